"""Running the task's tests against mutants of its change (the mutants: ``verify.mutants``).

In the clean checkout of the task's commit that verification already uses:

1. the task's new and changed test modules are run once, unmutated, under a small line
   tracer (a pytest plugin of ours, loaded with ``-p`` from a folder outside the checkout):
   it records which lines of the changed source files the tests execute, and how long a
   run takes;
2. the mutants of the lines the tests execute are chosen (at most ``mutants_max``, spread
   over the lines, deterministic); mutants of lines the tests never run are not run at all
   (they survive whatever the tests assert) and are reported apart in ``mutants.json``;
3. each chosen mutant is written into its own copy of the checkout (never the session's
   worktree, never the checkout other checks read) and the same tests run there (the
   task's tests by node id; their whole modules when pytest does not find one), stopping
   at the first failure, several at once up to the machine's cores. A mutant whose run
   fails is killed; one that runs past its timeout (a loop that no longer ends) counts as
   killed too; one whose run passes survived. The whole step stops at ``mutants_seconds``:
   mutants not finished by then are "not-run", never survivors.

The runs use the checks' environment (``checkout.check_env``) and the plan's pytest
command, like red-green.

Known limit: a test that detects the mutation itself (reads the source file or asks git)
can kill every mutant without checking behaviour; the test-quality heuristics and the
auditor see such tests, this check does not.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from loop_orchestrator import proc
from loop_orchestrator.errors import LoOrchError
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.verify import classify, junit, mutants
from loop_orchestrator.verify.checkout import SYS_PATH_VAR, check_env
from loop_orchestrator.verify.donechecks import pinned
from loop_orchestrator.verify.junit import FailedBy
from loop_orchestrator.verify.models import Finding
from loop_orchestrator.verify.mutants import Mutant, Outcome, Result
from loop_orchestrator.verify.testquality import FileChange, TestRef

log = logging.getLogger(__name__)

#: a mutant's run may take this many times the unmutated run (plus ``_TIMEOUT_MIN``)
TIMEOUT_FACTOR = 4.0
_TIMEOUT_MIN = 5.0
#: the tracer's module name and the variables it reads (set by us, after check_env)
_PLUGIN = "lo_orch_linetrace"
_FILES_VAR = "LO_ORCH_TRACE_FILES"
_OUT_VAR = "LO_ORCH_TRACE_OUT"
_TRACER = """\
# Written by lo-orch (loop_orchestrator.verify.mutation): which lines of the changed files
# the tests execute. Loaded with -p before the tests import anything.
import json as _json
import os as _os
import sys as _sys
import threading as _threading

_FILES = frozenset(_json.loads(_os.environ.get("@FILES@", "[]")))
_HITS = set()


def _local(frame, event, arg):
    if event == "line":
        _HITS.add((frame.f_code.co_filename, frame.f_lineno))
    return _local


def _global(frame, event, arg):
    name = frame.f_code.co_filename
    if name in _FILES:
        _HITS.add((name, frame.f_lineno))
        return _local
    return None


_sys.settrace(_global)
_threading.settrace(_global)
#: a test ended with another trace function than ours (the code under test replaced it)
_REPLACED = []


def pytest_runtest_teardown(item):
    if _sys.gettrace() is not _global:
        _REPLACED.append(item.nodeid)


def pytest_unconfigure(config):
    _sys.settrace(None)
    with open(_os.environ["@OUT@"], "w", encoding="utf-8") as fh:
        _json.dump({"hits": sorted(_HITS), "replaced": _REPLACED}, fh)
""".replace("@FILES@", _FILES_VAR).replace("@OUT@", _OUT_VAR)


@dataclass
class MutationRun:
    """What the mutation step did: its outcomes, findings and time (``seconds``)."""

    results: list[Result] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    #: why the step did not run (no pytest command, no changed source...), or None
    skipped: str | None = None


def changed_lines(files: Sequence[FileChange]) -> dict[str, tuple[str, set[int]]]:
    """path -> (text at the commit, lines the task added) for non-test Python sources."""
    return {
        f.path: (f.new, set(f.added))
        for f in files
        if f.new is not None
        and f.status != "D"
        and f.added
        and classify.is_python(f.path)
        and not classify.is_test_code(f.path)
    }


def _copy(tree: Path, dest: Path) -> Path:
    """A copy of the checkout (symlinked dependency folders stay links; no ``.git``)."""
    shutil.copytree(tree, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    return dest


def _argv(prefix: Sequence[str], modules: Sequence[str], tree: Path) -> list[str]:
    return pinned([*prefix, "-q", "-x", "-p", "no:cacheprovider", *modules], tree)


def _env(tree: Path, extra_path: Path | None = None) -> dict[str, str]:
    env = check_env(tree)
    if extra_path is not None:
        env[SYS_PATH_VAR] += os.pathsep + str(extra_path)
    return env


def _trace(
    tree: Path,
    prefix: Sequence[str],
    modules: Sequence[str],
    paths: Sequence[str],
    timeout: float,
    tests: Sequence[str] = (),
    memory: int | None = None,
) -> tuple[bool, float, set[tuple[str, int]] | None]:
    """Run the tests unmutated under the tracer: (passed, seconds, lines of ``paths`` hit,
    or None where that is not known).

    The tracer runs inside the tests' own process, so what it reports is only believed
    while it shows it stayed on: it saw lines of the test files ``tests`` run and no test
    ended with another trace function in place (a test that calls ``sys.settrace(None)``
    would otherwise make every mutant "not executed", a warning instead of a verdict)."""
    with tempfile.TemporaryDirectory(prefix="lo-orch-trace-") as tmp:
        folder = Path(tmp)
        (folder / f"{_PLUGIN}.py").write_text(_TRACER, encoding="utf-8")
        out = folder / "hits.json"
        names: dict[str, str] = {}
        for rel in [*paths, *tests]:
            for full in {str(tree / rel), str((tree / rel).resolve())}:
                names[full] = rel
        env = _env(tree, folder)
        env[_FILES_VAR] = json.dumps(sorted(names))
        env[_OUT_VAR] = str(out)
        argv = [*_argv(prefix, modules, tree), "-p", _PLUGIN]
        try:
            res = proc.run(
                argv,
                cwd=tree,
                env=env,
                timeout=timeout,
                check=False,
                input="",
                memory_limit=memory,
            )
        except (LoOrchError, OSError):
            return False, 0.0, None
        return res.returncode == 0, res.duration, _hits(out, names, paths, tests)


def _hits(
    out: Path, names: dict[str, str], paths: Sequence[str], tests: Sequence[str]
) -> set[tuple[str, int]] | None:
    """The lines of ``paths`` the tracer's report ``out`` says ran; None when the report is
    missing, malformed, or shows the tracer was switched off (no line of the test files
    ``tests`` ran under it, or a test replaced it)."""
    try:
        raw = json.loads(out.read_text(encoding="utf-8"))
        seen = {(names[f], int(n)) for f, n in raw["hits"] if f in names}
        replaced = bool(raw["replaced"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if replaced or (tests and not any(rel in tests for rel, _ in seen)):
        return None
    wanted = set(paths)
    return {(rel, n) for rel, n in seen if rel in wanted}


def _run_mutant(
    mutant: Mutant,
    tree: Path,
    prefix: Sequence[str],
    modules: Sequence[str],
    *,
    timeout: float,
    deadline: float,
    scratch: Path,
    memory: int | None = None,
) -> Result:
    started = time.monotonic()
    left = deadline - started
    if left <= 1.0:
        return Result(mutant, "not-run")
    limit = min(timeout, left)
    folder = Path(tempfile.mkdtemp(prefix="mutant-", dir=scratch))
    try:
        copy = _copy(tree, folder / "tree")
        target = copy / mutant.path
        target.unlink()  # a fresh file: never written through a link into the checkout
        target.write_text(mutant.source, encoding="utf-8")
        report = folder / "junit.xml"  # outside the copy the tests run in
        argv = [*_argv(prefix, modules, copy), f"--junitxml={report}"]
        try:
            res = proc.run(
                argv,
                cwd=copy,
                env=_env(copy),
                timeout=limit,
                check=False,
                input="",
                memory_limit=memory,
            )
        except (LoOrchError, OSError):
            return Result(mutant, "not-run", time.monotonic() - started)
        outcome: Outcome
        how: FailedBy = ""
        if res.returncode is None:
            # past its own timeout: a hang the tests exposed; cut by the step's budget:
            # unknown
            outcome = "timeout" if limit >= timeout else "not-run"
        else:
            outcome = "survived" if res.returncode == 0 else "killed"
            if outcome == "killed":
                how = junit.failed_by(junit.parse(report))
        return Result(mutant, outcome, round(time.monotonic() - started, 3), how)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def mutation_check(
    tree: Path,
    files: Sequence[FileChange],
    *,
    prefix: Sequence[str] | None,
    touched: Sequence[TestRef],
    evidence: Path,
    max_mutants: int,
    seconds: float,
    workers: int | None = None,
    mutant_timeout: float | None = None,
    memory: int | None = None,
) -> MutationRun:
    """Mutate the task's changed source lines in copies of ``tree`` and run its new and
    changed Python tests against each; the findings and ``mutants.json`` in ``evidence``.

    ``mutant_timeout``: each mutant's run limit; by default ``TIMEOUT_FACTOR`` times the
    unmutated run plus a few seconds. ``memory``: each test process's data memory bound.
    """
    start = time.monotonic()
    deadline = start + seconds
    run = MutationRun()
    refs = [t for t in touched if t.language == "python"]
    sources = changed_lines(files)
    if max_mutants <= 0 or seconds <= 0:
        run.skipped = "off ([verify] mutants_max or mutants_seconds is 0)"
    elif prefix is None:
        run.skipped = "no done-check runs pytest"
    elif not refs:
        run.skipped = "the task adds or changes no Python test"
    candidates: list[Mutant] = []
    if run.skipped is None:
        for path, (text, lines) in sorted(sources.items()):
            candidates += mutants.mutants_of(path, text, lines)
        if not candidates:
            run.skipped = "no mutant of the changed source lines"
    if run.skipped is None and prefix is not None:
        # the tests themselves (a module may hold hundreds of others); their modules when
        # pytest does not know a test by the name the source gives it
        modules = sorted({f"{r.path}::{r.qualname}" for r in refs})
        tests = sorted({r.path for r in refs})
        passed, base_seconds, hits = _trace(
            tree,
            prefix,
            modules,
            sorted(sources),
            max(1.0, deadline - time.monotonic()),
            tests,
            memory,
        )
        if not passed and deadline - time.monotonic() > 1.0:
            modules = tests
            passed, base_seconds, hits = _trace(
                tree, prefix, modules, sorted(sources), deadline - time.monotonic(), tests, memory
            )
        if not passed:
            run.skipped = (
                "the task's tests did not pass unmutated in the mutation checkout (failed, or "
                "did not finish within the budget)"
            )
        else:
            covered = (
                candidates if hits is None else [m for m in candidates if mutants.executed(m, hits)]
            )
            unexecuted = [m for m in candidates if m not in covered]
            chosen = mutants.select(covered, max_mutants)
            timeout = mutant_timeout or (TIMEOUT_FACTOR * base_seconds + _TIMEOUT_MIN)
            run.results = _run_all(
                chosen, tree, prefix, modules, timeout, deadline, workers, memory
            )
            run.results += [Result(m, "not-executed") for m in unexecuted]
            run.findings = mutants.judge(run.results, seconds=seconds)
    run.seconds = round(time.monotonic() - start, 3)
    _write(evidence, run, limit=max_mutants, budget=seconds)
    log.info(
        "mutants ran",
        extra={"mutants": len(run.results), "seconds": run.seconds, "skipped": run.skipped},
    )
    return run


def _run_all(
    chosen: Sequence[Mutant],
    tree: Path,
    prefix: Sequence[str],
    modules: Sequence[str],
    timeout: float,
    deadline: float,
    workers: int | None,
    memory: int | None = None,
) -> list[Result]:
    if not chosen:
        return []
    lock = threading.Lock()
    results: dict[int, Result] = {}
    with tempfile.TemporaryDirectory(prefix="lo-orch-mutants-") as scratch:

        def one(index: int) -> None:
            result = _run_mutant(
                chosen[index],
                tree,
                prefix,
                modules,
                timeout=timeout,
                deadline=deadline,
                scratch=Path(scratch),
                memory=memory,
            )
            with lock:
                results[index] = result

        count = max(1, min(workers or os.cpu_count() or 1, len(chosen)))
        with ThreadPoolExecutor(max_workers=count, thread_name_prefix="mutant") as pool:
            for future in [pool.submit(one, i) for i in range(len(chosen))]:
                future.result()
    return [results[i] for i in range(len(chosen))]


def _write(evidence: Path, run: MutationRun, *, limit: int, budget: float) -> None:
    doc: Mapping[str, object] = {
        "seconds": run.seconds,
        "mutants_max": limit,
        "mutants_seconds": budget,
        "skipped": run.skipped,
        "mutants": [
            {
                "path": r.mutant.path,
                "line": r.mutant.line,
                "kind": r.mutant.kind,
                "before": r.mutant.before,
                "after": r.mutant.after,
                "outcome": r.outcome,
                "failed_by": r.failed_by,
                "seconds": r.seconds,
            }
            for r in run.results
        ],
    }
    evidence.mkdir(parents=True, exist_ok=True)
    atomic_write_text(evidence / "mutants.json", json.dumps(doc, indent=2) + "\n")

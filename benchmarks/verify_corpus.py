"""Verification on real history, BEFORE and AFTER side by side.

Every case of ``tests/corpus/cases.json`` (a real upstream commit of a small open-source
project, rebuilt offline from a local mirror by ``tests/corpus/replay.py``) is verified as
one task through ``verify_task`` — scope, test quality, stubs, secrets, the done-check in a
clean checkout, red-green; auditor off — once as the honest upstream change and once per
gamed variant (assertions removed, skip markers, an out-of-scope edit, a hard-coded return,
a deleted test, an early exit in the module under test).

BEFORE is a baseline revision (default 90a9e1c, main before issue 26) checked out in a
temporary git worktree and imported through ``PYTHONPATH`` by a worker process; AFTER is
this tree. Both verify the very same commits (the cases are built once). Printed:

1. honest accepted (precision): honest upstream changes that pass;
2. gamed caught per kind (recall): variants that do not pass;
3. seconds per task for each check (scope, tests, stubs, secrets, done-checks, red-green,
   the mutation step where the version has one: "n/a" where it has none) and in all.

The gamed kinds are those of ``replay.KINDS``, among them weakened tests (the honest source,
the new tests' value checks made weak) and special-cased inputs (the changed function looks
up the tests' literal arguments and returns their expected values, instead of the real
change or in front of it).

``--cases FILE`` verifies the commits of another manifest of the same form as
``tests/corpus/cases.json`` (e.g. a held-out set kept outside the repository, for gaming
the checks were never tuned on); its projects' mirrors must be local too.

Honest changes always go through ``verify_task`` whole. A gamed variant whose source
checks (scope, test quality, stubs, secrets) already block is not run further: its
outcome is decided (the done-checks can add findings, never remove one), and on a shared
2-core machine the full path for every variant took well over an hour per version.

With ``--source-only`` nothing runs the projects' tests: every commit, honest ones too,
is judged by the source checks alone (scope, test quality, stubs, secrets). A gamed
variant caught there is caught for good; an honest change that passes there can still be
sent back by its done-checks. It takes a minute or two for the whole corpus, for
iterating on a heuristic; the figures to report come from a full run.

    .venv/bin/python benchmarks/verify_corpus.py [--baseline REV | --no-baseline]
        [--cases FILE] [--only CASE,...] [--kinds KIND,...] [--source-only] [--jobs 2]
        [--json OUT]

``--kinds weakened-tests`` verifies the honest commits and only the gamed variants of
those kinds (the full path of every variant of a sample is the costly part).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BASELINE = "90a9e1c"
REPO_ROOT = Path(__file__).resolve().parent.parent
CORPUS_DIR = REPO_ROOT / "tests" / "corpus"
CHECKS = ("scope", "tests", "stubs", "secrets", "done", "redgreen", "mutants", "total")
#: names a version may give its mutation step (timed as "mutants" where one exists)
MUTANT_STEPS = ("check_mutants", "run_mutants", "mutation_check", "mutants")


def _replay() -> Any:
    sys.path.insert(0, str(CORPUS_DIR))
    import replay  # type: ignore[import-not-found]  # tests/corpus, put on the path above

    return replay


# worker: runs under the version's PYTHONPATH -------------------------------------------


def _timed(module: Any, name: str, bucket: str, spent: dict[str, float]) -> None:
    original = getattr(module, name, None)
    if original is None:
        return

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[bucket] += time.perf_counter() - start

    setattr(module, name, wrapper)


def worker(manifest: Path, out: Path, *, source_only: bool = False) -> None:
    from loop_orchestrator.config import Settings
    from loop_orchestrator.plan.model import DoneCheck, Task
    from loop_orchestrator.runstate.state import RunDir
    from loop_orchestrator.verify import pyenv, scope, secrets, stubs
    from loop_orchestrator.verify import verdict as vmod

    spent: dict[str, float] = defaultdict(float)
    _timed(scope, "check_scope", "scope", spent)
    _timed(vmod, "check_tests", "tests", spent)
    _timed(stubs, "check_stubs", "stubs", spent)
    for name in (
        "check_secrets",
        "check_secret_files",
        "check_credential_documents",
        "check_binary_secrets",
        "check_conflict_markers",
    ):
        _timed(secrets, name, "secrets", spent)
    _timed(vmod, "run_done_checks", "done", spent)
    _timed(vmod, "red_green", "redgreen", spent)
    for name in MUTANT_STEPS:
        _timed(vmod, name, "mutants", spent)

    cases = json.loads(manifest.read_text(encoding="utf-8"))
    settings = Settings()
    settings.auditor.llm = "off"
    baseline = None
    results = []
    for case in cases:
        repo = Path(case["repo"])
        task = Task(
            id="upstream",
            title=case["subject"][:60],
            objective=case["subject"],
            owns=case["owns"],
            done=[DoneCheck(criterion="the changed tests pass", check=case["check"])],
        )
        if baseline is None:
            baseline = pyenv.take_baseline(repo, [task.done[0].argv()])
        for kind, commit in [("honest", case["honest"]), *case["variants"].items()]:
            if commit is None:
                continue
            spent.clear()
            start = time.perf_counter()
            findings = None
            if kind != "honest" or source_only:
                # verify_task fails a commit with a blocking source finding whatever its
                # checks then show (they add findings, never remove one): the outcome is
                # already known, and the done-checks are run only where they decide it
                found, *_ = vmod.deterministic_findings(repo, task, case["base"], commit)
                if any(f.blocking for f in found) or source_only:
                    passed = not any(f.blocking for f in found)
                    findings, path = found, "source"
            if findings is None:
                verdict = vmod.verify_task(
                    repo,
                    RunDir(repo),
                    task,
                    case["base"],
                    commit,
                    brief=case["subject"],
                    settings=settings,
                    site_baseline=baseline,
                )
                findings, passed, path = verdict.findings, verdict.passed, "full"
                # a version that times its own steps on the verdict: taken where not timed here
                for key, value in (getattr(verdict, "timings", None) or {}).items():
                    if isinstance(value, int | float) and key not in spent:
                        spent[key] = float(value)
            spent["total"] = time.perf_counter() - start
            results.append(
                {
                    "case": case["id"],
                    "kind": kind,
                    "passed": passed,
                    "path": path,
                    "blocking": sorted({f.check for f in findings if f.blocking}),
                    "warnings": sorted({f.check for f in findings if not f.blocking}),
                    "seconds": dict(spent),
                }
            )
            print(
                f"  {case['id']:28s} {kind:17s} {'pass' if passed else 'FAIL'} "
                f"{spent['total']:5.1f}s {','.join(results[-1]['blocking'])}",
                file=sys.stderr,
                flush=True,
            )
    out.write_text(json.dumps(results, indent=1), encoding="utf-8")


# driver ---------------------------------------------------------------------------------


@contextlib.contextmanager
def baseline_tree(rev: str) -> Iterator[Path]:
    """A temporary worktree of ``rev`` (removed at the end)."""
    folder = Path(tempfile.mkdtemp(prefix="lo-verify-before-"))
    tree = folder / "tree"
    subprocess.run(
        ["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", "-q", str(tree), rev],
        check=True,
    )
    try:
        yield tree
    finally:
        subprocess.run(
            ["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(tree)], check=False
        )
        shutil.rmtree(folder, ignore_errors=True)


def build(
    dest: Path, only: set[str] | None, cases_file: Path | None = None
) -> list[dict[str, Any]]:
    replay = _replay()
    if cases_file is not None and not cases_file.is_file():
        sys.exit(
            f"Error: no cases file {cases_file}; pass a manifest like tests/corpus/cases.json."
        )
    corpus = replay.load_corpus(cases_file)
    missing = replay.missing_mirrors(corpus)
    if missing:
        sys.exit(
            f"Error: no local mirror of {', '.join(missing)} under "
            f"{replay.mirrors_root()}; fetch them (or set LO_ORCH_CORPUS_MIRRORS)."
        )
    cases = replay.build_all(dest, only=only, corpus=corpus)
    return [
        {
            "id": c.id,
            "project": c.project,
            "repo": str(c.repo),
            "base": c.base,
            "honest": c.honest,
            "variants": c.variants,
            "owns": c.owns,
            "check": c.check,
            "subject": c.subject,
        }
        for c in cases
    ]


def _copy_cases(cases: list[dict[str, Any]], dest: Path) -> list[dict[str, Any]]:
    out = []
    for c in cases:
        target = dest / Path(c["repo"]).name
        shutil.copytree(c["repo"], target, symlinks=True)
        out.append({**c, "repo": str(target)})
    return out


def run_versions(
    versions: list[tuple[str, Path]],
    cases: list[dict[str, Any]],
    work: Path,
    jobs: int,
    *,
    source_only: bool = False,
) -> dict[str, list[dict[str, Any]]]:
    procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    results: dict[str, list[dict[str, Any]]] = {}

    def start(label: str, root: Path, own: list[dict[str, Any]]) -> None:
        manifest = work / f"{label}.cases.json"
        manifest.write_text(json.dumps(own), encoding="utf-8")
        out = work / f"{label}.results.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env["PYTHONPATH"] = str(root)
        print(f"{label}: verifying with {root}", file=sys.stderr, flush=True)
        argv = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            str(manifest),
            "--out",
            str(out),
        ]
        proc = subprocess.Popen([*argv, "--source-only"] if source_only else argv, env=env)
        procs.append((label, proc, out))

    def finish(index: int) -> None:
        label, proc, out = procs[index]
        if proc.wait() != 0:
            sys.exit(f"Error: the {label} worker failed (exit {proc.returncode})")
        results[label] = json.loads(out.read_text(encoding="utf-8"))

    for i, (label, root) in enumerate(versions):
        own = cases if i == 0 else _copy_cases(cases, work / f"copy-{label}")
        start(label, root, own)
        if jobs <= 1 or len(procs) >= jobs:
            finish(len(procs) - 1)
    for i, (label, _proc, _out) in enumerate(procs):
        if label not in results:
            finish(i)
    return results


def summarize(rows: list[dict[str, Any]], kinds: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in ["honest", *kinds]:
        mine = [r for r in rows if r["kind"] == kind]
        good = sum(1 for r in mine if (r["passed"] if kind == "honest" else not r["passed"]))
        out[kind] = (good, len(mine))
    seconds = defaultdict(list)
    for r in rows:
        for check in CHECKS:
            if check in r["seconds"]:
                seconds[check].append(r["seconds"][check])
    # mean over the tasks where the check ran (done-checks and red-green: full path only)
    out["seconds"] = {c: sum(v) / len(v) if v else 0.0 for c, v in seconds.items()}
    out["full_path"] = sum(1 for r in rows if r.get("path") == "full")
    out["honest_failed"] = [
        (r["case"], r["blocking"]) for r in rows if r["kind"] == "honest" and not r["passed"]
    ]
    out["gamed_passed"] = [
        (r["case"], r["kind"], r["warnings"]) for r in rows if r["kind"] != "honest" and r["passed"]
    ]
    return out


def render(summaries: dict[str, dict[str, Any]], kinds: list[str]) -> str:
    labels = list(summaries)
    width = 22
    lines = [f"{'':32s}" + "".join(f"{lab:>{width}s}" for lab in labels)]

    def pct(pair: tuple[int, int]) -> str:
        good, total = pair
        return f"{good}/{total} {100.0 * good / total:5.1f}%" if total else "n/a"

    lines.append(
        f"{'honest accepted':32s}"
        + "".join(f"{pct(summaries[lab]['honest']):>{width}s}" for lab in labels)
    )
    for kind in kinds:
        lines.append(
            f"{'gamed caught: ' + kind:32s}"
            + "".join(f"{pct(summaries[lab][kind]):>{width}s}" for lab in labels)
        )
    lines.append(
        f"{'verified in full':32s}"
        + "".join(f"{summaries[lab]['full_path']:>{width}d}" for lab in labels)
    )
    lines.append("seconds per task (mean over the tasks where the check ran)")
    for check in CHECKS:
        cells = [summaries[lab]["seconds"].get(check) for lab in labels]
        lines.append(
            f"{'  ' + check:32s}"
            + "".join(f"{'n/a':>{width}s}" if v is None else f"{v:>{width}.2f}" for v in cells)
        )
    for lab in labels:
        s = summaries[lab]
        if s["honest_failed"]:
            lines.append(
                f"{lab}: honest changes sent back: "
                + "; ".join(f"{c} ({', '.join(b)})" for c, b in s["honest_failed"])
            )
        if s["gamed_passed"]:
            lines.append(
                f"{lab}: gamed variants accepted: "
                + "; ".join(
                    f"{c} {k}" + (f" (warned: {', '.join(w)})" if w else "")
                    for c, k, w in s["gamed_passed"]
                )
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--only", default="", help="comma-separated case ids")
    parser.add_argument(
        "--kinds", default="", help="comma-separated gamed kinds to verify (default: all)"
    )
    parser.add_argument(
        "--cases", type=Path, help="another manifest of the form of tests/corpus/cases.json"
    )
    parser.add_argument("--jobs", type=int, default=1, help="versions verified at once")
    parser.add_argument("--json", type=Path, help="write the raw results here")
    parser.add_argument(
        "--source-only",
        action="store_true",
        help="judge every commit by the source checks alone (fast; honest "
        "figures are then an upper bound)",
    )
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.out, source_only=args.source_only)
        return 0
    kinds = list(_replay().KINDS)
    wanted = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(wanted) - set(kinds))
    if unknown:
        sys.exit(f"Error: unknown kind(s) {', '.join(unknown)}; known: {', '.join(kinds)}.")
    kinds = [k for k in kinds if k in wanted] if wanted else kinds
    only = {c for c in args.only.split(",") if c} or None
    with tempfile.TemporaryDirectory(prefix="lo-verify-corpus-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        cases = [
            {**c, "variants": {k: v for k, v in c["variants"].items() if k in kinds}}
            for c in build(work / "cases", only, args.cases)
        ]
        print(
            f"built {len(cases)} case(s) in {time.perf_counter() - started:.0f}s",
            file=sys.stderr,
            flush=True,
        )
        versions: list[tuple[str, Path]] = [("AFTER", REPO_ROOT)]
        with contextlib.ExitStack() as stack:
            if not args.no_baseline:
                before = stack.enter_context(baseline_tree(args.baseline))
                versions.insert(0, (f"BEFORE {args.baseline}", before))
            results = run_versions(versions, cases, work, args.jobs, source_only=args.source_only)
    summaries = {label: summarize(rows, kinds) for label, rows in results.items()}
    print(
        f"{len(cases)} real commits, "
        f"{len({c['project'] for c in cases})} projects; auditor off"
        + ("; SOURCE CHECKS ONLY (no done-checks, no red-green)" if args.source_only else "")
    )
    print(render(summaries, kinds))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

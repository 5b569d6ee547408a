"""The task's done-checks, from the approved plan, run in a clean checkout of the commit.

Each check is an argument list run without a shell (``proc.run``): ``echo a && false`` is
three arguments to echo, never a pipeline; ``sh -c "..."`` runs only when the approved plan
literally says so. A pytest check gets ``--junitxml`` (and no cache provider) so the
report proves which tests ran: a pytest check passes only when its report exists, shows at
least one test that ran, and no failure or error, whatever the exit code says (code under
test can end the interpreter with ``os._exit(0)`` before pytest writes anything). Output,
exit code and duration of every run are kept in the evidence folder, with a JSON summary.
"""

from __future__ import annotations

import configparser
import json
import logging
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Literal

from loop_orchestrator import proc
from loop_orchestrator.errors import LoOrchError
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.verify import junit
from loop_orchestrator.verify.models import CheckRun, Finding, blocking
from loop_orchestrator.verify.testquality import TestRef

log = logging.getLogger(__name__)

_PYTEST_NAMES = ("pytest", "py.test")


@dataclass(frozen=True)
class DoneSpec:
    """A done criterion and its command (None: judged by the auditor, not run)."""

    criterion: str
    argv: list[str] | None


def pytest_index(argv: Sequence[str]) -> int | None:
    """Index of the token that *is* pytest: ``pytest``, ``.venv/bin/pytest``, ``-m pytest``."""
    for i, token in enumerate(argv):
        if PurePath(token).name in _PYTEST_NAMES:
            return i
        if token == "-m" and i + 1 < len(argv) and argv[i + 1] in _PYTEST_NAMES:
            return i + 1
    return None


def is_pytest(argv: Sequence[str]) -> bool:
    return pytest_index(argv) is not None


def with_junit(argv: Sequence[str], junit_path: Path) -> list[str]:
    """``argv`` plus a JUnit report and no cache (nothing written into the checkout)."""
    return [*argv, f"--junitxml={junit_path}", "-p", "no:cacheprovider"]


#: the files pytest reads its configuration from, in its order (pytest 9,
#: ``_pytest.config.findpaths.CONFIG_LOADERS_BY_NAME``)
CONFIG_NAMES = (
    "pytest.toml",
    ".pytest.toml",
    "pytest.ini",
    ".pytest.ini",
    "pyproject.toml",
    "tox.ini",
    "setup.cfg",
)
_PINNING = ("-c", "--config-file", "--rootdir", "--confcutdir", "--inifile")


def _holds_pytest_config(path: Path) -> bool:
    """Whether pytest would take ``path`` as its configuration file."""
    if path.name in ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini"):
        return True  # always, even when empty
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    if path.name == "pyproject.toml":
        try:
            tool = tomllib.loads(text).get("tool", {})
        except tomllib.TOMLDecodeError:
            return False
        return isinstance(tool, dict) and "pytest" in tool
    parser = configparser.RawConfigParser()
    try:
        parser.read_string(text)
    except configparser.Error:
        return False
    return parser.has_section("pytest" if path.name == "tox.ini" else "tool:pytest")


def project_config(argv: Sequence[str], tree: Path) -> Path | None:
    """The configuration file pytest would pick for ``argv`` inside ``tree``: from the
    common folder of the path arguments up to ``tree``, never above it."""
    start = pytest_index(argv)
    dirs = []
    for arg in argv[(start or 0) + 1 :]:
        if arg.startswith("-"):
            continue
        path = (tree / arg.split("::", 1)[0]).resolve()
        if path.exists() and path.is_relative_to(tree.resolve()):
            dirs.append(path if path.is_dir() else path.parent)
    here = Path(os.path.commonpath(dirs)) if dirs else tree.resolve()
    for folder in (here, *here.parents):
        for name in CONFIG_NAMES:
            if (folder / name).is_file() and _holds_pytest_config(folder / name):
                return folder / name
        if folder == tree.resolve():
            break
    return None


def pinned(argv: Sequence[str], tree: Path) -> list[str]:
    """``argv`` with pytest's configuration, rootdir and conftest search held inside
    ``tree``. Unpinned, pytest looks for pytest.ini, tox.ini... and conftest.py in the
    folders *above* the checkout too (a temp folder any process can write). An approved
    plan that sets these options itself is left as it is."""
    if any(a.split("=", 1)[0] in _PINNING for a in argv):
        return list(argv)
    config = project_config(argv, tree)
    if config is None:
        # /dev/null: pytest's way of saying "no configuration file" (not a regular file)
        return [*argv, "-c", os.devnull, f"--rootdir={tree}", f"--confcutdir={tree}"]
    # as pytest itself does: the configuration file's folder is the rootdir (testpaths and
    # pythonpath are relative to it) and where the conftest search stops
    root = config.parent
    return [*argv, "-c", str(config), f"--rootdir={root}", f"--confcutdir={root}"]


def run_one(
    name: str,
    argv: Sequence[str],
    cwd: Path,
    evidence: Path,
    *,
    env: Mapping[str, str],
    timeout: float,
    criterion: str | None = None,
    cwd_kind: Literal["commit", "base"] = "commit",
    junit_path: Path | None = None,
    memory: int | None = None,
) -> CheckRun:
    """Run one command and keep its output in ``evidence/<name>.stdout.txt`` etc.;
    ``memory``: each of its processes' data memory bound (``proc.run``'s ``memory_limit``)."""
    evidence.mkdir(parents=True, exist_ok=True)
    out_path = evidence / f"{name}.stdout.txt"
    err_path = evidence / f"{name}.stderr.txt"
    error = None
    if junit_path is not None:
        junit_path.unlink(missing_ok=True)  # only a report this run wrote counts
    try:
        # stdin empty: a check that prompts ends instead of waiting on the supervisor's
        # terminal, and never reads from it
        result = proc.run(
            list(argv),
            cwd=cwd,
            env=env,
            timeout=timeout,
            check=False,
            input="",
            memory_limit=memory,
        )
        code, stdout, stderr, duration = (
            result.returncode,
            result.stdout,
            result.stderr,
            result.duration,
        )
    except LoOrchError as exc:  # the program does not exist
        code, stdout, stderr, duration = None, "", exc.render(), 0.0
        error = exc.message
    except OSError as exc:  # not executable, bad interpreter line...
        code, stdout, stderr, duration = None, "", str(exc), 0.0
        error = f"{argv[0]}: {exc.strerror or exc}"
    atomic_write_text(out_path, stdout)
    atomic_write_text(err_path, stderr)
    run = CheckRun(
        name=name,
        criterion=criterion,
        argv=list(argv),
        cwd_kind=cwd_kind,
        exit_code=code,
        timed_out=code is None and error is None,
        duration=round(duration, 3),
        stdout_path=str(out_path),
        stderr_path=str(err_path),
        junit_path=str(junit_path) if junit_path is not None and junit_path.exists() else None,
        error=error,
    )
    log.info("check ran", extra={"check": name, "argv": run.argv, "exit": code})
    return run


def run_done_checks(
    specs: Sequence[DoneSpec],
    tree: Path,
    evidence: Path,
    *,
    env: Mapping[str, str],
    timeout: float,
    memory: int | None = None,
) -> list[CheckRun]:
    """Run every done-check that has a command, in order, in ``tree``."""
    runs = []
    for n, spec in enumerate(specs, start=1):
        if not spec.argv:
            continue
        name = f"check-{n}"
        argv = list(spec.argv)
        junit_path = None
        if is_pytest(argv):
            junit_path = evidence / f"{name}.junit.xml"
            argv = with_junit(pinned(argv, tree), junit_path)
        runs.append(
            run_one(
                name,
                argv,
                tree,
                evidence,
                env=env,
                timeout=timeout,
                criterion=spec.criterion,
                junit_path=junit_path,
                memory=memory,
            )
        )
    return runs


def _tail(path: str | None, lines: int = 8) -> str:
    if not path:
        return ""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def check_findings(runs: Sequence[CheckRun], timeout: float) -> list[Finding]:
    """A blocking finding for every done-check that did not pass."""
    out = []
    for run in runs:
        if not run.name.startswith("check-"):
            continue
        shown = " ".join(run.argv)
        what = f"done-check {run.name} ({run.criterion or shown})"
        if run.error:
            out.append(
                blocking(
                    f"{what} could not start: {run.error}. It ran in a clean checkout of the "
                    "commit, where untracked files of your worktree do not exist.",
                    "done.error",
                    None,
                    None,
                    fix="Make the check runnable from a fresh checkout (commit what it needs).",
                )
            )
        elif run.timed_out:
            out.append(
                blocking(
                    f"{what} did not finish within {timeout:.0f} s.",
                    "done.timeout",
                    fix="Find what hangs (a prompt, a server, an endless loop) and fix it.",
                )
            )
        elif run.exit_code != 0:
            tail = _tail(run.stdout_path) or _tail(run.stderr_path)
            out.append(
                blocking(
                    f"{what} failed with exit code {run.exit_code}: `{shown}`."
                    + (f"\nLast lines of its output:\n{tail}" if tail else ""),
                    "done.failed",
                    fix=f"Run `{shown}` yourself and make it pass; the full "
                    f"output is in {run.stdout_path}.",
                )
            )
    return out


def report_findings(runs: Sequence[CheckRun]) -> list[Finding]:
    """A blocking finding for every pytest done-check that exited 0 without a JUnit report
    that proves it: no report, no test that ran (all skipped or deselected), or a failure."""
    out = []
    for run in runs:
        if (
            not run.name.startswith("check-")
            or not is_pytest(run.argv)
            or run.error
            or run.timed_out
            or run.exit_code != 0
        ):
            continue  # not pytest, or check_findings already blocks it
        what = f"done-check {run.name} ({run.criterion or ' '.join(run.argv)})"
        cases = junit.parse(Path(run.junit_path)) if run.junit_path else []
        if not run.junit_path:
            out.append(
                blocking(
                    f"{what} exited 0 but pytest wrote no JUnit report: the process ended before "
                    "pytest finished (os._exit, sys.exit or a crash in the code under test), so "
                    "nothing proves that a test ran.",
                    "done.no-report",
                    fix="Find what ends the process early (code that exits when imported or when "
                    "pytest is loaded) and remove it.",
                )
            )
        elif not any(c.outcome != "skipped" for c in cases):
            out.append(
                blocking(
                    f"{what} ran no test: its JUnit report has {len(cases)} test(s), none of them "
                    "run (all skipped, deselected or not collected).",
                    "done.no-tests",
                    fix=(
                        "Make the tests the check names run and pass; do not skip or deselect them."
                    ),
                )
            )
        elif bad := [c for c in cases if c.outcome in ("failed", "error")]:
            first = bad[0]
            out.append(
                blocking(
                    f"{what} exited 0, but its JUnit report shows {len(bad)} failed test(s), "
                    f"first {first.classname}::{first.name}: {first.message[:200]}",
                    "done.report-failed",
                    fix="Make every test pass; the exit code alone does not count.",
                )
            )
    return out


def new_test_findings(
    new_tests: Sequence[TestRef], runs: Sequence[CheckRun], new_files: Sequence[str] = ()
) -> list[Finding]:
    """New Python tests must appear in a JUnit report as passed, never skipped or missing;
    every new test module (``new_files``) must show at least one test that passed, also
    when its tests are not plain functions the AST can see.

    ``runs`` are the runs at the commit (done-checks and the green run). When none of them
    ran pytest there is nothing to look in (red-green warns about that); when pytest ran
    but left no report, every new test is missing.
    """
    if not any(is_pytest(r.argv) for r in runs):
        return []
    reports = [junit.parse(Path(r.junit_path)) for r in runs if r.junit_path]
    cases = [c for report in reports for c in report]
    out = []
    for ref in new_tests:
        if ref.language != "python":
            continue
        hits = junit.results_for(cases, ref)
        where = f"{ref.path}::{ref.qualname}"
        if not hits:
            out.append(
                blocking(
                    f"new test {where} did not run in any check (not collected, deselected or "
                    "not in the checked paths).",
                    "done.new-test-missing",
                    ref.path,
                    fix="Make sure pytest collects it (file and function names start with test_, "
                    "no deselecting marker) and that the done-checks cover it.",
                )
            )
        elif any(c.outcome == "skipped" for c in hits):
            out.append(
                blocking(
                    f"new test {where} was skipped: a skipped test proves nothing.",
                    "done.new-test-skipped",
                    ref.path,
                    fix="Remove the skip condition and make the test pass.",
                )
            )
        elif any(c.outcome in ("failed", "error") for c in hits):
            first = next(c for c in hits if c.outcome in ("failed", "error"))
            out.append(
                blocking(
                    f"new test {where} {first.outcome}: {first.message[:200]}",
                    "done.new-test-failed",
                    ref.path,
                    fix="Make the test pass.",
                )
            )
    named = {f.path for f in out}
    for path in new_files:
        if path in named or any(c.outcome == "passed" and junit.in_module(c, path) for c in cases):
            continue
        out.append(
            blocking(
                f"new test file {path} did not run in any check: no test of it passed in a JUnit "
                "report (not collected, deselected, skipped or not in the checked paths).",
                "done.new-test-missing",
                path,
                fix="Make sure pytest collects and runs its tests, and that the done-checks "
                "cover it.",
            )
        )
    return out


def write_summary(evidence: Path, runs: Sequence[CheckRun], **extra: object) -> Path:
    path = evidence / "checks.json"
    doc = {"runs": [r.model_dump(mode="json") for r in runs], **extra}
    atomic_write_text(path, json.dumps(doc, indent=2) + "\n")
    return path

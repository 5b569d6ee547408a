"""``verify_task``: every check on one task's commit, and the verdict bound to that commit.

Order: scope, test quality, stubs, secrets and conflict markers (pure, from git objects);
then, in a clean checkout of the commit, the plan's done-checks and red-green; then the
LLM auditor — only when nothing blocking was found (a failing task goes to rework anyway,
and the auditor costs time and money; it judges the next round). The task passes only when
no blocking finding stands and the auditor says PASS or is off.

Evidence lives in ``.orchestration/evidence/<task>/<sha12>/`` (one folder per commit, so
rework rounds keep their history); ``verdict.json`` there is bound to the full sha and is
never used for another commit (``load_verdict``).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.git import gateway as gitutil
from loop_orchestrator.git import parse as gitparse
from loop_orchestrator.plan.globs import path_matches
from loop_orchestrator.proc import check_memory_limit
from loop_orchestrator.runstate.state import RunDir, now_iso
from loop_orchestrator.verify import classify, disputes, junit, pyenv, scope, secrets, stubs
from loop_orchestrator.verify.checkout import check_env, clean_checkout
from loop_orchestrator.verify.donechecks import (
    DoneSpec,
    check_findings,
    new_test_findings,
    report_findings,
    run_done_checks,
    write_summary,
)
from loop_orchestrator.verify.llm_auditor import AuditInput, run_auditor
from loop_orchestrator.verify.models import (
    AuditorResult,
    CheckRun,
    Finding,
    Verdict,
    blocking,
    warning,
)
from loop_orchestrator.verify.mutation import MutationRun, mutation_check
from loop_orchestrator.verify.redgreen import all_passed, judge_skips, pytest_prefix, red_green
from loop_orchestrator.verify.testquality import (
    FileChange,
    TestRef,
    TestReport,
    check_tests,
    fixture_refs,
)
from loop_orchestrator.verify.weakproof import WeakProof, added_names, escalate

if TYPE_CHECKING:
    from loop_orchestrator.config import Settings
    from loop_orchestrator.plan.model import Task

log = logging.getLogger(__name__)

#: files larger than this are not read for the source checks (generated, vendored, data)
MAX_TEXT_BYTES = 2_000_000


def evidence_dir(rundir: RunDir, task_id: str, commit: str) -> Path:
    return rundir.task_evidence_dir(task_id) / commit[:12]


def load_verdict(rundir: RunDir, task_id: str, commit: str) -> Verdict | None:
    """The stored verdict for exactly ``commit`` (full sha), or None."""
    path = evidence_dir(rundir, task_id, commit) / "verdict.json"
    try:
        verdict = Verdict.model_validate_json(path.read_bytes())
    except (OSError, ValueError):
        return None
    return verdict if verdict.commit == commit and verdict.task == task_id else None


def task_data(task: Task) -> dict[str, Any]:
    return {
        "id": task.id,
        "title": task.title,
        "objective": task.objective,
        "owns": list(task.owns),
        "done": [{"criterion": d.criterion, "check": d.check} for d in task.done],
    }


class _Texts:
    """File texts at the base and the commit, read once."""

    def __init__(self, repo: Path, base: str, commit: str) -> None:
        self.repo, self.base, self.commit = repo, base, commit
        self._cache: dict[tuple[str, str], str | None] = {}

    def read(self, paths: Sequence[str]) -> None:
        """Read ``paths`` at the base and at the commit, all at once (``gitutil.files_at``)."""
        wanted = [(rev, p) for p in paths for rev in (self.base, self.commit)]
        for key, text in gitutil.files_at(self.repo, wanted).items():
            self._keep(key, text)

    def _keep(self, key: tuple[str, str], text: str | None) -> str | None:
        if text is not None and (len(text) > MAX_TEXT_BYTES or "\0" in text):
            text = None
        self._cache[key] = text
        return text

    def at(self, rev: str, path: str) -> str | None:
        """The text of ``path`` at ``rev``; None when absent, binary or huge."""
        key = (rev, path)
        if key not in self._cache:
            return self._keep(key, gitutil.file_at(self.repo, rev, path))
        return self._cache[key]

    def pair(self, path: str) -> tuple[str | None, str | None]:
        return self.at(self.base, path), self.at(self.commit, path)

    def raw_pair(self, path: str) -> tuple[str | None, str | None]:
        """Both versions as they are stored, binary and huge files included (not cached)."""
        return (
            gitutil.file_at(self.repo, self.base, path),
            gitutil.file_at(self.repo, self.commit, path),
        )


def collect_files(
    changes: Sequence[gitparse.Change], added: dict[str, list[tuple[int, str]]], texts: _Texts
) -> list[FileChange]:
    files = []
    for ch in changes:
        special = ch.new_mode in (scope.SYMLINK_MODE, scope.GITLINK_MODE)
        if special or classify.is_lock_file(ch.path):
            continue
        old, new = texts.pair(ch.path)
        files.append(
            FileChange(
                path=ch.path,
                status=ch.status,
                old=old,
                new=new,
                added={ln for ln, _ in added.get(ch.path, [])},
            )
        )
    return files


def _module_created(texts: _Texts) -> Callable[[str], bool]:
    def created(module: str) -> bool:
        rel = module.replace(".", "/")
        for cand in (f"{rel}.py", f"{rel}/__init__.py", f"src/{rel}.py", f"src/{rel}/__init__.py"):
            old, new = texts.pair(cand)
            if old is None and new is not None:
                return True
        return False

    return created


def deterministic_findings(
    repo: Path, task: Task, base: str, commit: str, all_tasks: Sequence[Task] | None = None
) -> tuple[list[Finding], Any, list[FileChange], _Texts]:
    """Scope, test quality, stubs, secrets, conflict markers: no command is run."""

    texts = _Texts(repo, base, commit)
    changes = gitutil.changed_paths(repo, base, commit)
    texts.read([ch.path for ch in changes])
    # The gateway diffs with --text, so a binary file's bytes come out as "lines": keep them
    # out of the line checks (a one-line binary would report every old token as added);
    # check_binary_secrets below reads what is new in their printable text instead.
    added = {
        path: lines
        for path, lines in gitutil.added_lines(repo, base, commit).items()
        if texts.at(commit, path) is not None
    }
    others = {t.id: list(t.owns) for t in (all_tasks or []) if t.id != task.id}
    findings = scope.check_scope(
        changes, task.owns, matches=path_matches, contents=texts.pair, other_owners=others
    )
    if not changes:
        findings.append(
            blocking(
                "the commit changes nothing compared with the base.",
                "scope.no-change",
                fix="Implement the task; the commit must contain the work.",
            )
        )
    files = collect_files(changes, added, texts)
    report = check_tests(files)
    findings += report.findings
    code = [
        f.path
        for f in files
        if (classify.is_python(f.path) or classify.is_js(f.path))
        and not classify.is_test_code(f.path)
        and f.added
    ]
    if report.fixtures:
        folders = {str(PurePosixPath(c).parent) for c in report.fixtures}
        modules = {
            path: text
            for path in gitutil.list_files(repo, commit)
            if classify.is_python_test_module(path)
            and ("." in folders or any(path.startswith(d + "/") for d in folders))
            and (text := texts.at(commit, path))
        }
        known = {
            (r.path, r.qualname)
            for r in [*report.touched, *report.inherited, *report.fixture_users]
        }
        report.fixture_users += fixture_refs(report.fixtures, modules, known)
    if code and not (report.touched or report.inherited or report.fixture_users):
        findings.append(
            warning(
                f"the task changes code ({', '.join(code[:3])}{', ...' if len(code) > 3 else ''}) "
                "but adds or changes no test.",
                "tests.none-added",
                fix="Add tests that prove the done criteria.",
            )
        )
    findings += stubs.check_stubs(files, report.expectations)
    findings += secrets.check_secrets(added)
    findings += secrets.check_secret_files(changes)
    findings += secrets.check_credential_documents(
        {f.path: f.new for f in files if f.new is not None and f.status != "D"}
    )
    # binary files (a NUL byte) and files too large to read as text: their printable text
    regular = [
        ch.path
        for ch in changes
        if ch.status != "D" and ch.new_mode not in (scope.SYMLINK_MODE, scope.GITLINK_MODE)
    ]
    findings += secrets.check_binary_secrets(
        [path for path in regular if path not in added or texts.at(commit, path) is None],
        texts.raw_pair,
    )
    findings += secrets.check_conflict_markers(added)
    return findings, report, files, texts


def weak_proof(
    report: TestReport,
    runs: Sequence[CheckRun],
    mutated: MutationRun | None,
    files: list[FileChange],
) -> WeakProof:
    """What the runs showed about the task's weak tests (``weakproof.escalate``): the red
    run's report at the parent (when it completed), the mutants' outcomes."""
    red = next((r for r in runs if r.cwd_kind == "base"), None)
    parent = (
        junit.parse(Path(red.junit_path))
        if red is not None and red.junit_path and not (red.error or red.timed_out)
        else None
    )
    return WeakProof(
        weak=report.weak,
        parent=parent,
        runs_as=report.runs_as,
        mutants=mutated.results if mutated is not None else (),
        added=added_names(files) if report.weak else frozenset(),
        # every test the mutants ran: a strong one among them may be what kills them
        tests=[
            t
            for t in [*report.touched, *report.inherited, *report.fixture_users]
            if t.language == "python"
        ],
    )


def tests_as_run(report: TestReport) -> list[TestRef]:
    """The task's changed tests under the names they run as: a test of a base class or a
    mixin as its subclasses run it, and the tests that use a changed fixture."""
    out: list[TestRef] = []
    for ref in [*report.touched, *report.inherited, *report.fixture_users]:
        also = report.runs_as.get((ref.path, ref.qualname))
        if also:
            out += also
        elif ref in report.touched or ref in report.fixture_users:
            out.append(ref)
    unique: dict[tuple[str, str], TestRef] = {}
    for r in out:
        unique.setdefault((r.path, r.qualname), r)
    return list(unique.values())


def verify_task(
    repo: Path,
    rundir: RunDir,
    task: Task,
    base: str,
    commit: str,
    *,
    brief: str,
    settings: Settings,
    all_tasks: Sequence[Task] | None = None,
    site_baseline: pyenv.SiteBaseline | None = None,
    claims: Sequence[tuple[str, str]] = (),
) -> Verdict:
    """Verify ``task`` at ``commit`` against ``base``; store and return the verdict.

    ``site_baseline`` is the fingerprint of the checks' Python environments taken when the
    run started (``pyenv.take_baseline``): a start-up hook, script or interpreter changed
    blocks the task and no check runs; any other difference blocks it once they ran.
    Without it (``lo-orch audit``), only changes made while the checks ran are seen.
    ``claims``: the session's disputes, (finding id, reason), settled by the auditor or
    carried to Gate 2 (``verify.disputes``).
    """
    repo = repo.resolve()
    base_sha, commit_sha = gitutil.rev_parse_all(repo, [base, commit])
    evidence = evidence_dir(rundir, task.id, commit_sha)
    shutil.rmtree(evidence, ignore_errors=True)
    evidence.mkdir(parents=True, exist_ok=True)
    log.info("verification started", extra={"task": task.id, "commit": commit_sha})

    findings, report, files, texts = deterministic_findings(
        repo, task, base_sha, commit_sha, all_tasks
    )
    specs = [DoneSpec(d.criterion, d.argv() if d.check else None) for d in task.done]
    timeout = settings.verify.check_timeout
    memory = check_memory_limit(settings.verify.check_memory_mb)
    # what red copies onto the base: the commit's test code and test data, not test config
    test_files = {
        f.path: f.new
        for f in files
        if f.new is not None
        and classify.is_test_code(f.path)
        and (not classify.is_test_config_path(f.path) or f.path in report.fixtures)
    }  # a conftest whose fixtures changed goes too: its users are the changed tests

    argvs = [s.argv for s in specs if s.argv]
    if site_baseline is not None:
        # the start-up hooks, scripts and interpreters before any check runs (a look at
        # the roots only); every file once the checks ran, below
        since = "since the run started"
        tampered = pyenv.findings(pyenv.changes(site_baseline, shallow=True), when=since)
    else:
        since = "while the checks ran"
        site_baseline, tampered = pyenv.take_baseline(repo, argvs), []
    findings += tampered

    with clean_checkout(repo, commit_sha) as tree:
        runs: list[CheckRun] = []
        mutated: MutationRun | None = None
        if not tampered:  # in a changed environment no check result means anything
            runs = run_done_checks(
                specs, tree, evidence, env=check_env(tree), timeout=timeout, memory=memory
            )
            findings += check_findings(runs, timeout)
            findings += report_findings(runs)
            rg = red_green(
                repo,
                base_sha,
                tree,
                prefix=pytest_prefix(argvs),
                # a mixin's tests, where a subclass in the task's files runs them
                touched=[
                    *report.touched,
                    *(r for r in report.inherited if (r.path, r.qualname) in report.runs_as),
                    *report.fixture_users,
                ],
                test_files=test_files,
                evidence=evidence,
                timeout=timeout,
                module_created=_module_created(texts),
                done_runs=runs,
                runs_as=report.runs_as,
                memory=memory,
            )
            runs += rg.runs
            findings += rg.findings
            findings = judge_skips(
                findings,
                report.conditional_skips,
                [r for r in runs if r.cwd_kind == "commit"],
                report.runs_as,
            )
            new_files = [
                f.path for f in files if f.status == "A" and classify.is_python_test_module(f.path)
            ]
            commit_runs = [r for r in runs if r.cwd_kind == "commit"]
            findings += new_test_findings(report.touched, commit_runs, new_files)
            py_refs = [t for t in report.touched if t.language == "python"]
            if all_passed(py_refs, commit_runs):
                # mutants mean something only against tests that pass unmutated; they run
                # the tests where they run (a base class's test under its subclasses)
                mutated = mutation_check(
                    tree,
                    files,
                    prefix=pytest_prefix(argvs),
                    touched=tests_as_run(report),
                    evidence=evidence,
                    max_mutants=settings.verify.mutants_max,
                    seconds=settings.verify.mutants_seconds,
                    memory=memory,
                )
                findings += mutated.findings
            # the checks ran the task's code: it must not have changed their interpreter,
            # nor may anything else have since the run started (a file added and removed
            # again leaves its folder changed)
            findings += pyenv.findings(pyenv.changes(site_baseline), when=since)
        findings = escalate(findings, weak_proof(report, runs, mutated, files))
        findings, held = disputes.hold(findings, claims)
        clean = not any(f.blocking for f in findings)
        if clean:
            diff = gitutil.diff_text(repo, base_sha, commit_sha)
            auditor = run_auditor(
                AuditInput(
                    task=task_data(task),
                    commit=commit_sha,
                    base=base_sha,
                    brief=brief,
                    diff=diff,
                    findings=findings,
                    checks=runs,
                ),
                settings,
                cwd=tree,
                evidence=evidence,
            )
        else:
            auditor = AuditorResult(
                mode=settings.auditor.llm
                if settings.auditor.llm in ("agent", "off")
                else "command",
                status="skipped",
                reasons=[
                    "the deterministic checks found blocking problems; the auditor "
                    "judges the next round"
                ],
            )

    findings, held = disputes.settle(
        findings,
        held,
        auditor_status=auditor.status,
        auditor_mode=auditor.mode,
        reasons=auditor.reasons,
    )
    clean = not any(f.blocking for f in findings)
    summary_path = write_summary(evidence, runs, task=task.id, commit=commit_sha, base=base_sha)
    files_kept = [str(summary_path)]
    for r in runs:
        files_kept += [p for p in (r.stdout_path, r.stderr_path, r.junit_path) if p]
    if auditor.output_path:
        files_kept.append(auditor.output_path)
    if (evidence / "mutants.json").exists():
        files_kept.append(str(evidence / "mutants.json"))
    verdict = Verdict(
        task=task.id,
        commit=commit_sha,
        base=base_sha,
        passed=clean and auditor.status != "fail",
        findings=findings,
        checks=runs,
        auditor=auditor,
        evidence_dir=str(evidence),
        evidence=[*files_kept, str(evidence / "verdict.json")],
        created_at=now_iso(),
        disputes=held,
    )
    atomic_write_text(evidence / "verdict.json", verdict.model_dump_json(indent=2) + "\n")
    log.info(
        "verification finished",
        extra={"task": task.id, "commit": commit_sha, "passed": verdict.passed},
    )
    return verdict

"""A run Gate 2 merged, built without a supervisor (its record written as the supervisor
writes it), with a real bare repository as its remote: what ``lo-orch pr`` starts from."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers.git import commit, git, init_repo
from helpers.github_api import FakeGitHub, serve
from loop_orchestrator import config
from loop_orchestrator.cli.main import run_cli
from loop_orchestrator.commands.plan import plan_from_file
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.state import Phase, RunDir, RunPhase, Store
from loop_orchestrator.verify.models import CheckRun, Finding, Severity, Verdict
from loop_orchestrator.verify.verdict import evidence_dir
from loop_orchestrator.workspace.staging import TASK_TRAILER

RUN = "widgets"
TOKEN = "ghp_SeCrEtT0kenNeverWritten0000000000000"
PLAN = """\
goal: Add the widget parser and its printer
name: widgets
tasks:
  - id: parser
    title: Widget parser
    objective: Parse widgets
    owns: [app/parser.py, tests/test_parser.py]
    done:
      - criterion: the parser parses
        check: pytest -q tests/test_parser.py
  - id: printer
    title: Widget printer
    objective: Print widgets
    owns: [app/printer.py]
    done:
      - criterion: it prints
        check: python -c pass
"""


@dataclass
class MergedRun:
    repo: Path
    remote: Path  # bare
    base: str
    commit: str  # the reviewed (merged) commit
    feature: str


def push_log(remote: Path, branch: str) -> list[str]:
    """The remote branch's reflog, newest first (``old new`` shas, then the message)."""
    path = remote / "logs" / "refs" / "heads" / branch
    if not path.exists():
        return []
    return list(reversed(path.read_text(encoding="utf-8").splitlines()))


def only_fast_forwards(remote: Path, branch: str) -> bool:
    """Whether every move the remote's reflog records kept the old tip as an ancestor."""
    zero = "0" * 40
    for line in push_log(remote, branch):
        old, new = line.split()[:2]
        if old == zero:
            continue
        res = git(remote, "merge-base", old, new).strip()
        if res != old:
            return False
    return True


def merged_run(root: Path, *, verdicts: bool = True) -> MergedRun:
    """A repository whose run ``widgets`` passed Gate 2 (feature branch at the reviewed
    commit, tasks integrated with recorded verdicts), and an empty bare remote ``origin``
    that keeps a reflog of every push (it holds nothing else: GitHub's base branch is the
    server's to know)."""
    repo = init_repo(root / "repo")
    remote = root / "remote.git"
    git(root, "init", "-q", "--bare", str(remote))
    with (remote / "config").open("a", encoding="utf-8") as cfg:
        cfg.write("[core]\n\tlogAllRefUpdates = always\n")  # the reflog the tests read
    git(repo, "remote", "add", "origin", str(remote))
    base = git(repo, "rev-parse", "HEAD").strip()
    plan = root / "plan.yaml"
    plan.write_text(PLAN, encoding="utf-8")
    plan_from_file(repo, plan, config.load_settings(repo))
    runs.approve_plan(repo)
    # the feature branch Gate 2 set, made here without the rest of the run
    git(repo, "checkout", "-q", "-b", f"feat/{RUN}")
    # as staging holds them: one commit per task, naming it in its trailer
    commit(
        repo,
        {"app/parser.py": "def parse(s):\n    return s.split()\n"},
        f"parser\n\n{TASK_TRAILER}: parser",
    )
    sha = commit(
        repo,
        {"app/printer.py": "P = 1\n", "app/shared.py": "SHARED = 1\n"},
        f"printer\n\n{TASK_TRAILER}: printer",
    )
    git(repo, "checkout", "-q", "main")
    rec = runs.open_record(repo)
    rundir = RunDir(repo)
    for tid, rounds in (("parser", 1), ("printer", 0)):
        rec.update_task(tid, phase=Phase.INTEGRATED, commit=sha, rework_count=rounds)
        if not verdicts:
            continue
        verdict = Verdict(
            task=tid,
            commit=sha,
            base=base,
            passed=True,
            findings=[Finding(check="tests.tautology", severity=Severity.WARNING, message="w")]
            if tid == "parser"
            else [],
            checks=[
                CheckRun(name="check-1", criterion="parses", argv=["pytest"], exit_code=0),
                CheckRun(name="green", argv=["pytest"], exit_code=0),
            ]
            if tid == "parser"
            else [],
        )
        folder = evidence_dir(rundir, tid, sha)
        folder.mkdir(parents=True, exist_ok=True)
        text = verdict.model_dump_json()
        (folder / "verdict.json").write_text(text, encoding="utf-8")
        rec.record_verdict(tid, sha, True, text)
    rec.update_run(
        phase=RunPhase.MERGED, merged_commit=sha, reviewed_commit=sha, integration={"commit": sha}
    )
    return MergedRun(repo, remote, base, sha, f"feat/{RUN}")


def serve_for(merged: MergedRun, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    """The local GitHub API for ``merged`` (octo/widgets, token ``TOKEN``), named to
    ``lo-orch pr`` by the environment, while the test runs (a fixture's body)."""
    gh = FakeGitHub("octo", "widgets", TOKEN, merged.remote)
    with serve(gh):
        monkeypatch.setenv("GITHUB_API_URL", gh.url)
        monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
        monkeypatch.setenv("LO_ORCH_PR_REPO", "octo/widgets")
        monkeypatch.delenv("GH_TOKEN", raising=False)
        yield gh


def pr(repo: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`lo-orch [-vv] pr ARGS --repo REPO` (debug log with ``-vv`` among ARGS)."""
    loud = [a for a in args if a == "-vv"]
    rest = [a for a in args if a != "-vv"]
    code = run_cli([*loud, "pr", *rest, "--repo", str(repo)])
    out, err = capsys.readouterr()
    return code, out, err


def remote_tip(m: MergedRun) -> str | None:
    res = git(m.remote, "for-each-ref", "--format=%(objectname)", f"refs/heads/{m.feature}")
    return res.strip() or None


def events(repo: Path, name: str) -> list[dict[str, object]]:
    return [e for e in Store.for_repo(repo).read_ledger() if e["event"] == name]

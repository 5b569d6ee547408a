"""The application functions of ``loop_orchestrator.commands`` called directly, as the
dashboard and scripts call them: the same checks, in the same order, as the command line
(``tests/test_cli.py`` runs them through click; ``tests/test_docs_agree.py`` keeps the
layers)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from helpers import REPO_ROOT
from helpers.runs import lo_orch

from loop_orchestrator.commands import doctor as doctoring
from loop_orchestrator.commands import plan as planning
from loop_orchestrator.commands import session
from loop_orchestrator.commands import status as statuses
from loop_orchestrator.errors import LoOrchError, StateError, UsageError
from loop_orchestrator.runstate.state import Store

EXAMPLE = REPO_ROOT / "examples" / "plan.yaml"


def test_a_wrong_plan_call_is_a_usage_error_before_any_repository_is_looked_for(
    tmp_path: Path,
) -> None:
    """A hurried user in the wrong folder: the call itself is wrong, said first (exit 2),
    and nothing is written there."""
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    with pytest.raises(UsageError, match="exactly one of FILE"):
        planning.plan(outside)
    with pytest.raises(UsageError, match="exactly one of FILE"):
        planning.plan(outside, file=EXAMPLE, goal="a second source")
    with pytest.raises(UsageError, match="--done only goes with --issue"):
        planning.plan(outside, file=EXAMPLE, done=["ABC-3"])
    assert list(outside.iterdir()) == []
    result = lo_orch(outside, "plan", timeout=60)
    assert result.returncode == 2, result.stderr
    assert "Error: give exactly one of FILE" in result.stderr
    # a right call in the wrong folder is the repository's error, not a usage error
    with pytest.raises(LoOrchError, match="not inside a git repository") as caught:
        planning.plan(outside, file=EXAMPLE)
    assert not isinstance(caught.value, UsageError)


def test_gate1_bound_to_the_plan_shown_refuses_a_plan_written_since(git_repo: Path) -> None:
    """The dashboard's Gate 1: a plan replaced while the person read the old one is not
    approved in its place."""
    plan_file = git_repo / "plan.yaml"
    shutil.copy(EXAMPLE, plan_file)
    shown = planning.plan(git_repo, file=plan_file).run.plan_sha256
    data = yaml.safe_load(plan_file.read_text(encoding="utf-8"))
    data["goal"] = "a different goal, planned while Gate 1 was on screen"
    plan_file.write_text(yaml.safe_dump(data), encoding="utf-8")
    now = planning.plan(git_repo, file=plan_file).run.plan_sha256
    assert now != shown
    with pytest.raises(StateError, match="plan changed while Gate 1 was shown"):
        planning.approve(git_repo, shown_sha256=shown)
    assert Store.for_repo(git_repo).read_run().approved_plan_sha256 is None
    done = planning.approve(git_repo, shown_sha256=now)
    assert (done.run, done.plan_sha256, done.tasks) == ("notes", now, 4)
    assert Store.for_repo(git_repo).read_run().approved_plan_sha256 == now


def test_gate1_refuses_a_plan_written_while_approve_runs(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan written after the dashboard's Gate 1 was answered but before the approval is
    recorded (another terminal's `lo-orch plan`) is refused too: the plan shown is compared
    with the plan approved, not with run.json read beforehand."""
    from loop_orchestrator.runstate import create as runs
    from loop_orchestrator.sessions.guard import refuse_in_session

    plan_file = git_repo / "plan.yaml"
    shutil.copy(EXAMPLE, plan_file)
    shown = planning.plan(git_repo, file=plan_file).run.plan_sha256
    data = yaml.safe_load(plan_file.read_text(encoding="utf-8"))
    data["goal"] = "a different goal, planned as the person pressed y"
    plan_file.write_text(yaml.safe_dump(data), encoding="utf-8")
    replanned: list[str] = []

    def plan_again_first(command: str) -> None:
        refuse_in_session(command)
        replanned.append(planning.plan(git_repo, file=plan_file).run.plan_sha256)

    monkeypatch.setattr(runs, "refuse_in_session", plan_again_first)
    with pytest.raises(StateError, match="plan changed while Gate 1 was shown"):
        planning.approve(git_repo, shown_sha256=shown)
    assert replanned and replanned[0] != shown
    assert Store.for_repo(git_repo).read_run().approved_plan_sha256 is None


def test_status_gives_the_document_and_the_table_of_the_same_tasks(git_repo: Path) -> None:
    plan_file = git_repo / "plan.yaml"
    shutil.copy(EXAMPLE, plan_file)
    planning.plan(git_repo, file=plan_file)
    bare = statuses.status(git_repo, rows=False)
    assert bare.rows == ()
    assert bare.spent is not None and bare.spent.startswith("Spent so far")
    full = statuses.status(git_repo)
    tasks = [t["task"] for t in full.document["tasks"]]
    assert sorted(tasks) == ["note-model", "note-search", "note-store", "notes-cli"]
    waves = [t["wave"] for t in full.document["tasks"]]
    assert waves == sorted(waves)
    assert [r[0] for r in full.rows] == tasks
    assert all(len(r) == len(full.headers) for r in full.rows)
    assert full.title == "Run notes: waiting for Gate 1 (plan NOT approved: `lo-orch approve`)"


def test_status_of_a_task_on_a_cluster_node_in_the_document_and_the_table(
    git_repo: Path,
) -> None:
    """A task whose session runs on a cluster node: `status --json` (no table) carries the
    node, and the table gains the node column after pane ('-' for the other tasks)."""
    plan_file = git_repo / "plan.yaml"
    shutil.copy(EXAMPLE, plan_file)
    planning.plan(git_repo, file=plan_file)
    store = Store.for_repo(git_repo)
    st = store.read_status("note-model")
    st.node = "worker-1 (10.0.0.7, n1)"
    store.write_status(st)
    bare = statuses.status(git_repo, rows=False)
    assert bare.rows == ()
    nodes = {t["task"]: t.get("node") for t in bare.document["tasks"]}
    assert nodes["note-model"] == "worker-1 (10.0.0.7, n1)" and nodes["notes-cli"] is None
    full = statuses.status(git_repo)
    at = full.headers.index("node")
    assert full.headers[at - 1] == "pane"
    assert {r[0]: r[at] for r in full.rows} == {t: (n or "-") for t, n in nodes.items()}


def test_signal_without_a_task_says_what_to_pass_before_looking_for_a_run(
    tmp_path: Path,
) -> None:
    with pytest.raises(UsageError, match="LO_ORCH_TASK is not set") as caught:
        session.signal("impl_done", task=None, note=None, disputes=(), repo=tmp_path, environ={})
    assert "--task TASK" in (caught.value.hint or "")


def test_doctor_outside_a_repository_checks_the_machine_but_a_wrong_repo_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    report = doctoring.doctor(None)
    [repository] = [c for c in report.checks if c.name == "repository"]
    assert repository.detail == "not inside a git repository"
    failed = [c.name for c in report.checks if c.status == "fail"]
    assert report.failed == failed
    assert (report.error is None) == (not failed)
    with pytest.raises(LoOrchError, match="does not exist"):
        doctoring.doctor(tmp_path / "missing")

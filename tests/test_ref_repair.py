"""The run's refs put back when something else moves them, and the watch that sees it: on
real repositories, with git moving the refs as an agent in its worktree would.

A forged staging commit is what an agent makes when it merges itself: its work, on top of
staging, pointed at by ``lo/<run>/staging``.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from helpers.git import git
from helpers.runs import ledger
from helpers.wait import wait_for

from loop_orchestrator.commands.plan import plan_from_file
from loop_orchestrator.config import WorkspaceConfig, load_settings
from loop_orchestrator.errors import GitError, RefTamperedError
from loop_orchestrator.git.refwatch import RefWatch, concerns
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.state import RunDir
from loop_orchestrator.supervisor.main import Supervisor
from loop_orchestrator.workspace import integration
from loop_orchestrator.workspace.branches import BOOK_NEXT, QUARANTINE, Moved, quarantined
from loop_orchestrator.workspace.workspace import Workspace

AUTHOR = {"author_name": "Lo Bot", "author_email": "bot@example.org"}
STAGING = "refs/heads/lo/r1/staging"


def started(repo: Path) -> Workspace:
    ws = Workspace(repo, "r1", WorkspaceConfig.model_validate(AUTHOR))
    ws.preflight()
    ws.create_staging(ws.resolve_base(None))
    return ws


def work(ws: Workspace, task: str, name: str) -> str:
    path = ws.ensure_worktree(task)
    (path / name).write_text(f"{task}\n", encoding="utf-8")
    return ws.commit_task(task, f"task {task}")


def forge(repo: Path, onto: str, *parents: str) -> str:
    """A commit on ``onto`` holding ``parents`` too, as an agent's own merge would be."""
    tree = git(repo, "rev-parse", f"{parents[-1] if parents else onto}^{{tree}}").strip()
    args = [a for p in (onto, *parents) for a in ("-p", p)]
    env_free = ["-c", "user.name=agent", "-c", "user.email=agent@localhost"]
    return git(repo, *env_free, "commit-tree", *args, "-m", "merged myself", tree).strip()


def test_a_moved_staging_is_put_back_and_what_was_found_is_kept(git_repo: Path) -> None:
    ws = started(git_repo)
    staging = ws.merge_into_staging("a", work(ws, "a", "a.txt"), "A")
    b = work(ws, "b", "b.txt")
    work(ws, "c", "c.txt")
    forged = forge(git_repo, staging, b)
    git(git_repo, "update-ref", STAGING, forged)
    moved = ws.branches.moved()
    assert moved == [Moved(STAGING, staging, forged)]
    # the forged commit holds b's work, not c's (nor a's: a's is lo-orch's staging commit)
    assert ws.branches.holders(forged, ["a", "b", "c"]) == ["b"]
    [done] = ws.branches.repair(moved, 1_800_000_000.25)
    assert git(git_repo, "rev-parse", STAGING).strip() == staging
    assert done.kept == f"{QUARANTINE}r1/heads/lo/r1/staging/20270115T080000250000Z"
    assert git(git_repo, "rev-parse", done.kept).strip() == forged
    assert quarantined(git_repo, "r1") == [(done.kept, forged)]
    # never on a branch, and recorded: the evidence is watched like staging
    assert forged not in git(git_repo, "for-each-ref", "--format=%(objectname)", "refs/heads")
    assert ws.branches.refs.get(done.kept) == forged
    ws.branches.check_refs()
    git(git_repo, "update-ref", "-d", done.kept)  # the agent deletes the evidence
    assert ws.branches.moved() == [Moved(done.kept, forged, None)]
    [again] = ws.branches.repair(ws.branches.moved(), 1_800_000_001.0)
    assert again.kept is None  # nothing was there to keep
    assert git(git_repo, "rev-parse", done.kept).strip() == forged
    ws.branches.check_refs()


def test_no_decision_reads_a_moved_staging(git_repo: Path) -> None:
    """Between the move and the repair, nothing takes the forged commit for staging: no
    task starts from it, nothing counts as merged by it, no conflict check uses it."""
    ws = started(git_repo)
    staging = ws.merge_into_staging("a", work(ws, "a", "a.txt"), "A")
    b = work(ws, "b", "b.txt")
    git(git_repo, "update-ref", STAGING, forge(git_repo, staging, b))
    with pytest.raises(RefTamperedError, match="lo/r1/staging"):
        ws.ensure_worktree("c")  # would start c on b's unverified work
    assert "lo/r1/c" not in ws.branches.tips()
    with pytest.raises(RefTamperedError):
        ws.is_merged(b)  # the forged merge holds b
    with pytest.raises(RefTamperedError):
        ws.staging.merge_precheck(b)
    ws.branches.repair(ws.branches.moved(), 1_800_000_000.0)
    ws.ensure_worktree("c")
    assert ws.task_start("c") == staging
    assert not ws.is_merged(b)


def test_a_repair_is_all_or_nothing(git_repo: Path) -> None:
    ws = started(git_repo)
    staging = ws.merge_into_staging("a", work(ws, "a", "a.txt"), "A")
    forged = forge(git_repo, staging)
    git(git_repo, "update-ref", STAGING, forged)
    moved = ws.branches.moved()
    again = forge(git_repo, forged)
    git(git_repo, "update-ref", STAGING, again)  # moved again before the repair
    with pytest.raises(GitError, match="moved again"):
        ws.branches.repair(moved, 1_800_000_000.0)
    assert git(git_repo, "rev-parse", STAGING).strip() == again  # nothing changed
    assert quarantined(git_repo, "r1") == []
    assert not [r for r in ws.branches.refs.items() if r.startswith(QUARANTINE)]
    with pytest.raises(RefTamperedError):
        ws.branches.check_refs()


def test_no_task_is_named_for_a_commit_of_nobodys_work(git_repo: Path) -> None:
    ws = started(git_repo)
    staging = ws.merge_into_staging("a", work(ws, "a", "a.txt"), "A")
    work(ws, "b", "b.txt")
    # squashed the way lo-orch merges (one parent): no task's commit is in it
    assert ws.branches.holders(forge(git_repo, staging), ["b"]) == []
    assert ws.branches.holders("f" * 40, ["b"]) == []  # not even an object


def test_a_task_branch_rewritten_behind_its_start_is_reported_not_moved(git_repo: Path) -> None:
    ws = started(git_repo)
    base = git(git_repo, "rev-parse", STAGING).strip()
    ws.merge_into_staging("a", work(ws, "a", "a.txt"), "A")
    mine = work(ws, "b", "b.txt")  # b starts from staging with a's work
    start = ws.task_start("b")
    assert start != base and ws.branches.lost_starts(["a", "b"]) == []
    # b's agent rebuilds its branch on the run's base: a's work would look like its undoing
    worktree = ws.worktree_path("b")
    git(worktree, "reset", "-q", "--hard", base)
    (worktree / "b.txt").write_text("b\n", encoding="utf-8")
    git(worktree, "add", "b.txt")
    git(worktree, "-c", "user.name=agent", "-c", "user.email=a@localhost", "commit", "-qm", "b")
    tip = git(worktree, "rev-parse", "HEAD").strip()
    assert ws.branches.lost_starts(["a", "b"]) == [Moved("refs/heads/lo/r1/b", start, tip)]
    assert git(git_repo, "rev-parse", "lo/r1/b").strip() == tip  # nothing moved
    git(worktree, "merge", "-q", "--no-edit", mine)  # merged back: contains its start again
    assert ws.branches.lost_starts(["b"]) == []


def test_which_ref_files_concern_the_watch() -> None:
    prefixes = [STAGING, "refs/heads/feat/r1", QUARANTINE]
    assert concerns("refs/heads/lo/r1/staging", prefixes)
    assert concerns("refs/heads/lo/r1/staging.lock", prefixes)
    assert concerns("packed-refs", prefixes) and concerns("packed-refs.lock", prefixes)
    assert concerns("refs/lo-orch/quarantine/r1/heads/lo/r1/staging/1", prefixes)
    assert not concerns("refs/heads/lo/r1/a", prefixes)  # a task's own branch
    assert not concerns("refs/heads/lo/r1/staging2", prefixes)
    assert not concerns("HEAD", prefixes) and not concerns("index", prefixes)


def test_the_watch_sees_a_foreign_move_within_a_second_and_lo_orchs_own_are_no_alarm(
    git_repo: Path,
) -> None:
    """The supervisor's way: every watch event is a comparison with the book, never an
    alarm by itself. lo-orch's moves fire the watch and compare clean; git's own
    housekeeping (packing refs) too; a foreign move or delete is seen within a second."""
    fired = threading.Event()
    ws = Workspace(git_repo, "r1", WorkspaceConfig.model_validate(AUTHOR))
    watch = RefWatch(git_repo, [STAGING, "refs/heads/feat/r1", QUARANTINE], fired.set)
    watch.start()
    try:

        def seen(what: str) -> None:
            wait_for(fired.is_set, 1.0, f"the watch to see {what}")
            fired.clear()

        ws.preflight()
        ws.create_staging(ws.resolve_base(None))
        seen("staging created")
        assert ws.branches.moved() == []
        staging = ws.merge_into_staging("a", work(ws, "a", "a.txt"), "A")
        seen("a merged")
        assert ws.branches.moved() == []
        staging = ws.merge_into_staging("b", work(ws, "b", "b.txt"), "B")
        seen("b merged")
        assert ws.branches.moved() == []
        ws.finish(staging)
        seen("the feature branch set")
        assert ws.branches.moved() == []
        git(git_repo, "pack-refs", "--all")
        seen("refs packed")
        assert ws.branches.moved() == []
        fired.clear()
        work(ws, "c", "c.txt")  # a task's own branch: not watched
        git(git_repo, "update-ref", STAGING, forge(git_repo, staging))
        seen("staging moved by someone else")
        assert [m.ref for m in ws.branches.moved()] == [STAGING]
        ws.branches.repair(ws.branches.moved(), 1_800_000_000.0)
        seen("lo-orch's repair")
        assert ws.branches.moved() == []
        git(git_repo, "pack-refs", "--all")
        fired.clear()
        git(git_repo, "update-ref", "-d", STAGING)  # packed: only packed-refs changes
        seen("staging deleted from packed-refs")
        assert ws.branches.moved() == [Moved(STAGING, staging, None)]
    finally:
        watch.stop()


def _awaiting_review(repo: Path, tmp_path: Path) -> tuple[Workspace, str]:
    """A run ``r1`` of one task, integrated, waiting for Gate 2: (workspace, staging)."""
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(
        "goal: g\nname: r1\ntasks:\n  - id: a\n    title: A\n    objective: o\n"
        "    owns: ['a.txt']\n    done:\n      - criterion: c\n        check: 'true'\n",
        encoding="utf-8",
    )
    settings = load_settings(repo)
    plan_from_file(repo, plan_file, settings)
    runs.approve_plan(repo)
    ws = Workspace.for_run(repo, runs.open_record(repo).run, settings.workspace)
    ws.create_staging(ws.resolve_base(None))
    staging = ws.merge_into_staging("a", work(ws, "a", "a.txt"), "A")
    plan, _ = runs.read_plan(RunDir(repo))
    record = runs.open_record(repo)
    assert integration.integrate(repo, settings, plan, skipped=[], record=record).passed
    return ws, staging


@pytest.mark.slow
def test_a_run_waiting_for_gate2_gets_staging_put_back_by_lo_orch_run(
    git_repo: Path, tmp_path: Path, tmux_socket: str
) -> None:
    """Moved while no supervisor watched: Gate 2 refuses it and says `lo-orch run` puts it
    back; `lo-orch run` does, and Gate 2 lands the reviewed commit."""
    _ws, staging = _awaiting_review(git_repo, tmp_path)
    forged = forge(git_repo, staging)
    git(git_repo, "update-ref", STAGING, forged)
    with pytest.raises(RefTamperedError) as err:
        integration.review(git_repo)
    assert "`lo-orch run` puts it back" in err.value.render()
    outcome = Supervisor(git_repo, load_settings(git_repo)).run()
    assert outcome.state == "review"
    assert git(git_repo, "rev-parse", STAGING).strip() == staging
    [event] = ledger(git_repo, "refs_repaired")
    assert event["found"] == forged and event["tasks"] == []  # no session runs
    assert quarantined(git_repo, "r1") == [(event["kept"], forged)]
    review = integration.review(git_repo)
    assert review.commit == staging
    integration.merge(git_repo, review)
    assert git(git_repo, "rev-parse", "feat/r1").strip() == staging
    assert quarantined(git_repo, "r1") == [(event["kept"], forged)]  # kept after the run


@pytest.mark.slow
def test_a_persons_commit_on_the_feature_branch_is_never_put_back(
    git_repo: Path, tmp_path: Path, tmux_socket: str
) -> None:
    """Gate 2 set the feature branch and stopped before handing it over; the user then
    committed on it, and a session moved staging too. The supervisor puts staging back,
    then stops naming the feature branch, which it never moves."""
    ws, staging = _awaiting_review(git_repo, tmp_path)
    ws.branches.create("feat/r1", staging)  # Gate 2's move, recorded, not handed over
    git(git_repo, "switch", "-q", "feat/r1")
    (git_repo / "mine.txt").write_text("the user's own work\n", encoding="utf-8")
    git(git_repo, "add", "mine.txt")
    git(git_repo, "commit", "-q", "--no-gpg-sign", "-m", "my commit")
    mine = git(git_repo, "rev-parse", "HEAD").strip()
    git(git_repo, "switch", "-q", "main")
    forged = forge(git_repo, staging)
    git(git_repo, "update-ref", STAGING, forged)
    with pytest.raises(RefTamperedError) as err:
        Supervisor(git_repo, load_settings(git_repo)).run()
    assert err.value.ref == "refs/heads/feat/r1" and err.value.found == mine
    assert git(git_repo, "rev-parse", "feat/r1").strip() == mine  # never moved over
    assert git(git_repo, "rev-parse", STAGING).strip() == staging
    [repaired] = ledger(git_repo, "refs_repaired")
    assert repaired["ref"] == STAGING  # only staging was put back
    assert quarantined(git_repo, "r1") == [(repaired["kept"], forged)]
    assert ledger(git_repo, "refs_tampered")[0]["ref"] == "refs/heads/feat/r1"


def test_a_move_a_crash_left_unrecorded_is_adopted_for_a_ref_the_book_never_had(
    git_repo: Path,
) -> None:
    """lo-orch wrote a new ref's value ahead and made it, then died before recording it (a
    kill at a random moment): the next comparison adopts it as lo-orch's own, whatever
    else the book holds (adopting it once broke the comparison: the book grew while it was
    read)."""
    ws = started(git_repo)
    staging = git(git_repo, "rev-parse", STAGING).strip()
    new = "refs/heads/lo/r1/integration"
    ws.branches.refs.set(BOOK_NEXT + new, staging)  # written ahead, as ``move`` does
    git(git_repo, "update-ref", new, staging)  # made; the record never written
    assert new not in ws.branches.refs.items()
    assert ws.branches.moved() == []
    book = ws.branches.refs.items()
    assert book[new] == staging and BOOK_NEXT + new not in book
    git(git_repo, "update-ref", new, forge(git_repo, staging))  # now someone else moves it
    assert [m.ref for m in ws.branches.moved()] == [new]

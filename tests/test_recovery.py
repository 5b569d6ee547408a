"""Self-healing, on real git repositories, a private tmux server and the
scripted agent: a deleted task worktree, temporary checkouts of a killed process, a stale
``index.lock``, a garbled status file. Each test checks the user's files and commits are
byte-identical afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers.git import git
from helpers.runs import approve, edit_script, ledger, lo, user_snapshot
from helpers.wait import wait_for

from loop_orchestrator.errors import LockHeldError
from loop_orchestrator.git import gateway as gitutil
from loop_orchestrator.git import parse as gitparse
from loop_orchestrator.runstate.journal import Record
from loop_orchestrator.runstate.state import Phase, RunDir, RunPhase, Store
from loop_orchestrator.sessions import procinfo
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.supervisor import recovery
from loop_orchestrator.supervisor.lock import RELEASE_GRACE, lock_holder, supervisor_lock
from loop_orchestrator.supervisor.main import Supervisor

TASK = "tokenize"  # the one task of the one_task fixture


def run_until_blocked(files: demo.DemoFiles) -> subprocess.CompletedProcess[str]:
    """The session plans, then says it is blocked: `lo-orch run` (after approval) stops
    with its session alive."""
    edit_script(
        files,
        lambda d: d[TASK].update(
            plan=[{"signal": {"phase": "blocked", "note": "need a decision"}}]
        ),
    )
    approve(files)
    return lo(files.repo, "run")


def test_a_deleted_worktree_is_made_again_before_the_next_prompt(
    one_task: demo.DemoFiles,
) -> None:
    repo = one_task.repo
    good = one_task.script.read_text(encoding="utf-8")
    first = run_until_blocked(one_task)
    assert first.returncode == 1 and "need a decision" in first.stderr, first.stderr
    before = user_snapshot(repo)
    worktree = repo / ".worktrees" / "demo" / TASK
    assert worktree.is_dir()
    # the user deletes the task's folder (rm -rf, not `git worktree remove`)
    subprocess.run(["rm", "-rf", str(worktree)], check=True)
    one_task.script.write_text(good, encoding="utf-8")  # the next session does the work
    assert lo(repo, "retry", TASK).returncode == 0
    retried_at = len(ledger(repo))

    second = lo(repo, "run")

    assert second.returncode == 0, second.stderr
    st = Record.open(repo, "demo").task(TASK)
    assert st.phase == Phase.INTEGRATED
    assert st.rework_count == 0  # no round was spent on a session without a folder
    after = ledger(repo)[retried_at:]
    names = [e["event"] for e in after]
    assert "worktree_recreated" in names and "session_relaunched" in names
    first_prompt = names.index("prompt_delivered")
    assert names.index("worktree_recreated") < names.index("session_relaunched") < first_prompt
    assert not [e for e in after if e["event"] in ("rework", "task_blocked", "task_failed")]
    assert user_snapshot(repo) == before


def test_a_worktree_that_cannot_be_made_again_blocks_at_once_with_the_reason(
    one_task: demo.DemoFiles,
) -> None:
    repo = one_task.repo
    assert run_until_blocked(one_task).returncode == 1
    worktree = repo / ".worktrees" / "demo" / TASK
    subprocess.run(["rm", "-rf", str(worktree)], check=True)
    git(repo, "worktree", "prune")
    # the user checked the task's branch out somewhere else meanwhile
    elsewhere = repo.parent / "elsewhere"
    git(repo, "worktree", "add", "-q", str(elsewhere), f"lo/demo/{TASK}")
    before = user_snapshot(repo)
    assert lo(repo, "retry", TASK).returncode == 0
    retried_at = len(ledger(repo))

    again = lo(repo, "run")

    assert again.returncode == 1
    assert "was deleted and cannot be made again" in again.stderr
    assert f"already checked out at {elsewhere}" in again.stderr
    after = [e["event"] for e in ledger(repo)[retried_at:]]
    assert "task_blocked" in after
    assert "prompt_delivered" not in after and "rework" not in after
    assert user_snapshot(repo) == before
    assert git(elsewhere, "status", "--porcelain") == ""


def _killed_inside_checkout(repo: Path, commit: str) -> Path:
    """A child process that dies (SIGKILL) inside `temp_checkout`, leaving its checkout."""
    code = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from loop_orchestrator.git import checkouts as tempcheckout\n"
        "with tempcheckout.temp_checkout(Path(sys.argv[1]), sys.argv[2]) as tree:\n"
        "    print(tree, flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(repo), commit],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == -signal.SIGKILL
    return Path(out.stdout.strip())


def _view_worktrees(repo: Path) -> list[gitparse.WorktreeInfo]:
    res = gitutil.git(repo, "worktree", "list", "--porcelain", "-z", view=True)
    return [w for w in gitparse.parse_worktrees(res.stdout) if w.path.name == "tree"]


def test_temporary_checkouts_of_a_killed_process_are_removed_locked_ones_too(
    git_repo: Path,
) -> None:
    head = git(git_repo, "rev-parse", "HEAD").strip()
    tree = _killed_inside_checkout(git_repo, head)
    locked = _killed_inside_checkout(git_repo, head)
    # as `git worktree add` leaves it when killed before it finished
    gitdir = Path((locked / ".git").read_text(encoding="utf-8").split(":", 1)[1].strip())
    (gitdir / "locked").write_text("initializing", encoding="utf-8")
    # the user's own checkout whose path merely looks alike is not lo-orch's
    mine = Path(tempfile.mkdtemp(prefix="lo-orch-checkout-")) / "tree"
    git(git_repo, "worktree", "add", "-q", "--detach", str(mine), head)
    # and a live process's checkout is left alone
    live = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pathlib import Path\n"
            "from loop_orchestrator.git import checkouts as tempcheckout\n"
            "with tempcheckout.temp_checkout(Path(sys.argv[1]), sys.argv[2]) as t:\n"
            "    print(t, flush=True)\n    time.sleep(120)\n",
            str(git_repo),
            head,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert live.stdout is not None
        live_tree = Path(live.stdout.readline().strip())
        before = user_snapshot(git_repo)
        assert git(git_repo, "worktree", "prune") == ""
        assert {w.path for w in _view_worktrees(git_repo)} >= {tree, locked, live_tree}
        # `git worktree prune` alone keeps the locked one
        gitutil.git(git_repo, "worktree", "prune", view=True)
        assert locked in {w.path for w in _view_worktrees(git_repo)}

        removed = recovery.remove_orphan_checkouts(git_repo)

        # (others are the machine's leftovers: holders of killed processes whose repository
        # is gone, and killed processes' shim folders)
        assert {tree.parent, locked.parent} <= set(removed)
        assert not {live_tree.parent, mine.parent} & set(removed)
        assert not tree.parent.exists() and not locked.parent.exists()
        assert {w.path for w in _view_worktrees(git_repo)} == {live_tree}
        assert live_tree.is_dir()
        assert mine.is_dir()  # registered in the user's repo, but carries no owner of ours
        assert str(mine) in git(git_repo, "worktree", "list")
        assert user_snapshot(git_repo) == before
    finally:
        live.kill()
        live.wait()
        recovery.remove_orphan_checkouts(git_repo)  # the live one's, now that it is killed
        git(git_repo, "worktree", "remove", "--force", str(mine))
        mine.parent.rmdir()


def test_a_checkout_registered_in_the_users_repo_by_a_killed_run_is_removed(
    git_repo: Path,
) -> None:
    """A temporary checkout registered in the user's repository (`lo-orch-checkout-*/tree`,
    locked initializing) with lo-orch's owner file naming this repository and a dead
    process is removed; the user's own worktrees are not."""
    head = git(git_repo, "rev-parse", "HEAD").strip()
    holder = Path(tempfile.mkdtemp(prefix="lo-orch-checkout-"))
    (holder / "owner.json").write_text(
        json.dumps({"pid": 2**22 + 7, "start": "1", "repo": str(git_repo.resolve())}),
        encoding="utf-8",
    )
    git(git_repo, "worktree", "add", "-q", "--detach", str(holder / "tree"), head)
    git(git_repo, "worktree", "lock", "--reason", "initializing", str(holder / "tree"))
    user_wt = git_repo.parent / "feature-wt"
    git(git_repo, "worktree", "add", "-q", "-b", "mine", str(user_wt), head)
    before = user_snapshot(git_repo)

    removed = recovery.remove_orphan_checkouts(git_repo)
    assert holder in removed and user_wt not in removed

    listing = git(git_repo, "worktree", "list", "--porcelain")
    assert str(holder) not in listing and str(user_wt) in listing
    assert not holder.exists()
    assert user_snapshot(git_repo) == before


def test_shim_folders_of_a_killed_check_process_and_checkouts_of_a_gone_repo_are_removed(
    git_repo: Path, tmp_path: Path
) -> None:
    """A process killed while running checks leaves its start-up shim folder
    (``lo-orch-pystart-*``, removed only by its exit handler) and may leave a checkout of a
    test repository since deleted: both go at the next start. A live process's shim, a shim
    without an owner file (not provably ours to end) and a dead process's checkout of a
    repository that still exists elsewhere are left alone."""
    script = (
        "import os\nfrom pathlib import Path\n"
        "from loop_orchestrator.verify.checkout import check_env\n"
        "check_env(Path('.'))\n"
        "from loop_orchestrator.verify import checkout\n"
        "print(checkout._shim_dir, flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    killed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert killed.returncode == -9
    dead_shim = Path(killed.stdout.split()[-1])
    assert dead_shim.is_dir() and (dead_shim / "sitecustomize.py").is_file()
    from loop_orchestrator.verify import checkout

    checkout.check_env(tmp_path)
    live_shim = checkout._shim_dir
    assert live_shim is not None
    unowned = Path(tempfile.mkdtemp(prefix=checkout.SHIM_PREFIX))
    gone_repo, other_repo = tmp_path / "deleted-repo", git_repo.parent
    holders = {}
    for name, repo in (("gone", gone_repo), ("other", other_repo)):
        holders[name] = Path(tempfile.mkdtemp(prefix="lo-orch-checkout-"))
        (holders[name] / "owner.json").write_text(
            json.dumps({"pid": 2**22 + 11, "start": "1", "repo": str(repo)}), encoding="utf-8"
        )
        (holders[name] / "tree").mkdir()
    try:
        removed = recovery.remove_orphan_checkouts(git_repo)

        assert dead_shim in removed and not dead_shim.exists()
        assert holders["gone"] in removed and not holders["gone"].exists()
        assert live_shim.is_dir() and (live_shim / "sitecustomize.py").is_file()
        assert unowned.is_dir() and holders["other"].is_dir()
        assert not {live_shim, unowned, holders["other"]} & set(removed)
    finally:
        for path in (unowned, holders["other"]):
            subprocess.run(["rm", "-rf", str(path)], check=False)


def test_a_supervisor_start_removes_the_checkouts_a_killed_one_left(
    one_task: demo.DemoFiles,
) -> None:
    repo = one_task.repo
    approve(one_task)
    head = git(repo, "rev-parse", "HEAD").strip()
    left = _killed_inside_checkout(repo, head)
    from loop_orchestrator import config

    sup = Supervisor(repo, config.load_settings(repo))
    outcome = sup.run()

    assert outcome.state == "review", outcome.message
    assert not left.parent.exists()
    assert [e for e in ledger(repo, "checkouts_removed") if str(left.parent) in e["paths"]]


def test_a_stale_index_lock_is_cleared_only_when_no_git_holds_it(
    git_repo: Path,
    tmp_path: Path,
) -> None:
    head = git(git_repo, "rev-parse", "HEAD").strip()
    wt = tmp_path / "wt"
    git(git_repo, "worktree", "add", "-q", "-b", "lo/x/t", str(wt), head)
    lock = Path(git(wt, "rev-parse", "--absolute-git-dir").strip()) / "index.lock"
    lock.write_bytes(b"")
    old = time.time() - 60
    os.utime(lock, (old, old))
    # a git process working in that worktree (waits on its stdin): the lock may be its own
    holder = subprocess.Popen(
        ["git", "hash-object", "--stdin"], cwd=wt, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    try:
        wait_for(lambda: holder.pid in recovery.git_holders(wt), 10, "the git process")
        outcome = recovery.clear_stale_index_lock(wt, wait=0.5)
        assert not outcome.cleared and holder.pid in outcome.held_by
        assert lock.exists()
    finally:
        holder.communicate(b"x", timeout=10)
    # a young lock (a git process may be just starting) is not taken either
    os.utime(lock, None)
    assert not recovery.clear_stale_index_lock(wt, wait=0).cleared
    os.utime(lock, (old, old))

    outcome = recovery.clear_stale_index_lock(wt, wait=0)

    assert outcome.cleared and not lock.exists()
    (wt / "a.txt").write_text("a\n", encoding="utf-8")
    git(wt, "add", "a.txt")  # git works in the worktree again


def test_a_stale_index_lock_does_not_cost_the_task_a_round(
    one_task: demo.DemoFiles,
    tmux_socket: str,
) -> None:
    """A git process killed mid-`git add` in the task's worktree left index.lock: the next
    start clears it, and the task's work is committed and verified in round 0."""
    repo = one_task.repo
    good = one_task.script.read_text(encoding="utf-8")
    assert run_until_blocked(one_task).returncode == 1
    wt = repo / ".worktrees" / "demo" / TASK
    lock = Path(git(wt, "rev-parse", "--absolute-git-dir").strip()) / "index.lock"
    lock.write_bytes(b"")
    old = time.time() - 60
    os.utime(lock, (old, old))
    one_task.script.write_text(good, encoding="utf-8")
    # the session is gone too (the next one reads the new script)
    subprocess.run(["tmux", "-L", tmux_socket, "kill-server"], check=False)
    before = user_snapshot(repo)
    assert lo(repo, "retry", TASK).returncode == 0

    again = lo(repo, "run")

    assert again.returncode == 0, again.stderr
    st = Record.open(repo, "demo").task(TASK)
    assert st.phase == Phase.INTEGRATED and st.rework_count == 0
    assert ledger(repo, "index_lock_cleared")
    assert not ledger(repo, "rework")
    assert user_snapshot(repo) == before


def test_a_garbled_status_file_is_rebuilt_and_reported_never_fatal(
    one_task: demo.DemoFiles,
) -> None:
    repo = one_task.repo
    assert run_until_blocked(one_task).returncode == 1
    status_file = RunDir(repo).status_path(TASK)
    status_file.write_bytes(b'{"task": "tokenize", "phase": \x00garbled')
    # `status` still shows every task, from the supervisor's record
    shown = lo(repo, "status", "--json")
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert [t["task"] for t in doc["tasks"]] == [TASK]
    assert doc["tasks"][0]["phase"] == "blocked"
    table = lo(repo, "status")
    assert table.returncode == 0 and TASK in table.stdout
    # the next supervisor start rebuilds it and says so
    again = lo(repo, "run")
    assert again.returncode == 1  # still blocked: nobody retried it
    assert "Traceback" not in again.stderr
    rebuilt = json.loads(status_file.read_text(encoding="utf-8"))
    assert rebuilt["phase"] == "blocked" and rebuilt["task"] == TASK
    edited = ledger(repo, "view_edited")
    assert edited and f"status/{TASK}.json" in edited[-1]["files"]
    assert Store.for_repo(repo).read_run().phase == RunPhase.RUNNING


#: a supervisor stand-in: takes the lock (a ``flock``, as filelock's), starts a child that
#: holds the lock's file a while (as one between fork and exec does), prints the child's
#: pid and is gone at once (as when SIGKILLed)
_TAKE_AND_DIE = (
    "import fcntl, os, sys, time\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"  # (filelock's lock, without its
    # at-fork handler, which a child between fork and exec does not run either)
    "child = os.fork()\n"
    "if child == 0:\n"
    "    os.close(1)\n    os.close(2)\n"  # (the test reads the stand-in's output to its end)
    "    time.sleep(float(sys.argv[2]))\n"
    "    os._exit(0)\n"
    "print(child, flush=True)\n"
    "os._exit(0)\n"
)


def _killed_holding(lock_file: str, seconds: float) -> int:
    """Run the stand-in; the pid of the child left holding the lock for ``seconds``."""
    done = subprocess.run(
        [sys.executable, "-c", _TAKE_AND_DIE, lock_file, str(seconds)],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


def test_a_start_right_after_a_kill_waits_for_the_lock_the_dead_supervisors_child_holds(
    tmp_path: Path,
) -> None:
    """`lo-orch run` right after a SIGKILLed one: a child the dead supervisor was starting
    still holds the lock's file for a moment (seen in CI: "another supervisor is running:
    pid N", N gone). The start waits for it, briefly; a live holder is refused at once."""
    rundir = RunDir(tmp_path)
    rundir.root.mkdir(parents=True)
    lock_file = str(rundir.supervisor_lock)
    _killed_holding(lock_file, 0.8)
    dead = lock_holder(rundir)
    assert dead is not None and procinfo.exited(dead)  # held, in the name of a gone pid
    started = time.monotonic()
    with supervisor_lock(rundir):
        waited = time.monotonic() - started
        assert lock_holder(rundir) == os.getpid()
    assert 0.0 < waited < RELEASE_GRACE

    # the wait is bounded: a file held past it is refused, naming the gone taker
    child = _killed_holding(lock_file, 30)
    try:
        started = time.monotonic()
        gone = lock_holder(rundir)
        with pytest.raises(LockHeldError, match=f"pid {gone}"), supervisor_lock(rundir):
            pass
        assert RELEASE_GRACE <= time.monotonic() - started < RELEASE_GRACE + 1
    finally:
        os.kill(child, signal.SIGKILL)  # the stand-in's child, by the id it printed
    wait_for(lambda: lock_holder(rundir) is None, 10, "the child's lock let go")

    # a live holder: refused at once, naming it
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom filelock import FileLock\n"
            "lock = FileLock(sys.argv[1], timeout=0)\nlock.acquire()\n"
            "print('held', flush=True)\n"
            "time.sleep(60)\n",
            lock_file,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        started = time.monotonic()
        with pytest.raises(LockHeldError, match=f"pid {holder.pid}"), supervisor_lock(rundir):
            pass
        assert time.monotonic() - started < 0.5
    finally:
        holder.kill()
        holder.wait()

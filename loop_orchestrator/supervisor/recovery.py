"""Self-healing: what a killed supervisor or a killed git process left behind.

- Temporary checkouts (``lo-orch-checkout-*``, ``tempcheckout.temp_checkout``) of a process that
  no longer runs: ``remove_orphan_checkouts`` unregisters and deletes them, locked ones
  included (a kill during ``git worktree add`` leaves the admin folder marked ``locked
  initializing``, which ``git worktree prune`` keeps for good). Only checkouts lo-orch made
  for this repository are touched: each carries an owner file naming the process and the
  repository (``OWNER_FILE``); in the user's repository a registration counts only with
  that file and the exact path shape ``temp_checkout`` gives (the object view, where
  ``temp_checkout`` registers them, is lo-orch's alone).
- The start-up shim folders of checks (``lo-orch-pystart-*``, ``verify.checkout``) of a
  process that no longer runs (each names its owner the same way), and the checkouts of a
  dead process whose repository no longer exists.
- A stale ``index.lock`` in a task worktree's admin folder (a git process killed mid-``git
  add``): ``clear_stale_index_lock`` removes it only when no running git process could
  hold it (none whose working folder, arguments, environment or open files reach that
  worktree), and only when it is a few seconds old; otherwise it waits for the holder.

Linux: who runs is read from ``/proc``. Without it nothing is ever cleared (no process can
be proven dead), and the caller sees the lock as before.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from loop_orchestrator.git import checkouts as tempcheckout
from loop_orchestrator.git.gateway import git
from loop_orchestrator.git.parse import parse_worktrees
from loop_orchestrator.sessions import procinfo
from loop_orchestrator.verify.checkout import SHIM_PREFIX

log = logging.getLogger(__name__)

#: the folder name prefix of a temporary checkout (spelled here and in tempcheckout)
CHECKOUT_PREFIX = tempcheckout.CHECKOUT_PREFIX
#: the file in a checkout's holder folder that names its owner process and repository
OWNER_FILE = tempcheckout.CHECKOUT_OWNER_FILE
#: a lock younger than this may belong to a git process that is just starting
LOCK_MIN_AGE = 2.0


# processes --------------------------------------------------------------------------------


def process_alive(pid: int, start: str | None) -> bool:
    """Whether ``pid`` still runs and is the same process (not a reused pid)."""
    now = procinfo.start_time(pid)
    if now is None:
        return False
    return start is None or now == start


def _pids() -> list[int]:
    try:
        return [int(p.name) for p in procinfo.PROC.iterdir() if p.name.isdigit()]
    except OSError:
        return []


def _is_git(pid: int) -> bool:
    base = procinfo.PROC / str(pid)
    with contextlib.suppress(OSError):
        if (base / "comm").read_text(encoding="utf-8", errors="replace").strip().startswith("git"):
            return True
    with contextlib.suppress(OSError):
        argv0 = (base / "cmdline").read_bytes().split(b"\0", 1)[0]
        return Path(argv0.decode("utf-8", "replace")).name.startswith("git")
    return False


def _reaches(pid: int, roots: tuple[str, ...]) -> bool:
    """Whether process ``pid`` works in, names or holds open something under ``roots``."""
    base = procinfo.PROC / str(pid)

    def under(text: str) -> bool:
        return any(text == r or text.startswith(r + os.sep) for r in roots)

    with contextlib.suppress(OSError):
        if under(str((base / "cwd").readlink())):
            return True
    with contextlib.suppress(OSError):
        args = (base / "cmdline").read_bytes().decode("utf-8", "replace").split("\0")
        if any(r in arg for arg in args for r in roots):
            return True
    env = procinfo.start_environ(pid)
    if any(under(env.get(k, "")) for k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")):
        return True
    with contextlib.suppress(OSError):
        for fd in (base / "fd").iterdir():
            with contextlib.suppress(OSError):
                if under(str(fd.readlink())):
                    return True
    return False


def git_holders(*roots: Path) -> list[int]:
    """Running git processes that work in, name or hold open anything under ``roots``."""
    keys = tuple(str(r.resolve()) for r in roots) + tuple(str(r) for r in roots)
    me = os.getpid()
    return [pid for pid in _pids() if pid != me and _is_git(pid) and _reaches(pid, keys)]


# index.lock -------------------------------------------------------------------------------


@dataclass
class LockOutcome:
    """What ``clear_stale_index_lock`` found: no lock, a stale one removed, or one held."""

    path: Path | None
    cleared: bool = False
    held_by: tuple[int, ...] = ()


def worktree_gitdir(worktree: Path) -> Path | None:
    """The admin folder of a linked worktree (``.git/worktrees/<name>``), or None."""
    res = git(worktree, "rev-parse", "--absolute-git-dir", check=False)
    if not res.ok:
        return None
    return Path(res.stdout.strip())


def clear_stale_index_lock(worktree: Path, *, wait: float = 10.0) -> LockOutcome:
    """Remove ``index.lock`` of ``worktree`` when no git process can be holding it.

    A lock some git process may hold is waited for (up to ``wait`` seconds: a session's
    own ``git status`` takes it for a moment) and then left alone.
    """
    if not worktree.is_dir() or not procinfo.PROC.is_dir():
        return LockOutcome(None)
    gitdir = worktree_gitdir(worktree)
    if gitdir is None:
        return LockOutcome(None)
    lock = gitdir / "index.lock"
    deadline = time.monotonic() + wait
    holders: list[int] = []
    while True:
        try:
            before = lock.stat()
        except FileNotFoundError:
            return LockOutcome(None)
        holders = git_holders(worktree, gitdir)
        old = time.time() - before.st_mtime >= LOCK_MIN_AGE
        if not holders and old:
            with contextlib.suppress(FileNotFoundError):
                now = lock.stat()
                if (now.st_ino, now.st_mtime_ns) == (before.st_ino, before.st_mtime_ns):
                    lock.unlink()
                    log.warning("stale index lock removed", extra={"path": str(lock)})
                    return LockOutcome(lock, cleared=True)
            continue
        if time.monotonic() >= deadline:
            return LockOutcome(lock, held_by=tuple(holders))
        time.sleep(0.2)


# temporary checkouts ------------------------------------------------------------------------


def _owner(holder: Path) -> dict[str, object] | None:
    try:
        data = json.loads((holder / OWNER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _owner_alive(owner: dict[str, object]) -> bool:
    pid = owner.get("pid")
    start = owner.get("start")
    return isinstance(pid, int) and process_alive(pid, start if isinstance(start, str) else None)


def _is_checkout_path(path: Path) -> bool:
    """The shape ``temp_checkout`` gives a checkout: ``<tmp>/lo-orch-checkout-XXXX/tree``."""
    return path.name == "tree" and path.parent.name.startswith(CHECKOUT_PREFIX)


def remove_orphan_checkouts(repo: Path) -> list[Path]:
    """Remove the temporary checkouts of ``repo`` whose owner process is gone; the folders
    removed. Checkouts of a running process (another `lo-orch audit`) are left alone."""
    repo = repo.resolve()
    removed: list[Path] = []
    # where temp_checkout registers them (the object view), and the user's repository
    # (lo-orch before the object view registered them there)
    for view in (True, False):
        res = git(repo, "worktree", "list", "--porcelain", "-z", check=False, view=view)
        if not res.ok:
            continue
        for info in parse_worktrees(res.stdout):
            if not _is_checkout_path(info.path):
                continue
            holder = info.path.parent
            owner = _owner(holder)
            # the object view is lo-orch's alone; in the user's repository only a checkout
            # whose owner file names this repository is lo-orch's
            if owner is None and not view:
                continue
            if owner is not None and (owner.get("repo") != str(repo) or _owner_alive(owner)):
                continue
            # unlocked first: `prune` keeps a locked one ("initializing") for good. The folder
            # goes with rmtree, which unlinks the dependency links and never follows them.
            git(repo, "worktree", "unlock", str(info.path), check=False, view=view)
            shutil.rmtree(holder, ignore_errors=True)
            removed.append(holder)
        git(repo, "worktree", "prune", check=False, view=view)
    # holders never registered (killed before `worktree add`, or after the prune), and
    # those of a repository that no longer exists (nothing else would ever remove them)
    tmp = Path(tempfile.gettempdir())
    for holder in tmp.glob(CHECKOUT_PREFIX + "*"):
        owner = _owner(holder)
        if owner is None or _owner_alive(owner):
            continue
        owner_repo = owner.get("repo")
        if owner_repo != str(repo) and (
            not isinstance(owner_repo, str) or Path(owner_repo).exists()
        ):
            continue
        shutil.rmtree(holder, ignore_errors=True)
        if holder not in removed:
            removed.append(holder)
    # start-up shim folders of checks (``verify.checkout``) whose process was killed
    for holder in tmp.glob(SHIM_PREFIX + "*"):
        owner = _owner(holder)
        if owner is not None and not _owner_alive(owner):
            shutil.rmtree(holder, ignore_errors=True)
            removed.append(holder)
    if removed:
        log.warning(
            "orphaned temporary checkouts removed", extra={"paths": [str(p) for p in removed]}
        )
    return removed

"""A sandboxed session's own task branch: the one ref it may move.

Inside the sandbox the repository's refs are read-only. git moves a branch by writing
``<ref>.lock`` beside it and renaming that over the ref, so a bind of the one ref file
cannot make it writable (a rename onto a mount point fails with EBUSY), and the folder
that holds it (``refs/heads/lo/<run>/``) holds staging and every other task's branch too.
So the session gets its own copy of that folder, the *mirror*: a folder in the
supervisor's private state, bound over ``refs/heads/lo/<run>/`` inside its sandbox only.
The mirror holds the task's branch as a plain file, which the session's ``git commit``
moves, and every other ref of the run as a file with its value at launch, each bound
read-only onto itself: writing one fails (EROFS), and so does replacing or removing it
(EBUSY). A new name written there (a lock, a branch the run has not made yet) is the
session's own view only: the supervisor never reads it, and git refuses it anyway, as its
reflog cannot be created. Of the reflogs only the branch's own file is writable (git
appends to a reflog in place; it is made empty before the launch if missing).

The supervisor takes the session's move when it takes the task's work (``adopt``): this
branch's value in the mirror, read without following a symlink, only a commit that
descends from the branch's tip, moved by compare-and-swap. Its own moves of the branch (a
commit of the worktree, staging merged in) are written back (``settle``). What is read
from the mirror never names the ref that is written: that is the supervisor's name for
the task.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from loop_orchestrator.errors import GitError
from loop_orchestrator.files import NOFOLLOW_DIR, open_regular
from loop_orchestrator.git import refread
from loop_orchestrator.git.gateway import common_dir, git, is_ancestor
from loop_orchestrator.runstate import private
from loop_orchestrator.workspace import ownobjects

log = logging.getLogger(__name__)

#: the folder of each task's mirror in the run's private state
MIRROR_DIR = "own-branch"
#: the folder of each task's own object store there
STORE_DIR = "own-objects"
#: the run's ref values that the mirrors' frozen refs are hard links to (``OwnBranch.values``)
VALUES_DIR = "ref-values"
#: in a mirror, beside ``refs``: what the supervisor last wrote for the branch
PUBLISHED = "published"
_SHA = re.compile(rb"^([0-9a-f]{40}(?:[0-9a-f]{24})?)\n?\Z")


def _holds(path: Path, sha: str) -> bool:
    """Whether ``path`` is a regular file holding exactly ``sha`` and a newline (read
    without following a symlink)."""
    fd = open_regular(path)
    if fd is None:
        return False
    try:
        return os.read(fd, 200) == f"{sha}\n".encode()
    finally:
        os.close(fd)


def task_branch_name(run: str, task: str) -> str:
    """The branch of ``task`` in run ``run`` (``Branches.task_branch`` checks the names)."""
    return f"lo/{run}/{task}"


@dataclass(frozen=True)
class OwnBranch:
    """Task ``task``'s branch ``branch`` in the repository whose git folder is ``common``;
    ``mirror``: its folder in the supervisor's private state."""

    repo: Path
    common: Path
    branch: str
    mirror: Path
    #: where the sandbox sees the repository's object store, read-only, while its own store
    #: (``ownobjects``) is bound over ``.git/objects``; None: no own store
    objects_view: Path | None = None

    @classmethod
    def of(cls, repo: Path, run: str, task: str) -> OwnBranch:
        repo = repo.resolve()
        mirror = private.run_dir(repo, run, create=False) / MIRROR_DIR / task
        return cls(repo, common_dir(repo), task_branch_name(run, task), mirror)

    @property
    def ref(self) -> str:
        return f"refs/heads/{self.branch}"

    @property
    def leaf(self) -> str:
        return self.branch.rsplit("/", 1)[-1]

    @property
    def ref_dir(self) -> Path:
        """The real folder of the branch's loose ref (the mount point of ``refs``)."""
        return self.common / self.ref.rsplit("/", 1)[0]

    @property
    def reflog(self) -> Path:
        """The branch's reflog (bound writable onto itself)."""
        return self.common / "logs" / self.ref

    @property
    def refs(self) -> Path:
        """The mirror's copy of ``ref_dir``."""
        return self.mirror / "refs"

    @property
    def store(self) -> Path:
        """The session's own object store (kept across launches until taken)."""
        return self.mirror.parent.parent / STORE_DIR / self.mirror.name

    def mounts(self) -> tuple[tuple[Path, Path], ...]:
        """Writable binds ``(host path, where the sandbox sees it)``."""
        binds = [(self.refs, self.ref_dir), (self.reflog, self.reflog)]
        if self.objects_view is not None:
            binds.append((self.store, self.common / "objects"))
        return tuple(binds)

    def frozen(self) -> tuple[tuple[Path, Path], ...]:
        """Read-only binds made after ``mounts``: every other ref's file in the mirror
        onto itself, and the repository's object store at ``objects_view``."""
        refs, ref_dir = self.refs, self.ref_dir
        own = refs / self.leaf
        files = sorted(p for p in refs.rglob("*") if p != own and p.is_file())
        binds = [(p, ref_dir / p.relative_to(refs)) for p in files]
        if self.objects_view is not None:
            binds.append((self.common / "objects", self.objects_view))
        return tuple(binds)

    def tip(self) -> str | None:
        return refread.value(self.repo, self.ref)

    # the supervisor's side ----------------------------------------------------------------

    def seed(self) -> None:
        """Make the mirror afresh before a launch: the branch's tip and every other ref of
        its folder as git holds them now (loose or packed); the branch's reflog and the
        folder the mirror is bound over exist. What the last session committed and the
        supervisor has not taken yet is taken first (a relaunch loses none of it)."""
        with contextlib.suppress(GitError):  # a lost race is logged; the files stay
            self.adopt()
        self.ref_dir.mkdir(parents=True, exist_ok=True)
        self.reflog.parent.mkdir(parents=True, exist_ok=True)
        if not self.reflog.exists():
            self.reflog.touch()
        if self.mirror.is_symlink() or self.mirror.is_file():
            self.mirror.unlink()
        elif self.mirror.exists():
            shutil.rmtree(self.mirror)  # fd-based: a symlink planted inside is not followed
        run_dir = self.mirror.parent.parent
        private.run_dir(self.repo, run_dir.name)  # 0700, as the run's private folder is made
        self.mirror.parent.mkdir(mode=0o700, exist_ok=True)
        self.mirror.mkdir(mode=0o700)
        self.refs.mkdir()
        if self.objects_view is not None:
            self._fresh_store_info()
            self.objects_view.mkdir(exist_ok=True)
        prefix = self.ref.rsplit("/", 1)[0] + "/"
        frozen = [
            (self.refs / name[len(prefix) :], sha)
            for name, sha in refread.for_each_ref(self.repo, [prefix]).items()
            if name != self.ref and name.startswith(prefix)
        ]
        values = {sha: self._value_file(sha) for sha in {sha for _, sha in frozen}}
        for folder in {path.parent for path, _ in frozen} - {self.refs}:
            folder.mkdir(parents=True, exist_ok=True)  # (most refs are in the folder itself)
        for path, sha in frozen:
            os.link(values[sha], path, follow_symlinks=False)
        tip = self.tip()
        if tip is not None:
            self.publish(tip)

    @property
    def values(self) -> Path:
        """The run's one file per ref value (``<sha>`` holding ``<sha>\\n``) that every
        mirror's frozen refs are hard links to."""
        return self.mirror.parent.parent / VALUES_DIR

    def _value_file(self, sha: str) -> Path:
        """The run's file of the value ``sha``, which the mirrors' frozen refs are hard links
        to. A file written per ref per launch was a new inode for every other task's branch
        at every launch (tasks x tasks of them in a run; a new inode is the dearest thing a
        write asks of ext4 under churn). The shared file is checked before it is linked (a
        regular file holding exactly the value; else it is made again), and it is never
        written through a mirror: each frozen ref is bound read-only in the sandbox, where
        the private folder is hidden."""
        if _SHA.match(sha.encode("ascii", "replace")) is None:
            msg = f"git listed {sha!r} as a ref's value"
            raise GitError(msg)
        shared = self.values / sha
        if _holds(shared, sha):
            return shared
        self.values.mkdir(mode=0o700, exist_ok=True)
        tmp = self.values / f".{sha}.{secrets.token_hex(8)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
        try:
            os.write(fd, f"{sha}\n".encode("ascii"))
        finally:
            os.close(fd)
        try:
            tmp.replace(shared)
        except IsADirectoryError:  # a folder in its place (fd-based: nothing followed)
            shutil.rmtree(shared)
            tmp.replace(shared)
        return shared

    def _fresh_store_info(self) -> None:
        """The store's ``info/alternates`` (the repository's store, where the sandbox shows
        it) written afresh: the session may have left ``info`` or the file as a symlink to
        something of the repository's, so what is there is removed, never written through."""
        self.store.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = self.store / "info"
        if info.is_symlink() or info.is_file():
            info.unlink()
        elif info.exists():
            shutil.rmtree(info)
        info.mkdir()
        fd = os.open(info / "alternates", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(f"{self.objects_view}\n")

    def read(self) -> str | None:
        """The sha the session left for its branch, or None (no mirror, no plain file
        holding a sha: a symlink, a symbolic ref, a FIFO are all None)."""
        try:
            folder = os.open(self.refs, NOFOLLOW_DIR)
        except OSError:
            return None
        try:
            fd = open_regular(self.leaf, dir_fd=folder)
        finally:
            os.close(folder)
        if fd is None:
            return None
        try:
            data = os.read(fd, 200)
        finally:
            os.close(fd)
        found = _SHA.match(data)
        return found.group(1).decode() if found else None

    def publish(self, sha: str) -> None:
        """Write ``sha`` as the branch's value in the mirror (no mirror: nothing to do).
        A new file renamed into the folder: a symlink left in its place is replaced, never
        followed."""
        try:
            folder = os.open(self.refs, NOFOLLOW_DIR)
        except OSError:
            return
        tmp = f".{self.leaf}.{secrets.token_hex(6)}"
        try:
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=folder
            )
            try:
                os.write(fd, f"{sha}\n".encode())
            finally:
                os.close(fd)
            os.replace(tmp, self.leaf, src_dir_fd=folder, dst_dir_fd=folder)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=folder)
            raise
        finally:
            os.close(folder)
        # beside the copy, out of the session's sight (only ``refs`` is bound in its sandbox)
        (self.mirror / PUBLISHED).write_text(f"{sha}\n", encoding="ascii")

    def published(self) -> str | None:
        """The value the supervisor last wrote into the copy."""
        try:
            return (self.mirror / PUBLISHED).read_text(encoding="ascii").strip() or None
        except OSError:
            return None

    def adopt(self) -> str | None:
        """Move the branch to where the session committed it (a fast-forward only); the new
        tip, or None when there was nothing to take. A move that is not a fast-forward
        (an amend, a reset) is not taken: the worktree still holds its files, and the
        supervisor's commit of the worktree carries them onto the branch. Only a value the
        session wrote counts: the one the supervisor wrote itself may be older than the
        branch (moved since by a node's work, say), and is no move of the session's."""
        ownobjects.take(self.repo, self.common, self.store)
        sha = self.read()
        if sha is None or sha == self.published():
            return None
        tip = self.tip()
        if tip is None or sha == tip:
            return None
        exists = git(self.repo, "cat-file", "-e", f"{sha}^{{commit}}", check=False).ok
        if not exists or not is_ancestor(self.repo, tip, sha):
            log.warning(
                "session branch move not taken",
                extra={"branch": self.branch, "tip": tip, "session": sha},
            )
            return None
        try:
            refread.update_ref(
                self.repo, self.branch, sha, tip, "lo-orch: the session's own commits"
            )
        except GitError:
            log.warning("session branch move lost a race", extra={"branch": self.branch})
            raise
        log.info("session branch move taken", extra={"branch": self.branch, "commit": sha})
        return sha

    def settle(self) -> None:
        """After the supervisor moved the branch itself: the session sees the new tip (a
        mirror the session broke is left as it is: its next move is not a fast-forward)."""
        tip = self.tip()
        if tip is None:
            return
        try:
            self.publish(tip)
        except OSError as exc:
            log.warning(
                "session branch view not updated", extra={"branch": self.branch, "error": str(exc)}
            )

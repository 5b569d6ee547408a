"""The branches of one run and the refs book that records them: names, compare-and-swap
moves written ahead, ``check_refs`` and ``moved``, the repair of a moved ref with what was
found on it kept under ``refs/lo-orch/quarantine/``, each task's start commit, clashes with
branches that are not the run's.

``Branches`` is the one collaborator of a run's workspace that moves refs and writes the
book (``workspace.py`` says the safety rules); ``worktrees.Worktrees`` and
``staging.Staging`` are given one.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from loop_orchestrator.errors import (
    GitError,
    RefTamperedError,
)
from loop_orchestrator.git import refread
from loop_orchestrator.git.gateway import git, is_ancestor, oid, ref_transaction
from loop_orchestrator.git.parse import WorktreeInfo, parse_worktrees
from loop_orchestrator.git.refbook import FileRefBook, RefBook
from loop_orchestrator.workspace.ownref import task_branch_name

log = logging.getLogger(__name__)

TASK_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
RUN_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
RESERVED_TASKS = frozenset({"staging"})
#: refs-book keys besides full ref names (spelled here only)
BOOK_BASE = "base"
BOOK_START = "start/"
BOOK_NEXT = "next:"
BOOK_WORKTREE = "worktree/"
ABSENT = "0" * 40
#: where what was found on a ref lo-orch put back is kept, per run (never a branch)
QUARANTINE = "refs/lo-orch/quarantine/"


def is_sha(text: str) -> bool:
    return re.fullmatch(r"[0-9a-f]{40}(?:[0-9a-f]{24})?", text) is not None


def check_task(task: str) -> str:
    """``task`` when it can name a task of a run (its branch, its worktree); else GitError."""
    if not TASK_RE.match(task) or task in RESERVED_TASKS:
        msg = f"invalid task id {task!r}"
        raise GitError(msg, hint="Task ids are 1-40 of a-z, 0-9 and '-' and not 'staging'.")
    return task


def rel(repo: Path, path: Path) -> str:
    """``path`` as messages name it: relative to the repository when inside it."""
    with contextlib.suppress(ValueError):
        return path.relative_to(repo).as_posix()
    return str(path)


def list_worktrees(repo: Path) -> list[WorktreeInfo]:
    """The repository's worktrees (stale entries pruned first)."""
    out = git(repo, "worktree", "list", "--porcelain", "-z").stdout
    infos = parse_worktrees(out)
    if any(w.prunable for w in infos):
        git(repo, "worktree", "prune")
        infos = parse_worktrees(git(repo, "worktree", "list", "--porcelain", "-z").stdout)
    return infos


def worktree_at(repo: Path, path: Path) -> WorktreeInfo | None:
    """The worktree checked out at ``path``, if any."""
    return worktree_in(list_worktrees(repo), path)


def worktree_in(worktrees: Iterable[WorktreeInfo], path: Path) -> WorktreeInfo | None:
    """The one of ``worktrees`` at ``path`` (symlinks resolved), if any.

    Only a worktree of the same last name, or one whose last part is a symlink, can
    resolve to ``path``: the others are not resolved (a resolve of every worktree at each
    launch and commit grew with the run's tasks)."""
    target = path.resolve()
    for w in worktrees:
        if (w.path.name == target.name or w.path.is_symlink()) and w.path.resolve() == target:
            return w
    return None


@dataclass(frozen=True)
class Moved:
    """A ref the book records that git shows elsewhere: ``found`` None when it is gone."""

    ref: str
    expected: str
    found: str | None

    def error(self) -> RefTamperedError:
        return RefTamperedError(self.ref, self.expected, self.found)


@dataclass(frozen=True)
class Repaired:
    """A ref put back on ``expected``; what was found on it kept at ``kept`` (None: the
    ref was gone, nothing to keep)."""

    ref: str
    expected: str
    found: str | None
    kept: str | None


def quarantine_name(run: str, ref: str, when: float) -> str:
    """``refs/lo-orch/quarantine/<run>/<ref without refs/>/<UTC time>`` for what was found
    on ``ref`` at ``when`` (epoch seconds)."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(when)) + f"{int(when * 1e6) % 10**6:06d}Z"
    return f"{QUARANTINE}{run}/{ref.removeprefix('refs/')}/{stamp}"


def quarantined(repo: Path, run: str) -> list[tuple[str, str]]:
    """``(ref, sha)`` of every quarantine ref of run ``run``, oldest first."""
    pairs = refread.for_each_ref(repo, [f"{QUARANTINE}{run}/"]).items()
    return sorted(pairs, key=lambda p: (p[0].rsplit("/", 1)[-1], p[0]))


class Branches:
    """The branches of one run in one repository and the refs book that records them."""

    def __init__(
        self, repo: Path, run: str, refs: RefBook | None = None, *, instance: str | None = None
    ) -> None:
        """``refs`` is where the run records its refs (default: a ``FileRefBook`` in the
        run's private folder, for run instance ``instance``: see ``for_run``)."""
        if not RUN_RE.match(run):
            msg = f"invalid run name {run!r}"
            raise GitError(
                msg,
                hint="Use 1-40 of a-z, 0-9 and '-', starting with a letter or "
                "digit (plan field `name`).",
            )
        self.repo = repo.resolve()
        self.run = run
        self.instance = instance
        self.refs: RefBook = refs or FileRefBook.for_run(self.repo, run, instance)
        #: task -> (start, tip, whether tip contains start) as ``lost_starts`` last found:
        #: a commit's ancestry never changes, so only a branch that moved is asked again
        self._contains: dict[str, tuple[str, str, bool]] = {}

    # names --------------------------------------------------------------------------

    @property
    def staging_branch(self) -> str:
        return f"lo/{self.run}/staging"

    @property
    def feature_branch(self) -> str:
        return f"feat/{self.run}"

    def task_branch(self, task: str) -> str:
        return task_branch_name(self.run, check_task(task))

    def check_branch_name(self, name: str) -> str:
        """``name`` when lo-orch may create or move a branch of that name (outside lo/)."""
        bad = (
            not name
            or name.startswith(("-", "lo/"))
            or "@{" in name
            or not git(self.repo, "check-ref-format", f"refs/heads/{name}", check=False).ok
        )
        if bad:
            msg = f"invalid branch name {name!r}"
            raise GitError(msg, hint="Use a valid git branch name outside lo/ (e.g. feat/x).")
        return name

    # what git holds -------------------------------------------------------------------

    def tips(self) -> dict[str, str]:
        """branch -> sha of every local branch."""
        found = refread.for_each_ref(self.repo, ["refs/heads/"])
        return {ref[len("refs/heads/") :]: sha for ref, sha in found.items()}

    def tip(self, branch: str) -> str | None:
        return refread.value(self.repo, f"refs/heads/{branch}")

    def watched(
        self, tasks: Sequence[str] = (), book: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """ref -> sha of what ``moved`` and ``lost_starts`` compare: every ref the book
        records (a value written ahead included) and the branches of ``tasks``; a ref git
        does not have is left out. ``book``: the book as just read (else read here)."""
        book = self.refs.items() if book is None else book
        names = {n for n, sha in book.items() if n.startswith("refs/") and sha != ABSENT}
        names |= {n[len(BOOK_NEXT) :] for n in book if n.startswith(BOOK_NEXT)}
        names |= {f"refs/heads/{self.task_branch(task)}" for task in tasks}
        return refread.values(self.repo, sorted(names))

    @property
    def staging_ref(self) -> str:
        return f"refs/heads/{self.staging_branch}"

    def kept(self) -> list[tuple[str, str]]:
        """``(ref, sha)`` of the quarantine refs this run (instance) made, oldest first
        (one an agent made up, or an earlier run of the same name left, is not listed)."""
        book = self.refs.items()
        return [(r, s) for r, s in quarantined(self.repo, self.run) if book.get(r) == s]

    def is_quarantine(self, ref: str) -> bool:
        """Whether ``ref`` is one of this run's quarantine refs."""
        return ref.startswith(f"{QUARANTINE}{self.run}/")

    def _key(self, branch: str) -> str:
        """The book key that makes ``branch`` this run's: a task's start, else the ref."""
        prefix = f"lo/{self.run}/"
        if branch.startswith(prefix) and branch != self.staging_branch:
            return BOOK_START + branch[len(prefix) :]
        return f"refs/heads/{branch}"

    def is_ours(self, branch: str) -> bool:
        """Whether this run (instance) created ``branch``, by its book."""
        return self.refs.get(self._key(branch)) is not None

    def move(self, branch: str, new: str | None, old: str | None, reason: str) -> None:
        """Compare-and-swap ``branch`` from ``old`` to ``new`` (None: absent) and record it.

        The new value is written ahead, so ``check_refs`` after a crash between the update
        and the record recognises lo-orch's own move instead of calling it tampering.
        A task's branch is not checked (its agent moves it): only its start is recorded.
        """
        ref = f"refs/heads/{branch}"
        checked = not self._key(branch).startswith(BOOK_START)
        if checked:
            self.refs.set(BOOK_NEXT + ref, new or ABSENT)
        refread.update_ref(self.repo, branch, new, old, reason)
        if checked:  # (the move recorded and the note ahead of it dropped: one write)
            if new:
                self.refs.change({ref: new}, (BOOK_NEXT + ref,))
            else:
                self.refs.change({}, (ref, BOOK_NEXT + ref))

    def create(self, name: str, sha: str) -> None:
        """Create the branch ``name`` at ``sha`` as this run's (recorded first)."""
        # Record first: a crash between the two steps leaves a record without a branch
        # (harmless), never a branch of ours that looks like a user's.
        key = self._key(name)
        if key.startswith(BOOK_START):
            self.refs.set(key, sha)
        try:
            self.move(name, sha, None, f"lo-orch: run {self.run} created {name}")
        except GitError:
            if key.startswith(BOOK_START):
                self.refs.drop(key)
            raise
        log.info("branch created", extra={"branch": name, "sha": sha})

    def delete(self, name: str, sha: str) -> None:
        """Delete the run's branch ``name`` if it is still at ``sha``."""
        # a compare-and-swap delete: only what was checked to be merged goes
        self.move(name, None, sha, f"lo-orch: run {self.run} deleted {name}")
        self.refs.drop(self._key(name))
        log.info("branch deleted", extra={"branch": name, "sha": sha})

    # the refs book ----------------------------------------------------------------------

    def check_refs(self) -> None:
        """Compare every ref the book records with git; ``RefTamperedError`` on a difference
        (the first, by name)."""
        moved = self.moved()
        if not moved:
            return
        first = moved[0]
        if first.ref == self.staging_ref or self.is_quarantine(first.ref):
            # only lo-orch moves these: its supervisor puts them back
            raise RefTamperedError(
                first.ref,
                first.expected,
                first.found,
                hint=(
                    "Nothing was changed. Only lo-orch moves this ref: `lo-orch run` puts it "
                    f"back on {first.expected[:12]} and keeps what it found under "
                    f"{QUARANTINE}{self.run}/ (while a supervisor runs it does so by "
                    "itself), then run this again."
                ),
            )
        raise first.error()

    def moved(
        self, refs: Mapping[str, str] | None = None, book: Mapping[str, str] | None = None
    ) -> list[Moved]:
        """Every ref the book records that git shows elsewhere (gone included), by name.

        A value written ahead (``move``) that git shows is adopted: lo-orch moved the ref
        and stopped before recording it. Nothing else is changed. ``refs``: what
        ``watched`` gave just now (else git is asked); ``book``: the book as read for it.
        """
        book = dict(self.refs.items() if book is None else book)  # (adoptions go in)
        now = self.watched(book=book) if refs is None else refs
        for name, ahead in list(book.items()):  # (an adopted value is added to ``book``)
            if not name.startswith(BOOK_NEXT):
                continue
            ref = name[len(BOOK_NEXT) :]
            found = now.get(ref, ABSENT)
            if found == ahead:
                if ahead == ABSENT:
                    self.refs.drop(ref)
                else:
                    self.refs.set(ref, ahead)
                book[ref] = ahead
            self.refs.drop(name)
        return [
            Moved(name, expected, now.get(name))
            for name, expected in sorted(book.items())
            if name.startswith("refs/") and expected != ABSENT and now.get(name) != expected
        ]

    def repair(self, moved: Sequence[Moved], when: float) -> list[Repaired]:
        """Put every ref of ``moved`` back on its recorded value and keep what was found on
        it under ``quarantine_name``: one atomic ref transaction (all or nothing), checked
        against what was found (a ref that moved again meanwhile fails it: nothing changes,
        ``GitError``). The quarantine refs are recorded in the book, so they are watched
        like the rest."""
        if not moved:
            return []
        done = [
            Repaired(
                m.ref,
                m.expected,
                m.found,
                quarantine_name(self.run, m.ref, when) if m.found else None,
            )
            for m in moved
        ]
        updates = [(r.ref, r.expected, r.found or ABSENT) for r in done]
        updates += [(r.kept, r.found, ABSENT) for r in done if r.kept and r.found]
        reason = f"lo-orch: run {self.run} put back refs moved outside lo-orch"
        # the quarantine refs are recorded first: a crash after the transaction leaves them
        # recorded (watched, listed); one before it makes the next check create them
        for r in done:
            if r.kept and r.found:
                self.refs.set(r.kept, r.found)
        if not ref_transaction(self.repo, updates, reason):
            for r in done:
                if r.kept:
                    self.refs.drop(r.kept)
            msg = (
                f"could not put back {', '.join(m.ref for m in moved)}: a ref moved again "
                "while lo-orch was repairing it; nothing changed"
            )
            raise GitError(
                msg,
                hint="lo-orch checks the refs again at once; if this "
                "repeats, stop whatever keeps moving them.",
            )
        log.warning(
            "refs put back",
            extra={"refs": [r.ref for r in done], "kept": [r.kept for r in done]},
        )
        return done

    def lost_starts(
        self,
        tasks: Sequence[str],
        refs: Mapping[str, str] | None = None,
        book: Mapping[str, str] | None = None,
    ) -> list[Moved]:
        """The task branches of ``tasks`` that no longer contain their recorded start (the
        staging commit their work is measured from): ``Moved(branch ref, start, tip)``.
        Not put back (a task's branch is its agent's), only reported. ``refs``: what
        ``watched`` gave just now for ``tasks`` (else git is asked); ``book``: the book as
        read for it."""
        if not tasks:
            return []
        book = self.refs.items() if book is None else book  # (one read for every task)
        now = self.watched(tasks, book) if refs is None else refs
        tips = {
            r.removeprefix("refs/heads/"): s for r, s in now.items() if r.startswith("refs/heads/")
        }
        lost = []
        for task in tasks:
            start = book.get(BOOK_START + task)
            tip = tips.get(self.task_branch(task))
            if start is None or tip is None or tip == start:
                continue
            known = self._contains.get(task)
            if known is not None and known[:2] == (start, tip):
                contains = known[2]
            else:
                contains = is_ancestor(self.repo, start, tip)
                self._contains[task] = (start, tip, contains)
            if not contains:
                lost.append(Moved(f"refs/heads/{self.task_branch(task)}", start, tip))
        return lost

    def holders(self, commit: str, tasks: Sequence[str]) -> list[str]:
        """Which of ``tasks`` have work ``commit`` contains: a commit of the task's branch
        since its recorded start is an ancestor of ``commit``."""
        if (
            not is_sha(commit)
            or git(self.repo, "cat-file", "-t", commit, check=False, view=True).stdout.strip()
            != "commit"
        ):
            return []
        found = []
        tips = self.tips()
        for task in tasks:
            start = self.refs.get(BOOK_START + task)
            tip = tips.get(self.task_branch(task))
            if start is None or tip is None or tip == start:
                continue
            own = git(
                self.repo, "rev-list", tip, f"^{start}", view=True, check=False
            ).stdout.split()
            inside = set(
                git(
                    self.repo, "rev-list", commit, f"^{start}", view=True, check=False
                ).stdout.split()
            )
            if any(c in inside for c in own):
                found.append(task)
        return found

    def recorded(self, branch: str) -> str:
        """The value lo-orch set ``branch`` (staging, the feature branch) to, checked
        against git; ``GitError`` when it never set it."""
        self.check_refs()
        sha = self.refs.get(f"refs/heads/{branch}")
        if sha is None:
            msg = f"{branch} was not created by run {self.run}"
            raise GitError(msg, hint="Start the run with `lo-orch run`, which creates it.")
        return sha

    def staging_tip(self) -> str | None:
        """Staging as lo-orch set it, for every decision that reads it (a task's start, what
        is merged, a brief's signatures): None while the run has not created it;
        ``RefTamperedError`` when git shows any recorded ref elsewhere (never the moved
        value)."""
        if self.refs.get(self.staging_ref) is None:
            return None
        return self.recorded(self.staging_branch)

    def base(self, fallback: str | None = None) -> str:
        """The run's base commit as recorded when staging was created (``fallback`` for a
        run recorded before the book existed)."""
        sha = self.refs.get(BOOK_BASE)
        if sha is None:
            if fallback is None:
                msg = f"run {self.run} has no recorded base commit"
                raise GitError(msg, hint="Start the run with `lo-orch run`.")
            return oid(self.repo, fallback)
        if fallback is not None and is_sha(fallback) and fallback != sha:
            what = f"the base of run {self.run}"
            raise RefTamperedError(
                what,
                sha,
                fallback,
                hint=(
                    "The run's published state (run.json) names another base than lo-orch "
                    "recorded; nothing was changed. Restore run.json or plan the run afresh."
                ),
            )
        return sha

    def hand_over(self, branch: str) -> None:
        """Gate 2 is done: ``branch`` is the user's from now on (no longer checked)."""
        self.refs.drop(f"refs/heads/{branch}")

    def task_start(self, task: str) -> str:
        """The staging commit a task's branch began at, as recorded: what its own changes
        are measured against (its producers' work, already on staging, is not its change).
        Never derived from anything an agent can move."""
        start = self.refs.get(BOOK_START + check_task(task))
        if start is None:
            msg = f"task {task} has no recorded start commit in run {self.run}"
            raise GitError(
                msg,
                hint="lo-orch did not create its branch; delete the branch "
                f"{self.task_branch(task)} to start the task afresh.",
            )
        return start

    def restart(self, task: str, commit: str) -> None:
        """Record ``commit`` as the task's new start (staging merged into its branch)."""
        self.refs.set(BOOK_START + check_task(task), commit)

    # clashes -----------------------------------------------------------------------------

    def clash(self, wanted: str, branches: Mapping[str, str]) -> str | None:
        """Why the run may not create ``wanted`` among ``branches`` (None: it may)."""
        if wanted in branches and not self.is_ours(wanted):
            return f"branch {wanted} already exists and was not created by run {self.run}"
        for name in branches:
            if wanted.startswith(name + "/") or name.startswith(wanted + "/"):
                return f"branch {name} exists, so git cannot also hold a branch {wanted}"
        return None

    def raise_clashes(self, problems: Sequence[str]) -> None:
        """GitError listing ``problems`` (clashes with what is not this run's), if any."""
        if problems:
            msg = (
                f"run {self.run} would reuse branches or worktrees it did not create:\n"
                + "\n".join(f"  - {p}" for p in problems)
            )
            raise GitError(
                msg,
                hint="lo-orch never adopts, resets or removes what it did not "
                "create for this run. Choose another run name (plan `name:`), or "
                "once you have saved what you need from them, remove those "
                "worktrees (`git worktree remove PATH`) and rename or delete those "
                "branches yourself.",
            )

    def refuse_checked_out(self, branch: str) -> None:
        """GitError when ``branch`` is checked out somewhere (moving it would leave that
        checkout out of date)."""
        for w in list_worktrees(self.repo):
            if w.branch == branch:
                msg = (
                    f"{branch} is checked out at {w.path}; moving it without that checkout "
                    "would leave the checkout out of date"
                )
                raise GitError(msg, hint="Switch that checkout to another branch, then retry.")

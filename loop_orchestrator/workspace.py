"""Everything that touches git: branches, worktrees, commits, diffs, merges, cleanup.

Safety (DESIGN.md sections 9 and 10): nothing is pushed and nothing is forced. Every
branch this module creates, every value it sets a ref to and each task's start commit are
recorded in the run's refs book (``refbook``), outside the repository: a user's branch that
happens to have the same name is refused, never reused or moved, and a ref of the run that
something else moved stops the run (``RefTamperedError``) before each merge, at integration
and at Gate 2. Every ref update is a compare-and-swap ``git update-ref``, read back, and
written ahead in the book so a crash in between is recognised on resume.

Runs never share anything (issue 12): each run's worktrees live in ``.worktrees/<run>/``,
and the book belongs to one run *instance* (``Workspace.for_run``), so a branch or worktree
an earlier run of the same name left behind (a worktree its cleanup kept because it held
uncommitted changes) is not this run's: it is never adopted, reset, committed from or
removed, and the new run stops at ``lo-orch plan`` naming it. Worktrees are recorded in the
book like branches; only recorded ones are reused, committed from and removed. Cleanup also
keeps a worktree holding files git ignores that lo-orch's setup did not create (an
``.env``, a local config): those are the user's too.

Staging holds each task's verified tree, not its history: one commit per task, whose single
parent is the previous staging commit (``git merge-tree --write-tree``, ``git commit-tree``,
no checkout). Rejected rounds stay on the task branch until cleanup.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from loop_orchestrator import proc
from loop_orchestrator.errors import (
    CommandError,
    ConfigError,
    GitError,
    MergeConflictError,
    RefTamperedError,
    SecretFileError,
    StaleReviewError,
)
from loop_orchestrator.files import ORCH_DIR, WORKTREES_DIR
from loop_orchestrator.gitutil import (
    WorktreeInfo,
    git,
    git_failure,
    identity,
    is_ancestor,
    is_secret_path,
    merge_base,
    merge_tree,
    oid,
    parse_status,
    parse_worktrees,
    quote_list,
    require_git,
    rev_parse,
    scan_tree,
    split_z,
    update_ref,
)

if TYPE_CHECKING:
    from loop_orchestrator.config import WorkspaceConfig
    from loop_orchestrator.refbook import RefBook
    from loop_orchestrator.state import RunState

__all__ = ["CleanupReport", "Workspace", "ensure_excludes", "init_repo", "repo_root"]

log = logging.getLogger(__name__)

TASK_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
RUN_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
RESERVED_TASKS = frozenset({"staging"})
#: lines lo-orch keeps in ``.git/info/exclude`` (never in the user's ``.gitignore``)
EXCLUDES = (f"/{ORCH_DIR}/", f"/{WORKTREES_DIR}/")
#: paths of the main checkout that are lo-orch's own, not the user's uncommitted work
_OWN_PREFIXES = (f"{ORCH_DIR}/", f"{WORKTREES_DIR}/", ".loop-orchestrator/")
#: refs-book keys besides full ref names (spelled here only)
_BASE = "base"
_START = "start/"
_NEXT = "next:"
_WORKTREE = "worktree/"
_ABSENT = "0" * 40
#: trailers of a staging commit: the task, and the verified commit whose tree it holds
TASK_TRAILER = "Lo-Orch-Task"
VERIFIED_TRAILER = "Lo-Orch-Verified"
#: folders and files that tools regenerate (caches, builds, environments): ignored files
#: there are never taken for a user's work when a task's worktree is cleaned up
DISPOSABLE_DIRS = frozenset(
    {
        "__pycache__",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".hypothesis",
        ".tox",
        ".nox",
        "node_modules",
        ".venv",
        "venv",
        "build",
        "dist",
        ".eggs",
        "htmlcov",
        ".cache",
        "target",
        ".gradle",
        ".next",
        ".parcel-cache",
        ".turbo",
    }
)
DISPOSABLE_FILES = re.compile(r".*\.py[co]|\.coverage(\..*)?|coverage\.xml|\.DS_Store|.*\.egg-info")
#: ignored files listed at most per worktree (beyond that it is kept: too much to judge)
_IGNORED_CAP = 20000


def instance_of(created_at: str) -> str | None:
    """The id of one run instance, from the time `lo-orch plan` created it (None: unknown)."""
    if not created_at:
        return None
    return hashlib.sha256(created_at.encode("utf-8")).hexdigest()[:16]


def _is_sha(text: str) -> bool:
    return re.fullmatch(r"[0-9a-f]{40}(?:[0-9a-f]{24})?", text) is not None


def repo_root(path: Path) -> Path:
    """The checkout a command run in ``path`` works on: the top of its work tree.

    A linked worktree of the user's is a checkout of its own (its HEAD, its run state:
    issue 12); a task worktree of lo-orch's (``<checkout>/.worktrees/<run>/<task>``) maps
    to the checkout that runs it, so an agent's `lo-orch status` finds its run.
    """
    if not path.exists():
        msg = f"{path} does not exist"
        raise GitError(msg, hint="Pass an existing folder with --repo.")
    result = git(
        path,
        "rev-parse",
        "--path-format=absolute",
        "--git-common-dir",
        "--show-toplevel",
        check=False,
    )
    if not result.ok:
        msg = f"{path.resolve()} is not inside a git repository"
        raise GitError(
            msg, hint="Run lo-orch inside your project's git checkout, or pass --repo PATH."
        )
    common, top = result.stdout.strip().splitlines()[:2]
    top_path = Path(top).resolve()
    parts = top_path.parts
    if WORKTREES_DIR in parts:  # innermost first: the checkout a task worktree belongs to
        for i in range(len(parts) - 1, 0, -1):
            if parts[i] != WORKTREES_DIR:
                continue
            owner = Path(*parts[:i])
            res = git(
                owner,
                "rev-parse",
                "--path-format=absolute",
                "--git-common-dir",
                "--show-toplevel",
                check=False,
            )
            found = res.stdout.strip().splitlines()[:2] if res.ok else []
            if (
                len(found) == 2
                and Path(found[0]).resolve() == Path(common).resolve()
                and Path(found[1]).resolve() == owner.resolve()
            ):
                return owner.resolve()
    return top_path


def main_checkout(repo: Path) -> Path | None:
    """The main checkout when ``repo`` is a linked worktree (None when it is the main one)."""
    res = git(
        repo, "rev-parse", "--path-format=absolute", "--git-common-dir", "--git-dir", check=False
    )
    if not res.ok:
        return None
    common, own = (Path(x).resolve() for x in res.stdout.strip().splitlines()[:2])
    if common == own:
        return None
    return common.parent if common.name == ".git" else common


def ensure_excludes(repo: Path) -> None:
    """Add ``.orchestration/`` and ``.worktrees/`` to ``.git/info/exclude`` if missing."""
    common = git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir").stdout.strip()
    exclude = Path(common) / "info" / "exclude"
    text = exclude.read_text(encoding="utf-8") if exclude.exists() else ""
    present = {line.strip() for line in text.splitlines()}
    missing = [line for line in EXCLUDES if line not in present]
    if not missing:
        return
    exclude.parent.mkdir(parents=True, exist_ok=True)
    prefix = "" if not text or text.endswith("\n") else "\n"
    with exclude.open("a", encoding="utf-8") as fh:
        fh.write(prefix + "# loop-orchestrator\n" + "".join(f"{m}\n" for m in missing))
    log.info("excludes added", extra={"path": str(exclude), "lines": missing})


def init_repo(path: Path, settings: WorkspaceConfig | None = None) -> Path:
    """Make ``path`` a repository with a first commit; refuse nested folders and secrets."""
    require_git()
    path = path.resolve()
    if not path.is_dir():
        msg = f"{path} is not a folder"
        raise GitError(msg, hint="Create it first, or pass an existing folder.")
    inside = git(path, "rev-parse", "--absolute-git-dir", check=False)
    if inside.ok:
        top = git(path, "rev-parse", "--show-toplevel", check=False)
        if top.ok and Path(top.stdout.strip()).resolve() == path:
            return path
        where = top.stdout.strip() if top.ok else inside.stdout.strip()
        msg = f"{path} is inside the git repository {where}; refusing to nest a new one in it"
        raise GitError(msg, hint=f"Run lo-orch in {where}, or move the folder out of it.")
    secrets, nested = scan_tree(path)
    if nested:
        msg = f"{path} holds other git repositories ({quote_list(nested)}); refusing `git init`"
        raise GitError(msg, hint="Run lo-orch inside one of them, or move them out.")
    if secrets:
        msg = (
            f"{path} holds secret-like files ({quote_list(secrets)}); refusing `git init` "
            "so they cannot end up in a commit"
        )
        raise GitError(
            msg,
            hint="Move them out of the folder (or create the repository "
            "yourself and ignore them), then run again. Nothing was changed.",
        )
    if settings is None:
        from loop_orchestrator.config import WorkspaceConfig

        settings = WorkspaceConfig()
    git(path, "init", "--quiet")
    ensure_excludes(path)
    git(path, "add", "--all")
    git(
        path,
        "commit",
        "--quiet",
        "--no-verify",
        "--no-gpg-sign",
        "--allow-empty",
        "-m",
        "lo-orch: initial commit",
        env=identity(settings),
    )
    log.info("repository initialised", extra={"path": str(path)})
    return path


def _disposable(rel: str) -> bool:
    parts = rel.rstrip("/").split("/")
    return (
        any(p in DISPOSABLE_DIRS or p.endswith(".egg-info") for p in parts)
        or DISPOSABLE_FILES.fullmatch(parts[-1]) is not None
    )


def ignored_files(checkout: Path) -> list[str]:
    """Files git ignores in ``checkout`` (relative paths), leaving out what tools regenerate
    (``DISPOSABLE_DIRS``, ``DISPOSABLE_FILES``) and lo-orch's own folders. Symbolic links
    count as files and are not followed."""
    out = git(
        checkout,
        "ls-files",
        "-z",
        "--others",
        "--ignored",
        "--exclude-standard",
        "--directory",
        check=False,
    )
    if not out.ok:
        raise git_failure(out, hint=f"{checkout} is not a usable git checkout.")
    found: list[str] = []
    for entry in split_z(out.stdout):
        if not entry or _disposable(entry) or entry.startswith(_OWN_PREFIXES):
            continue
        if not entry.endswith("/"):
            found.append(entry)
            continue
        for folder, dirs, files in os.walk(checkout / entry):
            here = Path(folder)
            rel_dir = here.relative_to(checkout).as_posix()
            links = [d for d in dirs if (here / d).is_symlink()]  # not followed: a file
            dirs[:] = sorted(
                d
                for d in dirs
                if d not in DISPOSABLE_DIRS and d not in links and not d.endswith(".egg-info")
            )
            found += [
                f"{rel_dir}/{f}"
                for f in sorted([*files, *links])
                if DISPOSABLE_FILES.fullmatch(f) is None
            ]
            if len(found) > _IGNORED_CAP:
                return found
    return found


def _digest(path: Path) -> str:
    """sha256 of a file's bytes (of the target's name for a symbolic link)."""
    if path.is_symlink():
        return "link:" + hashlib.sha256(str(path.readlink()).encode()).hexdigest()
    h = hashlib.sha256()
    try:
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return "unreadable"
    return h.hexdigest()


# the workspace of one run ---------------------------------------------------------------


@dataclass
class CleanupReport:
    """What ``Workspace.cleanup`` did; ``details`` says why a task or branch was kept."""

    removed: list[str] = field(default_factory=list)
    kept_dirty: list[str] = field(default_factory=list)
    branches_deleted: list[str] = field(default_factory=list)
    branches_kept: list[str] = field(default_factory=list)
    details: dict[str, str] = field(default_factory=dict)


class Workspace:
    """The branches and worktrees of one run in one repository."""

    def __init__(
        self,
        repo: Path,
        run: str,
        settings: WorkspaceConfig,
        refs: RefBook | None = None,
        *,
        instance: str | None = None,
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
        self.settings = settings
        self.instance = instance
        if refs is None:
            from loop_orchestrator.refbook import FileRefBook

            refs = FileRefBook.for_run(self.repo, run, instance)
        self.refs: RefBook = refs

    @classmethod
    def for_run(cls, repo: Path, state: RunState, settings: WorkspaceConfig) -> Workspace:
        """The workspace of the run ``state`` describes (this instance of its name only)."""
        return cls(repo, state.name, settings, instance=instance_of(state.created_at))

    # names --------------------------------------------------------------------------

    @property
    def staging_branch(self) -> str:
        return f"lo/{self.run}/staging"

    @property
    def feature_branch(self) -> str:
        return f"feat/{self.run}"

    def task_branch(self, task: str) -> str:
        return f"lo/{self.run}/{self._check_task(task)}"

    def worktree_path(self, task: str) -> Path:
        return self.repo / WORKTREES_DIR / self.run / self._check_task(task)

    @staticmethod
    def _check_task(task: str) -> str:
        if not TASK_RE.match(task) or task in RESERVED_TASKS:
            msg = f"invalid task id {task!r}"
            raise GitError(msg, hint="Task ids are 1-40 of a-z, 0-9 and '-' and not 'staging'.")
        return task

    def _check_branch_name(self, name: str) -> str:
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

    # small git helpers --------------------------------------------------------------

    def _git(
        self,
        *args: str,
        check: bool = True,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> proc.Result:
        return git(self.repo, *args, check=check, input=input, env=env)

    def _branches(self) -> dict[str, str]:
        out = self._git("for-each-ref", "--format=%(refname)%00%(objectname)", "refs/heads/")
        pairs = (line.split("\0") for line in out.stdout.splitlines() if line)
        return {ref[len("refs/heads/") :]: sha for ref, sha in pairs}

    def _tip(self, branch: str) -> str | None:
        return self._branches().get(branch)

    def _key(self, branch: str) -> str:
        """The book key that makes ``branch`` this run's: a task's start, else the ref."""
        prefix = f"lo/{self.run}/"
        if branch.startswith(prefix) and branch != self.staging_branch:
            return _START + branch[len(prefix) :]
        return f"refs/heads/{branch}"

    def _is_ours(self, branch: str) -> bool:
        return self.refs.get(self._key(branch)) is not None

    def _move(self, branch: str, new: str | None, old: str | None, reason: str) -> None:
        """Compare-and-swap ``branch`` from ``old`` to ``new`` (None: absent) and record it.

        The new value is written ahead, so ``check_refs`` after a crash between the update
        and the record recognises lo-orch's own move instead of calling it tampering.
        """
        ref = f"refs/heads/{branch}"
        checked = not self._key(branch).startswith(_START)
        if checked:
            self.refs.set(_NEXT + ref, new or _ABSENT)
        update_ref(self.repo, branch, new, old, reason)
        if checked:
            if new:
                self.refs.set(ref, new)
            else:
                self.refs.drop(ref)
            self.refs.drop(_NEXT + ref)

    def _create_branch(self, name: str, sha: str) -> None:
        # Record first: a crash between the two steps leaves a record without a branch
        # (harmless), never a branch of ours that looks like a user's.
        key = self._key(name)
        if key.startswith(_START):
            self.refs.set(key, sha)
        try:
            self._move(name, sha, None, f"lo-orch: run {self.run} created {name}")
        except GitError:
            if key.startswith(_START):
                self.refs.drop(key)
            raise
        log.info("branch created", extra={"branch": name, "sha": sha})

    def _delete_branch(self, name: str, sha: str) -> None:
        # a compare-and-swap delete: only what was checked to be merged goes
        self._move(name, None, sha, f"lo-orch: run {self.run} deleted {name}")
        self.refs.drop(self._key(name))
        log.info("branch deleted", extra={"branch": name, "sha": sha})

    # the refs book ----------------------------------------------------------------------

    def check_refs(self) -> None:
        """Compare every ref the book records with git; ``RefTamperedError`` on a difference.

        A value written ahead (``_move``) that git shows is adopted: lo-orch moved the ref
        and stopped before recording it.
        """
        book = self.refs.items()
        branches = {f"refs/heads/{b}": sha for b, sha in self._branches().items()}
        for name, ahead in book.items():
            if not name.startswith(_NEXT):
                continue
            ref = name[len(_NEXT) :]
            found = branches.get(ref, _ABSENT)
            if found == ahead:
                if ahead == _ABSENT:
                    self.refs.drop(ref)
                else:
                    self.refs.set(ref, ahead)
                book[ref] = ahead
            self.refs.drop(name)
        for name, expected in sorted(book.items()):
            if not name.startswith("refs/"):
                continue
            now = branches.get(name)
            if expected != _ABSENT and now != expected:
                raise RefTamperedError(name, expected, now)

    def recorded(self, branch: str) -> str:
        """The value lo-orch set ``branch`` (staging, the feature branch) to, checked
        against git; ``GitError`` when it never set it."""
        self.check_refs()
        sha = self.refs.get(f"refs/heads/{branch}")
        if sha is None:
            msg = f"{branch} was not created by run {self.run}"
            raise GitError(msg, hint="Start the run with `lo-orch run`, which creates it.")
        return sha

    def base(self, fallback: str | None = None) -> str:
        """The run's base commit as recorded when staging was created (``fallback`` for a
        run recorded before the book existed)."""
        sha = self.refs.get(_BASE)
        if sha is None:
            if fallback is None:
                msg = f"run {self.run} has no recorded base commit"
                raise GitError(msg, hint="Start the run with `lo-orch run`.")
            return oid(self.repo, fallback)
        if fallback is not None and _is_sha(fallback) and fallback != sha:
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

    def _clash(self, wanted: str, branches: Mapping[str, str]) -> str | None:
        if wanted in branches and not self._is_ours(wanted):
            return f"branch {wanted} already exists and was not created by run {self.run}"
        for name in branches:
            if wanted.startswith(name + "/") or name.startswith(wanted + "/"):
                return f"branch {name} exists, so git cannot also hold a branch {wanted}"
        return None

    def _raise_clashes(self, problems: Sequence[str]) -> None:
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

    def _worktrees(self) -> list[WorktreeInfo]:
        out = self._git("worktree", "list", "--porcelain", "-z").stdout
        infos = parse_worktrees(out)
        if any(w.prunable for w in infos):
            self._git("worktree", "prune")
            infos = parse_worktrees(self._git("worktree", "list", "--porcelain", "-z").stdout)
        return infos

    def _worktree_at(self, path: Path) -> WorktreeInfo | None:
        target = path.resolve()
        return next((w for w in self._worktrees() if w.path.resolve() == target), None)

    def _refuse_checked_out(self, branch: str) -> None:
        for w in self._worktrees():
            if w.branch == branch:
                msg = (
                    f"{branch} is checked out at {w.path}; moving it without that checkout "
                    "would leave the checkout out of date"
                )
                raise GitError(msg, hint="Switch that checkout to another branch, then retry.")

    def _rel(self, path: Path) -> str:
        with contextlib.suppress(ValueError):
            return path.relative_to(self.repo).as_posix()
        return str(path)

    # preflight ------------------------------------------------------------------------

    def preflight(self, allow_dirty: bool = False) -> None:
        """Refuse a run from outside the repository top, without commits, or a dirty checkout."""
        require_git()
        root = repo_root(self.repo)
        if root != self.repo:
            msg = f"{self.repo} is not the top of its git checkout ({root})"
            raise GitError(msg, hint=f"Pass --repo {root}.")
        head = self._git("rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
        if not head.ok:
            msg = f"{self.repo} has no commits yet"
            raise GitError(msg, hint="Commit your files first: every run starts from a commit.")
        self.ensure_excludes()
        dirty = [p for p in self.worktree_dirty(self.repo) if not p.startswith(_OWN_PREFIXES)]
        if not dirty:
            return
        if allow_dirty or self.settings.allow_dirty:
            log.warning("dirty checkout allowed", extra={"paths": dirty[:20]})
            return
        msg = f"the main checkout {self.repo} has uncommitted changes: {quote_list(dirty)}"
        raise GitError(
            msg,
            hint="Commit or stash them first: a run starts from a commit and "
            "never takes uncommitted work. To start anyway (your changes stay "
            "where they are, outside the run), pass --allow-dirty.",
        )

    def ensure_excludes(self) -> None:
        """Keep ``.orchestration/`` and ``.worktrees/`` out of git through info/exclude."""
        ensure_excludes(self.repo)

    def resolve_base(self, ref: str | None) -> str:
        """The sha of the run's base: ``ref`` (plan ``base``) or HEAD."""
        return rev_parse(self.repo, ref or "HEAD")

    # branches ---------------------------------------------------------------------------

    def check_branch_names(self, tasks: Sequence[str], feature: str | None = None) -> None:
        """Refuse task ids, branch names or worktree folders that clash with what is not
        this run's (an earlier run's leftovers included: they are the user's now).

        An existing feature branch is no clash: Gate 2 decides whether it may move it.
        """
        for task in tasks:
            self._check_task(task)
        feature = self._check_branch_name(feature or self.feature_branch)
        wanted = [self.staging_branch, *(self.task_branch(t) for t in tasks)]
        branches = self._branches()
        problems = [p for w in wanted if (p := self._clash(w, branches))]
        if feature not in branches:
            problems += [p for p in [self._clash(feature, branches)] if p]
        worktrees = self._worktrees()
        for task in tasks:
            path = self.worktree_path(task)
            if self._owns_worktree(task) or not (path.exists() or path.is_symlink()):
                continue
            rel = self._rel(path)
            info = next((w for w in worktrees if w.path.resolve() == path.resolve()), None)
            if info is None:
                problems.append(f"{rel} exists and is not a worktree this run created")
                continue
            dirty = self.worktree_dirty(path)
            what = f"uncommitted changes ({quote_list(dirty)})" if dirty else "no changes"
            problems.append(
                f"{rel} is a worktree an earlier run left (on "
                f"{info.branch or 'a detached HEAD'}, {what}); it is yours now"
            )
        self._raise_clashes(problems)

    def create_staging(self, base_sha: str) -> str:
        """Create the staging branch at ``base_sha``; an existing one of this run is kept."""
        base = rev_parse(self.repo, base_sha)
        name = self.staging_branch
        self.check_refs()
        branches = self._branches()
        tip = branches.get(name)
        if tip is not None and self._is_ours(name):
            self.refs.set(_BASE, self.refs.get(_BASE) or base)
            if not is_ancestor(self.repo, base, tip):
                msg = f"{name} exists but does not contain the base commit {base[:12]}"
                raise GitError(
                    msg,
                    hint="It belongs to an earlier run with the same name: "
                    "clean that run up or choose another run name.",
                )
            return tip
        problem = self._clash(name, branches)
        self._raise_clashes([problem] if problem else [])
        self.refs.set(_BASE, base)
        self._create_branch(name, base)
        return base

    # worktrees ------------------------------------------------------------------------

    def ensure_worktree(self, task: str) -> Path:
        """``.worktrees/<task>`` on ``lo/<run>/<task>`` from the staging tip; reused if there."""
        branch = self.task_branch(task)
        path = self.worktree_path(task)
        rel = self._rel(path)
        branches = self._branches()
        staging = branches.get(self.staging_branch)
        if staging is None:
            msg = f"{self.staging_branch} does not exist"
            raise GitError(msg, hint="Create the run's staging branch before its worktrees.")
        worktrees = self._worktrees()
        here = next((w for w in worktrees if w.path.resolve() == path.resolve()), None)
        if here is not None:
            if here.branch != branch or not self._owns_worktree(task):
                on = here.branch or "a detached HEAD"
                msg = (
                    f"{rel} is a worktree on {on} that run {self.run} did not create; it "
                    "was left as it is and will not be used"
                )
                raise GitError(
                    msg,
                    hint="Choose another run name (plan `name:`), or once "
                    f"you have saved what you need from it, `git worktree remove "
                    f"{rel}` and run again.",
                )
            self._check_launch(branch, branches[branch], staging)
            log.info("worktree reused", extra={"task": task, "path": str(path)})
            return path
        other = next((w for w in worktrees if w.branch == branch), None)
        if other is not None:
            msg = f"{branch} is already checked out at {other.path}"
            raise GitError(msg, hint="Remove that worktree, or move it back to " + rel + ".")
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            msg = f"{rel} exists and is not a worktree of this repository; it was left as it is"
            raise GitError(msg, hint="Move it away or delete it, then run again.")
        problem = self._clash(branch, branches)
        self._raise_clashes([problem] if problem else [])
        if branch in branches:  # crash-resume: the branch outlived its worktree
            self._check_launch(branch, branches[branch], staging)
        else:
            self._create_branch(branch, staging)
        self.ensure_excludes()
        path.parent.mkdir(parents=True, exist_ok=True)
        # recorded first: a crash after `worktree add` leaves a worktree known as this run's
        self.refs.set(_WORKTREE + task, str(path))
        try:
            self._git("worktree", "add", "--quiet", str(path), branch)
        except GitError:
            self.refs.drop(_WORKTREE + task)
            raise
        log.info("worktree created", extra={"task": task, "path": str(path), "branch": branch})
        return path

    def _owns_worktree(self, task: str) -> bool:
        """Whether this run (instance) created the task's worktree, by its own record."""
        return self.refs.get(_WORKTREE + task) == str(self.worktree_path(task))

    def _require_own_worktree(self, task: str) -> Path:
        path = self.worktree_path(task)
        if not self._owns_worktree(task):
            msg = f"{self._rel(path)} was not created by run {self.run}; it is left as it is"
            raise GitError(
                msg,
                hint="lo-orch commits and merges only in worktrees it created "
                "for this run; relaunch the task (`lo-orch retry TASK`).",
            )
        return path

    def task_start(self, task: str) -> str:
        """The staging commit a task's branch began at, as recorded: what its own changes
        are measured against (its producers' work, already on staging, is not its change).
        Never derived from anything an agent can move."""
        start = self.refs.get(_START + self._check_task(task))
        if start is None:
            msg = f"task {task} has no recorded start commit in run {self.run}"
            raise GitError(
                msg,
                hint="lo-orch did not create its branch; delete the branch "
                f"{self.task_branch(task)} to start the task afresh.",
            )
        return start

    def _check_launch(self, branch: str, tip: str, staging: str) -> None:
        """Trust a task branch only if it still grows from the staging commit it began at."""
        task = branch[len(f"lo/{self.run}/") :]
        launch = self.refs.get(_START + task)
        ok = (
            launch is not None
            and self._git("cat-file", "-e", f"{launch}^{{commit}}", check=False).ok
            and is_ancestor(self.repo, launch, staging)
            and is_ancestor(self.repo, launch, tip)
        )
        if not ok:
            msg = (
                f"{branch} is not based on {self.staging_branch} (it no longer contains the "
                "commit it was started from); it was left as it is and will not be used"
            )
            raise GitError(
                msg,
                hint=f"Inspect it with `git log {branch}`; delete or rename it "
                "to start the task afresh.",
            )

    def run_setup(self, worktree: Path) -> proc.Result | None:
        """Run the configured setup command in a new worktree (no shell, with a timeout)."""
        command = (self.settings.setup_command or "").strip()
        if not command:
            self._record_own_files(worktree)
            return None
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            msg = f"[workspace] setup_command cannot be parsed: {exc}"
            raise ConfigError(msg, hint="Fix the quoting in your config.") from exc
        result = proc.run(
            argv,
            cwd=worktree,
            env=proc.no_git_env(),
            timeout=self.settings.setup_timeout,
            check=False,
        )
        if not result.ok:
            status = (
                f"timed out after {self.settings.setup_timeout:g}s"
                if result.returncode is None
                else f"exited {result.returncode}"
            )
            tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
            msg = f"worktree setup `{command}` {status} in {self._rel(worktree)}"
            raise CommandError(
                argv,
                result.returncode,
                result.stdout,
                result.stderr,
                message=msg + (f":\n{tail}" if tail else ""),
                hint="Fix [workspace] setup_command (it runs without a shell; "
                "use `sh -c '...'` for shell syntax) or its timeout.",
            )
        self._record_own_files(worktree)
        log.info("worktree setup ran", extra={"worktree": str(worktree), "cmd": argv})
        return result

    # ignored files: lo-orch's own, or the user's ---------------------------------------

    def _own_files_path(self, task: str) -> Path:
        from loop_orchestrator import private

        folder = private.run_dir(self.repo, self.run) / "own-files"
        return folder / f"{self.instance or 'run'}-{self._check_task(task)}.json"

    def _record_own_files(self, worktree: Path) -> None:
        """Remember the ignored files lo-orch's setup left in a task's new worktree (their
        sha256): those, unchanged, are lo-orch's own at cleanup; any other is the user's."""
        task = worktree.name
        if not TASK_RE.match(task) or worktree.resolve() != self.worktree_path(task).resolve():
            return  # not a task worktree of this run: nothing of it is ever removed
        files = {rel: _digest(worktree / rel) for rel in ignored_files(worktree)}
        target = self._own_files_path(task)
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".own-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(files, indent=1, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        Path(tmp).replace(target)

    def user_ignored_files(self, task: str) -> list[str]:
        """Ignored files in the task's worktree that are neither regenerable (caches,
        builds) nor left unchanged by lo-orch's setup: the user put or edited them."""
        path = self.worktree_path(task)
        try:
            own = json.loads(self._own_files_path(task).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            own = {}
        if not isinstance(own, dict):
            own = {}
        found = ignored_files(path)
        return [rel for rel in found if own.get(rel) is None or own[rel] != _digest(path / rel)]

    def worktree_dirty(self, path: Path) -> list[str]:
        """Uncommitted and untracked paths of a checkout (ignored files do not count)."""
        res = git(
            path,
            "status",
            "--porcelain=v1",
            "-z",
            "--no-renames",
            "--untracked-files=all",
            check=False,
        )
        if not res.ok:
            raise git_failure(res, hint=f"{path} is not a usable git checkout.")
        return [e.path for e in parse_status(res.stdout)]

    # commits ----------------------------------------------------------------------------

    def commit_task(self, task: str, message: str) -> str:
        """Commit everything in the task's worktree as the configured author; return HEAD.

        Secret-like files are refused before anything is staged, also when the agent
        committed one itself. Work the agent already committed is accepted as it is.
        """
        branch = self.task_branch(task)
        path = self.worktree_path(task)
        info = self._worktree_at(path)
        if info is not None:
            self._require_own_worktree(task)
        if info is None:
            msg = f"task {task} has no worktree at {self._rel(path)}"
            raise GitError(msg, hint="Launch the task (its worktree is created then).")
        if info.branch != branch:
            msg = (
                f"{self._rel(path)} is on {info.branch or 'a detached HEAD'}, not {branch}; "
                "the task's work must be on its branch"
            )
            raise GitError(msg, hint=f"In the worktree run `git switch {branch}`, then retry.")
        if split_z(git(path, "ls-files", "--unmerged", "-z").stdout):
            msg = f"task {task} has unresolved merge conflicts in {self._rel(path)}"
            raise GitError(msg, hint="Resolve or abort the merge in the worktree, then retry.")
        entries = parse_status(
            git(
                path, "status", "--porcelain=v1", "-z", "--no-renames", "--untracked-files=all"
            ).stdout
        )
        present = [e.path for e in entries if os.path.lexists(path / e.path)]
        bad = sorted({p for p in [*present, *self._committed_paths(branch)] if is_secret_path(p)})
        if bad:
            self._refuse_secrets(task, bad)
        if entries:
            git(path, "add", "--all")
            staged = split_z(
                git(
                    path,
                    "diff",
                    "--cached",
                    "--no-renames",
                    "--name-only",
                    "-z",
                    "--diff-filter=AMT",
                ).stdout
            )
            leaked = [p for p in staged if is_secret_path(p)]
            if leaked:
                git(path, "reset", "--quiet")
                self._refuse_secrets(task, leaked)
            if git(path, "diff", "--cached", "--quiet", check=False).returncode == 1:
                text = message.strip() or f"lo-orch: task {task}"
                git(
                    path,
                    "commit",
                    "--quiet",
                    "--no-verify",
                    "--no-gpg-sign",
                    "-F",
                    "-",
                    input=text + "\n",
                    env=identity(self.settings),
                )
        head = git(path, "rev-parse", "HEAD").stdout.strip()
        log.info("task committed", extra={"task": task, "commit": head})
        return head

    def refresh_task(self, task: str) -> str:
        """Bring staging into a task's branch (a merge commit in its worktree) before the
        task is reopened; the merge becomes the task's new start, so verification still
        measures only the task's own change. Returns the new start commit."""
        branch = self.task_branch(task)
        path = self.worktree_path(task)
        staging = self._tip(self.staging_branch)
        if staging is None or is_ancestor(self.repo, staging, oid(self.repo, branch)):
            return self.task_start(task)
        self._require_own_worktree(task)
        if self.worktree_dirty(path):
            msg = f"task {task}'s worktree has uncommitted changes; staging cannot be merged in"
            raise GitError(msg, hint=f"Commit or discard them in {self._rel(path)}.")
        res = git(
            path,
            "merge",
            "--no-ff",
            "--no-edit",
            "--no-verify",
            "--no-gpg-sign",
            "-m",
            f"lo-orch: bring {self.staging_branch} into {task}",
            staging,
            check=False,
            env=identity(self.settings),
        )
        if not res.ok:
            git(path, "merge", "--abort", check=False)
            conflicts = self.merge_precheck(branch, onto=staging)
            msg = f"staging does not merge into task {task}"
            raise MergeConflictError(
                msg,
                conflicts,
                hint="Resolve it by hand in the worktree, then `lo-orch run` again.",
            )
        head = git(path, "rev-parse", "HEAD").stdout.strip()
        self.refs.set(_START + task, head)
        log.info("staging merged into task", extra={"task": task, "commit": head})
        return head

    def _committed_paths(self, branch: str) -> list[str]:
        """Paths added or modified by the branch's own commits (since it left staging)."""
        staging, tip = self._tip(self.staging_branch), self._tip(branch)
        if staging is None or tip is None:
            return []
        try:
            fork = merge_base(self.repo, staging, tip)
        except GitError:
            return []
        out = git(
            self.repo,
            "log",
            "--format=",
            "--name-only",
            "--no-renames",
            "--diff-filter=AMT",
            "-z",
            f"{fork}..{tip}",
            view=True,
        ).stdout
        return [p.strip("\n") for p in split_z(out) if p.strip("\n")]

    def _refuse_secrets(self, task: str, paths: Sequence[str], verb: str = "commit") -> None:
        msg = f"task {task}: refusing to {verb} secret-like files: {quote_list(paths)}"
        raise SecretFileError(
            msg,
            paths,
            hint="Nothing was changed. Delete them from the "
            "worktree or ignore them (.gitignore); if the agent committed one, "
            "its branch must be rewritten without it.",
        )

    # merges -------------------------------------------------------------------------------

    def merge_precheck(self, commit: str, onto: str | None = None) -> list[str]:
        """Paths that would conflict merging ``commit`` onto ``onto`` (default staging)."""
        ours = rev_parse(self.repo, onto or self.staging_branch)
        return merge_tree(self.repo, ours, rev_parse(self.repo, commit))[1]

    def pairwise_precheck(self, commits: Mapping[str, str]) -> list[tuple[str, str, list[str]]]:
        """``(task_a, task_b, paths)`` for every pair of task commits that would conflict."""
        items = [(task, rev_parse(self.repo, c)) for task, c in commits.items()]
        found = []
        for i, (task_a, sha_a) in enumerate(items):
            for task_b, sha_b in items[i + 1 :]:
                paths = merge_tree(self.repo, sha_a, sha_b)[1]
                if paths:
                    found.append((task_a, task_b, paths))
        return found

    def _squashed(self, tip: str) -> dict[str, str]:
        """``verified commit -> staging commit`` for every task commit squashed onto the
        first-parent history of ``tip`` since the run's base.

        Trustworthy because every commit on that line was made by lo-orch: the tip was
        checked against the book, and each staging value lo-orch set has the previous one
        as its only parent.
        """
        base = self.refs.get(_BASE)
        span = f"{base}..{tip}" if base else tip
        out = git(
            self.repo, "log", "--first-parent", "--format=%H%x00%B%x00", span, "--", view=True
        ).stdout
        fields = out.split("\0")
        found: dict[str, str] = {}
        for i in range(0, len(fields) - 1, 2):
            sha, body = fields[i].strip(), fields[i + 1]
            for line in body.splitlines():
                key, _, value = line.partition(":")
                if key == VERIFIED_TRAILER and _is_sha(value.strip()):
                    found.setdefault(value.strip(), sha)
        return found

    def is_merged(self, commit: str) -> bool:
        """Whether the task commit ``commit`` is on staging (squashed, or an ancestor)."""
        tip = self._tip(self.staging_branch)
        if tip is None:
            return False
        sha = oid(self.repo, commit)
        return sha in self._squashed(tip) or is_ancestor(self.repo, sha, tip)

    def merge_into_staging(self, task: str, commit: str, title: str) -> str:
        """Put a verified task commit's tree onto staging; return staging's new sha.

        One commit per task, whose single parent is the previous staging commit and whose
        tree is the merge of staging with ``commit``: the rounds that led to it (a stub, an
        assertion-free test, a token...) stay on the task branch and never become reachable
        from staging. The refs are checked against the book first. A conflict raises
        ``MergeConflictError`` and changes nothing; a commit already on staging returns the
        current staging sha (crash-resume).
        """
        self._check_task(task)
        name = self.staging_branch
        theirs = oid(self.repo, commit)
        if not self._is_ours(name) or self._tip(name) is None:
            msg = f"{name} does not exist or is not this run's staging branch"
            raise GitError(msg, hint="Start the run with `lo-orch run`, which creates it.")
        old = self.recorded(name)
        if theirs in self._squashed(old) or is_ancestor(self.repo, theirs, old):
            log.info("task already merged", extra={"task": task, "staging": old})
            return old
        self._refuse_checked_out(name)
        tree, conflicts = merge_tree(self.repo, old, theirs)
        if tree is None:
            msg = f"task {task} conflicts with {name} in: {quote_list(conflicts)}"
            raise MergeConflictError(
                msg,
                conflicts,
                hint=f"Nothing was changed; {name} is "
                "as it was. The task must be reworked on top of staging.",
            )
        # Defence in depth: staging never receives a secret-like file, whoever committed it.
        added = split_z(
            git(
                self.repo,
                "diff-tree",
                "-r",
                "--no-renames",
                "--name-only",
                "-z",
                "--diff-filter=AMT",
                old,
                tree,
                view=True,
            ).stdout
        )
        secrets = [p for p in added if is_secret_path(p)]
        if secrets:
            self._refuse_secrets(task, secrets, "merge")
        text = (
            f"lo-orch: task {task}: {title}\n\n"
            f"{TASK_TRAILER}: {task}\n{VERIFIED_TRAILER}: {theirs}\n"
        )
        new = git(
            self.repo,
            "commit-tree",
            "--no-gpg-sign",
            "-p",
            old,
            "-F",
            "-",
            tree,
            input=text,
            env=identity(self.settings),
            view=True,
        ).stdout.strip()
        self._move(name, new, old, f"lo-orch: task {task} onto {name}")
        log.info("task merged into staging", extra={"task": task, "staging": new})
        return new

    # Gate 2 -------------------------------------------------------------------------------

    def finish(
        self, reviewed_commit: str, feature: str | None = None, merge_into: str | None = None
    ) -> str:
        """Set the feature branch to exactly the reviewed staging commit; return its sha.

        Refuses when a ref of the run is not where lo-orch set it, or staging moved since the
        review. ``merge_into`` also merges the feature branch into that local branch (never
        pushed).
        """
        staging = self.staging_branch
        reviewed = oid(self.repo, reviewed_commit)
        tip = self.recorded(staging)
        if tip != reviewed:
            now = tip[:12] if tip else "missing"
            msg = (
                f"{staging} moved since the review (reviewed {reviewed[:12]}, now {now}); "
                "nothing was changed"
            )
            raise StaleReviewError(msg, hint="Review the new diff and confirm again.")
        name = self._check_branch_name(feature or self.feature_branch)
        target = self._check_branch_name(merge_into) if merge_into else None
        branches = self._branches()
        current = branches.get(name)
        if current is None:
            problem = self._clash(name, branches)
            self._raise_clashes([problem] if problem else [])
            self._create_branch(name, reviewed)
        elif current != reviewed:
            # Moved only over a value lo-orch set itself, or forward (nothing is dropped):
            # a commit someone made on the branch is never left on no branch (issue 12).
            ours = self._is_ours(name) and self.refs.get(f"refs/heads/{name}") == current
            if not ours and not is_ancestor(self.repo, current, reviewed):
                self._refuse_moving(name, current, reviewed)
            self._refuse_checked_out(name)
            if ours:
                self._move(
                    name, reviewed, self.recorded(name), f"lo-orch: gate 2 of run {self.run}"
                )
            else:
                self._move(
                    name, reviewed, current, f"lo-orch: gate 2 of run {self.run} (fast-forward)"
                )
        log.info("feature branch set", extra={"branch": name, "sha": reviewed})
        if target:
            self._merge_into_local(name, reviewed, target)
        self.check_refs()
        return reviewed

    def _refuse_moving(self, name: str, current: str, reviewed: str) -> None:
        out = (
            git(
                self.repo,
                "log",
                "--format=%h %s",
                "--max-count=6",
                f"{reviewed}..{current}",
                view=True,
            )
            .stdout.strip()
            .splitlines()
        )
        shown = "\n".join(f"    {line}" for line in out[:5]) + ("\n    ..." if len(out) > 5 else "")
        msg = (
            f"branch {name} holds commits the reviewed result {reviewed[:12]} does not "
            f"(lo-orch did not set it there); moving it would leave them on no branch. "
            f"Nothing was changed:\n{shown}"
        )
        raise GitError(
            msg,
            hint=f"Land the result under another name: `lo-orch merge --branch "
            f"{name}-{reviewed[:7]}`; or merge it into {name} yourself: "
            f"`git switch {name} && git merge {reviewed[:12]}`.",
        )

    def _merge_into_local(self, source: str, sha: str, target: str) -> str:
        target_tip = self._tip(target)
        if target_tip is None or target == source:
            msg = f"cannot merge {source} into {target!r}: no such other local branch"
            raise GitError(
                msg, hint=f"{source} is ready; name an existing branch or merge it yourself."
            )
        if is_ancestor(self.repo, sha, target_tip):
            return target_tip
        tree, conflicts = merge_tree(self.repo, target_tip, sha)
        if tree is None:
            msg = f"{source} conflicts with {target} in: {quote_list(conflicts)}; nothing merged"
            raise MergeConflictError(
                msg,
                conflicts,
                hint=f"{source} is ready at {sha[:12]}; "
                f"merge it into {target} yourself and resolve them.",
            )
        text = f"lo-orch: merge {source} into {target}"
        checkout = next((w for w in self._worktrees() if w.branch == target), None)
        if checkout is None:
            new = (
                sha
                if is_ancestor(self.repo, target_tip, sha)
                else git(
                    self.repo,
                    "commit-tree",
                    "--no-gpg-sign",
                    "-p",
                    target_tip,
                    "-p",
                    sha,
                    "-F",
                    "-",
                    tree,
                    input=text + "\n",
                    env=identity(self.settings),
                    view=True,
                ).stdout.strip()
            )
            update_ref(self.repo, target, new, target_tip, text)
            return new
        dirty = [p for p in self.worktree_dirty(checkout.path) if not p.startswith(_OWN_PREFIXES)]
        if dirty:
            msg = (
                f"{target} is checked out at {checkout.path} with uncommitted changes "
                f"({quote_list(dirty)}); nothing was merged"
            )
            raise GitError(msg, hint=f"Commit or stash them, then `git merge {source}`.")
        # git merge overwrites ignored files silently (an .env, a local config)
        added = split_z(
            git(
                self.repo,
                "diff-tree",
                "-r",
                "--no-renames",
                "--name-only",
                "-z",
                "--diff-filter=A",
                target_tip,
                tree,
                view=True,
            ).stdout
        )
        clobbered = [p for p in added if os.path.lexists(checkout.path / p)]
        if clobbered:
            msg = (
                f"merging {source} into {target} would overwrite files git ignores in "
                f"{checkout.path}: {quote_list(clobbered)}; nothing was merged"
            )
            raise GitError(
                msg,
                hint=f"{source} is ready at {sha[:12]}; move those files "
                f"aside, then `git merge {source}` yourself.",
            )
        res = git(
            checkout.path,
            "merge",
            "--no-edit",
            "--no-verify",
            "-m",
            text,
            sha,
            env=identity(self.settings),
            check=False,
        )
        if not res.ok:
            merging = git(
                checkout.path, "rev-parse", "--verify", "--quiet", "MERGE_HEAD", check=False
            )
            if merging.ok:
                git(checkout.path, "merge", "--abort")
            raise git_failure(res, hint=f"{source} is ready; merge it into {target} yourself.")
        return git(checkout.path, "rev-parse", "HEAD").stdout.strip()

    # cleanup -----------------------------------------------------------------------------

    def remove_worktree(self, task: str) -> bool:
        """Remove the task's worktree if it is clean (never forced); False when kept."""
        return self._remove(task) is None

    def _remove(self, task: str) -> str | None:
        """None when no worktree remains, otherwise why it was kept."""
        path = self.worktree_path(task)
        rel = self._rel(path)
        info = self._worktree_at(path)
        if info is None:
            if path.exists():
                return f"{rel} is not a worktree of this repository; left as it is"
            return None
        if not self._owns_worktree(task):
            return f"{rel} was not created by run {self.run}; left as it is"
        if info.branch is not None and info.branch != self.task_branch(task):
            return f"{rel} is on {info.branch}, not this run's {self.task_branch(task)}"
        if info.locked:
            return f"{rel} is locked (`git worktree unlock` it to allow removal)"
        dirty = self.worktree_dirty(path)
        if dirty:
            return f"{rel} has uncommitted changes: {quote_list(dirty)}"
        users = self.user_ignored_files(task)
        if users:
            return f"{rel} holds files git ignores that lo-orch did not create: {quote_list(users)}"
        if (
            info.branch is None
            and info.head
            and not self._git(
                "for-each-ref", "--contains", info.head, "--format=x", "refs/heads/"
            ).stdout
        ):
            return f"{rel} is on a detached HEAD with commits no branch holds"
        res = self._git("worktree", "remove", str(path), check=False)
        if not res.ok:
            return f"{rel} was kept: {res.stderr.strip()}"
        self.refs.drop(_WORKTREE + task)
        self._own_files_path(task).unlink(missing_ok=True)
        for folder in (path.parent, path.parent.parent):  # .worktrees/<run>, .worktrees
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty
        log.info("worktree removed", extra={"task": task, "path": str(path)})
        return None

    def cleanup(self, tasks: Sequence[str], *, delete_staging: bool = False) -> CleanupReport:
        """Remove clean worktrees and merged task branches; keep and list everything else."""
        report = CleanupReport()
        self._git("worktree", "prune")
        for task in tasks:
            existed = self._worktree_at(self.worktree_path(task)) is not None
            kept = self._remove(task)
            if kept is not None:
                report.kept_dirty.append(task)
                report.details[task] = kept
            elif existed:
                report.removed.append(task)
        branches = self._branches()
        targets = [
            t
            for n in (self.staging_branch, self.feature_branch)
            if (t := branches.get(n)) is not None
        ]
        squashed = {sha for t in targets for sha in self._squashed(t)}
        checked_out = {w.branch for w in self._worktrees()}
        for task in tasks:
            name = self.task_branch(task)
            tip = branches.get(name)
            if tip is None or not self._is_ours(name):
                continue  # a user's branch is never touched
            reason = None
            if name in checked_out:
                reason = "its worktree was kept"
            elif tip not in squashed and not any(is_ancestor(self.repo, tip, t) for t in targets):
                reason = f"not merged into {self.staging_branch}"
            if reason is None:
                self._delete_branch(name, tip)
                report.branches_deleted.append(name)
            else:
                report.branches_kept.append(name)
                report.details[name] = reason
        staging, feat = branches.get(self.staging_branch), branches.get(self.feature_branch)
        if delete_staging and staging and feat and self.staging_branch not in checked_out:
            if is_ancestor(self.repo, staging, feat):
                self._delete_branch(self.staging_branch, staging)
                report.branches_deleted.append(self.staging_branch)
            else:
                report.branches_kept.append(self.staging_branch)
                report.details[self.staging_branch] = f"not merged into {self.feature_branch}"
        return report

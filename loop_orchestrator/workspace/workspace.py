"""The workspace of one run: its branches, worktrees, commits, merges and cleanup.

``Workspace`` assembles three collaborators, each in its own module and each given what
it needs: ``branches.Branches`` (names, the refs book, compare-and-swap moves, each task's
start), ``worktrees.Worktrees`` (a ``Branches``: worktrees, ignored files, committing a
task, removing a worktree) and ``staging.Staging`` (both: merging onto staging, Gate 2's
move of the feature branch, staging brought into a task). This module holds what spans
them (preflight, branch-name checks, cleanup) and the repository-level helpers; the
methods most callers use are delegated here, the rest are the collaborators' own.

Safety (docs/design.md sections 9 and 10): nothing is pushed and nothing is forced. Every
branch this module creates, every value it sets a ref to and each task's start commit are
recorded in the run's refs book (``refbook``), outside the repository: a user's branch that
happens to have the same name is refused, never reused or moved, and a ref of the run that
something else moved is refused (``RefTamperedError``) before each merge, at integration and
at Gate 2 (the supervisor puts lo-orch's own back: ``Branches.repair``). Every ref update is
a compare-and-swap ``git update-ref``, read back, and written ahead in the book so a crash
in between is recognised on resume.

Runs never share anything: each run's worktrees live in ``.worktrees/<run>/``,
and the book belongs to one run *instance* (``Workspace.for_run``), so a branch or worktree
an earlier run of the same name left behind (a worktree its cleanup kept because it held
uncommitted changes) is not this run's: it is never adopted, reset, committed from or
removed. Where it holds the name, the new run is a numbered instance with names of its own
(``instances``); ``check_branch_names`` still stops `lo-orch plan` at anything left that
the chosen names would reuse. Worktrees are recorded in the
book like branches; only recorded ones are reused, committed from and removed. Cleanup also
keeps a worktree holding files git ignores that lo-orch's setup did not create (an
``.env``, a local config): those are the user's too.

Staging holds each task's verified tree, not its history: one commit per task, whose single
parent is the previous staging commit (``git merge-tree --write-tree``, ``git commit-tree``,
no checkout). Rejected rounds stay on the task branch until cleanup.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from loop_orchestrator import proc
from loop_orchestrator.config import WorkspaceConfig
from loop_orchestrator.errors import GitError
from loop_orchestrator.files import WORKTREES_DIR
from loop_orchestrator.git.gateway import (
    git,
    identity,
    is_ancestor,
    quote_list,
    require_git,
    rev_parse,
)
from loop_orchestrator.git.refbook import RefBook
from loop_orchestrator.git.secretfiles import scan_tree
from loop_orchestrator.runstate.state import RunState
from loop_orchestrator.workspace.branches import (
    Branches,
    check_task,
    list_worktrees,
    rel,
    worktree_at,
)
from loop_orchestrator.workspace.staging import Staging
from loop_orchestrator.workspace.worktrees import (
    OWN_PREFIXES,
    Worktrees,
    dirty_paths,
    ensure_excludes,
)

__all__ = ["CleanupReport", "Workspace", "init_repo", "repo_root"]

log = logging.getLogger(__name__)


def instance_of(created_at: str) -> str | None:
    """The id of one run instance, from the time `lo-orch plan` created it (None: unknown)."""
    if not created_at:
        return None
    return hashlib.sha256(created_at.encode("utf-8")).hexdigest()[:16]


def repo_root(path: Path) -> Path:
    """The checkout a command run in ``path`` works on: the top of its work tree.

    A linked worktree of the user's is a checkout of its own (its HEAD, its run state);
    a task worktree of lo-orch's (``<checkout>/.worktrees/<run>/<task>``) maps
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


@dataclass
class CleanupReport:
    """What ``Workspace.cleanup`` did; ``details`` says why a task or branch was kept."""

    removed: list[str] = field(default_factory=list)
    kept_dirty: list[str] = field(default_factory=list)
    branches_deleted: list[str] = field(default_factory=list)
    branches_kept: list[str] = field(default_factory=list)
    details: dict[str, str] = field(default_factory=dict)


class Workspace:
    """The branches and worktrees of one run in one repository: ``branches``,
    ``worktrees`` and ``staging`` (see the module docstring)."""

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
        self.branches = Branches(repo, run, refs, instance=instance)
        self.worktrees = Worktrees(self.branches, settings)
        self.staging = Staging(self.branches, self.worktrees, settings)
        self.settings = settings
        self.repo = self.branches.repo
        self.run = run

    @classmethod
    def for_run(cls, repo: Path, state: RunState, settings: WorkspaceConfig) -> Workspace:
        """The workspace of the run ``state`` describes (this instance of its name only)."""
        return cls(repo, state.name, settings, instance=instance_of(state.created_at))

    # what most callers use, delegated ------------------------------------------------

    @property
    def staging_branch(self) -> str:
        return self.branches.staging_branch

    def task_branch(self, task: str) -> str:
        return self.branches.task_branch(task)

    def task_start(self, task: str) -> str:
        return self.branches.task_start(task)

    def worktree_path(self, task: str) -> Path:
        return self.worktrees.worktree_path(task)

    def ensure_excludes(self) -> None:
        self.worktrees.ensure_excludes()

    def ensure_worktree(self, task: str) -> Path:
        return self.worktrees.ensure_worktree(task)

    def run_setup(self, worktree: Path) -> proc.Result | None:
        return self.worktrees.run_setup(worktree)

    def commit_task(self, task: str, message: str) -> str:
        return self.worktrees.commit_task(task, message)

    def create_staging(self, base_sha: str) -> str:
        return self.staging.create_staging(base_sha)

    def is_merged(self, commit: str) -> bool:
        return self.staging.is_merged(commit)

    def merge_into_staging(self, task: str, commit: str, title: str) -> str:
        return self.staging.merge_into_staging(task, commit, title)

    def refresh_task(self, task: str) -> str:
        return self.staging.refresh_task(task)

    def finish(
        self, reviewed_commit: str, feature: str | None = None, merge_into: str | None = None
    ) -> str:
        return self.staging.finish(reviewed_commit, feature, merge_into)

    # preflight ------------------------------------------------------------------------

    def preflight(self, allow_dirty: bool = False) -> None:
        """Refuse a run from outside the repository top, without commits, or a dirty checkout."""
        require_git()
        root = repo_root(self.repo)
        if root != self.repo:
            msg = f"{self.repo} is not the top of its git checkout ({root})"
            raise GitError(msg, hint=f"Pass --repo {root}.")
        head = git(self.repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
        if not head.ok:
            msg = f"{self.repo} has no commits yet"
            raise GitError(msg, hint="Commit your files first: every run starts from a commit.")
        self.ensure_excludes()
        dirty = [p for p in dirty_paths(self.repo) if not p.startswith(OWN_PREFIXES)]
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

    def resolve_base(self, ref: str | None) -> str:
        """The sha of the run's base: ``ref`` (plan ``base``) or HEAD."""
        return rev_parse(self.repo, ref or "HEAD")

    # branches ---------------------------------------------------------------------------

    def check_branch_names(self, tasks: Sequence[str], feature: str | None = None) -> None:
        """Refuse task ids, branch names or worktree folders that clash with what is not
        this run's (an earlier run's leftovers included: they are the user's now).

        An existing feature branch is no clash: Gate 2 decides whether it may move it.
        """
        book = self.branches
        for task in tasks:
            check_task(task)
        feature = book.check_branch_name(feature or book.feature_branch)
        wanted = [book.staging_branch, *(book.task_branch(t) for t in tasks)]
        branches = book.tips()
        problems = [p for w in wanted if (p := book.clash(w, branches))]
        if feature not in branches:
            problems += [p for p in [book.clash(feature, branches)] if p]
        worktrees = list_worktrees(self.repo)
        for task in tasks:
            path = self.worktrees.worktree_path(task)
            if self.worktrees.owns(task) or not (path.exists() or path.is_symlink()):
                continue
            where = rel(self.repo, path)
            info = next((w for w in worktrees if w.path.resolve() == path.resolve()), None)
            if info is None:
                problems.append(f"{where} exists and is not a worktree this run created")
                continue
            dirty = dirty_paths(path)
            what = f"uncommitted changes ({quote_list(dirty)})" if dirty else "no changes"
            problems.append(
                f"{where} is a worktree an earlier run left (on "
                f"{info.branch or 'a detached HEAD'}, {what}); it is yours now"
            )
        book.raise_clashes(problems)

    # cleanup -----------------------------------------------------------------------------

    def cleanup(self, tasks: Sequence[str], *, delete_staging: bool = False) -> CleanupReport:
        """Remove clean worktrees and merged task branches; keep and list everything else."""
        book = self.branches
        report = CleanupReport()
        git(self.repo, "worktree", "prune")
        for task in tasks:
            existed = worktree_at(self.repo, self.worktrees.worktree_path(task)) is not None
            kept = self.worktrees.remove(task)
            if kept is not None:
                report.kept_dirty.append(task)
                report.details[task] = kept
            elif existed:
                report.removed.append(task)
        staging_branch, feature_branch = book.staging_branch, book.feature_branch
        branches = book.tips()
        targets = [
            t for n in (staging_branch, feature_branch) if (t := branches.get(n)) is not None
        ]
        squashed = {sha for t in targets for sha in self.staging.squashed(t)}
        checked_out = {w.branch for w in list_worktrees(self.repo)}
        for task in tasks:
            name = book.task_branch(task)
            tip = branches.get(name)
            if tip is None or not book.is_ours(name):
                continue  # a user's branch is never touched
            reason = None
            if name in checked_out:
                reason = "its worktree was kept"
            elif tip not in squashed and not any(is_ancestor(self.repo, tip, t) for t in targets):
                reason = f"not merged into {staging_branch}"
            if reason is None:
                book.delete(name, tip)
                report.branches_deleted.append(name)
            else:
                report.branches_kept.append(name)
                report.details[name] = reason
        staging, feat = branches.get(staging_branch), branches.get(feature_branch)
        if delete_staging and staging and feat and staging_branch not in checked_out:
            if is_ancestor(self.repo, staging, feat):
                book.delete(staging_branch, staging)
                report.branches_deleted.append(staging_branch)
            else:
                report.branches_kept.append(staging_branch)
                report.details[staging_branch] = f"not merged into {feature_branch}"
        return report

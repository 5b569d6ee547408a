"""The workspace of one run: its branches, worktrees, commits, merges and cleanup.

``Workspace`` is built in layers, each in its own module: ``branches.py`` (names, the refs
book, compare-and-swap moves), ``worktrees.py`` (worktrees, ignored files, committing a
task), ``staging.py`` (merging onto staging, Gate 2's move of the feature branch) and this
module (preflight, branch-name checks, cleanup, and the repository-level helpers).

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
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

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
from loop_orchestrator.git.secretfiles import scan_tree
from loop_orchestrator.workspace.branches import BOOK_WORKTREE
from loop_orchestrator.workspace.staging import Staging
from loop_orchestrator.workspace.worktrees import OWN_PREFIXES, ensure_excludes

if TYPE_CHECKING:
    from loop_orchestrator.config import WorkspaceConfig
    from loop_orchestrator.runstate.state import RunState

__all__ = ["CleanupReport", "Workspace", "init_repo", "repo_root"]

log = logging.getLogger(__name__)


def instance_of(created_at: str) -> str | None:
    """The id of one run instance, from the time `lo-orch plan` created it (None: unknown)."""
    if not created_at:
        return None
    return hashlib.sha256(created_at.encode("utf-8")).hexdigest()[:16]


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


@dataclass
class CleanupReport:
    """What ``Workspace.cleanup`` did; ``details`` says why a task or branch was kept."""

    removed: list[str] = field(default_factory=list)
    kept_dirty: list[str] = field(default_factory=list)
    branches_deleted: list[str] = field(default_factory=list)
    branches_kept: list[str] = field(default_factory=list)
    details: dict[str, str] = field(default_factory=dict)


class Workspace(Staging):
    """The branches and worktrees of one run in one repository."""

    @classmethod
    def for_run(cls, repo: Path, state: RunState, settings: WorkspaceConfig) -> Workspace:
        """The workspace of the run ``state`` describes (this instance of its name only)."""
        return cls(repo, state.name, settings, instance=instance_of(state.created_at))

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
        dirty = [p for p in self.worktree_dirty(self.repo) if not p.startswith(OWN_PREFIXES)]
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
        self.refs.drop(BOOK_WORKTREE + task)
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

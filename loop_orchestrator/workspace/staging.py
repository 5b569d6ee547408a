"""The staging branch of one run and Gate 2: creating staging, merge prechecks, one
commit a task on staging (``git merge-tree --write-tree``, ``git commit-tree``, no
checkout), and setting the feature branch to the reviewed staging commit.

``Staging`` is given the run's ``branches.Branches`` (every ref it moves goes through it)
and ``worktrees.Worktrees`` (a task's worktree, when staging is brought into it).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from loop_orchestrator.config import WorkspaceConfig
from loop_orchestrator.errors import (
    GitError,
    MergeConflictError,
    StaleReviewError,
)
from loop_orchestrator.git.gateway import (
    git,
    git_failure,
    identity,
    is_ancestor,
    merge_tree,
    oid,
    quote_list,
    rev_parse,
)
from loop_orchestrator.git.parse import split_z
from loop_orchestrator.git.refread import update_ref
from loop_orchestrator.git.secretfiles import is_secret_path
from loop_orchestrator.workspace.branches import (
    BOOK_BASE,
    Branches,
    check_task,
    is_sha,
    list_worktrees,
    rel,
)
from loop_orchestrator.workspace.ownref import OwnBranch
from loop_orchestrator.workspace.worktrees import (
    OWN_PREFIXES,
    Worktrees,
    dirty_paths,
    refuse_secrets,
)

log = logging.getLogger(__name__)

#: trailers of a staging commit: the task, and the verified commit whose tree it holds
TASK_TRAILER = "Lo-Orch-Task"
VERIFIED_TRAILER = "Lo-Orch-Verified"


class Staging:
    """The staging branch of one run, and the feature branch Gate 2 sets."""

    def __init__(self, branches: Branches, worktrees: Worktrees, settings: WorkspaceConfig) -> None:
        self.branches = branches
        self.worktrees = worktrees
        self.settings = settings
        self.repo = branches.repo
        self.run = branches.run

    def create_staging(self, base_sha: str) -> str:
        """Create the staging branch at ``base_sha``; an existing one of this run is kept."""
        book = self.branches
        base = rev_parse(self.repo, base_sha)
        name = book.staging_branch
        book.check_refs()
        branches = book.tips()
        tip = branches.get(name)
        if tip is not None and book.is_ours(name):
            book.refs.set(BOOK_BASE, book.refs.get(BOOK_BASE) or base)
            if not is_ancestor(self.repo, base, tip):
                msg = f"{name} exists but does not contain the base commit {base[:12]}"
                raise GitError(
                    msg,
                    hint="It belongs to an earlier run with the same name: "
                    "clean that run up or choose another run name.",
                )
            return tip
        problem = book.clash(name, branches)
        book.raise_clashes([problem] if problem else [])
        book.refs.set(BOOK_BASE, base)
        book.create(name, base)
        return base

    # merges -------------------------------------------------------------------------------

    def merge_precheck(self, commit: str, onto: str | None = None) -> list[str]:
        """Paths that would conflict merging ``commit`` onto ``onto`` (default staging)."""
        ours = rev_parse(self.repo, onto) if onto else self.branches.staging_tip()
        if ours is None:
            msg = f"{self.branches.staging_branch} was not created by run {self.run}"
            raise GitError(msg, hint="Start the run with `lo-orch run`, which creates it.")
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

    def squashed(self, tip: str) -> dict[str, str]:
        """``verified commit -> staging commit`` for every task commit squashed onto the
        first-parent history of ``tip`` since the run's base.

        Trustworthy because every commit on that line was made by lo-orch: the tip was
        checked against the book, and each staging value lo-orch set has the previous one
        as its only parent.
        """
        base = self.branches.refs.get(BOOK_BASE)
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
                if key == VERIFIED_TRAILER and is_sha(value.strip()):
                    found.setdefault(value.strip(), sha)
        return found

    def is_merged(self, commit: str) -> bool:
        """Whether the task commit ``commit`` is on staging (squashed, or an ancestor)."""
        tip = self.branches.staging_tip()
        if tip is None:
            return False
        sha = oid(self.repo, commit)
        return sha in self.squashed(tip) or is_ancestor(self.repo, sha, tip)

    def merge_into_staging(self, task: str, commit: str, title: str) -> str:
        """Put a verified task commit's tree onto staging; return staging's new sha.

        One commit per task, whose single parent is the previous staging commit and whose
        tree is the merge of staging with ``commit``: the rounds that led to it (a stub, an
        assertion-free test, a token...) stay on the task branch and never become reachable
        from staging. The refs are checked against the book first. A conflict raises
        ``MergeConflictError`` and changes nothing; a commit already on staging returns the
        current staging sha (crash-resume).
        """
        book = self.branches
        name = book.staging_branch
        check_task(task)
        theirs = oid(self.repo, commit)
        if not book.is_ours(name) or book.tip(name) is None:
            msg = f"{name} does not exist or is not this run's staging branch"
            raise GitError(msg, hint="Start the run with `lo-orch run`, which creates it.")
        old = book.recorded(name)
        if theirs in self.squashed(old) or is_ancestor(self.repo, theirs, old):
            log.info("task already merged", extra={"task": task, "staging": old})
            return old
        book.refuse_checked_out(name)
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
            refuse_secrets(task, secrets, "merge")
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
        book.move(name, new, old, f"lo-orch: task {task} onto {name}")
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
        book = self.branches
        staging = book.staging_branch
        reviewed = oid(self.repo, reviewed_commit)
        tip = book.recorded(staging)
        if tip != reviewed:
            now = tip[:12] if tip else "missing"
            msg = (
                f"{staging} moved since the review (reviewed {reviewed[:12]}, now {now}); "
                "nothing was changed"
            )
            raise StaleReviewError(msg, hint="Review the new diff and confirm again.")
        name = book.check_branch_name(feature or book.feature_branch)
        target = book.check_branch_name(merge_into) if merge_into else None
        branches = book.tips()
        current = branches.get(name)
        if current is None:
            problem = book.clash(name, branches)
            book.raise_clashes([problem] if problem else [])
            book.create(name, reviewed)
        elif current != reviewed:
            # Moved only over a value lo-orch set itself, or forward (nothing is dropped):
            # a commit someone made on the branch is never left on no branch.
            ours = book.is_ours(name) and book.refs.get(f"refs/heads/{name}") == current
            if not ours and not is_ancestor(self.repo, current, reviewed):
                self._refuse_moving(name, current, reviewed)
            book.refuse_checked_out(name)
            if ours:
                book.move(name, reviewed, book.recorded(name), f"lo-orch: gate 2 of run {self.run}")
            else:
                book.move(
                    name, reviewed, current, f"lo-orch: gate 2 of run {self.run} (fast-forward)"
                )
        log.info("feature branch set", extra={"branch": name, "sha": reviewed})
        if target:
            self._merge_into_local(name, reviewed, target)
        book.check_refs()
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
        target_tip = self.branches.tip(target)
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
        checkout = next((w for w in list_worktrees(self.repo) if w.branch == target), None)
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
        dirty = [p for p in dirty_paths(checkout.path) if not p.startswith(OWN_PREFIXES)]
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

    def refresh_task(self, task: str) -> str:
        """Bring staging into a task's branch (a merge commit in its worktree) before the
        task is reopened; the merge becomes the task's new start, so verification still
        measures only the task's own change. Returns the new start commit."""
        book = self.branches
        branch = book.task_branch(task)
        staging = book.staging_tip()
        if staging is None or is_ancestor(self.repo, staging, oid(self.repo, branch)):
            return book.task_start(task)
        path = self.worktrees.require_own(task)
        own = OwnBranch.of(self.repo, book.run, task)
        own.adopt()  # the session's own commits first: they are not uncommitted changes
        if dirty_paths(path):
            msg = f"task {task}'s worktree has uncommitted changes; staging cannot be merged in"
            raise GitError(msg, hint=f"Commit or discard them in {rel(self.repo, path)}.")
        res = git(
            path,
            "merge",
            "--no-ff",
            "--no-edit",
            "--no-verify",
            "--no-gpg-sign",
            "-m",
            f"lo-orch: bring {book.staging_branch} into {task}",
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
        own.settle()
        book.restart(task, head)
        log.info("staging merged into task", extra={"task": task, "commit": head})
        return head

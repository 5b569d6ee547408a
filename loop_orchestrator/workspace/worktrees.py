"""The worktrees of one run and what is committed from them: creating, reusing and
removing a task's worktree, the setup command, ignored files (lo-orch's own or the user's),
dirty paths, committing a task.

``Worktrees`` is given the run's ``branches.Branches``: it creates a task's branch and
records its worktrees in the refs book through it.
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
from collections.abc import Sequence
from pathlib import Path

from loop_orchestrator import proc
from loop_orchestrator.config import WorkspaceConfig
from loop_orchestrator.errors import (
    CommandError,
    ConfigError,
    GitError,
    SecretFileError,
)
from loop_orchestrator.files import ORCH_DIR, WORKTREES_DIR
from loop_orchestrator.git.gateway import (
    common_dir,
    git,
    git_failure,
    identity,
    is_ancestor,
    quote_list,
)
from loop_orchestrator.git.parse import UNMERGED, parse_raw_diff, parse_status, split_z
from loop_orchestrator.git.secretfiles import is_secret_path
from loop_orchestrator.runstate import private
from loop_orchestrator.workspace.branches import (
    BOOK_START,
    BOOK_WORKTREE,
    TASK_RE,
    Branches,
    check_task,
    list_worktrees,
    rel,
    worktree_at,
    worktree_in,
)
from loop_orchestrator.workspace.ownref import OwnBranch

log = logging.getLogger(__name__)

#: paths of the main checkout that are lo-orch's own, not the user's uncommitted work
OWN_PREFIXES = (f"{ORCH_DIR}/", f"{WORKTREES_DIR}/", ".loop-orchestrator/")
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
IGNORED_CAP = 20000

#: lines lo-orch keeps in ``.git/info/exclude`` (never in the user's ``.gitignore``)
EXCLUDES = (f"/{ORCH_DIR}/", f"/{WORKTREES_DIR}/")


def ensure_excludes(repo: Path, lines: tuple[str, ...] = EXCLUDES) -> None:
    """Add ``lines`` (``.orchestration/`` and ``.worktrees/``) to ``.git/info/exclude`` if
    missing."""
    exclude = common_dir(repo) / "info" / "exclude"
    text = exclude.read_text(encoding="utf-8") if exclude.exists() else ""
    present = {line.strip() for line in text.splitlines()}
    missing = [line for line in lines if line not in present]
    if not missing:
        return
    exclude.parent.mkdir(parents=True, exist_ok=True)
    prefix = "" if not text or text.endswith("\n") else "\n"
    with exclude.open("a", encoding="utf-8") as fh:
        fh.write(prefix + "# loop-orchestrator\n" + "".join(f"{m}\n" for m in missing))
    log.info("excludes added", extra={"path": str(exclude), "lines": missing})


def is_disposable(rel: str) -> bool:
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
        if not entry or is_disposable(entry) or entry.startswith(OWN_PREFIXES):
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
            if len(found) > IGNORED_CAP:
                return found
    return found


def file_digest(path: Path) -> str:
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


def refuse_secrets(task: str, paths: Sequence[str], verb: str = "commit") -> None:
    """``SecretFileError``: the task's work holds secret-like ``paths``."""
    msg = f"task {task}: refusing to {verb} secret-like files: {quote_list(paths)}"
    raise SecretFileError(
        msg,
        paths,
        hint="Nothing was changed. Delete them from the "
        "worktree or ignore them (.gitignore); if the agent committed one, "
        "its branch must be rewritten without it.",
    )


def dirty_paths(path: Path) -> list[str]:
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


class Worktrees:
    """The worktrees of one run and the commits taken from them."""

    def __init__(self, branches: Branches, settings: WorkspaceConfig) -> None:
        self.branches = branches
        self.settings = settings
        self.repo = branches.repo
        self.run = branches.run

    def worktree_path(self, task: str) -> Path:
        return self.repo / WORKTREES_DIR / self.run / check_task(task)

    # worktrees ------------------------------------------------------------------------

    def ensure_excludes(self) -> None:
        """Keep ``.orchestration/`` and ``.worktrees/`` out of git through info/exclude."""
        ensure_excludes(self.repo)

    def ensure_worktree(self, task: str) -> Path:
        """``.worktrees/<task>`` on ``lo/<run>/<task>`` from the staging tip; reused if there."""
        book = self.branches
        branch = book.task_branch(task)
        path = self.worktree_path(task)
        where = rel(self.repo, path)
        branches = book.tips()
        staging = book.staging_tip()  # as lo-orch set it: a task never starts on a moved one
        if staging is None:
            msg = f"{book.staging_branch} does not exist"
            raise GitError(msg, hint="Create the run's staging branch before its worktrees.")
        worktrees = list_worktrees(self.repo)
        here = worktree_in(worktrees, path)
        if here is not None:
            if here.branch != branch or not self.owns(task):
                on = here.branch or "a detached HEAD"
                msg = (
                    f"{where} is a worktree on {on} that run {self.run} did not create; it "
                    "was left as it is and will not be used"
                )
                raise GitError(
                    msg,
                    hint="Choose another run name (plan `name:`), or once "
                    f"you have saved what you need from it, `git worktree remove "
                    f"{where}` and run again.",
                )
            self._check_launch(branch, branches[branch], staging)
            log.info("worktree reused", extra={"task": task, "path": str(path)})
            return path
        other = next((w for w in worktrees if w.branch == branch), None)
        if other is not None:
            msg = f"{branch} is already checked out at {other.path}"
            raise GitError(msg, hint="Remove that worktree, or move it back to " + where + ".")
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            msg = f"{where} exists and is not a worktree of this repository; it was left as it is"
            raise GitError(msg, hint="Move it away or delete it, then run again.")
        problem = book.clash(branch, branches)
        book.raise_clashes([problem] if problem else [])
        if branch in branches:  # crash-resume: the branch outlived its worktree
            self._check_launch(branch, branches[branch], staging)
        else:
            book.create(branch, staging)
        self.ensure_excludes()
        path.parent.mkdir(parents=True, exist_ok=True)
        # recorded first: a crash after `worktree add` leaves a worktree known as this run's
        book.refs.set(BOOK_WORKTREE + task, str(path))
        try:
            git(self.repo, "worktree", "add", "--quiet", str(path), branch)
        except GitError:
            book.refs.drop(BOOK_WORKTREE + task)
            raise
        log.info("worktree created", extra={"task": task, "path": str(path), "branch": branch})
        return path

    def owns(self, task: str) -> bool:
        """Whether this run (instance) created the task's worktree, by its own record."""
        return self.branches.refs.get(BOOK_WORKTREE + task) == str(self.worktree_path(task))

    def require_own(self, task: str) -> Path:
        """The task's worktree; GitError unless this run created it."""
        path = self.worktree_path(task)
        if not self.owns(task):
            msg = f"{rel(self.repo, path)} was not created by run {self.run}; it is left as it is"
            raise GitError(
                msg,
                hint="lo-orch commits and merges only in worktrees it created "
                "for this run; relaunch the task (`lo-orch retry TASK`).",
            )
        return path

    def _check_launch(self, branch: str, tip: str, staging: str) -> None:
        """Trust a task branch only if it still grows from the staging commit it began at."""
        task = branch[len(f"lo/{self.run}/") :]
        launch = self.branches.refs.get(BOOK_START + task)
        ok = (
            launch is not None
            and git(self.repo, "cat-file", "-e", f"{launch}^{{commit}}", check=False).ok
            and is_ancestor(self.repo, launch, staging)
            and is_ancestor(self.repo, launch, tip)
        )
        if not ok:
            msg = (
                f"{branch} is not based on {self.branches.staging_branch} (it no longer "
                "contains the commit it was started from); it was left as it is and will not "
                "be used"
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
            msg = f"worktree setup `{command}` {status} in {rel(self.repo, worktree)}"
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
        folder = private.run_dir(self.repo, self.run) / "own-files"
        return folder / f"{self.branches.instance or 'run'}-{check_task(task)}.json"

    def _record_own_files(self, worktree: Path) -> None:
        """Remember the ignored files lo-orch's setup left in a task's new worktree (their
        sha256): those, unchanged, are lo-orch's own at cleanup; any other is the user's."""
        task = worktree.name
        if not TASK_RE.match(task) or worktree.resolve() != self.worktree_path(task).resolve():
            return  # not a task worktree of this run: nothing of it is ever removed
        files = {rel: file_digest(worktree / rel) for rel in ignored_files(worktree)}
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
        return [rel for rel in found if own.get(rel) is None or own[rel] != file_digest(path / rel)]

    # removal ----------------------------------------------------------------------------

    def remove_worktree(self, task: str) -> bool:
        """Remove the task's worktree if it is clean (never forced); False when kept."""
        return self.remove(task) is None

    def remove(self, task: str) -> str | None:
        """Remove the task's worktree unless something in it is not lo-orch's to drop:
        None when no worktree remains, otherwise why it was kept."""
        path = self.worktree_path(task)
        where = rel(self.repo, path)
        info = worktree_at(self.repo, path)
        if info is None:
            if path.exists():
                return f"{where} is not a worktree of this repository; left as it is"
            return None
        if not self.owns(task):
            return f"{where} was not created by run {self.run}; left as it is"
        branch = self.branches.task_branch(task)
        if info.branch is not None and info.branch != branch:
            return f"{where} is on {info.branch}, not this run's {branch}"
        if info.locked:
            return f"{where} is locked (`git worktree unlock` it to allow removal)"
        # what a sandboxed session committed and nobody took yet: onto its branch first
        with contextlib.suppress(GitError):  # a lost race is logged; the worktree is kept
            OwnBranch.of(self.repo, self.run, task).adopt()
        dirty = dirty_paths(path)
        if dirty:
            return f"{where} has uncommitted changes: {quote_list(dirty)}"
        users = self.user_ignored_files(task)
        if users:
            return (
                f"{where} holds files git ignores that lo-orch did not create: {quote_list(users)}"
            )
        if (
            info.branch is None
            and info.head
            and not git(
                self.repo, "for-each-ref", "--contains", info.head, "--format=x", "refs/heads/"
            ).stdout
        ):
            return f"{where} is on a detached HEAD with commits no branch holds"
        res = git(self.repo, "worktree", "remove", str(path), check=False)
        if not res.ok:
            return f"{where} was kept: {res.stderr.strip()}"
        self.branches.refs.drop(BOOK_WORKTREE + task)
        self._own_files_path(task).unlink(missing_ok=True)
        for folder in (path.parent, path.parent.parent):  # .worktrees/<run>, .worktrees
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty
        log.info("worktree removed", extra={"task": task, "path": str(path)})
        return None

    # commits ----------------------------------------------------------------------------

    def commit_task(self, task: str, message: str) -> str:
        """Commit everything in the task's worktree as the configured author; return HEAD.

        Secret-like files are refused before anything is staged, also when the agent
        committed one itself. Work the agent already committed is accepted as it is.
        """
        branch = self.branches.task_branch(task)
        path = self.worktree_path(task)
        where = rel(self.repo, path)
        info = worktree_at(self.repo, path)
        if info is not None:
            self.require_own(task)
        if info is None:
            msg = f"task {task} has no worktree at {where}"
            raise GitError(msg, hint="Launch the task (its worktree is created then).")
        if info.branch != branch:
            msg = (
                f"{where} is on {info.branch or 'a detached HEAD'}, not {branch}; "
                "the task's work must be on its branch"
            )
            raise GitError(msg, hint=f"In the worktree run `git switch {branch}`, then retry.")
        # a sandboxed session's own commits are in its view of the branch until taken here
        own = OwnBranch.of(self.repo, self.run, task)
        own.adopt()
        entries = parse_status(
            git(
                path, "status", "--porcelain=v1", "-z", "--no-renames", "--untracked-files=all"
            ).stdout
        )
        if any(e.xy in UNMERGED for e in entries):  # (the index's unmerged entries)
            msg = f"task {task} has unresolved merge conflicts in {where}"
            raise GitError(msg, hint="Resolve or abort the merge in the worktree, then retry.")
        present = [e.path for e in entries if os.path.lexists(path / e.path)]
        bad = sorted({p for p in [*present, *self._committed_paths(branch)] if is_secret_path(p)})
        if bad:
            refuse_secrets(task, bad)
        if entries:
            git(path, "add", "--all")
            staged = parse_raw_diff(
                git(path, "diff", "--cached", "--no-renames", "--raw", "-z").stdout
            )
            leaked = [c.path for c in staged if c.status != "D" and is_secret_path(c.path)]
            if leaked:
                git(path, "reset", "--quiet")
                refuse_secrets(task, leaked)
            if staged:  # (anything staged, deletions included, differs from HEAD)
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
        head = self.branches.tip(branch)  # (the worktree is on it: checked above)
        if head is None:
            msg = f"task {task}'s branch {branch} went away while its work was committed"
            raise GitError(msg, hint="Launch the task again (its worktree is made then).")
        own.settle()
        log.info("task committed", extra={"task": task, "commit": head})
        return head

    def _committed_paths(self, branch: str) -> list[str]:
        """Paths added or modified by the branch's own commits: those staging does not
        have (all of them, for a branch with no history in common with staging)."""
        staging, tip = self.branches.staging_tip(), self.branches.tip(branch)
        if staging is None or tip is None:
            return []
        out = git(
            self.repo,
            "log",
            "--format=",
            "--name-only",
            "--no-renames",
            "--diff-filter=AMT",
            "-z",
            f"{staging}..{tip}",
            view=True,
        ).stdout
        return [p.strip("\n") for p in split_z(out) if p.strip("\n")]

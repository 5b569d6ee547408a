"""Temporary clean checkouts of one commit (for integration tests, done-checks and the
demo), each marked with its owner so ``recovery`` can remove those a killed process left.

The checkout is a worktree of ``gitutil``'s object view: no config, attributes or filters
of the user's repository apply to the files checks run on.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from loop_orchestrator.git.gateway import git, oid
from loop_orchestrator.sessions import procinfo

#: untracked folders of the main checkout that ``temp_checkout`` can link into its tree
DEPENDENCY_DIRS = (".venv", "venv", "node_modules")
#: a temporary checkout's folder prefix, and the file in it naming its owner (a process
#: and a repository), so a later start removes those of a killed process (``recovery``)
CHECKOUT_PREFIX = "lo-orch-checkout-"
CHECKOUT_OWNER_FILE = "owner.json"


def write_owner(holder: Path, repo: Path | None = None) -> None:
    """Name this process (pid and kernel start time) and, for a checkout, its repository in
    ``holder``'s owner file, so a later start can prove the owner gone (``recovery``)."""
    owner: dict[str, object] = {"pid": os.getpid(), "start": procinfo.start_time(os.getpid())}
    if repo is not None:
        owner["repo"] = str(repo.resolve())
    (holder / CHECKOUT_OWNER_FILE).write_text(json.dumps(owner), encoding="utf-8")


@contextlib.contextmanager
def temp_checkout(repo: Path, commit: str, *, link_dependencies: bool = False) -> Iterator[Path]:
    """A clean, detached checkout of ``commit`` in a temporary folder, gone afterwards.

    Checks run here may leave build output behind; the folder is ours alone, so it is
    deleted as a whole and its worktree record pruned (no user work can live in it). With
    ``link_dependencies`` the main checkout's installed dependencies (``.venv``,
    ``node_modules``...) are linked in, so the project's own test command runs there.
    """
    sha = oid(repo, commit)
    holder = Path(tempfile.mkdtemp(prefix=CHECKOUT_PREFIX))
    tree = holder / "tree"
    links: list[Path] = []
    try:
        write_owner(holder, repo)
        # a worktree of the object view: no config, attributes or filters of the user's
        # repository apply to the files the checks run on
        git(repo, "worktree", "add", "--quiet", "--detach", str(tree), sha, view=True)
        if link_dependencies:
            for name in DEPENDENCY_DIRS:
                source, target = repo / name, tree / name
                if source.is_dir() and not target.exists() and not target.is_symlink():
                    target.symlink_to(source, target_is_directory=True)
                    links.append(target)
        yield tree
    finally:
        # Unlink our links first, so removing the folder can never walk into the user's.
        for link in links:
            with contextlib.suppress(OSError):
                link.unlink()
        shutil.rmtree(holder, ignore_errors=True)
        git(repo, "worktree", "prune", check=False, view=True)

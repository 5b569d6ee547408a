"""The repository a command works on."""

from __future__ import annotations

from pathlib import Path

from loop_orchestrator.errors import GitError
from loop_orchestrator.git.gateway import git
from loop_orchestrator.workspace import workspace


def find_repo(path: Path | None = None) -> Path:
    """The repository a command works on (``workspace.repo_root`` of ``path``, default the
    current directory), with an error that says what is wrong for a bare repository (no
    checkout to make worktrees from)."""
    path = Path.cwd() if path is None else path
    try:
        return workspace.repo_root(path)
    except GitError:
        if not path.exists():
            raise
        bare = git(path, "rev-parse", "--is-bare-repository", check=False)
        if bare.ok and bare.stdout.strip() == "true":
            where = path.resolve()
            msg = (
                f"{where} is a bare repository: it has no checkout, and lo-orch works in "
                "a checkout (it makes task worktrees from it)"
            )
            raise GitError(
                msg,
                hint=f"Clone it (`git clone {where} <folder>`) and run "
                "lo-orch in that folder, or pass --repo with a checkout.",
            ) from None
        raise

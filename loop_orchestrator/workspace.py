"""Everything that touches git: branches, worktrees, commits, diffs, merges, cleanup."""

from __future__ import annotations

from pathlib import Path

from loop_orchestrator import proc
from loop_orchestrator.errors import GitError


def repo_root(path: Path) -> Path:
    """The top of the git work tree containing ``path`` (the main checkout for a worktree)."""
    if not path.exists():
        raise GitError(f"{path} does not exist", hint="Pass an existing folder with --repo.")
    result = proc.run(
        ["git", "rev-parse", "--path-format=absolute", "--git-common-dir", "--show-toplevel"],
        cwd=path,
        env=proc.no_git_env(),
        check=False,
    )
    if not result.ok:
        raise GitError(
            f"{path.resolve()} is not inside a git repository",
            hint="Run lo-orch inside your project's git checkout, or pass --repo PATH.",
        )
    common, top = result.stdout.strip().splitlines()[:2]
    common_path = Path(common)
    # In a linked worktree the common dir is <main>/.git: report the main checkout.
    if common_path.name == ".git":
        return common_path.parent.resolve()
    return Path(top).resolve()

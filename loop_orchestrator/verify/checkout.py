"""Clean checkouts for running checks: a temporary detached worktree, removed afterwards.

The agent's worktree may hold untracked files, caches or edits made after the commit; the
verdict is about the commit, so checks run in a fresh ``git worktree add --detach`` of it.
Hooks of the user's repository are disabled for that checkout (``core.hooksPath``), and
untracked dependency folders of the main checkout (``.venv``, ``node_modules``...) are
linked in, so a done-check such as ``.venv/bin/pytest`` or ``npx jest`` finds its tools.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from loop_orchestrator import proc
from loop_orchestrator.gitutil import git

log = logging.getLogger(__name__)

#: untracked folders of the main checkout linked into a verification checkout
DEPENDENCY_DIRS = (".venv", "venv", "node_modules")


@contextlib.contextmanager
def clean_checkout(repo: Path, commit: str, *, link_dependencies: bool = True) -> Iterator[Path]:
    """A detached worktree of ``commit`` in a temporary folder, removed on exit."""
    holder = Path(tempfile.mkdtemp(prefix="lo-verify-"))
    tree = holder / "tree"
    links: list[Path] = []
    try:
        git(repo, "-c", "core.hooksPath=/dev/null", "worktree", "add", "--detach", "--quiet",
            str(tree), commit)
        if link_dependencies:
            for name in DEPENDENCY_DIRS:
                source = repo / name
                target = tree / name
                if source.is_dir() and not target.exists() and not target.is_symlink():
                    target.symlink_to(source, target_is_directory=True)
                    links.append(target)
        yield tree
    finally:
        # Unlink our links first, so nothing below can ever walk into the user's folders.
        for link in links:
            with contextlib.suppress(OSError):
                link.unlink()
        # --force: the folder is ours and holds only build output and caches of the run.
        result = git(repo, "worktree", "remove", "--force", str(tree), check=False)
        if not result.ok and tree.exists():
            log.warning("verification checkout not removed by git",
                        extra={"path": str(tree), "stderr": result.stderr})
        shutil.rmtree(holder, ignore_errors=True)
        if not result.ok:
            git(repo, "worktree", "prune", check=False)


def check_env(tree: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for commands run in a verification checkout.

    ``GIT_*`` leaks removed; the checkout (and its ``src/``) first on ``PYTHONPATH`` so an
    editable install of the main checkout cannot shadow the code under test; no bytecode
    files; ``CI=true`` so test runners do not watch or prompt.
    """
    env = proc.no_git_env(base)
    paths = [str(tree)]
    if (tree / "src").is_dir():
        paths.append(str(tree / "src"))
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["CI"] = "true"
    for key in [k for k in env if k.startswith("LO_ORCH_") and k != "LO_ORCH_LOG_DIR"]:
        del env[key]
    return env

"""Clean checkouts for running checks: a temporary detached worktree, removed afterwards.

The agent's worktree may hold untracked files, caches or edits made after the commit; the
verdict is about the commit, so checks run in a fresh ``git worktree add --detach`` of it.
Hooks of the user's repository are disabled for that checkout (``core.hooksPath``), and
untracked dependency folders of the main checkout (``.venv``, ``node_modules``...) are
linked in, so a done-check such as ``.venv/bin/pytest`` or ``npx jest`` finds its tools.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

from loop_orchestrator import proc
from loop_orchestrator.gitutil import temp_checkout


def clean_checkout(
    repo: Path, commit: str, *, link_dependencies: bool = True
) -> contextlib.AbstractContextManager[Path]:
    """A detached worktree of ``commit`` in a temporary folder with the main checkout's
    dependencies linked in, removed on exit (``gitutil.temp_checkout``)."""
    return temp_checkout(repo, commit, link_dependencies=link_dependencies)


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

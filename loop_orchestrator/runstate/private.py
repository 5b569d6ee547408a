"""Where the supervisor keeps what no agent may write: its record, its keys, its refs book.

Not under the repository (every agent's worktree shares its ``.git`` and can reach
``.orchestration/``), not named in any agent's environment or brief: under the user's state
folder, one folder per repository and run, created ``0700``. ``LO_ORCH_STATE_HOME``
overrides the root (tests, and users who keep state elsewhere); else
``$XDG_STATE_HOME/loop-orchestrator``, else ``~/.local/state/loop-orchestrator``.

Standard library only (``lo-orch hook`` may need the path on its fast path).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

_RUN_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}\Z")


def state_home() -> Path:
    """The root folder of every run's private state."""
    explicit = os.environ.get("LO_ORCH_STATE_HOME")
    if explicit:
        return Path(explicit).expanduser().resolve()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return (base / "loop-orchestrator").resolve()


def repo_key(repo: Path) -> str:
    """A stable folder name for one repository (its resolved path, hashed)."""
    resolved = str(repo.resolve())
    digest = hashlib.sha256(resolved.encode("utf-8")).hexdigest()[:16]
    return f"{Path(resolved).name[:32] or 'repo'}-{digest}"


def run_dir(repo: Path, run: str, *, create: bool = True) -> Path:
    """The private folder of run ``run`` in ``repo`` (created ``0700`` unless told not to)."""
    if not _RUN_RE.match(run):
        msg = f"{run!r} is not a run name"
        raise ValueError(msg)
    path = state_home() / repo_key(repo) / run
    if create:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.chmod(0o700)
    return path


def repo_dir(repo: Path) -> Path:
    """The private folder of repository ``repo`` (its main checkout or its ``.git``),
    shared by its runs; created ``0700``."""
    resolved = repo.resolve()
    if resolved.name == ".git":
        resolved = resolved.parent
    path = state_home() / repo_key(resolved)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    return path

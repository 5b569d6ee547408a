"""`lo-orch pr`: after Gate 2, the reviewed commit pushed and its pull request opened, then
followed (docs/design.md section 12)."""

from __future__ import annotations

from pathlib import Path

from loop_orchestrator.pullrequest import flow
from loop_orchestrator.pullrequest.flow import Followed as Followed
from loop_orchestrator.pullrequest.flow import Opened as Opened
from loop_orchestrator.sessions.guard import refuse_in_session


def pr(
    repo: Path, *, remote: str | None = None, base: str | None = None, draft: bool = False
) -> Opened:
    """`lo-orch pr [--remote] [--base] [--draft]`: push the reviewed commit (never forced)
    and open the pull request, or reuse the open one."""
    refuse_in_session("lo-orch pr")
    return flow.open_pr(repo, remote=remote, base=base, draft=draft)


def follow(repo: Path) -> Followed:
    """`lo-orch pr --follow`: read the pull request's checks and comments and route each to
    the task that owns its lines (or to the person)."""
    refuse_in_session("lo-orch pr")
    return flow.follow(repo)

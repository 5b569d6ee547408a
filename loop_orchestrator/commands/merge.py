"""`lo-orch merge` (Gate 2) and `lo-orch cleanup`.

Gate 2 is a person's act between two calls: ``review`` says what they are shown (bound to
one staging commit), ``merge`` lands exactly that review once they said yes.
"""

from __future__ import annotations

from pathlib import Path

from loop_orchestrator.workspace import integration
from loop_orchestrator.workspace.integration import CleanupResult as CleanupResult
from loop_orchestrator.workspace.integration import Merged as Merged
from loop_orchestrator.workspace.integration import Review as Review


def review(repo: Path, *, branch: str | None = None) -> Review:
    """`lo-orch merge [--branch]`, first half: the whole diff, the stat, the costs and what
    is for the person to judge (nothing moves)."""
    return integration.review(repo, branch=branch)


def merge(repo: Path, reviewed: Review, *, merge_into: str | None = None) -> Merged:
    """`lo-orch merge [--into]`, second half: move the feature branch to the reviewed
    commit, then clean up."""
    return integration.merge(repo, reviewed, merge_into=merge_into)


def cleanup(repo: Path, *, abandon: bool = False) -> CleanupResult:
    """`lo-orch cleanup [--abandon]`: remove clean worktrees and kill this run's sessions;
    dirty worktrees are kept."""
    return integration.cleanup(repo, abandon=abandon)

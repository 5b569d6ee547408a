"""``pr.json`` in the run's private folder: what ``lo-orch pr`` pushed, opened and read.

Out of the sessions' reach (docs/design.md section 3); never holds the token.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.runstate import private

FILE = "pr.json"


class RoutedItem(BaseModel):
    """One piece of feedback routed, and whether it was answered."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kind: str
    task: str | None  # None: the person's
    title: str
    text: str
    paths: list[tuple[str, int | None]] = Field(default_factory=list)
    hunk: str = ""
    url: str = ""
    reply_to: int | None = None
    #: the head commit it was about, and the commit its answer named
    commit: str = ""
    answered: str | None = None
    #: recorded as a Gate 2 comment of its task (for a review round)
    sent: bool = False
    #: by an author who may not push to the repository (never sent to a session)
    outside: bool = False


class PrRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    remote: str = ""
    repo: str = ""
    api: str = ""
    branch: str = ""
    base: str = ""
    number: int | None = None
    url: str = ""
    #: the commit the remote branch was last pushed to (or found at) by lo-orch pr
    pushed: str | None = None
    #: followed listing page URL -> its ETag, the body it answered, its next page's URL
    etags: dict[str, str] = Field(default_factory=dict)
    bodies: dict[str, Any] = Field(default_factory=dict)
    nexts: dict[str, str] = Field(default_factory=dict)
    routed: list[RoutedItem] = Field(default_factory=list)
    #: the ids of the comments lo-orch wrote on the pull request (never feedback)
    own: list[int] = Field(default_factory=list)


def path(repo: Path, run: str) -> Path:
    return private.run_dir(repo, run) / FILE


def load(repo: Path, run: str) -> PrRecord:
    p = path(repo, run)
    if not p.exists():
        return PrRecord()
    return PrRecord.model_validate_json(p.read_text(encoding="utf-8"))


def save(repo: Path, run: str, rec: PrRecord) -> None:
    atomic_write_text(path(repo, run), rec.model_dump_json(indent=2) + "\n")

"""Review comments at Gate 2 and the requests that send them back (docs/design.md section 11).

A comment is a person's (or a pull request reviewer's) words about lines of the reviewed
staging diff, addressed to the task that wrote them. Comments and requests live only in the
supervisor's record (the journal in the private folder), never in ``.orchestration/``: an
agent can neither add one nor mark one answered. This module holds their models and how the
journal's entries add up to them; the record is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

#: who said it: a person at Gate 2, a pull request review, a failing check of the PR
Source = Literal["person", "github-review", "github-check"]
SOURCES: tuple[Source, ...] = ("person", "github-review", "github-check")
#: how its task was found: the path's ``owns``, the task that changed the line, ``--task``
RoutedBy = Literal["owns", "line", "task"]

#: the longest comment recorded (a prompt, not a file)
MAX_COMMENT_CHARS = 4000
#: lines of the file around the line a comment points at, kept with it
EXCERPT_CONTEXT = 2
#: the longest line of an excerpt kept
EXCERPT_LINE_CHARS = 200

#: journal entry kinds (spelled once)
COMMENT = "comment"
CHANGES_REQUESTED = "changes_requested"
REQUEST_TAKEN = "request_taken"


class Comment(BaseModel):
    """One recorded comment (contract: docs/design.md section 11)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    task: str
    path: str | None = None
    line: int | None = Field(default=None, ge=1)
    text: str
    source: Source = "person"
    routed_by: RoutedBy
    #: the staging commit that was reviewed
    commit: str
    #: the first line number of ``excerpt``
    excerpt_start: int | None = None
    #: the lines pointed at (and a few around them) in ``commit``
    excerpt: list[str] = Field(default_factory=list)
    created_at: str
    #: the request that sent it back (None: recorded, not sent yet)
    request: str | None = None


class ChangeRequest(BaseModel):
    """One `lo-orch request-changes`: which comments went to which tasks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    #: the staging commit the changes were requested on (Gate 2 again shows what changed)
    commit: str
    comments: list[str]
    tasks: list[str]
    #: each task's integrated commit then (a comment without a path: did its work change?)
    task_commits: dict[str, str] = Field(default_factory=dict)
    created_at: str
    #: a supervisor opened its review rounds (or refused them, with a reason in the ledger)
    taken: bool = False


class Comments(BaseModel):
    """What the journal's comment entries add up to."""

    comments: dict[str, Comment] = Field(default_factory=dict)
    requests: dict[str, ChangeRequest] = Field(default_factory=dict)

    def unsent(self) -> list[Comment]:
        """Comments recorded and not yet sent back, oldest first."""
        return [c for c in self.comments.values() if c.request is None]

    def pending(self) -> list[ChangeRequest]:
        """Requests no supervisor has taken yet, oldest first."""
        return [r for r in self.requests.values() if not r.taken]

    def last_request(self) -> ChangeRequest | None:
        """The latest request (what Gate 2 again compares with)."""
        return list(self.requests.values())[-1] if self.requests else None

    def of_request(self, request: str, task: str | None = None) -> list[Comment]:
        """The comments ``request`` sent (to ``task``), in the order they were made."""
        return [
            c
            for c in self.comments.values()
            if c.request == request and (task is None or c.task == task)
        ]


def fold(state: Comments, kind: str, data: Mapping[str, Any]) -> None:
    """Apply one journal entry of a comment kind to ``state`` (others change nothing)."""
    if kind == COMMENT:
        comment = Comment.model_validate(data)
        state.comments[comment.id] = comment
    elif kind == CHANGES_REQUESTED:
        req = ChangeRequest.model_validate(data)
        state.requests[req.id] = req
        for cid in req.comments:
            if cid in state.comments:
                state.comments[cid] = state.comments[cid].model_copy(update={"request": req.id})
    elif kind == REQUEST_TAKEN and str(data.get("id")) in state.requests:
        rid = str(data["id"])
        state.requests[rid] = state.requests[rid].model_copy(update={"taken": True})


class Record(Protocol):
    """What of the supervisor's record (``journal.Record``) comments use."""

    def refresh(self) -> bool: ...

    def append(self, kind: str, **data: Any) -> None: ...

    def comments(self) -> Comments: ...


def of(record: Record) -> Comments:
    """A copy of the record's comments and requests (read again from the journal)."""
    record.refresh()
    return record.comments()


def append_comment(record: Record, comment: Comment) -> None:
    """Record one comment."""
    record.append(COMMENT, **comment.model_dump(mode="json"))


def append_request(record: Record, request: ChangeRequest) -> None:
    """Record a request: its comments are sent back from now on."""
    record.append(CHANGES_REQUESTED, **request.model_dump(mode="json"))


def mark_taken(record: Record, request: str) -> None:
    """A supervisor opened (or refused) every review round of ``request``."""
    record.append(REQUEST_TAKEN, id=request)

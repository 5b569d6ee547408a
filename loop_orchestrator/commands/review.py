"""`lo-orch comment`, `lo-orch comments` and `lo-orch request-changes`: a person's review
comments at Gate 2, sent back to the sessions that wrote the lines (docs/design.md section
11). The dashboard's Gate 2 screen and the pull request follower call the same functions
(``source`` says who spoke).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from loop_orchestrator.config import load_settings
from loop_orchestrator.runstate import comments as store
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.comments import ChangeRequest as ChangeRequest
from loop_orchestrator.runstate.comments import Comment as Comment
from loop_orchestrator.runstate.comments import Source
from loop_orchestrator.runstate.state import RunPhase
from loop_orchestrator.workspace import comments as commenting
from loop_orchestrator.workspace import workspace


def comment(
    repo: Path,
    path: str | None,
    line: int | None,
    text: str,
    *,
    task: str | None = None,
    source: Source = "person",
) -> Comment:
    """`lo-orch comment PATH[:LINE] TEXT` / `--task TASK TEXT`: recorded for the task that
    owns PATH (or changed LINE, or ``task``); the comment, with where it went."""
    return commenting.record_comment(repo, path, line, text, task=task, source=source)


@dataclass(frozen=True)
class CommentList:
    """`lo-orch comments`: every comment, oldest first, and the state of each."""

    comments: tuple[Comment, ...]
    #: comment id -> "recorded" | "requested" | "sent"
    states: dict[str, str]
    #: comment id -> answered, for the comments of the last request once Gate 2 is back
    answered: dict[str, bool]

    def as_json(self) -> list[dict[str, object]]:
        """One object per comment: its record, ``state`` and ``answered`` (None: not known
        yet)."""
        return [
            {
                **c.model_dump(mode="json"),
                "state": self.states[c.id],
                "answered": self.answered.get(c.id),
            }
            for c in self.comments
        ]


def comments(repo: Path) -> CommentList:
    """`lo-orch comments [--json]`: the run's comments and what became of them."""
    rec = runs.open_record(repo)
    found = store.of(rec)
    states = {
        c.id: "recorded"
        if c.request is None
        else ("sent" if found.requests[c.request].taken else "requested")
        for c in found.comments.values()
    }
    answered: dict[str, bool] = {}
    if rec.run.phase == RunPhase.AWAITING_MERGE_REVIEW:
        ws = workspace.Workspace.for_run(repo, rec.run, load_settings(repo).workspace)
        _since, shown = commenting.answers(repo, rec, ws.branches.recorded(ws.staging_branch))
        answered = {a.comment.id: a.answered for a in shown if states[a.comment.id] == "sent"}
    return CommentList(tuple(found.comments.values()), states, answered)


def request_changes(repo: Path) -> ChangeRequest:
    """`lo-orch request-changes`: every recorded comment sent back; each addressed task
    gets a review round from the running supervisor (or the next `lo-orch run`)."""
    return commenting.request_changes(repo)

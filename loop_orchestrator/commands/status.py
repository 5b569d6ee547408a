"""`lo-orch status`: the status document, and the table a person reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loop_orchestrator.cost import usage
from loop_orchestrator.runstate import progress as statusdoc


@dataclass(frozen=True)
class StatusReport:
    """The run's status: the document (`status --json`), the table's title, headers and
    rows (empty when not asked for), and what was spent so far (None before any task)."""

    document: dict[str, Any]
    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    spent: str | None
    #: refs of the run lo-orch put back, and where what was found on them is kept
    quarantined: tuple[str, ...] = ()
    #: why the sessions' panes could not be looked at (the cluster's error and what to do)
    panes_problem: str | None = None


def status(repo: Path, *, rows: bool = True, now: float | None = None) -> StatusReport:
    """`lo-orch status [--json] [--watch]`; ``rows=False`` skips the table (and its look at
    the panes) for `--json`."""
    doc = statusdoc.status_document(repo)
    headers = list(statusdoc.STATUS_HEADERS)
    table: list[list[str]] = []
    panes = statusdoc.Panes({})
    if rows:  # the node column goes into rows; `--json` has the node in the document
        panes = statusdoc.panes_alive(repo)
        table = statusdoc.status_rows(repo, doc, now, panes)
        headers, table = statusdoc.with_nodes(doc, statusdoc.STATUS_HEADERS, table)
    spent = (
        usage.line("Spent so far", usage.Usage.from_json(doc["run"]["usage"]))
        if doc["tasks"]
        else None
    )
    return StatusReport(
        document=doc,
        title=statusdoc.status_title(doc),
        headers=tuple(headers),
        rows=tuple(tuple(r) for r in table),
        spent=spent,
        quarantined=tuple(statusdoc.quarantine_lines(doc)),
        panes_problem=panes.problem,
    )

"""The status table at a terminal's width: which columns are shown whole, which wrap and
which give way, as one pure rule. `lo-orch status` (a rich table) and the dashboard (a
Textual DataTable) both lay their task table out with it; each says what its table draws
around the cells (``Frame``).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

#: columns shown whole at every width: a person reads a task's phase at a glance
WHOLE_COLUMNS = ("task", "wave", "phase", "cost")
#: the other columns, the first to give way last (a column that does not fit is left out,
#: the ones after it too if they do not fit either)
YIELDING_COLUMNS = (
    "waiting for",
    "in phase",
    "pane",
    "rework",
    "node",
    "last activity",
    "note",
)
#: the long columns: they wrap (at least this wide) instead of taking the width
WRAPPING_COLUMNS = frozenset({"waiting for", "last activity", "node", "note"})
WRAP_MIN = 12
#: a wrapped cell's lines at most (the rest is in the task's ledger and review)
WRAP_LINES = 3


@dataclass(frozen=True)
class Frame:
    """The cells a table takes besides its columns' text: ``per_column`` for each column
    shown (padding, a border between columns), ``fixed`` once (the outer edges, a
    scrollbar)."""

    per_column: int
    fixed: int

    def used(self, widths: dict[str, int]) -> int:
        """The table's width with these columns."""
        return sum(w + self.per_column for w in widths.values()) + self.fixed


def fit_columns(
    headers: list[str], rows: list[list[str]], width: int, frame: Frame
) -> dict[str, int]:
    """The table's columns that fit in ``width`` cells, each with its width, in the order
    of ``headers``: the whole columns at their widest cell, then the others as long as they
    fit, the long ones at least ``WRAP_MIN`` wide; what is left is shared by the long ones,
    none wider than its widest cell."""
    natural = {h: max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)}
    room = width - frame.fixed
    chosen: dict[str, int] = {}
    for h in WHOLE_COLUMNS:
        if h in natural:
            chosen[h] = natural[h]
            room -= natural[h] + frame.per_column
    order = [h for h in YIELDING_COLUMNS if h in natural]
    order += [h for h in headers if h not in chosen and h not in order]
    for h in order:
        need = min(natural[h], max(WRAP_MIN, len(h))) if h in WRAPPING_COLUMNS else natural[h]
        if need + frame.per_column <= room:
            chosen[h] = need
            room -= need + frame.per_column
    # the rest shared evenly by the long columns shown, none past its widest cell
    wanting = [h for h in order if h in chosen and h in WRAPPING_COLUMNS]
    while room > 0 and (wanting := [h for h in wanting if chosen[h] < natural[h]]):
        share = max(1, room // len(wanting))
        for h in wanting:
            more = min(share, natural[h] - chosen[h], room)
            chosen[h] += more
            room -= more
    return {h: chosen[h] for h in headers if h in chosen}


def wrap_cell(text: str, width: int, lines: int = WRAP_LINES) -> list[str]:
    """``text`` folded into at most ``lines`` lines of ``width`` (the last one ending in
    ``…`` when there is more)."""
    folded = textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]
    if len(folded) <= lines:
        return folded
    kept = folded[:lines]
    kept[-1] = kept[-1][: max(0, width - 1)] + "…"
    return kept


def fitted_cells(
    headers: list[str], rows: list[list[str]], widths: dict[str, int]
) -> list[list[list[str]]]:
    """Each row's cells of the columns in ``widths``, each as its lines: the long columns
    wrapped to their width, the others as they are (one line)."""
    return [
        [
            wrap_cell(cell, widths[h]) if h in WRAPPING_COLUMNS else [cell]
            for h, cell in zip(headers, row, strict=True)
            if h in widths
        ]
        for row in rows
    ]

"""When the supervisor's loop looks at what: its cadence, pure (every time is passed in).

The loop wakes for an event (a session's report, a job that ended, a ref that moved) or
when a periodic check is due, whichever comes first. At an event it looks only at the
tasks whose record changed and whose job ended: the work of a session's report does not
grow with the number of tasks. The periodic checks run on their own clocks, however many
events come in between (a session that floods the inbox cannot starve them):

- every ``SESSIONS_SECONDS``: pane liveness, limits and stalls of the working sessions;
- every ``VIEW_SECONDS``: the published view against the record, the inbox folder;
- every ``SWEEP_SECONDS``: every task looked at again, changed or not (what nothing
  announces: a concurrency raised after a quiet period, and a belt to the braces of the
  change tracking).

Each clock is kept by its due time: a check is due when ``now`` reaches it, and the next
one is due a period after the check ran (a loop held up by a long step catches up once,
not in a burst).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from loop_orchestrator.runstate.state import Phase

#: pane liveness, limits and stalls of working sessions are checked this often
SESSIONS_SECONDS = 0.5
#: the published view is compared with the record (and the inbox folder read) this often
VIEW_SECONDS = 1.0
#: every task is looked at again this often, whether its record changed or not
SWEEP_SECONDS = 2.0


@dataclass(frozen=True)
class Clocks:
    """When each periodic check is due next (monotonic seconds; 0: at once)."""

    sessions: float = 0.0
    view: float = 0.0
    sweep: float = 0.0


@dataclass(frozen=True)
class Turn:
    """What one turn of the loop does besides the tasks that changed."""

    sessions: bool
    view: bool
    sweep: bool


def turn(clocks: Clocks, now: float) -> tuple[Turn, Clocks]:
    """The checks due at ``now``, and the clocks after this turn ran them."""
    due = Turn(
        sessions=now >= clocks.sessions,
        view=now >= clocks.view,
        sweep=now >= clocks.sweep,
    )
    return due, replace(
        clocks,
        sessions=now + SESSIONS_SECONDS if due.sessions else clocks.sessions,
        view=now + VIEW_SECONDS if due.view else clocks.view,
        sweep=now + SWEEP_SECONDS if due.sweep else clocks.sweep,
    )


def wait(clocks: Clocks, now: float) -> float:
    """How long the loop may sleep, if no event wakes it, before a check is due."""
    return max(0.0, min(clocks.sessions, clocks.view, clocks.sweep) - now)


def to_look_at(
    due: Turn, order: Mapping[str, int], changed: Collection[str], finished: Collection[str]
) -> list[str]:
    """The tasks this turn looks at, in the run's order (``order``: task -> its place):
    every task at a sweep, else those whose record changed or whose job ended (a task
    not in the run is never looked at)."""
    if due.sweep:
        return sorted(order, key=order.__getitem__)
    wanted = {t for t in (*changed, *finished) if t in order}
    return sorted(wanted, key=order.__getitem__)


def release_due(
    due: Turn,
    seen: Mapping[str, Phase],
    looked: Mapping[str, Phase],
    finished: Collection[str],
) -> bool:
    """Whether this turn asks which tasks may start (and whether the run has settled): at
    a sweep, when a job ended, or when a task it looked at moved to another phase than
    the loop last saw (``seen``); a report that changes no phase does not."""
    if due.sweep or finished:
        return True
    return any(seen.get(t) != phase for t, phase in looked.items())

"""The supervisor loop's cadence (pure): what a turn looks at, and the periodic checks on
their own clocks however many events come in between."""

from __future__ import annotations

from loop_orchestrator.runstate.state import Phase
from loop_orchestrator.supervisor import cadence
from loop_orchestrator.supervisor.cadence import Clocks, Turn

ORDER = {f"t{i:03d}": i for i in range(64)}
EVENT = Turn(sessions=False, view=False, sweep=False)


def _run(events: list[float], until: float) -> dict[str, list[float]]:
    """Drive the cadence as the loop does: a turn at each event and whenever it has slept
    out its wait; when each periodic check ran."""
    clocks, now = Clocks(), 0.0
    ran: dict[str, list[float]] = {"sessions": [], "view": [], "sweep": []}
    pending = iter(sorted(events))
    event = next(pending, None)
    while now <= until:
        due, clocks = cadence.turn(clocks, now)
        for name, times in ran.items():
            if getattr(due, name):
                times.append(now)
        wake = now + cadence.wait(clocks, now)
        while event is not None and event <= now:
            event = next(pending, None)
        now = wake if event is None else min(wake, event)
    return ran


def test_the_first_turn_runs_every_check() -> None:
    due, clocks = cadence.turn(Clocks(), 100.0)
    assert due == Turn(sessions=True, view=True, sweep=True)
    assert clocks.sessions == 100.0 + cadence.SESSIONS_SECONDS
    assert cadence.wait(clocks, 100.0) == cadence.SESSIONS_SECONDS


def test_a_flood_of_events_does_not_starve_the_liveness_check() -> None:
    # a session sends a report every millisecond for ten seconds: pane liveness and
    # stalls are still checked every SESSIONS_SECONDS (a turn per event must not push the
    # periodic checks back)
    events = [i / 1000 for i in range(10_000)]
    ran = _run(events, 10.0)
    gaps = [b - a for a, b in zip(ran["sessions"], ran["sessions"][1:], strict=False)]
    assert len(ran["sessions"]) >= 10.0 / cadence.SESSIONS_SECONDS
    assert max(gaps) <= cadence.SESSIONS_SECONDS + 1e-3
    assert max(b - a for a, b in zip(ran["sweep"], ran["sweep"][1:], strict=False)) <= (
        cadence.SWEEP_SECONDS + 1e-3
    )


def test_an_idle_loop_sleeps_until_the_next_check_and_still_checks_on_time() -> None:
    ran = _run([], 10.0)
    gaps = [b - a for a, b in zip(ran["sessions"], ran["sessions"][1:], strict=False)]
    # a pane killed while nothing happens is noticed within SESSIONS_SECONDS
    assert gaps and max(gaps) <= cadence.SESSIONS_SECONDS + 1e-9
    assert len(ran["view"]) == 1 + int(10.0 / cadence.VIEW_SECONDS)
    # and the loop never woke more often than its checks need
    assert len(ran["sessions"]) <= 1 + int(10.0 / cadence.SESSIONS_SECONDS)


def test_a_late_turn_catches_up_once_not_in_a_burst() -> None:
    _due, clocks = cadence.turn(Clocks(), 0.0)
    due, clocks = cadence.turn(clocks, 30.0)  # a loop held up for half a minute
    assert due.sessions and due.sweep
    again, _ = cadence.turn(clocks, 30.01)
    assert again == EVENT


def test_an_event_looks_only_at_the_tasks_that_changed_in_the_run_order() -> None:
    looked = cadence.to_look_at(EVENT, ORDER, {"t040", "t002"}, ["t017", "t040"])
    assert looked == ["t002", "t017", "t040"]
    # a task not in the run (a forged name) is never looked at
    assert cadence.to_look_at(EVENT, ORDER, {"zzz"}, []) == []


def test_a_sweep_looks_at_every_task() -> None:
    sweep = Turn(sessions=False, view=False, sweep=True)
    assert cadence.to_look_at(sweep, ORDER, set(), []) == list(ORDER)


def test_what_may_start_is_asked_when_a_phase_moves_or_a_job_ends() -> None:
    seen = {"t000": Phase.PLANNING, "t001": Phase.IMPLEMENTING}
    # a hook that changed no phase: nothing new may start
    assert not cadence.release_due(EVENT, seen, {"t000": Phase.PLANNING}, [])
    assert cadence.release_due(EVENT, seen, {"t000": Phase.PLAN_READY}, [])
    assert cadence.release_due(EVENT, seen, {}, ["t001"])
    # a task the loop never saw yet counts as moved
    assert cadence.release_due(EVENT, seen, {"t002": Phase.PENDING}, [])
    assert cadence.release_due(Turn(False, False, True), seen, {}, [])

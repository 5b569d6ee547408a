"""The hook benchmark's window of working sessions (pure: no run)."""

from __future__ import annotations

from typing import Any

from benchmarks.hooks import while_all_work


def call(task: str, label: str, began: float, wall: float = 0.01) -> list[Any]:
    return [task, label, wall, 0.001, 0, began]


def test_the_window_runs_from_the_last_burst_begun_to_the_first_ended() -> None:
    """Of the sessions bursting at once; a session that bursts later (its task waited for
    another) is left out."""
    calls = [
        call("a", "PreToolUse", 10.0),
        call("a", "Notification", 20.0),
        call("b", "PreToolUse", 12.0),
        call("b", "PermissionRequest", 30.0),
        call("a", "floor: python -c pass", 5.0),  # not a hook: neither bounds nor counts
        call("a", "SessionStart", 11.0),  # not the burst's
        call("c", "PreToolUse", 40.0),  # later, alone
        call("c", "PreToolUse", 50.0),
    ]
    # the supervisor's CPU: 1 s of it before the window, then 0.2 s a second
    samples = [(t, 1.0 + 0.2 * max(0.0, t - 12.0)) for t in (9.0, 11.0, 12.0, 15.0, 20.0, 25.0)]
    got = while_all_work(calls, samples)
    assert got is not None
    # from b's first (12.0) to a's last end (20.01): samples at 12, 15 and 20
    assert got["sessions"] == 2.0 and got["seconds"] == 8.0
    assert abs(got["share"] - 100 * 0.2 / 2) < 1e-9  # 10 % of a core per session
    assert got["events"] == 2.0  # b's PreToolUse at 12 and a's Notification at 20
    assert abs(got["per_event"] - 1.6 / 2) < 1e-9


def test_no_window_without_a_second_of_samples_in_it() -> None:
    samples = [(float(t), t / 10) for t in range(40)]
    assert while_all_work([], samples) is None
    short = [call("a", "PreToolUse", 10.2), call("a", "PreToolUse", 10.7)]
    assert while_all_work(short, samples) is None  # no two samples in 10.2..10.71
    one = [call("a", "PreToolUse", 10.0), call("a", "PreToolUse", 20.0)]
    got = while_all_work(one, samples)
    assert got is not None and got["sessions"] == 1.0 and got["share"] == 10.0

"""The supervisor benchmark's split of a hook's wall at its ledger line (pure: no run)."""

from __future__ import annotations

from typing import Any

from benchmarks.supervisor import split_at_ledger


def line(task: str, event: str, at: float) -> dict[str, Any]:
    iso = f"2026-12-06T00:00:{at:09.6f}+00:00"
    return {"ts": iso, "event": "hook", "task": task, "hook_event": event}


BASE = 1796515200.0  # 2026-12-06T00:00:00 UTC


def hook(task: str, event: str, began: float, wall: float) -> list[str]:
    return [task, event, f"{wall:.6f}", "0.001", "0", f"{BASE + began:.6f}"]


def test_each_hook_is_split_at_the_ledger_line_of_its_turn() -> None:
    ledger = [
        line("a", "Stop", 10.030),
        {"ts": "2026-12-06T00:00:10.5+00:00", "event": "signal", "task": "a"},
        line("a", "Stop", 20.010),
        line("b", "Stop", 10.040),
    ]
    # (the log is in the order the hooks ended: the second Stop of a ended before b's)
    hooks = [hook("a", "Stop", 20.0, 0.05), hook("a", "Stop", 10.0, 0.04)]
    hooks.append(hook("b", "Stop", 10.0, 0.1))
    to_line, after = split_at_ledger(ledger, hooks)
    assert sorted(round(x, 3) for x in to_line) == [0.01, 0.03, 0.04]
    # a's first: 10.0 + 0.04 - 10.03; its second: 20.0 + 0.05 - 20.01; b's: 10.1 - 10.04
    assert sorted(round(x, 3) for x in after) == [0.01, 0.04, 0.06]


def test_an_event_whose_hooks_and_lines_do_not_pair_up_is_left_out() -> None:
    ledger = [line("a", "Stop", 10.03), line("a", "SessionStart", 5.0)]
    hooks = [hook("a", "Stop", 10.0, 0.05), hook("a", "Stop", 30.0, 0.05)]
    hooks.append(hook("a", "SessionStart", 4.99, 0.02))
    hooks.append(["a", "PreToolUse", "0.01", "0.001", "0"])  # (an old log line: no start)
    to_line, after = split_at_ledger(ledger, hooks)
    assert [round(x, 3) for x in to_line] == [0.01]
    assert [round(x, 3) for x in after] == [0.01]

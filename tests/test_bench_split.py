"""The supervisor benchmark's split of a hook's wall at its ledger line (pure: no run)."""

from __future__ import annotations

from typing import Any

from benchmarks.supervisor import pool, render, split_at_ledger


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


def measured(walls: list[float], cpu: float, wall: float, tally: float | None) -> dict[str, Any]:
    """One run's figures as ``measure`` returns them (the parts ``pool`` and ``render`` read)."""
    return {
        "tasks": 4,
        "latency": [0.02, 0.03],
        "to_phase": [],
        "expected": 8,
        "reaction": [],
        "early": 0,
        "prompt_wall": [],
        "prompt_cpu": [],
        "hook_wall": walls,
        "hook_cpu": [0.001] * len(walls),
        "hook_failed": 0,
        "hook_to_line": [],
        "hook_after_line": [],
        "integrated": 4,
        "rejected": 0,
        "blocked": [],
        "tally": None if tally is None else {"cpu": cpu, "tally": {"git": [tally, 10]}},
        "wall": wall,
        "cpu": cpu,
        "waited_cpu": 2 * cpu,
        "peak_mib": 50.0 + cpu,
        "problem": None,
    }


def test_runs_pooled_keep_every_sample_and_count_per_task_over_all_of_them() -> None:
    runs = [measured([0.01, 0.03], 1.0, 10.0, 0.2), measured([0.05], 3.0, 30.0, 0.4)]
    pooled = pool(runs)
    assert pooled["hook_wall"] == [0.01, 0.03, 0.05]
    assert pooled["cpu"] == 4.0 and pooled["wall"] == 40.0 and pooled["runs"] == 2
    assert pooled["peak_mib"] == 53.0  # the highest, not a sum
    assert pooled["integrated"] == 8 and pooled["expected"] == 16
    assert pooled["rounds"] == [(0.02, 1.0), (0.05, 3.0)]  # each run's own p50 and CPU
    assert pooled["tally"] == {"cpu": 4.0, "tally": {"git": [0.6000000000000001, 20]}}
    table = render([4], {("AFTER", 4): pooled}, ["AFTER"], concurrency=4)
    rows = {line[:44].strip(): line[44:].strip() for line in table.splitlines()}
    assert rows["4 same, ms per task"] == "500"  # 4 s over 2 runs of 4 tasks
    assert rows["4 same + what it waited for, ms per task"] == "1500"  # (4 + 8) s / 8
    assert rows["4 supervisor CPU s (a run's mean)"] == "2.00"
    assert rows["4 same, % of a core per working session"] == "2.50"  # 4 s / 40 s / 4
    each = "AFTER, each run: hook wall p50 ms / supervisor CPU ms per task: 20/250, 50/750"
    assert f"  note: {each}" in table.splitlines()
    assert "integrated" not in table  # 8 of 2 runs x 4: no note


def test_a_run_without_its_tally_leaves_the_pooled_tally_out() -> None:
    runs = [measured([0.01], 1.0, 10.0, 0.2), measured([0.02], 1.0, 10.0, None)]
    assert pool(runs)["tally"] is None

"""Worked examples of the scheduler: waves, the ready queue, strict waves, blocked tasks."""

from __future__ import annotations

from typing import Any

import pytest

from loop_orchestrator.plan.loading import validate_plan_data
from loop_orchestrator.plan.model import Plan
from loop_orchestrator.plan.schedule import (
    ready_tasks,
    waiting_on,
    wave_of,
    waves,
)
from loop_orchestrator.runstate.state import Phase


def task(tid: str, *deps: str) -> dict[str, Any]:
    return {
        "id": tid,
        "objective": tid,
        "owns": [f"src/{tid}.py"],
        "depends_on": list(deps),
        "done": [{"criterion": "ok", "check": "pytest -q"}],
    }


@pytest.fixture
def diamond() -> Plan:
    #   a   b   c        wave 1 (cap 2 splits it: a b | c)
    #    \ /    |
    #     d     e        level 1
    #      \   /
    #        f           level 2
    return validate_plan_data(
        {
            "goal": "g",
            "tasks": [
                task("a"),
                task("b"),
                task("c"),
                task("d", "a", "b"),
                task("e", "c"),
                task("f", "d", "e"),
            ],
        }
    )


P, L, INT, B = Phase.PENDING, Phase.LAUNCHING, Phase.INTEGRATED, Phase.BLOCKED


def test_waves_split_levels_by_the_cap(diamond: Plan) -> None:
    assert waves(diamond, 4) == [["a", "b", "c"], ["d", "e"], ["f"]]
    assert waves(diamond, 2) == [["a", "b"], ["c"], ["d", "e"], ["f"]]
    assert waves(diamond, 1) == [[t] for t in "abcdef"]
    assert wave_of(diamond, 2) == {"a": 1, "b": 1, "c": 2, "d": 3, "e": 3, "f": 4}
    with pytest.raises(ValueError, match="at least 1"):
        waves(diamond, 0)


def test_ready_queue_starts_a_task_as_soon_as_its_dependencies_are_integrated(
    diamond: Plan,
) -> None:
    phases = dict.fromkeys("abcdef", P)
    assert ready_tasks(diamond, phases, 2) == ["a", "b"]
    phases |= {"a": L, "b": L}
    assert ready_tasks(diamond, phases, 2) == []
    phases |= {"a": INT, "b": INT}
    # d's producers are integrated: it may start before c (wave 2) has even started
    assert ready_tasks(diamond, phases, 2) == ["c", "d"]
    assert ready_tasks(diamond, phases, 1) == ["c"]


def test_strict_waves_wait_for_the_whole_previous_wave(diamond: Plan) -> None:
    phases = dict.fromkeys("abcdef", P) | {"a": INT, "b": INT}
    assert ready_tasks(diamond, phases, 2, strict_waves=True) == ["c"]
    phases |= {"c": Phase.VERIFYING}
    assert ready_tasks(diamond, phases, 2, strict_waves=True) == []
    phases |= {"c": INT}
    assert ready_tasks(diamond, phases, 2, strict_waves=True) == ["d", "e"]


def test_strict_waves_pass_a_blocked_task_and_what_waits_on_it(diamond: Plan) -> None:
    # a is blocked: d and f can never start; c and e must not wait for them
    phases = dict.fromkeys("abcdef", P) | {"a": B, "b": INT}
    assert ready_tasks(diamond, phases, 2, strict_waves=True) == ["c"]
    phases |= {"c": INT}
    assert ready_tasks(diamond, phases, 2, strict_waves=True) == ["e"]
    phases |= {"e": INT}
    assert ready_tasks(diamond, phases, 2, strict_waves=True) == []
    assert waiting_on(diamond, phases) == {"d": ["a"], "f": ["a"]}


def test_given_wave_numbers_are_used(diamond: Plan) -> None:
    phases = dict.fromkeys("abcdef", P)
    numbers = {"a": 2, "b": 1, "c": 1, "d": 3, "e": 3, "f": 4}
    assert ready_tasks(diamond, phases, 3, wave_numbers=numbers) == ["b", "c", "a"]
    assert ready_tasks(diamond, phases, 3, strict_waves=True, wave_numbers=numbers) == ["b", "c"]


def test_sessions_in_any_active_phase_count_against_the_cap(diamond: Plan) -> None:
    for phase in (
        Phase.LAUNCHING,
        Phase.PLANNING,
        Phase.PLAN_READY,
        Phase.IMPLEMENTING,
        Phase.IMPL_DONE,
        Phase.VERIFYING,
        Phase.APPROVED,
    ):
        phases = dict.fromkeys("abcdef", P) | {"a": phase}
        assert ready_tasks(diamond, phases, 2) == ["b"], phase
    for phase in (Phase.BLOCKED, Phase.FAILED, Phase.INTEGRATED):
        phases = dict.fromkeys("abcdef", P) | {"a": phase}
        assert ready_tasks(diamond, phases, 2) == ["b", "c"], phase


def test_blocked_producers_hold_back_their_dependents_only(diamond: Plan) -> None:
    phases = dict.fromkeys("abcdef", P) | {"a": B, "b": INT, "c": INT}
    assert ready_tasks(diamond, phases, 4) == ["e"]
    assert waiting_on(diamond, phases) == {"d": ["a"], "f": ["a"]}
    phases |= {"e": Phase.FAILED}
    assert waiting_on(diamond, phases) == {"d": ["a"], "f": ["a", "e"]}


def test_missing_phases_count_as_pending(diamond: Plan) -> None:
    assert ready_tasks(diamond, {}, 4) == ["a", "b", "c"]
    assert waiting_on(diamond, {}) == {}

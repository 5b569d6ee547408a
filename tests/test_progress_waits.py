"""What each task waits for (runstate.progress): one ``Wait`` per situation, decided from
the task's status and the run's phase alone, and its plain words."""

from __future__ import annotations

from typing import Any

import pytest

from loop_orchestrator.runstate.progress import WAIT_TEXT, Wait, wait_of, waiting_for
from loop_orchestrator.runstate.state import Phase, RunPhase, TaskStatus

RUNNING = RunPhase.RUNNING


def _decided(phase: Phase, run: RunPhase = RUNNING, **kw: Any) -> Wait:
    st = TaskStatus(task="t", phase=phase, **kw.pop("status", {}))
    return wait_of(
        st,
        run,
        alive=kw.get("alive", True),
        deps=kw.get("deps", []),
        phases=kw.get("phases", {}),
        full=kw.get("full", False),
    )


CASES: dict[Wait, tuple[Phase, RunPhase, dict[str, Any]]] = {
    Wait.RETRY: (Phase.BLOCKED, RUNNING, {}),
    Wait.GATE_2: (Phase.INTEGRATED, RunPhase.AWAITING_MERGE_REVIEW, {}),
    Wait.MERGED: (Phase.INTEGRATED, RunPhase.MERGED, {}),
    Wait.DONE: (Phase.INTEGRATED, RUNNING, {}),
    Wait.GATE_1: (Phase.PENDING, RunPhase.AWAITING_PLAN_APPROVAL, {}),
    Wait.STOPPED: (Phase.PLANNING, RunPhase.STOPPED, {}),
    Wait.DEPENDENCIES: (
        Phase.PENDING,
        RUNNING,
        {"deps": ["a", "b"], "phases": {"a": Phase.INTEGRATED, "b": Phase.IMPLEMENTING}},
    ),
    Wait.SLOT: (Phase.PENDING, RUNNING, {"full": True}),
    Wait.NO_SUPERVISOR: (Phase.IMPLEMENTING, RUNNING, {"alive": False}),
    Wait.START: (Phase.PENDING, RUNNING, {}),
    Wait.LIMIT: (
        Phase.IMPLEMENTING,
        RUNNING,
        {"status": {"limit_until": "2026-12-01T12:00:00+00:00", "waiting_for": "the limit"}},
    ),
    Wait.PERMISSION: (Phase.IMPLEMENTING, RUNNING, {"status": {"waiting_for": "Bash: rm"}}),
    Wait.PERMISSION_PROMPT: (
        Phase.PLANNING,
        RUNNING,
        {"status": {"last_event": "Notification", "last_notification": "permission_prompt"}},
    ),
    Wait.AGENT: (Phase.IMPLEMENTING, RUNNING, {}),
    Wait.AGENT_START: (Phase.LAUNCHING, RUNNING, {}),
    Wait.VERIFICATION: (Phase.VERIFYING, RUNNING, {}),
    Wait.STAGING: (Phase.APPROVED, RUNNING, {}),
    Wait.SUPERVISOR: (Phase.PLAN_READY, RUNNING, {}),
}


@pytest.mark.parametrize("expected", list(CASES), ids=[w.value for w in CASES])
def test_each_situation_has_its_wait(expected: Wait) -> None:
    phase, run, kw = CASES[expected]
    assert _decided(phase, run, **kw) is expected


def test_every_wait_is_reached_and_worded() -> None:
    assert set(CASES) == set(Wait) == set(WAIT_TEXT)


def test_the_words_name_the_command_and_what_is_waited_for() -> None:
    st = TaskStatus(task="tok", phase=Phase.PENDING)
    words = waiting_for(
        st,
        RUNNING,
        alive=True,
        deps=["a", "b", "c"],
        phases={"a": Phase.INTEGRATED, "b": Phase.IMPLEMENTING},
        full=False,
    )
    assert words == "tasks b, c"
    blocked = TaskStatus(task="tok", phase=Phase.FAILED)
    assert "`lo-orch retry tok`" in waiting_for(
        blocked, RUNNING, alive=True, deps=[], phases={}, full=False
    )
    asking = TaskStatus(task="tok", phase=Phase.IMPLEMENTING, waiting_for="Bash: {rm -rf}")
    assert waiting_for(asking, RUNNING, alive=True, deps=[], phases={}, full=False).startswith(
        "Bash: {rm -rf}; answer it with `lo-orch permit tok allow|deny`"
    )

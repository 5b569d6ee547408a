"""The task lifecycle: every transition of the table, signals and the Stop gate (pure, fast)."""

from __future__ import annotations

import itertools

import pytest

from loop_orchestrator.runstate.state import ACTIVE_PHASES, Phase, TaskStatus
from loop_orchestrator.supervisor import lifecycle
from loop_orchestrator.supervisor.lifecycle import (
    Event,
    IllegalTransition,
    decide_signal,
    next_phase,
    only_activity,
)

# The whole table written out by hand: a changed transition must change this test too.
EXPECTED = {
    (Phase.PENDING, Event.RELEASE): Phase.LAUNCHING,
    (Phase.LAUNCHING, Event.RELAUNCH): Phase.PENDING,
    (Phase.LAUNCHING, Event.READY): Phase.PLANNING,
    (Phase.PLANNING, Event.PLAN_READY): Phase.PLAN_READY,
    (Phase.PLAN_READY, Event.IMPLEMENT): Phase.IMPLEMENTING,
    (Phase.IMPLEMENTING, Event.IMPL_DONE): Phase.IMPL_DONE,
    (Phase.IMPL_DONE, Event.VERIFY): Phase.VERIFYING,
    (Phase.VERIFYING, Event.VERIFY): Phase.VERIFYING,
    (Phase.VERIFYING, Event.PASS): Phase.APPROVED,
    (Phase.VERIFYING, Event.REWORK): Phase.IMPLEMENTING,
    (Phase.APPROVED, Event.INTEGRATED): Phase.INTEGRATED,
    (Phase.INTEGRATED, Event.REOPEN): Phase.IMPLEMENTING,
    (Phase.INTEGRATED, Event.REVIEW_ROUND): Phase.IMPLEMENTING,
}
OPEN = [Phase.PENDING, *sorted(ACTIVE_PHASES), Phase.INTEGRATED]
for _p in [*OPEN, Phase.BLOCKED]:
    EXPECTED[(_p, Event.BLOCK)] = Phase.BLOCKED
for _p in [*OPEN, Phase.FAILED]:
    EXPECTED[(_p, Event.FAIL)] = Phase.FAILED
for _p in (Phase.BLOCKED, Phase.FAILED):
    EXPECTED[(_p, Event.RETRY_START)] = Phase.PENDING
    EXPECTED[(_p, Event.RETRY_PLAN)] = Phase.PLANNING
for _p in (Phase.BLOCKED, Phase.FAILED, Phase.INTEGRATED):
    EXPECTED[(_p, Event.RETRY_IMPLEMENT)] = Phase.IMPLEMENTING
# a session that moved a ref of the run: never from a task whose work was integrated
for _p in (
    Phase.PLANNING,
    Phase.PLAN_READY,
    Phase.IMPLEMENTING,
    Phase.IMPL_DONE,
    Phase.VERIFYING,
    Phase.APPROVED,
):
    EXPECTED[(_p, Event.TAMPERED)] = Phase.IMPLEMENTING


@pytest.mark.parametrize(("phase", "event"), list(itertools.product(Phase, Event)))
def test_every_phase_and_event(phase: Phase, event: Event) -> None:
    expected = EXPECTED.get((phase, event))
    if expected is None:
        with pytest.raises(IllegalTransition, match=f"{event.value} is not allowed"):
            next_phase(phase, event)
    else:
        assert next_phase(phase, event) == expected


def test_nothing_leaves_a_merged_task_but_a_reopen_a_block_or_a_failure() -> None:
    leaving = {e for (p, e) in lifecycle.TABLE if p == Phase.INTEGRATED}
    assert leaving == {
        Event.REOPEN,
        Event.REVIEW_ROUND,
        Event.BLOCK,
        Event.FAIL,
        Event.RETRY_IMPLEMENT,
    }


def status(
    phase: Phase, rework: int = 0, delivered: str | None = "same", **kw: object
) -> TaskStatus:
    if delivered == "same":
        delivered = lifecycle.delivery_key(phase, rework)
    return TaskStatus(task="alpha", phase=phase, rework_count=rework, delivered=delivered, **kw)  # type: ignore[arg-type]


def test_signal_follows_its_phase_once_the_prompt_arrived() -> None:
    d = decide_signal(status(Phase.PLANNING), "plan_ready", None)
    assert d.accepted and d.changes["phase"] == Phase.PLAN_READY
    d = decide_signal(status(Phase.IMPLEMENTING, rework=2), "impl_done", "done")
    assert d.accepted and d.changes == {"phase": Phase.IMPL_DONE, "stop_blocks": 0, "note": "done"}


def test_impl_done_before_the_rework_prompt_arrived_is_refused() -> None:
    """The real-CLI fault: a round counted for an impl_done sent before that round's
    prompt reached the session (it still had round 0's prompt)."""
    st = status(Phase.IMPLEMENTING, rework=1, delivered="implementing:0")
    d = decide_signal(st, "impl_done", None)
    assert not d.accepted
    assert "has not reached the session" in d.message
    assert d.changes == {}


def test_without_hooks_the_sessions_signal_for_the_prompt_being_delivered_counts() -> None:
    """An agent without hooks is confirmed on screen, which a fast program outruns: once
    the first Enter of its prompt was pressed (``delivering``), its signal for it is the
    evidence that it arrived (CI: the signal refused, the run waited for ever). With hooks
    the UserPromptSubmit hook comes first, and the same signal is still refused."""
    st = status(Phase.IMPLEMENTING, delivered="planning:0", delivering="implementing:0")
    d = decide_signal(st, "impl_done", None, on_screen=True)
    assert d.accepted and d.changes["phase"] == Phase.IMPL_DONE
    assert not decide_signal(st, "impl_done", None).accepted
    # a rework round's prompt in flight: that round's signal counts, none of another phase
    st = status(
        Phase.IMPLEMENTING, rework=1, delivered="implementing:0", delivering="implementing:1"
    )
    assert decide_signal(st, "impl_done", None, on_screen=True).accepted
    assert not decide_signal(st, "plan_ready", None, on_screen=True).accepted


def test_without_hooks_a_signal_before_its_prompts_enter_is_still_refused() -> None:
    """Nothing in flight (the prompt not yet pasted, or round 0's key still in flight in
    round 1): the session's impl_done is one left over from before, as with hooks."""
    for delivering in (None, "implementing:0"):
        st = status(Phase.IMPLEMENTING, rework=1, delivered="implementing:0", delivering=delivering)
        d = decide_signal(st, "impl_done", None, on_screen=True)
        assert not d.accepted and "has not reached the session" in d.message


def test_plan_ready_while_implementing_prompt_is_pending_is_refused() -> None:
    st = status(Phase.IMPLEMENTING, delivered="planning:0")
    assert not decide_signal(st, "plan_ready", None).accepted
    assert not decide_signal(st, "impl_done", None).accepted


@pytest.mark.parametrize(
    ("phase", "signal"),
    [
        (Phase.PENDING, "plan_ready"),
        (Phase.LAUNCHING, "impl_done"),
        (Phase.PLANNING, "impl_done"),
        (Phase.VERIFYING, "impl_done"),
        (Phase.APPROVED, "plan_ready"),
        (Phase.INTEGRATED, "impl_done"),
        (Phase.INTEGRATED, "blocked"),
        (Phase.PENDING, "blocked"),
        (Phase.FAILED, "blocked"),
    ],
)
def test_signals_that_make_no_sense_are_refused(phase: Phase, signal: str) -> None:
    d = decide_signal(status(phase), signal, "a note")
    assert not d.accepted
    assert f"is in phase {phase.value}" in d.message


def test_repeated_signal_changes_nothing() -> None:
    d = decide_signal(status(Phase.IMPL_DONE), "impl_done", None)
    assert d.accepted and d.repeated and d.changes == {}


def test_blocked_needs_a_note_and_a_prompt() -> None:
    assert not decide_signal(status(Phase.IMPLEMENTING), "blocked", None).accepted
    no_prompt = status(Phase.LAUNCHING, delivered=None)
    assert "not received a prompt" in decide_signal(no_prompt, "blocked", "x").message
    d = decide_signal(status(Phase.VERIFYING, delivered="implementing:0"), "blocked", "why")
    assert d.accepted and d.changes["phase"] == Phase.BLOCKED and d.changes["error"] == "why"


def test_unknown_signal() -> None:
    assert not decide_signal(status(Phase.PLANNING), "approved", None).accepted


def test_stop_gate_holds_only_a_session_that_has_its_prompt() -> None:
    """The other real-CLI fault: a turn ending just after plan_ready, before the implement
    prompt arrived, was held for not having implemented."""
    before_prompt = status(Phase.IMPLEMENTING, delivered="planning:0")
    assert lifecycle.stop_decision(before_prompt, False, "lo-orch") is None
    reason = lifecycle.stop_decision(status(Phase.IMPLEMENTING), False, "$LO_ORCH_BIN")
    assert reason is not None
    assert "`$LO_ORCH_BIN signal impl_done`" in reason
    assert "reminder 1 of 3" in reason


def test_stop_gate_is_bounded_and_honours_stop_hook_active() -> None:
    assert lifecycle.stop_decision(status(Phase.PLANNING), True, "lo-orch") is None
    held = status(Phase.PLANNING, stop_blocks=lifecycle.MAX_STOP_BLOCKS)
    assert lifecycle.stop_decision(held, False, "lo-orch") is None
    for phase in (Phase.PLAN_READY, Phase.IMPL_DONE, Phase.VERIFYING, Phase.BLOCKED):
        assert lifecycle.stop_decision(status(phase), False, "lo-orch") is None


def test_hook_changes() -> None:
    st = status(Phase.PLANNING)
    assert lifecycle.hook_changes(st, "SessionStart", {"session_id": "s1"}, "T") == {
        "last_event": "SessionStart",
        "last_event_at": "T",
        "session_id": "s1",
    }
    known = status(Phase.PLANNING, session_id="s0")
    assert "session_id" not in lifecycle.hook_changes(known, "Stop", {"session_id": "s1"}, "T")
    assert lifecycle.hook_changes(st, "UserPromptSubmit", {}, "T")["prompt_submitted_at"] == "T"
    assert lifecycle.hook_changes(st, "Stop", {}, "T")["turn_ended_at"] == "T"
    auth = lifecycle.hook_changes(st, "StopFailure", {"error": "authentication_failed"}, "T")
    assert auth["error"] == lifecycle.NOT_LOGGED_IN_ERROR
    other = lifecycle.hook_changes(st, "StopFailure", {"error": "rate_limit"}, "T")
    assert "error" not in other


def test_rework_limit_counts_rounds_a_person_granted() -> None:
    assert lifecycle.rework_limit(status(Phase.BLOCKED, extra_rounds=2), 3) == 5


@pytest.mark.parametrize(
    ("st", "expected"),
    [
        (status(Phase.PENDING, delivered=None), None),
        (status(Phase.LAUNCHING, delivered=None), lifecycle.Action.START),
        (status(Phase.PLANNING), None),
        (status(Phase.PLANNING, delivered=None), lifecycle.Action.REDELIVER),
        (status(Phase.PLAN_READY, delivered="planning:0"), lifecycle.Action.IMPLEMENT),
        (status(Phase.IMPLEMENTING, delivered="planning:0"), lifecycle.Action.REDELIVER),
        (
            status(Phase.IMPLEMENTING, rework=2, delivered="implementing:1"),
            lifecycle.Action.REDELIVER,
        ),
        (status(Phase.IMPLEMENTING), None),
        (
            status(Phase.IMPLEMENTING, error=lifecycle.NOT_LOGGED_IN_ERROR),
            lifecycle.Action.NOT_LOGGED_IN,
        ),
        (status(Phase.IMPL_DONE, delivered="implementing:0"), lifecycle.Action.VERIFY),
        (status(Phase.VERIFYING, delivered="implementing:0"), lifecycle.Action.VERIFY),
        (status(Phase.APPROVED, delivered="implementing:0"), lifecycle.Action.INTEGRATE),
        (status(Phase.INTEGRATED), None),
        (status(Phase.BLOCKED), None),
        (status(Phase.FAILED), None),
    ],
)
def test_the_next_step_follows_from_the_recorded_state(
    st: TaskStatus, expected: lifecycle.Action | None
) -> None:
    assert lifecycle.action(st) == expected


def test_only_a_tool_calls_word_that_the_session_is_at_work_waits_for_the_views_round() -> None:
    st = TaskStatus(task="t", phase=Phase.IMPLEMENTING, session_id="s")
    tool = lifecycle.hook_changes(st, "PreToolUse", {"session_id": "s"}, "T")
    assert only_activity("PreToolUse", tool)
    first = lifecycle.hook_changes(TaskStatus(task="t"), "PreToolUse", {"session_id": "s"}, "T")
    assert not only_activity("PreToolUse", first)  # the session's id: written at once
    for event, payload in (
        ("SessionStart", {}),
        ("UserPromptSubmit", {}),
        ("Stop", {}),
        ("SessionEnd", {}),  # the same fields as a tool call's, but the session ended
        ("PermissionRequest", {"tool_name": "Bash"}),
        ("Notification", {"notification_type": "permission_prompt"}),
        ("Notification", {}),
        ("StopFailure", {"error": "authentication_failed"}),
    ):
        assert not only_activity(event, lifecycle.hook_changes(st, event, payload, "T")), event

"""The supervisor's pure decision core: every rule in milliseconds, exhaustively where a
table allows (no tmux, no git, no clock)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loop_orchestrator.runstate.state import ACTIVE_PHASES, Phase, TaskStatus
from loop_orchestrator.supervisor import decide, lifecycle
from loop_orchestrator.supervisor.decide import (
    Block,
    Implement,
    Integrate,
    Launch,
    NotLoggedIn,
    Nudge,
    Observation,
    Pane,
    Redeliver,
    Relaunch,
    ReportBlocked,
    Resume,
    Verify,
)

NOW = 1_800_000_000.0
MIN = 60.0


def obs(phase: Phase = Phase.IMPLEMENTING, **kw: object) -> Observation:
    base = Observation(task="alpha", phase=phase, now=NOW, last_activity=NOW)
    return replace(base, **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------- what the record asks for

# Written out by hand: phase, prompt received, not logged in -> the step
REACT = {
    Phase.LAUNCHING: Launch(),
    Phase.PLAN_READY: Implement(),
    Phase.IMPL_DONE: Verify(reacted=True),
    Phase.VERIFYING: Verify(reacted=False),
    Phase.APPROVED: Integrate(),
}


@pytest.mark.parametrize(
    ("phase", "received", "logged_out"),
    list(itertools.product(Phase, (True, False), (True, False))),
)
def test_react_for_every_phase(phase: Phase, received: bool, logged_out: bool) -> None:
    steps = decide.react(
        obs(phase, prompt_received=received, not_logged_in=logged_out, reported_blocked=True)
    )
    if phase in REACT:
        expected: list[object] = [REACT[phase]]
    elif phase in (Phase.PLANNING, Phase.IMPLEMENTING) and not received:
        expected = [Redeliver()]
    elif phase in (Phase.PLANNING, Phase.IMPLEMENTING) and logged_out:
        expected = [NotLoggedIn()]
    else:
        expected = []
    assert steps == expected


def test_react_agrees_with_the_lifecycle_action_of_a_record() -> None:
    for phase, rework, delivered, error in itertools.product(
        Phase, (0, 2), (None, "planning:0", "implementing:2"), (None, "x")
    ):
        status = TaskStatus(
            task="alpha", phase=phase, rework_count=rework, delivered=delivered, error=error
        )
        st_obs = obs(
            phase,
            prompt_received=lifecycle.prompt_received(status),
            not_logged_in=error == lifecycle.NOT_LOGGED_IN_ERROR,
            reported_blocked=True,
        )
        action = lifecycle.action(status)
        steps = decide.react(st_obs)
        assert (action is None) == (steps == [])


def test_a_busy_task_gets_nothing_not_even_its_block_reported() -> None:
    assert decide.decide(obs(Phase.APPROVED, busy=True)) == []
    assert decide.decide(obs(Phase.BLOCKED, busy=True, reported_blocked=False)) == []


def test_a_block_the_session_set_is_reported_once() -> None:
    first = obs(Phase.BLOCKED, blocked_reason="needs a key")
    assert decide.decide(first) == [ReportBlocked("needs a key")]
    assert decide.decide(replace(first, reported_blocked=True)) == []


# ---------------------------------------------------------------- liveness, limits, stalls


@pytest.mark.parametrize("phase", sorted(Phase))
def test_only_working_sessions_with_a_checked_pane_are_watched(phase: Phase) -> None:
    dead = obs(phase, pane=Pane(alive=False, dead_status=1))
    expected = Relaunch(1) if phase in decide.WORKING_PHASES else None
    assert decide.watch(dead) == expected
    assert decide.watch(replace(dead, pane=None)) is None  # not checked this tick
    assert decide.watch(replace(dead, busy=True)) is None  # its step runs


def test_a_dead_pane_goes_before_a_limit_and_a_stall() -> None:
    o = obs(pane=Pane(alive=False), limited=True, limit_until=NOW + 100, last_activity=0.0)
    assert decide.watch(o) == Relaunch(None)


def test_a_parked_session_is_resumed_when_its_wait_ends_and_never_stalls() -> None:
    parked = obs(pane=Pane(alive=True), limited=True, limit_until=NOW + 1, last_activity=0.0)
    assert decide.watch(parked) is None
    assert decide.watch(replace(parked, now=NOW + 1)) == Resume()
    # an unreadable limit time (0.0) is over at once
    assert decide.watch(replace(parked, limit_until=0.0)) == Resume()


def test_a_stalled_session_is_nudged_then_blocked() -> None:
    """The stall rule (the whole path, a hung session nudged and then blocked, runs end to
    end in test_permissions, under attack)."""
    quiet = obs(pane=Pane(alive=True), stall_minutes=20, last_activity=NOW - 20 * MIN)
    assert decide.watch(quiet) == Nudge()
    step = decide.watch(replace(quiet, nudged=True))
    assert isinstance(step, Block)
    assert "no activity for 20 minutes after a nudge" in step.reason
    assert "lo-orch attach" in step.reason


def test_activity_within_the_stall_time_is_not_a_stall() -> None:
    o = obs(pane=Pane(alive=True), stall_minutes=20, last_activity=NOW - 20 * MIN + 1)
    assert decide.watch(o) is None
    assert decide.watch(replace(o, nudged=True)) is None


def test_a_permission_dialog_waiting_for_a_person_is_not_a_stall() -> None:
    o = obs(pane=Pane(alive=True), last_activity=0.0, nudged=True, permission_waiting=True)
    assert decide.watch(o) is None


@given(
    now=st.floats(0, 1e10),
    activity=st.floats(0, 1e10),
    minutes=st.floats(0.01, 1e4),
    nudged=st.booleans(),
)
def test_the_stall_rule_is_exactly_its_threshold(
    now: float, activity: float, minutes: float, nudged: bool
) -> None:
    o = obs(
        pane=Pane(alive=True),
        now=now,
        last_activity=activity,
        stall_minutes=minutes,
        nudged=nudged,
    )
    step = decide.watch(o)
    if now - activity < minutes * 60:
        assert step is None
    else:
        assert isinstance(step, Block if nudged else Nudge)


def test_decide_reacts_first_and_watches_only_when_no_step_was_taken() -> None:
    # a redelivery due: not also a stall or a dead pane in the same tick
    o = obs(prompt_received=False, pane=Pane(alive=False), last_activity=0.0)
    assert decide.decide(o) == [Redeliver()]
    assert decide.decide(replace(o, prompt_received=True)) == [Relaunch(None)]


def test_screen_samples_every_fifteen_seconds_and_keeps_when_it_changed() -> None:
    first = decide.screen_seen(None, 7, NOW)
    assert first == decide.Screen(7, NOW, NOW)
    assert not decide.screen_due(first, NOW + 14.9)
    assert decide.screen_due(first, NOW + 15)
    same = decide.screen_seen(first, 7, NOW + 15)
    assert same.changed == NOW and same.sampled == NOW + 15
    assert decide.screen_seen(same, 8, NOW + 30).changed == NOW + 30


# ---------------------------------------------------------------- budgets and starting


def test_a_task_over_its_budget_is_stopped_with_how_to_give_it_more() -> None:
    assert decide.over_budget("alpha", cost=0.99, cap=1.0) is None
    assert decide.over_budget("alpha", cost=None, cap=1.0) is None  # unknown: not held
    assert decide.over_budget("alpha", cost=5.0, cap=None) is None
    reason = decide.over_budget("alpha", cost=1.0, cap=1.0)
    assert reason is not None
    assert "spent $1.0000 of $1.0000" in reason
    assert "lo-orch retry alpha --budget DOLLARS" in reason


def test_the_task_budget_is_the_persons_then_the_plans_then_the_configs() -> None:
    assert decide.task_budget(3.0, 2.0, 1.0) == 3.0
    assert decide.task_budget(None, 2.0, 1.0) == 2.0
    assert decide.task_budget(None, None, 1.0) == 1.0
    assert decide.task_budget(None, None, None) is None
    assert decide.task_budget(0.0, 2.0, 1.0) == 0.0  # a zero budget is a budget


def release(spent: float | None, *, own: bool = False, busy: bool = False) -> object:
    return decide.release("alpha", wave=2, busy=busy, run_cap=10.0, run_spent=spent, own_budget=own)


def test_a_spent_run_budget_blocks_new_tasks_unless_a_person_gave_one() -> None:
    assert release(9.99) == decide.Release(2)
    spent = release(10.0)
    assert isinstance(spent, Block)
    assert spent.reason == (
        "not started: the run's budget is spent ($10.0000 of $10.0000); "
        "start it with `lo-orch retry alpha --budget DOLLARS`"
    )
    assert release(10.0, own=True) == decide.Release(2)
    assert release(None) == decide.Release(2)  # unknown spend: not held against it
    assert release(99.0, busy=True) is None
    no_cap = decide.release(
        "alpha", wave=0, busy=False, run_cap=None, run_spent=99.0, own_budget=False
    )
    assert no_cap == decide.Release(0)


def test_no_new_session_while_a_limit_holds_the_account() -> None:
    assert decide.may_release(False)
    assert not decide.may_release(True)


@pytest.mark.parametrize("phase", sorted(Phase))
def test_the_run_runs_while_a_job_or_an_active_task_does(phase: Phase) -> None:
    assert decide.running({"a": phase, "b": Phase.INTEGRATED}, jobs=True)
    assert decide.running({"a": phase}, jobs=False) == (phase in ACTIVE_PHASES)


# ---------------------------------------------------------------- limits


def test_a_usage_limit_waits_for_its_reset_and_the_grace() -> None:
    reset = datetime(2027, 1, 15, 14, 30, tzinfo=UTC).timestamp()
    p = decide.park(error="rate_limit", now=NOW, reset=reset, grace=150, wait=60)
    assert p == decide.Park("usage_limit", "usage limit, resets 14:30 UTC", reset + 150)


def test_a_rate_limit_waits_the_configured_time() -> None:
    p = decide.park(error="overloaded", now=NOW, reset=None, grace=150, wait=60)
    assert p == decide.Park("rate_limit", "overloaded from the model API", NOW + 60)


# ---------------------------------------------------------------- dead sessions


def death(**kw: object) -> decide.Death:
    base = decide.Death(
        task="alpha",
        lost=False,
        dead_status=1,
        relaunches=0,
        node_losses=0,
        max_node_losses=3,
        parked=False,
        screen_file="ev/last-screen-0.txt",
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def test_a_dead_session_is_relaunched_once_then_the_task_fails() -> None:
    first = decide.after_death(death())
    assert first == decide.Restart("exited", {"relaunches": 1}, False, "relaunching once", {})
    again = decide.after_death(death(relaunches=1))
    assert isinstance(again, decide.Fail)
    assert again.cause == "exited"
    assert "exited (status 1) again after a relaunch" in again.error
    assert "ev/last-screen-0.txt" in again.error


@pytest.mark.parametrize(("losses", "cap"), list(itertools.product(range(5), range(4))))
def test_a_session_lost_with_its_node_is_relaunched_up_to_the_cap(losses: int, cap: int) -> None:
    # (its own relaunches do not count against node losses)
    step = decide.after_death(
        death(lost=True, node_losses=losses, max_node_losses=cap, relaunches=1)
    )
    if losses >= cap:
        assert isinstance(step, decide.Fail)
        assert step.cause == "node_lost"
        assert f"max_node_losses = {cap}" in step.error
        assert "lo-orch retry alpha" in step.error
    else:
        assert isinstance(step, decide.Restart)
        assert step.counted == {"node_losses": losses + 1}
        assert step.fields == {"node_losses": losses + 1}
        assert f"({losses + 1} of at most {cap})" in step.message


def test_a_parked_session_is_relaunched_without_a_new_prompt() -> None:
    step = decide.after_death(death(parked=True))
    assert isinstance(step, decide.Restart)
    assert step.parked
    assert step.message.endswith("(parked by a limit: no prompt until its wait ends)")


@pytest.mark.parametrize(
    ("agent_error", "exists", "alive", "gone"),
    [
        (False, True, True, False),  # a backend error on a live session: the step's own
        (False, True, False, True),  # a backend error on a dead pane
        (False, False, False, True),  # on a pane that is gone
        (True, True, True, False),  # the agent's error, its session alive
        (True, True, False, False),  # the agent exited with its pane kept: report it
        (True, False, False, True),  # the agent's error, the session gone
    ],
)
def test_a_session_gone_under_a_step(
    agent_error: bool, exists: bool, alive: bool, gone: bool
) -> None:
    assert decide.session_gone(agent_error=agent_error, exists=exists, alive=alive) is gone


# ---------------------------------------------------------------- rework, integration


@pytest.mark.parametrize(("count", "limit"), list(itertools.product(range(5), range(5))))
def test_the_rework_limit(count: int, limit: int) -> None:
    step = decide.rework(rework_count=count, limit=limit, summary="2 checks failed\nmore")
    if count + 1 > limit:
        assert step == Block(f"verification failed after {count} rework round(s): 2 checks failed")
    else:
        assert step == decide.SendBack(count + 1, "2 checks failed")


def test_a_rework_without_a_summary_points_at_the_reviews() -> None:
    assert decide.rework(rework_count=0, limit=3, summary="") == decide.SendBack(
        1, "see the reviews"
    )


@pytest.mark.parametrize(("count", "limit"), list(itertools.product(range(4), range(4))))
def test_the_review_round_limit_of_a_reopened_task(count: int, limit: int) -> None:
    step = decide.reopen(rework_count=count, limit=limit, paths=["a.py", "b.py"])
    if count + 1 > limit:
        assert step == Block(
            f"the integration tests still fail on a.py, b.py after {count} rework round(s)"
        )
    else:
        assert step == decide.SendBack(count + 1, "integration tests fail on a.py, b.py")


def test_a_locked_index_blocks_instead_of_a_rework_round() -> None:
    held = decide.commit_failed(
        "alpha", error="E", message="m", held_by=[41, 42], index_locked=False
    )
    assert held == Block(
        "the worktree's git index is locked (git process(es) 41, 42 hold it): m; "
        "when no git runs there, `lo-orch retry alpha`"
    )
    stuck = decide.commit_failed("alpha", error="E", message="m", held_by=[], index_locked=True)
    assert isinstance(stuck, Block)
    assert "(it could not be cleared)" in stuck.reason
    other = decide.commit_failed("alpha", error="E", message="m", held_by=[], index_locked=False)
    assert other == decide.SendBack(0, "the work could not be committed: E")


# ---------------------------------------------------------------- errors and the end


def test_a_moved_ref_is_checked_at_once_other_errors_block_the_task() -> None:
    assert decide.after_error(decide.StepError.REFS_TAMPERED, "moved") == decide.CheckRefs()
    assert decide.after_error(decide.StepError.SESSION_GONE, "gone", 137) == Relaunch(137)
    assert decide.after_error(decide.StepError.SESSION_GONE, "gone") == Relaunch(None)
    assert decide.after_error(decide.StepError.OTHER, "conflict") == Block("conflict")


# ---------------------------------------------------------------- moved refs


def test_only_refs_nobody_but_lo_orch_may_move_are_put_back() -> None:
    assert decide.puts_back(decide.RefKind.STAGING)
    assert decide.puts_back(decide.RefKind.QUARANTINE)
    # the feature branch (a person may commit on it) is never moved over
    assert not decide.puts_back(decide.RefKind.BRANCH)
    assert [k for k in decide.RefKind if not decide.puts_back(k)] == [decide.RefKind.BRANCH]


def test_the_task_whose_work_the_forged_commit_holds_is_the_one_reworked() -> None:
    running = ["alpha", "beta", "gamma"]
    assert decide.tampering_tasks(["beta"], running) == ("beta",)
    assert decide.tampering_tasks(["gamma", "alpha"], running) == ("alpha", "gamma")
    # no task's commits in it (a commit of its own, a deleted ref): every running task
    assert decide.tampering_tasks([], running) == ("alpha", "beta", "gamma")
    # a holder that is not running any more (integrated) is not reworked; then all running
    assert decide.tampering_tasks(["delta"], running) == ("alpha", "beta", "gamma")
    assert decide.tampering_tasks([], []) == ()


def test_a_tampering_task_is_sent_back_then_blocked_after_the_limit() -> None:
    what = "lo/r/staging was moved outside lo-orch"
    assert decide.after_tamper("alpha", rework_count=0, limit=3, what=what) == decide.SendBack(
        1, what
    )
    assert decide.after_tamper("alpha", rework_count=2, limit=3, what=what) == decide.SendBack(
        3, what
    )
    last = decide.after_tamper("alpha", rework_count=3, limit=3, what=what)
    assert isinstance(last, Block)
    assert last.reason.startswith(what)
    assert "after 3 rework round(s)" in last.reason and "lo-orch retry alpha" in last.reason


@pytest.mark.parametrize(
    ("phase", "busy", "due"),
    [
        (Phase.IMPLEMENTING, False, decide.TamperDue.NOW),
        (Phase.PLANNING, False, decide.TamperDue.NOW),
        (Phase.PLAN_READY, False, decide.TamperDue.NOW),
        (Phase.IMPL_DONE, False, decide.TamperDue.NOW),
        (Phase.VERIFYING, False, decide.TamperDue.NOW),
        (Phase.APPROVED, False, decide.TamperDue.NOW),
        # a step runs: its verification takes the round, or the round follows it
        (Phase.VERIFYING, True, decide.TamperDue.AFTER_STEP),
        (Phase.IMPLEMENTING, True, decide.TamperDue.AFTER_STEP),
        (Phase.LAUNCHING, False, decide.TamperDue.AFTER_STEP),
        # verified and merged, or stuck with a person: nothing to rework
        (Phase.INTEGRATED, False, decide.TamperDue.DROP),
        (Phase.BLOCKED, False, decide.TamperDue.DROP),
        (Phase.FAILED, False, decide.TamperDue.DROP),
        (Phase.PENDING, False, decide.TamperDue.DROP),
    ],
)
def test_when_a_tamper_round_is_sent(phase: Phase, busy: bool, due: decide.TamperDue) -> None:
    assert decide.tamper_due(phase, busy=busy) is due
    if due is decide.TamperDue.NOW:  # and the lifecycle allows the round from there
        assert lifecycle.next_phase(phase, lifecycle.Event.TAMPERED) is Phase.IMPLEMENTING


def test_stuck_tasks_pause_the_run_unless_told_to_continue() -> None:
    stuck = {"b": "needs a key"}
    waiting = {"c": ["b"]}
    assert decide.finish(stuck, waiting, continue_blocked=False) == decide.Pause(
        ("b: needs a key", "c: waiting on b")
    )
    assert decide.finish(stuck, waiting, continue_blocked=True) == decide.IntegrateRun(("b", "c"))
    assert decide.finish({}, {}, continue_blocked=False) == decide.IntegrateRun(())


def test_outcome_states_are_the_contract_strings() -> None:
    assert {s.value for s in decide.OutcomeState} == {
        "review",
        "blocked",
        "integration_failed",
        "merged",
        "stopped",
    }


def test_each_outcome_gets_its_own_result_or_hint() -> None:
    from loop_orchestrator.commands.run import RunResult, result_of
    from loop_orchestrator.errors import LoOrchError, StateError
    from loop_orchestrator.supervisor.main import Outcome

    assert result_of(Outcome(decide.OutcomeState.REVIEW, "ok")) == RunResult("review", "ok")
    assert result_of(Outcome(decide.OutcomeState.MERGED, "m")) == RunResult("merged", "m")
    with pytest.raises(StateError, match="tasks that need a human:\nb: x") as blocked:
        result_of(Outcome(decide.OutcomeState.BLOCKED, "b: x"))
    assert "--continue-blocked" in (blocked.value.hint or "")
    with pytest.raises(LoOrchError) as failed:
        result_of(Outcome(decide.OutcomeState.INTEGRATION_FAILED, "tests fail"))
    assert "names no file a task owns" in (failed.value.hint or "")
    with pytest.raises(LoOrchError) as stopped:
        result_of(Outcome(decide.OutcomeState.STOPPED, "a ref moved"))
    assert stopped.value.message == "a ref moved"
    # (not the integration failure's hint: nothing failed to integrate)
    assert "names no file" not in (stopped.value.hint or "")
    assert "stopped before Gate 2" in (stopped.value.hint or "")

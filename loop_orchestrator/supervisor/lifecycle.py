"""One task lifecycle: which event moves a task from which phase to which, and who may say so.

Pure: no I/O, no clock of its own, no git, no tmux. The supervisor (effects: launch,
deliver, verify, integrate), the inbox (signals and hooks from sessions) and `lo-orch
retry` all decide through this module, so there is one answer to "may this happen now?".

A task's state is more than its phase: it also holds which prompt the session has
*received* (``delivered``: phase and round of the last prompt whose arrival was confirmed)
and the rework round. A signal or a Stop decision is judged against the prompt the session
actually has, never against a phase it has not been told about yet (a session whose turn
ends right after ``plan_ready`` is not blocked for not having implemented; an
``impl_done`` sent before the rework prompt arrived is not a new round).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from loop_orchestrator.runstate.state import ACTIVE_PHASES, Phase, TaskStatus


class Event(StrEnum):
    """What can happen to a task."""

    RELEASE = "release"  # dependencies integrated, a slot free: start it
    RELAUNCH = "relaunch"  # a launch was interrupted before anything started
    READY = "ready"  # the session is up: ask it to plan
    PLAN_READY = "plan_ready"  # signal from the session
    IMPLEMENT = "implement"  # the supervisor asks for the implementation
    IMPL_DONE = "impl_done"  # signal from the session
    VERIFY = "verify"  # the supervisor commits and checks the work
    PASS = "pass"  # verdict for the commit: passed
    REWORK = "rework"  # verdict failed, or the commit failed: another round
    INTEGRATED = "integrated"  # merged into staging
    BLOCK = "block"  # a session's own `signal blocked`, or the supervisor gives up
    FAIL = "fail"  # the session died twice, or an internal error
    RETRY_START = "retry_start"  # a person's retry of a task that never got a worktree
    RETRY_PLAN = "retry_plan"  # a person's retry of a task that was planning
    RETRY_IMPLEMENT = "retry_implement"  # a person's retry with a rework round
    REOPEN = "reopen"  # the integration tests blame an integrated task's files
    TAMPERED = "tampered"  # its session moved a ref of the run: another round
    REVIEW_ROUND = "review_round"  # a person's comments at Gate 2 sent back to it


_ANY_ACTIVE = tuple(sorted(ACTIVE_PHASES))
_STUCK = (Phase.BLOCKED, Phase.FAILED)
_OPEN = (Phase.PENDING, *_ANY_ACTIVE, Phase.INTEGRATED)

#: (phase, event) -> next phase. Anything not here is refused.
TABLE: Mapping[tuple[Phase, Event], Phase] = {
    (Phase.PENDING, Event.RELEASE): Phase.LAUNCHING,
    (Phase.LAUNCHING, Event.RELAUNCH): Phase.PENDING,
    (Phase.LAUNCHING, Event.READY): Phase.PLANNING,
    (Phase.PLANNING, Event.PLAN_READY): Phase.PLAN_READY,
    (Phase.PLAN_READY, Event.IMPLEMENT): Phase.IMPLEMENTING,
    (Phase.IMPLEMENTING, Event.IMPL_DONE): Phase.IMPL_DONE,
    (Phase.IMPL_DONE, Event.VERIFY): Phase.VERIFYING,
    (Phase.VERIFYING, Event.VERIFY): Phase.VERIFYING,  # resumed after a crash
    (Phase.VERIFYING, Event.PASS): Phase.APPROVED,
    (Phase.VERIFYING, Event.REWORK): Phase.IMPLEMENTING,
    (Phase.APPROVED, Event.INTEGRATED): Phase.INTEGRATED,
    (Phase.INTEGRATED, Event.REOPEN): Phase.IMPLEMENTING,
    (Phase.INTEGRATED, Event.REVIEW_ROUND): Phase.IMPLEMENTING,
    # a session that moved a ref of the run, from any phase its work is not verified in yet
    # (every active phase once it has a session)
    **{(p, Event.TAMPERED): Phase.IMPLEMENTING for p in ACTIVE_PHASES - {Phase.LAUNCHING}},
    # a person is needed: from anywhere a task can still be worked on
    **{(p, Event.BLOCK): Phase.BLOCKED for p in (*_OPEN, Phase.BLOCKED)},
    **{(p, Event.FAIL): Phase.FAILED for p in (*_OPEN, Phase.FAILED)},
    **{(p, Event.RETRY_START): Phase.PENDING for p in _STUCK},
    **{(p, Event.RETRY_PLAN): Phase.PLANNING for p in _STUCK},
    **{(p, Event.RETRY_IMPLEMENT): Phase.IMPLEMENTING for p in (*_STUCK, Phase.INTEGRATED)},
}

#: the signals a session may send, and the phase each follows
SIGNALS: Mapping[str, Event] = {
    "plan_ready": Event.PLAN_READY,
    "impl_done": Event.IMPL_DONE,
    "blocked": Event.BLOCK,
}
#: the phase each progress signal follows
SIGNAL_FROM: Mapping[str, str] = {"plan_ready": "planning", "impl_done": "implementing"}
#: phases in which a session owes a signal before it stops, and the signal it owes
OWED: Mapping[Phase, str] = {Phase.PLANNING: "plan_ready", Phase.IMPLEMENTING: "impl_done"}
#: Stop blocks per task between two signals; Claude Code itself overrides after 8 in a row
MAX_STOP_BLOCKS = 3


class Action(StrEnum):
    """What the supervisor does next for a task, decided from its recorded state alone."""

    START = "start"  # create the worktree, launch the session, ask it to plan
    IMPLEMENT = "implement"  # plan_ready: ask for the implementation
    VERIFY = "verify"  # impl_done (or a verification a restart interrupted)
    INTEGRATE = "integrate"  # approved: merge into staging
    REDELIVER = "redeliver"  # the prompt of this phase and round never arrived
    NOT_LOGGED_IN = "not_logged_in"  # the session's StopFailure said so: block the task


def action(st: TaskStatus) -> Action | None:
    """The supervisor's next step for a task no job is working on (None: nothing to do).

    Pure: the same recorded state always gives the same step, so a supervisor restarted at
    any moment picks up exactly where the record stands.
    """
    return action_for(st.phase, prompt_received(st), st.error == NOT_LOGGED_IN_ERROR)


def action_for(phase: Phase, received: bool, not_logged_in: bool) -> Action | None:
    """``action`` of a task in ``phase`` whose session has (``received``) the prompt of its
    phase and round or not, and said it is not logged in or not."""
    simple = {
        Phase.LAUNCHING: Action.START,  # a launch a restart interrupted reuses its pane
        Phase.PLAN_READY: Action.IMPLEMENT,
        Phase.IMPL_DONE: Action.VERIFY,
        Phase.VERIFYING: Action.VERIFY,
        Phase.APPROVED: Action.INTEGRATE,
    }
    if phase in simple:
        return simple[phase]
    if phase in OWED and not received:
        return Action.REDELIVER
    if phase in (Phase.LAUNCHING, *OWED) and not_logged_in:
        return Action.NOT_LOGGED_IN
    return None


class IllegalTransition(ValueError):
    """An event that the lifecycle does not allow in the task's phase (a bug, or a forger)."""


def next_phase(phase: Phase, event: Event) -> Phase:
    """The phase ``event`` leads to from ``phase``; IllegalTransition if it may not."""
    try:
        return TABLE[(phase, event)]
    except KeyError:
        msg = f"{event.value} is not allowed in phase {phase.value}"
        raise IllegalTransition(msg) from None


def delivery_key(phase: Phase | str, rework: int) -> str:
    """Which prompt a task is due: its phase and rework round (``implementing:1``)."""
    return f"{Phase(phase).value}:{rework}"


def prompt_received(st: TaskStatus) -> bool:
    """Whether the session has received the prompt of the task's current phase and round."""
    return st.delivered == delivery_key(st.phase, st.rework_count)


def prompt_in_flight(st: TaskStatus) -> bool:
    """Whether the prompt of the task's current phase and round is being delivered."""
    return st.delivering == delivery_key(st.phase, st.rework_count)


def rework_limit(st: TaskStatus, max_rework: int) -> int:
    """The one rework policy: the configured rounds plus every round a person granted;
    a review round takes a round number too but is counted apart (``review_rounds``)."""
    return max_rework + st.extra_rounds + st.review_rounds


@dataclass(frozen=True)
class Decision:
    """The answer to a session's signal."""

    accepted: bool
    message: str
    changes: dict[str, Any] = field(default_factory=dict)
    repeated: bool = False


def decide_signal(
    st: TaskStatus, signal: str, note: str | None, *, on_screen: bool = False
) -> Decision:
    """Whether a session's ``signal`` is accepted in its task's state, and what changes.

    ``plan_ready`` and ``impl_done`` are accepted only from the phase they follow *and*
    once the prompt of that phase and round has reached the session; ``blocked`` from any
    active phase once a prompt has reached it (with a note). Repeating the signal of the
    phase the task is in changes nothing.

    ``on_screen``: the agent has no hooks, so its prompt's arrival is confirmed on its
    screen, which a fast program can outrun: its own signal for the prompt being delivered
    (``delivering``) is that evidence first. (With hooks the UserPromptSubmit hook comes
    before anything the session does.)
    """
    event = SIGNALS.get(signal)
    if event is None:
        return Decision(False, f"unknown signal {signal!r}")
    if st.phase.value == signal:
        return Decision(True, f"already {signal}; nothing changed", repeated=True)
    try:
        new = next_phase(st.phase, event)
    except IllegalTransition:
        return Decision(False, _refusal(st, signal))
    if event is Event.BLOCK and st.phase not in ACTIVE_PHASES:
        return Decision(False, _refusal(st, signal))
    if event is Event.BLOCK:
        if not note:
            return Decision(False, "`signal blocked` needs a note saying what is missing")
        if st.delivered is None:
            return Decision(False, f"task {st.task} has not received a prompt yet")
    elif not prompt_received(st) and not (on_screen and prompt_in_flight(st)):
        return Decision(
            False,
            f"task {st.task} is {st.phase.value} (round {st.rework_count}) but its prompt "
            "for that has not reached the session yet; wait for it",
        )
    changes: dict[str, Any] = {"phase": new, "stop_blocks": 0}
    if note:
        changes["note"] = note
    if event is Event.BLOCK:
        changes["error"] = note
    return Decision(True, f"{st.phase.value} -> {new.value}", changes)


def _refusal(st: TaskStatus, signal: str) -> str:
    follows = {"plan_ready": "planning", "impl_done": "implementing"}.get(signal)
    needs = f"only follows phase {follows}" if follows else "needs a task with a live session"
    return f"task {st.task} is in phase {st.phase.value}; `signal {signal}` {needs}"


def stop_decision(st: TaskStatus, stop_hook_active: bool, bin_cmd: str) -> str | None:
    """The loop gate: why this session may not stop yet, or None to let it stop.

    Only a session that has received the prompt of a planning or implementing phase and
    not signalled is sent back; once per stop (never while ``stop_hook_active``) and at
    most ``MAX_STOP_BLOCKS`` times until it signals.
    """
    owed = OWED.get(st.phase)
    if owed is None or stop_hook_active or not prompt_received(st):
        return None
    if st.stop_blocks >= MAX_STOP_BLOCKS:
        return None
    work = (
        "write the plan the brief asks for"
        if owed == "plan_ready"
        else "finish the implementation and run the task's done-checks and tests"
    )
    return (
        f"loop-orchestrator: task {st.task} is in phase {st.phase.value} and has not "
        f"reported yet. Do not stop here: {work}, then run `{bin_cmd} signal {owed}`. If "
        f'you cannot finish, run `{bin_cmd} signal blocked --note "<what is missing and '
        f'what you need>"` instead. (Stop reminder {st.stop_blocks + 1} of '
        f"{MAX_STOP_BLOCKS}.)"
    )


#: hook events after which no permission dialog of the session is still open
MOVED_ON_EVENTS = ("UserPromptSubmit", "Stop", "SessionStart", "SessionEnd")


#: what a tool call's hook (PreToolUse) changes when it says no more than that the session
#: is at work: the record has it at once, the published view with its next round
#: (``Record.publish_pending`` on the loop's view clock), not a status file per tool call
ACTIVITY_FIELDS = frozenset({"last_event", "last_event_at"})


def only_activity(event: str, changes: Mapping[str, Any]) -> bool:
    """Whether hook ``event``'s ``changes`` are a tool call's and say no more than that the
    session is at work (a session's start, prompt, stop or end is published at once)."""
    return event == "PreToolUse" and set(changes) <= ACTIVITY_FIELDS


def hook_changes(
    st: TaskStatus, event: str, payload: Mapping[str, Any], now: str
) -> dict[str, Any]:
    """What a hook event changes in the task's recorded state."""
    changes: dict[str, Any] = {"last_event": event, "last_event_at": now}
    sid = payload.get("session_id")
    if st.session_id is None and isinstance(sid, str) and sid:
        changes["session_id"] = sid
    if event in MOVED_ON_EVENTS and st.waiting_for:
        changes["waiting_for"] = None  # the person answered (or the session moved on)
    if event == "UserPromptSubmit":
        changes["prompt_submitted_at"] = now
        changes["turn_ended_at"] = None
    elif event == "Stop":
        changes["turn_ended_at"] = now
    elif event == "PermissionRequest":
        changes["waiting_for"] = permission_wait(payload)
    elif event == "StopFailure" and payload.get("error") == "authentication_failed":
        changes["error"] = NOT_LOGGED_IN_ERROR
    elif event == "Notification" and isinstance(payload.get("notification_type"), str):
        changes["last_notification"] = payload["notification_type"]
    return changes


def permission_wait(payload: Mapping[str, Any]) -> str:
    """What a task waits for when its session shows a permission dialog."""
    tool = payload.get("tool_name") if isinstance(payload.get("tool_name"), str) else "a tool"
    summary = payload.get("tool_summary")
    what = f"{tool}: {summary}" if isinstance(summary, str) and summary else str(tool)
    return f"a person: Claude Code asks permission to use {what}"


#: a task's error after `StopFailure` with ``authentication_failed`` (Claude Code 2.1.332)
NOT_LOGGED_IN_ERROR = "not logged in: run `claude` and /login"
NOT_LOGGED_IN_HINT = "Run `claude` and type /login, then `lo-orch run` again."

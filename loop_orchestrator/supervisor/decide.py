"""The supervisor's decisions: an observation of one task in, the steps to take out.

Pure, like ``lifecycle``: no I/O, no clock of its own (every time is passed in, as seconds
since the epoch), no tmux, no git. The supervisor observes (its record, the panes, the
spend book), asks this module what to do, and carries the steps out. Everything the
supervisor *decides* lives here, so it can be tested in milliseconds: what a task's record
asks for next, the liveness and stall rule, parking at a limit and resuming after it, the
relaunch policy of a dead session, the rework and review-round limits, the task's and the
run's budgets, when a run may start new sessions, how it ends, and what a moved ref does
(lo-orch's own refs are put back and the task whose work they held is reworked; a branch a
person may move stops the run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from loop_orchestrator.cost.usage import money
from loop_orchestrator.runstate.comments import RoutedBy
from loop_orchestrator.runstate.state import ACTIVE_PHASES, Phase
from loop_orchestrator.supervisor import lifecycle
from loop_orchestrator.supervisor.lifecycle import Action

#: phases in which the session is expected to be alive and working
WORKING_PHASES = frozenset({Phase.LAUNCHING, Phase.PLANNING, Phase.IMPLEMENTING})


# ---------------------------------------------------------------- steps


@dataclass(frozen=True)
class Launch:
    """Create the worktree, launch the session, ask it to plan (a pane a restart left is
    reused)."""


@dataclass(frozen=True)
class Implement:
    """``plan_ready``: ask for the implementation."""


@dataclass(frozen=True)
class Verify:
    """Commit and verify the work; ``reacted``: the session's ``impl_done`` caused it (a
    verification a restart interrupted is resumed without that ledger line)."""

    reacted: bool = False


@dataclass(frozen=True)
class Integrate:
    """Approved: merge into staging."""


@dataclass(frozen=True)
class Redeliver:
    """The prompt of the task's phase and round never arrived: deliver it (or relaunch)."""


@dataclass(frozen=True)
class Block:
    """A person is needed: move the task to ``blocked`` with ``reason``."""

    reason: str


@dataclass(frozen=True)
class NotLoggedIn:
    """The session's StopFailure said the agent is not logged in: block with its hint."""


@dataclass(frozen=True)
class ReportBlocked:
    """The session blocked itself (``lo-orch signal blocked``): ledger and notify, once."""

    reason: str


@dataclass(frozen=True)
class Relaunch:
    """The task's pane is dead or gone: handle it as a dead session (``after_death``)."""

    dead_status: int | None


@dataclass(frozen=True)
class Resume:
    """The limit's wait is over: resume the parked session with a short prompt."""


@dataclass(frozen=True)
class Nudge:
    """No activity for the stall time: remind the session once."""


@dataclass(frozen=True)
class Release:
    """Dependencies integrated and a slot free: start the task (wave ``wave``)."""

    wave: int


@dataclass(frozen=True)
class SendBack:
    """Another rework round (``round``), with the findings in ``summary``."""

    round: int
    summary: str


@dataclass(frozen=True)
class Fail:
    """The task failed (a session dead twice, lost with too many nodes)."""

    cause: str
    error: str


@dataclass(frozen=True)
class Park:
    """A rate or usage limit: the session waits until ``until`` (epoch seconds)."""

    kind: str  # "usage_limit" | "rate_limit"
    reason: str
    until: float


@dataclass(frozen=True)
class CheckRefs:
    """A step found a ref of the run moved: check and repair the refs now; the task's
    step is taken again on its next turn."""


TaskStep = (
    Launch
    | Implement
    | Verify
    | Integrate
    | Redeliver
    | Block
    | NotLoggedIn
    | ReportBlocked
    | Relaunch
    | Resume
    | Nudge
)


# ---------------------------------------------------------------- one task, one tick


@dataclass(frozen=True)
class Pane:
    """The task's pane as the last liveness check saw it."""

    alive: bool
    dead_status: int | None = None


@dataclass(frozen=True)
class Observation:
    """One task as the supervisor sees it at ``now``: its record and its session.

    Times are seconds since the epoch (0.0: never, or unreadable). ``pane`` is None when
    the liveness of sessions was not checked this tick (it is checked every half second)
    or the task has no pane.
    """

    task: str
    phase: Phase
    now: float
    #: a step of the task (a job) runs now: nothing else is decided for it
    busy: bool = False
    #: the prompt of the task's phase and round has reached the session
    prompt_received: bool = True
    #: the session said the agent is not logged in (its StopFailure)
    not_logged_in: bool = False
    #: a blocked task was reported (ledger, notification) already
    reported_blocked: bool = False
    #: what blocked it (the error, the session's note)
    blocked_reason: str = "blocked"
    pane: Pane | None = None
    #: parked by a limit (``limit_until`` set) until then
    limited: bool = False
    limit_until: float = 0.0
    #: a permission request of the session waits for a person (the desk keeps it open)
    permission_waiting: bool = False
    #: the last sign of life: a hook event, a change of the record, a change on screen
    last_activity: float = 0.0
    nudged: bool = False
    stall_minutes: float = 20.0


def decide(obs: Observation) -> list[TaskStep]:
    """What to do about one task now (empty: nothing).

    What the record asks for comes first (a step, or a block to report); when no step was
    taken and the sessions' liveness was checked, a dead pane, the end of a limit's wait,
    or a stall. The supervisor's loop applies the two halves at their own points of a tick
    (``react`` for every task, then a person's messages, then ``watch`` on the liveness
    check), so a step started in between is seen as ``busy``; this is their composition.
    """
    steps = react(obs)
    if steps:
        return steps  # (a blocked task is not working: nothing to watch)
    watched = watch(obs)
    return [watched] if watched is not None else []


def react(obs: Observation) -> list[TaskStep]:
    """What the task's recorded state asks for (the lifecycle's ``action``), and a block
    the session set itself that nobody reported yet."""
    if obs.busy:
        return []  # after its step
    steps: list[TaskStep] = []
    action = lifecycle.action_for(obs.phase, obs.prompt_received, obs.not_logged_in)
    step = _ACTIONS.get(action) if action is not None else None
    if action is Action.VERIFY:
        step = Verify(reacted=obs.phase == Phase.IMPL_DONE)
    if step is not None:
        steps.append(step)
    if obs.phase == Phase.BLOCKED and not obs.reported_blocked:
        steps.append(ReportBlocked(obs.blocked_reason))
    return steps


_ACTIONS: Mapping[Action, TaskStep] = {
    Action.START: Launch(),
    Action.IMPLEMENT: Implement(),
    Action.INTEGRATE: Integrate(),
    Action.REDELIVER: Redeliver(),
    Action.NOT_LOGGED_IN: NotLoggedIn(),
}


def watch(obs: Observation) -> Relaunch | Resume | Nudge | Block | None:
    """Liveness, limits and stalls of a working session no step is working on."""
    if obs.busy or obs.phase not in WORKING_PHASES or obs.pane is None:
        return None
    if not obs.pane.alive:
        return Relaunch(obs.pane.dead_status)  # (a parked session too: noticed now)
    if obs.limited:
        return Resume() if obs.now >= obs.limit_until else None  # parked: not a stall
    return stall(obs)


def stall(obs: Observation) -> Nudge | Block | None:
    """The stall rule: no sign of life for ``stall_minutes``: a nudge, then a block.

    A permission dialog waiting for a person is not a stall (only a request the desk keeps
    open counts: a forged hook event cannot switch the check off).
    """
    if obs.permission_waiting:
        return None
    if obs.now - obs.last_activity < obs.stall_minutes * 60:
        return None
    if not obs.nudged:
        return Nudge()
    return Block(
        f"no activity for {obs.stall_minutes:g} minutes after a nudge; attach with "
        "`lo-orch attach` to see why"
    )


SCREEN_SAMPLE_SECONDS = 15.0


@dataclass(frozen=True)
class Screen:
    """What the stall rule knows of a pane's screen: its hash, when it last changed, when
    it was last sampled."""

    digest: int
    changed: float
    sampled: float


def screen_due(seen: Screen | None, now: float) -> bool:
    """Whether the screen is to be sampled again (every ``SCREEN_SAMPLE_SECONDS``)."""
    return seen is None or now - seen.sampled >= SCREEN_SAMPLE_SECONDS


def screen_seen(seen: Screen | None, digest: int, now: float) -> Screen:
    """The screen after a sample with ``digest`` at ``now``."""
    changed = now if seen is None or digest != seen.digest else seen.changed
    return Screen(digest, changed, now)


# ---------------------------------------------------------------- starting tasks


def may_release(limited_sessions: bool) -> bool:
    """No new session while a limit holds the account (a working session is parked)."""
    return not limited_sessions


def release(
    task: str,
    *,
    wave: int,
    busy: bool,
    run_cap: float | None,
    run_spent: float | None,
    own_budget: bool,
) -> Release | Block | None:
    """A task the scheduler says is ready: start it, or block it when the run's budget is
    spent (a person's own budget for the task, `lo-orch retry --budget`, overrides it)."""
    if busy:
        return None
    spent = run_budget_spent(task, cap=run_cap, spent=run_spent, own_budget=own_budget)
    return Block(spent) if spent else Release(wave)


def running(phases: Mapping[str, Phase], *, jobs: bool) -> bool:
    """Something runs: a step (a job), or a task in an active phase. When nothing runs and
    nothing is ready to start, the run is settled: all integrated, or the rest is stuck."""
    return jobs or any(p in ACTIVE_PHASES for p in phases.values())


# ---------------------------------------------------------------- budgets


def over_budget(task: str, *, cost: float | None, cap: float | None) -> str | None:
    """Why the task must stop now: it spent its budget (None: it may go on; an unknown
    cost cannot be held against a budget, its notes say why)."""
    if cap is None or cost is None or cost < cap:
        return None
    return (
        f"over its budget: spent {money(cost)} of {money(cap)}; give it more with "
        f"`lo-orch retry {task} --budget DOLLARS` (its new total budget)"
    )


def task_budget(own: float | None, planned: float | None, default: float | None) -> float | None:
    """The task's budget: a person's (`lo-orch retry --budget`), the plan's, the config's."""
    if own is not None:
        return own
    return planned if planned is not None else default


def run_budget_spent(
    task: str, *, cap: float | None, spent: float | None, own_budget: bool
) -> str | None:
    """Why ``task`` may not start: the run's budget is spent (else None)."""
    if cap is None or own_budget or spent is None or spent < cap:
        return None
    return (
        f"not started: the run's budget is spent ({money(spent)} of {money(cap)}); "
        f"start it with `lo-orch retry {task} --budget DOLLARS`"
    )


# ---------------------------------------------------------------- limits


def park(*, error: str, now: float, reset: float | None, grace: float, wait: float) -> Park:
    """Claude Code gave up on a turn for a limit: until when the session waits.

    A usage limit with a known reset time waits until then plus ``grace`` (Claude Code
    resumes by itself); anything else is a rate limit, waited out for ``wait`` seconds.
    """
    from datetime import UTC, datetime

    if reset is not None:
        at = datetime.fromtimestamp(reset, UTC)
        return Park("usage_limit", f"usage limit, resets {at:%H:%M} UTC", reset + grace)
    return Park("rate_limit", f"{error} from the model API", now + wait)


# ---------------------------------------------------------------- dead sessions


@dataclass(frozen=True)
class Death:
    """A session found dead (``Relaunch``), with what its task's record counts."""

    task: str
    #: it went with its cluster node (not its agent's doing)
    lost: bool
    dead_status: int | None
    relaunches: int
    node_losses: int
    max_node_losses: int
    #: parked by a limit that has not ended yet
    parked: bool
    #: where its last screen was kept
    screen_file: str


@dataclass(frozen=True)
class Restart:
    """Relaunch the dead session, resuming its conversation."""

    cause: str
    #: the record's counts after this death
    counted: Mapping[str, int]
    #: keep the prompt as delivered: a parked session resumes after the limit's wait
    parked: bool
    message: str
    fields: Mapping[str, int] = field(default_factory=dict)


def after_death(d: Death) -> Restart | Fail:
    """The relaunch policy: a dead session is relaunched once (resumed), then the task
    fails; one lost with its cluster node is relaunched up to ``max_node_losses`` times."""
    cause = "node_lost" if d.lost else "exited"
    cap = d.max_node_losses
    if d.lost and d.node_losses >= cap:
        return Fail(
            cause,
            f"the session was lost with its cluster node {d.node_losses + 1} times, "
            f"more than [cluster] max_node_losses = {cap} allows; check the nodes with "
            f"`ray status` and `lo-orch doctor`, then `lo-orch retry {d.task}` (or raise "
            "max_node_losses in .loop-orchestrator/config.toml first)",
        )
    if not d.lost and d.relaunches >= 1:
        return Fail(
            cause,
            f"the session exited (status {d.dead_status}) again after a relaunch; "
            f"last screen in {d.screen_file}",
        )
    message = (
        f"its cluster node was lost ({d.node_losses + 1} of at most {cap}): "
        "relaunching on another node"
        if d.lost
        else "relaunching once"
    ) + (" (parked by a limit: no prompt until its wait ends)" if d.parked else "")
    counted = {"node_losses": d.node_losses + 1} if d.lost else {"relaunches": d.relaunches + 1}
    return Restart(
        cause,
        counted,
        d.parked,
        message,
        {"node_losses": d.node_losses + 1} if d.lost else {},
    )


# ---------------------------------------------------------------- verification, rework


def rework(*, rework_count: int, limit: int, summary: str) -> SendBack | Block:
    """A failed verdict (or a commit that failed): another round, or a block after
    ``limit`` rounds (``lifecycle.rework_limit``: the configured ones and those granted)."""
    first_line = summary.splitlines()[0] if summary else "see the reviews"
    if rework_count + 1 > limit:
        return Block(f"verification failed after {rework_count} rework round(s): {first_line}")
    return SendBack(rework_count + 1, first_line)


def reopen(*, rework_count: int, limit: int, paths: Sequence[str]) -> SendBack | Block:
    """An integration failure blamed an integrated task's files: reopen it for another
    round, or block it after ``limit`` rounds."""
    where = ", ".join(paths)
    if rework_count + 1 > limit:
        return Block(
            f"the integration tests still fail on {where} after {rework_count} rework round(s)"
        )
    return SendBack(rework_count + 1, f"integration tests fail on {where}")


def commit_failed(
    task: str, *, error: str, message: str, held_by: Sequence[int], index_locked: bool
) -> SendBack | Block:
    """The work could not be committed. A locked git index is not the session's fault (a
    rework round would only fail the same way): a block; anything else another round.
    ``SendBack.round`` is 0 here: ``rework`` numbers the round."""
    if held_by or index_locked:
        who = (
            f"git process(es) {', '.join(map(str, held_by))} hold it"
            if held_by
            else "it could not be cleared"
        )
        return Block(
            f"the worktree's git index is locked ({who}): {message}; when no git runs "
            f"there, `lo-orch retry {task}`"
        )
    return SendBack(0, f"the work could not be committed: {error}")


# ---------------------------------------------------------------- moved refs


class RefKind(StrEnum):
    """Who may move a ref the refs book records."""

    STAGING = "staging"  # lo/<run>/staging: only lo-orch, one verified task at a time
    QUARANTINE = "quarantine"  # refs/lo-orch/quarantine/<run>/...: lo-orch's evidence
    BRANCH = "branch"  # any other branch (the feature branch Gate 2 set): a person may


def puts_back(kind: RefKind) -> bool:
    """Whether lo-orch puts a moved ref of ``kind`` back on its recorded value: only a ref
    nobody but lo-orch may move. A branch a person may commit on (the feature branch) is
    never moved over: the run stops and says what to do, as Gate 2 does."""
    return kind in (RefKind.STAGING, RefKind.QUARANTINE)


def tampering_tasks(holders: Sequence[str], running: Sequence[str]) -> tuple[str, ...]:
    """Whose session moved a ref, as far as lo-orch can tell: the running tasks whose
    work the commit found on it contains (``holders``, by ancestry); every running task
    when none does (a commit of no task's, a deleted ref)."""
    held = [t for t in running if t in holders]
    return tuple(held or running)


class TamperDue(StrEnum):
    """When a tampering task's rework round is sent."""

    NOW = "now"  # no step runs for it: a round now
    AFTER_STEP = "after_step"  # a step runs (its verification takes the round)
    DROP = "drop"  # nothing left to rework (integrated, stuck, not started)


def tamper_due(phase: Phase, *, busy: bool) -> TamperDue:
    """When the round of a task found tampering is sent (its verified, integrated work is
    not taken back: it was checked, whatever its session did since)."""
    if busy or phase is Phase.LAUNCHING:
        return TamperDue.AFTER_STEP
    if (phase, lifecycle.Event.TAMPERED) in lifecycle.TABLE:
        return TamperDue.NOW
    return TamperDue.DROP


def after_tamper(task: str, *, rework_count: int, limit: int, what: str) -> SendBack | Block:
    """A task found moving refs of the run (``what``: which, and where its find is kept):
    a rework round whose review says so, or a block after ``limit`` rounds."""
    if rework_count + 1 > limit:
        return Block(
            f"{what}; after {rework_count} rework round(s) it is blocked: read the "
            f"reviews, then `lo-orch retry {task}` if it should go on"
        )
    return SendBack(rework_count + 1, what)


# ---------------------------------------------------------------- review comments, rounds


@dataclass(frozen=True)
class Routed:
    """Where a comment goes: ``task``, found ``by`` its owns, the line, or ``--task``."""

    task: str
    by: RoutedBy


@dataclass(frozen=True)
class Unrouted:
    """No task could be told for a comment: the person names one with ``--task``."""

    message: str
    hint: str


def route_comment(
    where: str, *, owners: Sequence[str], changed_by: str | None, task: str | None = None
) -> Routed | Unrouted:
    """The task a comment on ``where`` (``PATH[:LINE]``) goes to: ``task`` when a person
    named one; else the one task whose ``owns`` match the path (``owners``); else, when
    several or none own it, the task whose integrated staging commit last changed the line
    (``changed_by``, None for a line of the base or a comment without a line) if it is one
    of the owners (or nobody owns the path). Anything else is refused, saying ``--task``."""
    if task is not None:
        return Routed(task, "task")
    if len(owners) == 1:
        return Routed(owners[0], "owns")
    if changed_by is not None and (not owners or changed_by in owners):
        return Routed(changed_by, "line")
    hint = f'Address it to a task: `lo-orch comment --task TASK {where} "..."`'
    if owners:
        return Unrouted(
            f"{where} is owned by {', '.join(owners)} and no task of them changed that line",
            hint + f" (one of {', '.join(owners)}).",
        )
    return Unrouted(
        f"no task owns {where} and no task's integrated work changed that line",
        hint + " (`lo-orch status` lists the tasks).",
    )


@dataclass(frozen=True)
class ReviewRound:
    """Reopen an integrated task for review round ``review_round`` (its ``round`` number)."""

    round: int
    review_round: int


def review_round(
    task: str, *, phase: Phase, rework_count: int, review_rounds: int, limit: int
) -> ReviewRound | Unrouted:
    """Whether ``task`` may have a review round now: only integrated work is reviewed, and
    at most ``limit`` (``[run] max_review_rounds``) rounds per task; verification rework
    is not counted here (``lifecycle.rework_limit`` counts review rounds apart)."""
    if phase is not Phase.INTEGRATED:
        return Unrouted(
            f"task {task} is {phase.value}: only integrated work gets a review round",
            "Gate 2 shows integrated work only; see `lo-orch status`.",
        )
    if review_rounds >= limit:
        return Unrouted(
            f"task {task} had {review_rounds} review round(s), the most [run] "
            f"max_review_rounds = {limit} allows",
            "Raise max_review_rounds in .loop-orchestrator/config.toml, or change the "
            "lines yourself after `lo-orch merge`.",
        )
    return ReviewRound(rework_count + 1, review_rounds + 1)


def answered(line: int | None, hunks: Sequence[tuple[int, int]]) -> bool:
    """Whether a comment on ``line`` (None: the whole file) was answered by a change whose
    ``git diff -U0`` hunks of that file, old side, are ``hunks`` (start, count): a hunk
    replacing or removing that line, or adding lines right beside it."""
    if line is None:
        return bool(hunks)
    for start, count in hunks:
        if count > 0 and start <= line < start + count:
            return True
        if count == 0 and start in (line - 1, line):  # lines added after ``start``
            return True
    return False


# ---------------------------------------------------------------- errors of a step


class StepError(StrEnum):
    """How a task's step ended in an error a person can act on."""

    REFS_TAMPERED = "refs_tampered"  # a ref of the run moved under it
    SESSION_GONE = "session_gone"  # its session died under the step
    OTHER = "other"  # not logged in, a dialog, a conflict...


def after_error(
    kind: StepError, message: str, dead_status: int | None = None
) -> CheckRefs | Relaunch | Block:
    """What an error of a task's step leads to: a moved ref is checked and repaired at once
    (``after_tamper`` says the rest) and the step is taken again; a session that died
    under the step is relaunched as any dead session; anything else blocks the task with
    the message."""
    if kind is StepError.REFS_TAMPERED:
        return CheckRefs()
    if kind is StepError.SESSION_GONE:
        return Relaunch(dead_status)
    return Block(message)


def session_gone(*, agent_error: bool, exists: bool, alive: bool) -> bool:
    """Whether a step's error (of the backend, or of the agent) was the session of a
    working task dying under it: a backend error on a dead session; an agent error (a
    prompt not confirmed, a ready prompt not reached) only when the session no longer
    exists at all (which of the two a lost session raises depends only on the moment it
    went; an agent that exited with its pane kept is the step's error to report)."""
    return not (exists and (alive or agent_error))


# ---------------------------------------------------------------- the run's end


class OutcomeState(StrEnum):
    """How a supervisor run ended."""

    REVIEW = "review"  # integrated; waiting for Gate 2
    BLOCKED = "blocked"  # tasks need a person
    INTEGRATION_FAILED = "integration_failed"  # the integration command failed
    MERGED = "merged"  # merged already
    STOPPED = "stopped"  # the run stopped (a moved ref)


@dataclass(frozen=True)
class Pause:
    """Tasks need a person: the run waits (``lines``: each and why)."""

    lines: tuple[str, ...]


@dataclass(frozen=True)
class IntegrateRun:
    """Integrate staging without the ``skipped`` tasks."""

    skipped: tuple[str, ...]


def finish(
    stuck: Mapping[str, str], waiting: Mapping[str, Sequence[str]], *, continue_blocked: bool
) -> Pause | IntegrateRun:
    """Nothing more can run: pause for the stuck tasks, or integrate the rest
    (``--continue-blocked``: without the stuck tasks and those waiting on them)."""
    if stuck and not continue_blocked:
        lines = [f"{t}: {why}" for t, why in stuck.items()]
        lines += [f"{t}: waiting on {', '.join(c)}" for t, c in waiting.items()]
        return Pause(tuple(lines))
    return IntegrateRun(tuple(sorted(set(stuck) | set(waiting))))

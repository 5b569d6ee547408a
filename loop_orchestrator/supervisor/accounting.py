"""The supervisor's rate and usage limits, spend and budgets: a session that hit a limit is
parked until it resets and then resumed; every message's usage is read from the session's
transcript into the supervisor's own spend book; a task or the run over its budget stops.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from loop_orchestrator import templating
from loop_orchestrator.cost import limits, usage
from loop_orchestrator.runstate.state import (
    Phase,
)
from loop_orchestrator.supervisor.base import WORKING_PHASES, SupervisorBase, wait_for_text

log = logging.getLogger(__name__)

#: how long a PreToolUse answer waits for the tool's message to reach the transcript
TRANSCRIPT_WAIT = 3.0


class UsageAndLimits(SupervisorBase):
    """Rate and usage limits, spend and budgets."""

    def _limit_hit(self, tid: str, error: str, said: str | None = None) -> None:
        """Claude Code gave up on a turn for a limit: park the task until it resets (the
        reset time from what the session said, ``said``, else from its screen)."""
        from datetime import UTC, datetime, timedelta

        st = self.record.task(tid)
        if st.phase not in WORKING_PHASES:
            return
        now = datetime.now(UTC)
        reset = limits.usage_limit_reset(said or "", now)
        if reset is None and st.pane_id:
            reset = limits.usage_limit_reset(self.backend.capture(st.pane_id, lines=60), now)
        if reset is not None:
            kind, reason = "usage_limit", f"usage limit, resets {reset:%H:%M} UTC"
            until = reset + timedelta(seconds=self.settings.run.usage_limit_grace_seconds)
        else:
            kind, reason = "rate_limit", f"{error} from the model API"
            until = now + timedelta(seconds=self.settings.run.limit_wait_seconds)
        until_iso = until.isoformat(timespec="seconds")
        self._set(
            tid,
            limit_until=until_iso,
            limit_reason=reason,
            limit_kind=kind,
            limit_hits=st.limit_hits + 1,
            waiting_for=f"waiting_limit: {reason}; lo-orch resumes it at {until:%H:%M:%S} UTC",
        )
        self._event("limit_hit", tid, error=error, kind=kind, until=until_iso, message=reason)
        self.notifier.notify(
            "limit_wait",
            f"{tid}:{until_iso}",
            f"{reason}; lo-orch resumes it at {until:%H:%M:%S} UTC",
            tid,
        )
        before = self.governor.current
        if kind == "rate_limit" and self.governor.hit(time.time()) < before:
            self._event(
                "concurrency_lowered",
                concurrency=self.governor.current,
                message=f"repeated rate limits: at most {self.governor.current} "
                "session(s) at once for now",
            )

    def _resume_after_limit(self, tid: str) -> None:
        """The limit's time is up and the session did not resume by itself: a short prompt."""
        st = self.record.task(tid)
        if not st.limit_until or st.phase not in WORKING_PHASES:
            return
        reason = st.limit_reason or "a limit"
        self._set(tid, limit_until=None, limit_kind=None, waiting_for=None)
        self._event("limit_resumed", tid, message=reason)
        phase = (
            st.phase.value
            if st.rework_count == 0 or st.phase != Phase.IMPLEMENTING
            else f"{st.phase.value} (rework {st.rework_count})"
        )
        self._deliver_raw(
            tid,
            templating.render("prompt_resume_limit.md.j2", task=tid, reason=reason, phase=phase),
        )

    def _refresh_usage(self, tid: str, tool_use_id: str | None = None) -> usage.Usage | None:
        """Read the task's session transcript again; record (and ledger) what changed.

        The path is derived from the session id lo-orch chose, the worktree and the Claude
        config dir, never taken from the session. Only for Claude Code sessions. With
        ``tool_use_id`` (a PreToolUse hook: the tool waits for this answer) it first waits,
        briefly, for the message that asks for that tool to reach the transcript: Claude
        Code may start the hook before it has written that message, and the tool (which
        may erase the transcript) must not run before lo-orch has read it.
        """
        st = self.record.task(tid)
        if self.adapter.name != "claude" or not st.session_id or not st.worktree:
            return None
        env = {**os.environ, **self.settings.agent.env}
        try:
            path = usage.session_transcript(Path(st.worktree), st.session_id, env)
        except ValueError:  # a session id that is not a UUID: nothing lo-orch launched
            return None
        if tool_use_id:
            wait_for_text(path, tool_use_id, TRANSCRIPT_WAIT)
        # the spend is lo-orch's own book of every message it has read, never less than
        # before (a session that truncates its transcript does not spend less: spend.py)
        seen = self.spend.observe(tid, st.session_id, path)
        booked = self.spend.messages(tid)
        now = usage.price(booked, self.prices)
        if seen.missing and not booked:
            now = usage.unknown(f"transcript missing: {path}")
        if seen.bad:
            now.notes.append(usage.bad_note(seen.bad, path))
        if seen.tampered:
            self.tampered[tid] = "; ".join(seen.tampered)
            self._event(
                "transcript_tampered",
                tid,
                transcript=str(path),
                message="; ".join(seen.tampered) + "; the spend kept is lo-orch's "
                "own record of what it read",
            )
        if tid in self.tampered:
            now.notes.append(
                f"transcript tampered with ({self.tampered[tid]}): the spend "
                "is lo-orch's own record of what it read"
            )
        data = now.as_json()
        if data == st.usage:
            return now
        rounds = {str(r): u.as_json() for r, u in sorted(now.rounds.items())}
        self._set(tid, usage=data, usage_rounds=rounds)
        self.store.append_ledger("usage", task=tid, round=st.rework_count, **data)
        return now

    def _run_usage(self) -> usage.Usage:
        return usage.total(
            usage.Usage.from_json(st.usage)
            for st in self._statuses().values()
            if st.usage is not None
        )

    def _task_budget(self, tid: str) -> float | None:
        st = self.record.task(tid)
        if st.budget_usd is not None:
            return st.budget_usd
        planned = self.plan.task(tid).max_cost_usd
        return planned if planned is not None else self.settings.run.task_max_cost_usd

    def _turn_ended(self, tid: str) -> str | None:
        """At the end of a turn (a hook): refresh the usage; why the task must stop now, if
        it is over its budget while it works on a prompt (a task that signalled is stopped
        before its next prompt instead, see ``_deliver``)."""
        if self.record.task(tid).phase not in (Phase.PLANNING, Phase.IMPLEMENTING):
            self._refresh_usage(tid)
            return None
        return self._over_budget(tid)

    def _over_budget(self, tid: str) -> str | None:
        """Refresh the task's usage; why it must stop if it spent its budget (else None)."""
        now = self._refresh_usage(tid)
        cap = self._task_budget(tid)
        if now is None or cap is None:
            return None
        if now.cost_usd is None or now.cost_usd < cap:
            # (an unknown cost cannot be held against a budget; its notes say why)
            return None
        return (
            f"over its budget: spent {usage.money(now.cost_usd)} of "
            f"{usage.money(cap)}; give it more with `lo-orch retry {tid} --budget "
            "DOLLARS` (its new total budget)"
        )

    def _run_budget_spent(self, tid: str) -> str | None:
        """Why ``tid`` may not start: the run's budget is spent (a person's own budget for
        the task, `lo-orch retry --budget`, overrides it)."""
        cap = self.settings.run.max_cost_usd
        if cap is None or self.record.task(tid).budget_usd is not None:
            return None
        spent = self._run_usage().cost_usd
        if spent is None or spent < cap:
            return None
        return (
            f"not started: the run's budget is spent ({usage.money(spent)} of "
            f"{usage.money(cap)}); start it with `lo-orch retry {tid} --budget DOLLARS`"
        )

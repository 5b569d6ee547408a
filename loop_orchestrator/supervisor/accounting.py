"""The supervisor's accounting: rate and usage limits, spend and budgets.

A session that hit a limit is parked until it resets (the sessions service resumes it);
every message's usage is read from the session's transcript into the supervisor's own spend
book; a task over its budget is stopped. The rules are ``decide``'s; here the reading and
the recording.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loop_orchestrator.agents import aider, cline, opencode, qwen, vibe
from loop_orchestrator.config import Settings
from loop_orchestrator.cost import limits, spend, usage
from loop_orchestrator.errors import AgentError, PaneGoneError
from loop_orchestrator.plan.model import Plan
from loop_orchestrator.runstate.state import Phase
from loop_orchestrator.sessions.backend import wait_until
from loop_orchestrator.supervisor import decide
from loop_orchestrator.supervisor.decide import WORKING_PHASES
from loop_orchestrator.supervisor.journal import Journal

#: how often a Mistral Vibe session's store is read for failed turns (seconds)
STORE_SECONDS = 5.0

log = logging.getLogger(__name__)

#: how long a PreToolUse answer waits for the tool's message to reach the transcript
TRANSCRIPT_WAIT = 3.0
#: how long a turn's end waits for the turn's last words to reach the transcript
LAST_WORDS_WAIT = 1.0
#: how far before the last read's end a tool's message is looked for first
LOOK_BACK = 65536
#: the most of a turn's last words looked for in the transcript, and the fewest worth it
NEEDLE_CHARS = (48, 8)


def last_words_needle(said: str) -> str | None:
    """What of a turn's last words (the Stop hook's ``last_assistant_message``) stands the
    same in the transcript's JSON: the end of its last line, as far back as it holds only
    characters JSON writes as they are; None when too little of it does."""
    tail = said.rstrip().rsplit("\n", 1)[-1][-NEEDLE_CHARS[0] :]
    plain = len(tail)
    while plain > 0 and (tail[plain - 1].isascii() and tail[plain - 1].isprintable()):
        if tail[plain - 1] in '"\\':
            break
        plain -= 1
    needle = tail[plain:]
    return needle if len(needle) >= NEEDLE_CHARS[1] else None


def wait_for_text(path: Path, needle: str, timeout: float, start: int = 0) -> bool:
    """Wait until the file at ``path`` holds ``needle`` (False after ``timeout``).

    ``start`` is where the file was read up to before: the part from ``LOOK_BACK`` bytes
    before it is looked at each time, the whole file once only if the needle is not there
    (it may be in a long line read before, a parallel tool's)."""
    wanted = needle.encode("utf-8")
    begin = max(0, start - LOOK_BACK)
    whole = begin == 0

    def present() -> bool:
        nonlocal whole
        try:
            with path.open("rb") as fh:
                # shorter than what was read before: rewritten, so looked at as a whole
                at = begin if os.fstat(fh.fileno()).st_size >= start else 0
                fh.seek(at)
                if wanted in fh.read():
                    return True
                if whole or at == 0:
                    return False
                whole = True
                fh.seek(0)
                return wanted in fh.read()
        except OSError:
            return False

    return wait_until(present, timeout, interval=0.02)


class Accounting:
    """Limits, spend and budgets of one run's tasks."""

    def __init__(
        self,
        journal: Journal,
        settings: Settings,
        plan: Plan,
        *,
        agent: str,
        capture: Callable[..., str],
        cap: int,
    ) -> None:
        self.journal = journal
        self.settings = settings
        self.plan = plan
        #: the agent's kind: only Claude Code's transcripts are read
        self.agent = agent
        #: a pane's screen (``SessionBackend.capture``): where a limit's reset time shows
        self.capture = capture
        self.prices = usage.prices_from(settings)
        #: every message's usage read from the sessions' transcripts (private, monotonic)
        self.spend = spend.SpendBook(journal.record.folder / spend.BOOK_FILE)
        #: task -> how its transcript was tampered with (first seen)
        self.tampered: dict[str, str] = {}
        #: task -> (the book's version, its priced messages): the book is priced again
        #: only when a message was booked
        self.priced: dict[str, tuple[int, usage.Usage]] = {}
        #: Mistral Vibe: task -> when its store is read for failed turns next (monotonic),
        #: and the failures already seen in it
        self.store_due: dict[str, float] = {}
        self.failures: dict[str, set[str]] = {}
        #: concurrency lowered after repeated rate limits, raised after a quiet period
        self.governor = limits.Governor(cap, quiet=settings.run.limit_quiet_seconds)

    def limit_hit(self, tid: str, error: str, said: str | None = None) -> None:
        """Claude Code gave up on a turn for a limit: park the task until it resets (the
        reset time from what the session said, ``said``, else from its screen)."""
        from datetime import UTC, datetime

        st = self.journal.record.task(tid)
        if st.phase not in WORKING_PHASES:
            return
        now = datetime.now(UTC)
        reset = limits.usage_limit_reset(said or "", now)
        if reset is None and st.pane_id:
            with contextlib.suppress(PaneGoneError):  # gone: no screen to read it from
                reset = limits.usage_limit_reset(self.capture(st.pane_id, lines=60), now)
        parked = decide.park(
            error=error,
            now=now.timestamp(),
            reset=reset.timestamp() if reset is not None else None,
            grace=self.settings.run.usage_limit_grace_seconds,
            wait=self.settings.run.limit_wait_seconds,
        )
        kind, reason = parked.kind, parked.reason
        until = datetime.fromtimestamp(parked.until, UTC)
        until_iso = until.isoformat(timespec="seconds")
        self.journal.set(
            tid,
            limit_until=until_iso,
            limit_reason=reason,
            limit_kind=kind,
            limit_hits=st.limit_hits + 1,
            waiting_for=f"waiting_limit: {reason}; lo-orch resumes it at {until:%H:%M:%S} UTC",
        )
        self.journal.event(
            "limit_hit", tid, error=error, kind=kind, until=until_iso, message=reason
        )
        self.journal.notifier.notify(
            "limit_wait",
            f"{tid}:{until_iso}",
            f"{reason}; lo-orch resumes it at {until:%H:%M:%S} UTC",
            tid,
        )
        before = self.governor.current
        if kind == "rate_limit" and self.governor.hit(time.time()) < before:
            self.journal.event(
                "concurrency_lowered",
                concurrency=self.governor.current,
                message=f"repeated rate limits: at most {self.governor.current} "
                "session(s) at once for now",
            )

    def refresh_usage(
        self, tid: str, tool_use_id: str | None = None, last_words: str | None = None
    ) -> usage.Usage | None:
        """Read the task's session transcript again; record (and ledger) what changed.

        The path is derived from the session id lo-orch chose, the worktree and the Claude
        config dir, never taken from the session. Only for Claude Code sessions. With
        ``tool_use_id`` (a PreToolUse hook: the tool waits for this answer) it first waits,
        briefly, for the message that asks for that tool to reach the transcript: Claude
        Code may start the hook before it has written that message, and the tool (which
        may erase the transcript) must not run before lo-orch has read it. With
        ``last_words`` (a Stop hook's ``last_assistant_message``) it waits, more briefly,
        for the turn's last message: Claude Code may write it while the hook runs, and a
        task stopped by its budget there is ended before it would be read later.
        """
        st = self.journal.record.task(tid)
        if self.agent == "qwen" and st.session_id:
            return self._refresh_qwen(tid, st.session_id, st.usage)
        if self.agent == "cline" and st.session_id and st.worktree:
            return self._refresh_cline(tid, st.session_id, Path(st.worktree), st.usage)
        if self.agent == "vibe" and st.worktree:
            return self._refresh_vibe(tid, Path(st.worktree), st.usage)
        if self.agent == "aider" and st.worktree:
            return self._refresh_aider(tid, Path(st.worktree), st.usage)
        if self.agent == "opencode" and st.session_id:
            return self._refresh_opencode(tid, st.session_id, st.usage)
        if self.agent != "claude" or not st.session_id or not st.worktree:
            return None
        env = {**os.environ, **self.settings.agent.env}
        try:
            path = usage.session_transcript(Path(st.worktree), st.session_id, env)
        except ValueError:  # a session id that is not a UUID: nothing lo-orch launched
            return None
        self.await_transcript(tid, tool_use_id, last_words)
        # the spend is lo-orch's own book of every message it has read, never less than
        # before (a session that truncates its transcript does not spend less: spend.py)
        seen = self.spend.observe(tid, st.session_id, path)
        now, booked = self._priced(tid)
        if seen.missing and not booked:
            now = usage.unknown(f"transcript missing: {path}")
        if seen.bad:
            now.notes.append(usage.bad_note(seen.bad, path))
        if seen.tampered:
            self.tampered[tid] = "; ".join(seen.tampered)
            self.journal.event(
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
        self.journal.set(tid, usage=data, usage_rounds=rounds)
        self.journal.store.append_ledger("usage", task=tid, round=st.rework_count, **data)
        return now

    def await_transcript(
        self, tid: str, tool_use_id: str | None = None, last_words: str | None = None
    ) -> None:
        """Wait, briefly, for the message that asks for tool ``tool_use_id`` (or, more
        briefly, for a turn's ``last_words``) to reach the task's Claude Code transcript
        (``refresh_usage`` says why). Also called before a hook's step takes the record, so
        that one session's wait holds up no other session's report."""
        if not tool_use_id and not last_words:
            return
        st = self.journal.record.task(tid)
        if self.agent != "claude" or not st.session_id or not st.worktree:
            return
        env = {**os.environ, **self.settings.agent.env}
        try:
            path = usage.session_transcript(Path(st.worktree), st.session_id, env)
        except ValueError:
            return
        needle = last_words_needle(last_words) if last_words else None
        if tool_use_id:
            start = self.spend.offset(tid, st.session_id)
            wait_for_text(path, tool_use_id, TRANSCRIPT_WAIT, start)
        elif needle is not None:
            start = self.spend.offset(tid, st.session_id)
            wait_for_text(path, needle, LAST_WORDS_WAIT, start)

    def _refresh_qwen(
        self, tid: str, session_id: str, before: dict[str, Any] | None
    ) -> usage.Usage | None:
        """Qwen Code's tokens from its chat file (found by the session id lo-orch chose)."""
        env = {**os.environ, **self.settings.agent.env}
        chat = qwen.find_chat(qwen.runtime_dir(env), session_id)
        if chat is None:
            return None
        counted = qwen.chat_usage(chat)
        tokens = {
            "input_tokens": counted["input_tokens"] - counted["cached_tokens"],
            "output_tokens": counted["output_tokens"],
            "cache_read_input_tokens": counted["cached_tokens"],
        }
        return self._record_tokens(tid, tokens, "Qwen Code's chat file", before)

    def _refresh_opencode(
        self, tid: str, session_id: str, before: dict[str, Any] | None
    ) -> usage.Usage | None:
        """opencode's tokens from the task's own database (named by lo-orch's session id)."""
        env = {**os.environ, **self.settings.agent.env}
        try:
            db = opencode.task_db(env, session_id)
        except AgentError:  # a session id lo-orch did not choose: nothing it launched
            return None
        counted = opencode.db_usage(db)
        if not counted["messages"]:
            return None
        tokens = {
            "input_tokens": counted["input_tokens"],
            "output_tokens": counted["output_tokens"],
            "cache_read_input_tokens": counted["cache_read"],
            "cache_creation_input_tokens": counted["cache_write"],
        }
        return self._record_tokens(tid, tokens, "opencode's database", before)

    def _record_tokens(
        self,
        tid: str,
        tokens: dict[str, int],
        source: str,
        before: dict[str, Any] | None,
        notes: tuple[str, ...] = (),
    ) -> usage.Usage:
        """Record tokens an agent's own files give; no prices for them: the cost stays
        unknown, so no budget can stop it."""
        now = usage.Usage(
            tokens={**dict.fromkeys(usage.TOKEN_KEYS, 0), **tokens},
            cost_usd=None,
            models=[self.settings.agent.model] if self.settings.agent.model else [],
            notes=[f"tokens from {source}; lo-orch has no prices for its models", *notes],
        )
        data = now.as_json()
        if data != before:
            self.journal.set(tid, usage=data)
            self.journal.store.append_ledger("usage", task=tid, **data)
        return now

    def _refresh_cline(
        self, tid: str, session_id: str, worktree: Path, before: dict[str, Any] | None
    ) -> usage.Usage | None:
        """Cline's tokens from its record of the task's session (the id its hooks
        reported)."""
        env = {**os.environ, **self.settings.agent.env}
        record = cline.session_record(cline.data_dir(env), session_id, worktree)
        if record is None:
            return None
        counted = cline.session_usage(record)
        tokens = {
            "input_tokens": counted["input_tokens"],
            "output_tokens": counted["output_tokens"],
            "cache_read_input_tokens": counted["cache_read"],
            "cache_creation_input_tokens": counted["cache_write"],
        }
        return self._record_tokens(tid, tokens, "Cline's session file", before)

    def _vibe_sessions(self, worktree: Path) -> list[Path]:
        env = {**os.environ, **self.settings.agent.env}
        return vibe.sessions_for(vibe.store_dir(env), worktree)

    def _refresh_vibe(
        self, tid: str, worktree: Path, before: dict[str, Any] | None
    ) -> usage.Usage | None:
        """Mistral Vibe's tokens from its session store (every session it recorded for the
        worktree: a relaunch that could not resume starts another)."""
        counts = [c for c in map(vibe.session_usage, self._vibe_sessions(worktree)) if c]
        if not counts:
            return None
        cached = sum(c["cached_tokens"] for c in counts)
        tokens = {
            "input_tokens": sum(c["input_tokens"] for c in counts) - cached,
            "output_tokens": sum(c["output_tokens"] for c in counts),
            "cache_read_input_tokens": cached,
        }
        return self._record_tokens(tid, tokens, "Mistral Vibe's session store", before)

    def _refresh_aider(
        self, tid: str, worktree: Path, before: dict[str, Any] | None
    ) -> usage.Usage | None:
        """aider's tokens from the chat history lo-orch names in the worktree (rounded by
        aider above 1000); its own cost figure is noted, not booked."""
        chat = aider.history_paths(worktree)[0]
        try:
            text = chat.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        counted = aider.history_usage(text)
        tokens = {
            "input_tokens": max(0, counted["input_tokens"] - counted["cached_tokens"]),
            "output_tokens": counted["output_tokens"],
            "cache_read_input_tokens": counted["cached_tokens"],
            "cache_creation_input_tokens": counted["cache_write_tokens"],
        }
        notes: tuple[str, ...] = ()
        if counted["cost_usd"] is not None:
            notes = (f"aider's own cost figure: ${counted['cost_usd']:.4f}",)
        return self._record_tokens(tid, tokens, "aider's chat history (rounded)", before, notes)

    def notice_failed_turns(self, tid: str) -> bool:
        """Mistral Vibe gave up on a turn (its retries spent): an event for each failure,
        and a rate limit parks the task as Claude Code's StopFailure does (True: parked).
        Its store is read at most every ``STORE_SECONDS`` per task; other kinds: False."""
        if self.agent != "vibe":
            return False
        now = time.monotonic()
        if now < self.store_due.get(tid, 0.0):
            return False
        self.store_due[tid] = now + STORE_SECONDS
        st = self.journal.record.task(tid)
        if not st.worktree or st.phase not in WORKING_PHASES or st.limit_until:
            return False
        errors = [e for s in self._vibe_sessions(Path(st.worktree)) for e in vibe.session_errors(s)]
        new, limited = vibe.new_failures(errors, self.failures.get(tid))
        self.failures.setdefault(tid, set()).update(e["id"] for e in errors)
        for error in new:
            self.journal.event(
                "agent_api_error", tid, status=error["status"], message=error["error"]
            )
        if limited is None:
            return False
        self.limit_hit(tid, "rate_limit", limited)
        return True

    def _priced(self, tid: str) -> tuple[usage.Usage, bool]:
        """The task's booked spend priced (a copy to add notes to), and whether anything
        is booked."""
        version = self.spend.version(tid)
        cached = self.priced.get(tid)
        if cached is None or cached[0] != version:
            cached = (version, usage.price(self.spend.totals(tid), self.prices))
            self.priced[tid] = cached
        return copy.deepcopy(cached[1]), version > 0

    def run_usage(self) -> usage.Usage:
        return usage.total(
            usage.Usage.from_json(st.usage)
            for st in self.journal.statuses().values()
            if st.usage is not None
        )

    def task_budget(self, tid: str) -> float | None:
        return decide.task_budget(
            self.journal.record.task(tid).budget_usd,
            self.plan.task(tid).max_cost_usd,
            self.settings.run.task_max_cost_usd,
        )

    def turn_ended(self, tid: str, last_words: str | None = None) -> str | None:
        """At the end of a turn (a hook; ``last_words``: what the session says it said
        last, only waited for): refresh the usage; why the task must stop now, if it is over
        its budget while it works on a prompt (a task that signalled is stopped before its
        next prompt instead, see ``Sessions.deliver``)."""
        if self.journal.record.task(tid).phase not in (Phase.PLANNING, Phase.IMPLEMENTING):
            self.refresh_usage(tid, last_words=last_words)
            return None
        return self.over_budget(tid, last_words)

    def over_budget(self, tid: str, last_words: str | None = None) -> str | None:
        """Refresh the task's usage; why it must stop if it spent its budget (else None)."""
        now = self.refresh_usage(tid, last_words=last_words)
        if now is None:
            return None
        return decide.over_budget(tid, cost=now.cost_usd, cap=self.task_budget(tid))

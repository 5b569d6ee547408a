"""What the supervisor makes of a session's report (a signal or a hook event).

The inbox (``inbox.Server``) says which task's session a message really comes from; this
module judges it against the supervisor's record through the lifecycle, records what it
changes (ledger line first, then the record, then the published status) and returns the
answer the sender gets: ``{"ok", "message", "previous", "phase", "repeated"}`` for a
signal, ``{"exit_code", "stderr"}`` for a hook (exit 2 = the Stop gate holds the session).

A message claiming another task than the session it comes from, coming from no session, or
left in another task's inbox folder, is refused and logged (``event_rejected``). A message
left while no supervisor listened is *unattested*: it is logged, and only ever used as a
hint (an unattested signal makes the supervisor ask the session for it again; an
unattested UserPromptSubmit keeps a prompt that did arrive from being sent twice; an
unattested Stop says the turn ended).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from loop_orchestrator.permissions.desk import Desk
from loop_orchestrator.runstate.journal import Record
from loop_orchestrator.runstate.state import Phase, Store, now_iso
from loop_orchestrator.sessions.listener import Request
from loop_orchestrator.supervisor import lifecycle
from loop_orchestrator.verify import disputable as rules

Reply = dict[str, Any]
#: the fields of a hook payload that go to the ledger
LEDGER_FIELDS = (
    "session_id",
    "error",
    "notification_type",
    "message",
    "reason",
    "source",
    "prompt_chars",
    "prompt_sha256",
    "tool_name",
    "tool_summary",
)
#: hook events that end a turn: the task's usage is read again there, its budget checked
TURN_ENDS = ("Stop", "StopFailure", "SessionEnd")
#: StopFailure ``error`` values that mean "the API refused for a while" (Claude Code 2.1.332)
LIMIT_ERRORS = ("rate_limit", "server_error", "overloaded")


class Reports:
    """Judges sessions' messages for one run."""

    def __init__(
        self,
        record: Record,
        store: Store,
        task_ids: list[str],
        event: Callable[..., None],
        ask_again: Callable[[str, str], None],
        turn_ended: Callable[[str, str | None], str | None] | None = None,
        block: Callable[[str, str], None] | None = None,
        limit_hit: Callable[[str, str, str | None], None] | None = None,
        desk: Desk | None = None,
        observe: Callable[[str, str | None], object] | None = None,
        settle: Callable[[str, str | None, str | None], None] | None = None,
        *,
        on_screen: bool = False,
    ) -> None:
        self.record = record
        self.store = store
        self.task_ids = set(task_ids)
        self.event = event  # the supervisor's ledger-and-progress call
        self.ask_again = ask_again
        #: at a turn boundary (Stop, StopFailure, SessionEnd): refresh the task's usage;
        #: a reason when the task is over its budget (then ``block`` stops it)
        self.turn_ended = turn_ended
        self.block = block
        #: a StopFailure for a rate or usage limit: the supervisor parks the task (given
        #: the hook's ``last_assistant_message``, which names a usage limit's reset time)
        self.limit_hit = limit_hit
        #: permission requests: rules answer, the rest waits for a person
        self.desk = desk
        #: at every other hook event (PreToolUse before each tool): read the task's
        #: transcript into the supervisor's spend book before the tool can touch it
        self.observe = observe
        #: waits for what a hook says is in the transcript (a tool's request, a turn's last
        #: words; ``Accounting.await_transcript``) before the hook's step takes the record:
        #: then ``observe`` and ``turn_ended`` are not asked to wait
        self.settle = settle
        #: the agent has no hooks: its prompts are confirmed on screen (``decide_signal``)
        self.on_screen = on_screen

    def handle(self, request: Request) -> Reply | None:
        """Judge one message; the answer its sender gets (None: nobody waits for it).

        The judgement and the change it makes are one step under the record's lock, so a
        supervisor job changing the same task cannot slip in between. A signal's change is
        durable (fsynced, after the lock is let go) before the answer goes out; a hook
        event's is made durable by the next append that is (docs/design.md, "What a power
        cut may lose").
        """
        awaited = self._awaited(request) if self.settle is not None else None
        if awaited is not None and self.settle is not None:
            self.settle(*awaited)  # (outside the record's lock: it may take a second)
        with self.record.step(durable=request.message.get("type") != "hook"):
            return self._handle(request)

    def _awaited(self, request: Request) -> tuple[str, str | None, str | None] | None:
        """What an attested hook event of its own task says is in the transcript: (task,
        the tool asked for, the turn's last words), or None."""
        msg = request.message
        task, raw = msg.get("task"), msg.get("payload")
        if msg.get("type") != "hook" or not request.attested or request.task != task:
            return None
        if task not in self.task_ids or not isinstance(raw, dict) or not isinstance(task, str):
            return None
        tool, said = raw.get("tool_use_id"), raw.get("last_assistant_message")
        if msg.get("event") == "PreToolUse" and isinstance(tool, str):
            return task, tool, None
        if msg.get("event") == "Stop" and isinstance(said, str):
            return task, None, said
        return None

    def _handle(self, request: Request) -> Reply | None:
        msg = request.message
        kind, claimed = msg.get("type"), msg.get("task")
        if claimed not in self.task_ids or kind not in ("signal", "hook", "permission"):
            return self._reject(request, f"no task {claimed!r} in this run")
        if request.attested and request.task != claimed:
            why = (
                f"a message for task {claimed} came from the session of task {request.task}"
                if request.task
                else f"a message for task {claimed} came from outside any session "
                f"lo-orch runs (pid {request.pid})"
            )
            return self._reject(request, why)
        if not request.attested and request.task is not None and request.task != claimed:
            # left where only task request.task's messages are kept (its node's inbox
            # folder): not even a hint for another task
            why = f"a message for task {claimed} was left in task {request.task}'s inbox"
            return self._reject(request, why)
        if kind == "signal":
            return self._signal(str(claimed), request)
        if kind == "permission":
            # a waiting PermissionRequest hook asks for its answer: only from the session
            # whose request it is (checked above, and the request names its task)
            rid = request.message.get("id")
            if not request.attested or self.desk is None or not isinstance(rid, str):
                return {"state": "unknown"}
            return self.desk.poll(str(claimed), rid)
        return self._hook(str(claimed), request)

    def _reject(self, request: Request, why: str) -> Reply:
        claimed = request.message.get("task")
        self.event(
            "event_rejected",
            claimed if isinstance(claimed, str) else None,
            kind=request.message.get("type"),
            pid=request.pid,
            message=why,
        )
        return {"ok": False, "exit_code": 0, "message": f"refused: {why}"}

    def _signal(self, tid: str, request: Request) -> Reply | None:
        signal, note = str(request.message.get("phase")), request.message.get("note")
        note = note if isinstance(note, str) else None
        st = self.record.task(tid)
        if not request.attested:
            # anyone could have left it: ask the session to say it again, now that
            # someone listens
            self.event("signal_unattested", tid, phase=signal)
            if st.phase.value == lifecycle.SIGNAL_FROM.get(signal):
                self.ask_again(tid, signal)
            return None
        claims, refused = _disputes(request.message.get("disputes"), signal, note)
        if refused:
            self.event(
                "signal_rejected", tid, phase=signal, current=st.phase.value, message=refused
            )
            return {
                "ok": False,
                "message": refused,
                "previous": st.phase.value,
                "phase": signal,
                "repeated": False,
            }
        decision = lifecycle.decide_signal(st, signal, note, on_screen=self.on_screen)
        reply = {
            "ok": decision.accepted,
            "message": decision.message,
            "previous": st.phase.value,
            "phase": signal,
            "repeated": decision.repeated,
        }
        if not decision.accepted:
            self.event(
                "signal_rejected",
                tid,
                phase=signal,
                current=st.phase.value,
                message=decision.message,
            )
        elif decision.changes:
            changes = dict(decision.changes)
            extra: dict[str, Any] = {}
            if signal == "impl_done":
                # every impl_done replaces the last round's disputes (none: an empty list)
                changes["disputes"] = claims
                if claims:
                    extra["disputes"] = [c["check"] for c in claims]
            # logged before the status changes: the ledger shows cause before effect
            self.store.append_ledger_unsynced(
                "signal",
                task=tid,
                phase=signal,
                previous=st.phase.value,
                note=note,
                **extra,
            )
            if st.waiting_for:
                changes["waiting_for"] = None
            self.record.update_task(tid, **changes)
        return reply

    def _hook(self, tid: str, request: Request) -> Reply:
        event = str(request.message.get("event"))
        raw = request.message.get("payload")
        payload: dict[str, Any] = raw if isinstance(raw, dict) else {}
        st = self.record.task(tid)
        fields = {k: payload[k] for k in LEDGER_FIELDS if k in payload}
        if event == "UserPromptSubmit" and payload.get("prompt_chars") == 0:
            # no prompt arrived: Qwen Code 0.15.10 fires it again, with an empty prompt,
            # when it sends a tool's result on; taken as a submit, it would confirm a
            # prompt pasted meanwhile that the session never read
            self.store.append_ledger_unsynced(
                "hook", task=tid, hook_event=event, empty_prompt=True, **fields
            )
            return {"exit_code": 0}
        if not request.attested:
            self.store.append_ledger_unsynced(
                "hook", task=tid, hook_event=event, attested=False, **fields
            )
            left = request.message.get("left_at")
            at = _iso(left) if isinstance(left, (int, float)) else now_iso()
            if event == "UserPromptSubmit":
                changes: dict[str, Any] = {"prompt_submitted_at": at, "turn_ended_at": None}
                if st.delivering and at >= (st.delivery_started_at or "~"):
                    # submitted after the interrupted delivery began: that prompt arrived
                    changes |= {"delivered": st.delivering, "delivering": None}
                    self.event(
                        "prompt_delivered",
                        tid,
                        phase=st.phase.value,
                        rework=st.rework_count,
                        message="confirmed by the session's hook, left while no "
                        "supervisor listened; not resent",
                    )
                self.record.update_task(tid, **changes)
            elif event == "Stop":
                self.record.update_task(tid, turn_ended_at=at)
            return {"exit_code": 0}
        changes = lifecycle.hook_changes(st, event, payload, now_iso())
        if event == "UserPromptSubmit" and st.delivering and st.delivered != st.delivering:
            # the session's own word that the prompt being delivered arrived: record it
            # now, not when the deliverer next looks, so that the signal a fast session
            # sends right after is judged against the prompt it really has
            changes |= {"delivered": st.delivering, "delivering": None}
        reply: Reply = {"exit_code": 0}
        waited = self.settle is not None  # (``handle`` waited for the transcript)
        said = payload.get("last_assistant_message") if event == "Stop" and not waited else None
        over_budget = (
            self.turn_ended(tid, said if isinstance(said, str) else None)
            if self.turn_ended is not None and event in TURN_ENDS
            else None
        )
        if event not in TURN_ENDS and self.observe is not None:
            # before a tool runs: the message that asks for it must be read first
            ask = payload.get("tool_use_id") if event == "PreToolUse" and not waited else None
            self.observe(tid, ask if isinstance(ask, str) else None)
        if event == "Stop":
            active = payload.get("stop_hook_active") is True
            cmd = request.message.get("bin")
            # a task over its budget may stop: it is blocked below, not sent back to work
            reason = (
                None
                if over_budget
                else lifecycle.stop_decision(st, active, cmd if isinstance(cmd, str) else "lo-orch")
            )
            fields["stop_hook_active"] = active
            fields["decision"] = "block" if reason else "allow"
            if reason:
                changes["stop_blocks"] = st.stop_blocks + 1
                changes["turn_ended_at"] = None
                reply = {"exit_code": 2, "stderr": reason + "\n"}
        if self.desk is not None and event == "PermissionRequest":
            asked = self.desk.ask(tid, payload)
            if asked.get("decided"):
                changes.pop("waiting_for", None)  # a rule answered: nobody is waited for
            reply |= asked
        elif self.desk is not None and event in lifecycle.MOVED_ON_EVENTS:
            self.desk.close_task(tid, f"the session moved on ({event})")
        self.store.append_ledger_unsynced("hook", task=tid, hook_event=event, **fields)
        only_activity = lifecycle.only_activity(event, changes)
        self.record.update_task(tid, publish=not only_activity, **changes)
        if changes.get("waiting_for"):
            self.event("waiting_for_person", tid, message=changes["waiting_for"])
        if over_budget and self.block is not None:
            if st.phase is not Phase.BLOCKED:  # (else a prompt's job found it over first)
                self.block(tid, over_budget)
                self.record.sync()  # a decision, not only a report: durable before the answer
        elif (
            event == "StopFailure"
            and payload.get("error") in LIMIT_ERRORS
            and self.limit_hit is not None
        ):
            said = payload.get("last_assistant_message")
            self.limit_hit(tid, str(payload["error"]), said if isinstance(said, str) else None)
            self.record.sync()
        elif event == "UserPromptSubmit" and st.limit_until:
            # a prompt reached the session (Claude Code's own resume after a usage limit,
            # or lo-orch's): it works again
            self.record.update_task(tid, limit_until=None, limit_kind=None)
            self.event("limit_over", tid, message="the session works again")
        return reply


def _disputes(
    raw: object, signal: str, note: str | None
) -> tuple[list[dict[str, str]], str | None]:
    """The disputes a signal carries, or why the signal is refused. A message
    without the key (every older client) disputes nothing."""
    if raw is None:
        return [], None
    if not isinstance(raw, list) or not all(isinstance(c, str) for c in raw):
        return [], "disputes must be a list of finding ids"
    if not raw:
        return [], None
    if signal != "impl_done":
        return [], "a dispute goes with impl_done only"
    if not note or not note.strip():
        return [], "a dispute needs a reason (--note)"
    for code in raw:
        why = rules.problem(code)
        if why:
            return [], f"cannot dispute {code}: {why}"
    text = note.strip()[: rules.MAX_NOTE]
    return [{"check": c, "note": text} for c in dict.fromkeys(raw)], None


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="microseconds")

"""The supervisor's permission desk: a session's ``PermissionRequest`` hook asks here, a rule
answers at once or the request stays open for a person (``lo-orch permit``), and open
requests are kept honest: one whose hook stopped polling, or whose dialog is no longer on
the screen, is closed (``permissions.py`` has the requests, rules and the store).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from loop_orchestrator.errors import StateError
from loop_orchestrator.permissions.requests import (
    PermissionRequest,
    Permissions,
    Rule,
    decide,
    dialog_on_screen,
    hook_output,
)

#: seconds without a poll from the hook that asked, after which a request is closed
POLL_STALE = 15.0
#: seconds a new request has for its dialog to be drawn before the screen check counts
DIALOG_GRACE = 5.0
#: consecutive screen checks without a dialog that close a request
DIALOG_MISSES = 2


class Desk:
    """The supervisor's permission desk: answers by rule, keeps open requests honest.

    Called on the listener's threads (``ask``/``poll``, under the record's lock) and by
    the loop (``sweep``, ``is_waiting``).
    """

    def __init__(
        self,
        perms: Permissions,
        allow: Sequence[Rule],
        deny: Sequence[Rule],
        bin_cmd: str | None,
        *,
        log: Any,
        opened: Any = None,
        closed: Any = None,
        clock: Any = None,
        dialog_grace: float = DIALOG_GRACE,
    ) -> None:

        self.perms = perms
        self.dialog_grace = dialog_grace
        self.allow, self.deny = list(allow), list(deny)
        self.bin_cmd = bin_cmd
        self.log = log  # (event, task, **fields): the supervisor's ledger call
        self.opened = opened  # (request): a person is needed (notification, status)
        self.closed = closed  # (task): nothing is open for it any more
        self.clock = clock or time.monotonic
        self.started = self.clock()
        self.polled: dict[str, float] = {}
        self.asked: dict[str, float] = {}
        self.misses: dict[str, int] = {}

    def ask(self, task: str, payload: dict[str, Any]) -> dict[str, Any]:
        """A session's PermissionRequest hook: a rule's answer, or an open request's id."""
        tool = str(payload.get("tool_name") or "")
        req = self.perms.new_request(task, tool, payload)
        run_allow, run_deny = self.perms.run_rules()
        found = decide(req, [*self.allow, *run_allow], [*self.deny, *run_deny], self.bin_cmd)
        if found is not None:
            decision, rule = found
            self.log(
                "permission_answered",
                task,
                request=req.id,
                decision=decision,
                tool=tool,
                message=req.summary,
                by="rule",
                rule=rule,
            )
            return {
                "exit_code": 0,
                "decided": decision,
                "stdout": hook_output(decision, f"lo-orch: denied by the rule {rule}"),
            }
        with self.perms.locked():
            self.perms.write(req)
        self.polled[req.id] = self.asked[req.id] = self.clock()
        self.log("permission_requested", task, request=req.id, tool=tool, message=req.summary)
        if self.opened is not None:
            self.opened(req)
        return {"exit_code": 0, "permission": req.id}

    def poll(self, task: str, rid: str) -> dict[str, Any]:
        """The waiting hook asks again: the answer (for Claude Code) once there is one."""
        try:
            req = self.perms.get(rid)
        except StateError:
            req = None
        if req is None or req.task != task:
            return {"state": "unknown"}
        self.polled[rid] = self.clock()
        if req.state == "answered" and req.decision is not None:
            if self.closed is not None:
                self.closed(task)
            return {
                "state": "answered",
                "stdout": hook_output(
                    req.decision, "lo-orch: a person denied this (lo-orch permit)"
                ),
            }
        return {"state": req.state}

    def close_task(self, task: str, because: str) -> None:
        """The session moved on (a new prompt, the turn ended): its open requests are gone."""
        for req in self.perms.open_requests(task):
            self._close(req, because)

    def _close(self, req: PermissionRequest, because: str) -> None:
        if self.perms.settle(req.id, state="closed", closed_because=because) is not None:
            self.log("permission_closed", req.task, request=req.id, message=because)
            self.polled.pop(req.id, None)
            self.misses.pop(req.id, None)
            if self.closed is not None and not self.perms.open_requests(req.task):
                self.closed(req.task)

    def sweep(self, screen_of: Any) -> None:
        """Close open requests that are not real any more: the hook that asked stopped
        polling, or the session's screen shows no permission dialog. ``screen_of(task)``:
        the pane's text, or None when there is no pane."""
        now = self.clock()
        for req in self.perms.open_requests():
            last = self.polled.get(req.id, self.started)
            if now - last > POLL_STALE:
                self._close(
                    req,
                    "the hook that asked stopped waiting (answered in the pane, "
                    "or the session moved on)",
                )
                continue
            if now - self.asked.get(req.id, self.started) < self.dialog_grace:
                continue
            screen = screen_of(req.task)
            if screen is not None and dialog_on_screen(screen):
                self.misses.pop(req.id, None)
                continue
            self.misses[req.id] = self.misses.get(req.id, 0) + 1
            if self.misses[req.id] >= DIALOG_MISSES:
                self._close(req, "no permission dialog on the session's screen")

    def is_waiting(self, task: str) -> bool:
        """Does ``task`` wait for a person's answer to a real, open request?"""
        return bool(self.perms.open_requests(task))

    def waiting_tasks(self) -> set[str]:
        """Every task that waits for a person's answer (``is_waiting`` of all, one read)."""
        return {r.task for r in self.perms.open_requests()}

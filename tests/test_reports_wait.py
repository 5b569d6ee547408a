"""A hook's wait for its transcript happens before its step takes the record."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from helpers.served import start_run

from loop_orchestrator.runstate.state import Store
from loop_orchestrator.sessions.listener import Request
from loop_orchestrator.supervisor.reports import Reports


def hook(task: str, event: str, **payload: Any) -> Request:
    message = {"type": "hook", "task": task, "event": event, "payload": payload}
    return Request(message=message, task=task, pid=1, attested=True)


def test_one_sessions_transcript_wait_holds_up_no_other_sessions_report(tmp_path: Path) -> None:
    rec = start_run(tmp_path)
    release = threading.Event()
    settled: list[tuple[str, str | None, str | None]] = []
    observed: list[tuple[str, str | None]] = []

    def settle(task: str, tool: str | None, said: str | None) -> None:
        settled.append((task, tool, said))
        if task == "alpha":
            assert release.wait(10)  # alpha's transcript is slow to show the tool's request

    reports = Reports(
        rec,
        Store.for_repo(tmp_path),
        ["alpha", "beta"],
        lambda *_a, **_k: None,
        lambda _t, _s: None,
        observe=lambda task, tool: observed.append((task, tool)),
        settle=settle,
    )
    answers: list[object] = []
    slow = threading.Thread(
        target=lambda: answers.append(reports.handle(hook("alpha", "PreToolUse", tool_use_id="t1")))
    )
    slow.start()
    try:
        # while alpha waits, beta's report is judged and recorded
        assert reports.handle(hook("beta", "Notification", message="hi")) == {"exit_code": 0}
        assert rec.task("beta").last_event == "Notification"
        assert answers == [] and rec.task("alpha").last_event is None
    finally:
        release.set()
        slow.join(10)
    assert answers == [{"exit_code": 0}] and rec.task("alpha").last_event == "PreToolUse"
    assert settled == [("alpha", "t1", None)]  # a Notification says nothing of a transcript
    # the wait was done: reading the transcript in the step does not wait again
    assert observed == [("beta", None), ("alpha", None)]
    # a hook claiming another session's task is not waited for
    forged = Request(
        message=hook("alpha", "PreToolUse", tool_use_id="t2").message,
        task="beta",
        pid=1,
        attested=True,
    )
    refused = reports.handle(forged)
    assert refused is not None and refused["ok"] is False
    assert settled == [("alpha", "t1", None)]


def test_a_sessions_activity_reaches_the_view_with_its_next_round_other_changes_at_once(
    tmp_path: Path,
) -> None:
    """A tool call (PreToolUse) changes the record at once and the status file when the
    loop's view clock publishes what is pending; what a person or a tool reading the file
    must see (the session's id, a prompt submitted, a permission dialog) is written at once."""
    rec = start_run(tmp_path)
    store = Store.for_repo(tmp_path)
    reports = Reports(rec, store, ["alpha"], lambda *_a, **_k: None, lambda _t, _s: None)

    def on_disk() -> dict[str, Any]:
        return store.read_status("alpha").model_dump()

    reports.handle(hook("alpha", "SessionStart", session_id="s-1"))
    assert on_disk()["session_id"] == "s-1"  # more than activity: written at once
    written = store.dirs.status_path("alpha").stat().st_mtime_ns
    for _ in range(3):
        reports.handle(hook("alpha", "PreToolUse", session_id="s-1", tool_name="Bash"))
    assert rec.task("alpha").last_event == "PreToolUse"
    assert on_disk()["last_event"] == "SessionStart"
    assert store.dirs.status_path("alpha").stat().st_mtime_ns == written  # not rewritten
    rec.publish_pending()
    assert on_disk() == rec.task("alpha").model_dump()
    # a change that says more is published at once, with the activity before it
    reports.handle(hook("alpha", "PreToolUse", session_id="s-1"))
    reports.handle(hook("alpha", "UserPromptSubmit", session_id="s-1", prompt_chars=5))
    assert on_disk() == rec.task("alpha").model_dump()
    assert on_disk()["last_event"] == "UserPromptSubmit"
    reports.handle(hook("alpha", "PreToolUse", session_id="s-1"))
    reports.handle(hook("alpha", "PermissionRequest", session_id="s-1", tool_name="Bash"))
    assert on_disk()["waiting_for"] and on_disk()["last_event"] == "PermissionRequest"
    # the ledger has every event at once, the pending ones too
    events = [e.get("hook_event") for e in store.read_ledger() if e.get("event") == "hook"]
    assert events.count("PreToolUse") == 5

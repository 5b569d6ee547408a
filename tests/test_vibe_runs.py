"""The real Mistral Vibe CLI (PyPI ``mistral-vibe``) as a task's agent, its model played by
the scripted Chat Completions endpoint (``simulator/chat_endpoint.py``).

Vibe runs in tmux panes on a private socket with a throwaway ``VIBE_HOME`` whose
config.toml names the endpoint on 127.0.0.1 as its provider, offline; its ``bash`` tool
does the work and runs ``lo-orch signal``; each prompt is confirmed from its session store.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.agents import (
    agent_cli,
    endpoint_for,
    run_killing_mid_task,
    sessions_by_task,
)
from helpers.git import git
from helpers.runs import approve, edit_script, ledger, only

from loop_orchestrator.agents import vibe
from loop_orchestrator.agents.contract import AgentContext
from loop_orchestrator.agents.registry import make_adapter
from loop_orchestrator.agents.vibe import VibeAdapter
from loop_orchestrator.config import AgentConfig, AuditorConfig, RunConfig, Settings
from loop_orchestrator.errors import AgentError, AgentStartError, ConfigError, LoOrchError
from loop_orchestrator.readiness import check_login
from loop_orchestrator.runstate.state import Phase, RunDir, Store
from loop_orchestrator.sessions.backend import LaunchSpec
from loop_orchestrator.sessions.tmux import TmuxBackend
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.simulator.chat_endpoint import ChatEndpoint
from loop_orchestrator.simulator.script import load_script
from loop_orchestrator.supervisor.lifecycle import Event
from loop_orchestrator.supervisor.main import Supervisor
from loop_orchestrator.workspace import integration


def settings_for(endpoint: ChatEndpoint, files: demo.DemoFiles) -> Settings:
    env = endpoint.vibe_env(files.root / "vibe-home")
    return Settings(
        agent=AgentConfig(kind="vibe", command=str(agent_cli("vibe")), env=env, ready_timeout=90),
        auditor=AuditorConfig(llm="off"),
        run=RunConfig(concurrency=2, stall_minutes=1, stagger_seconds=0.1),
    )


@pytest.mark.slow
def test_a_task_runs_with_real_vibe_resumed_after_a_kill_and_merges(
    demo_files: demo.DemoFiles, tmux_socket: str
) -> None:
    """A task in a real Mistral Vibe session whose prompts its session store confirmed;
    Vibe is killed mid-task and relaunched with ``--resume`` into its own conversation;
    its tokens are read from its store; the work is reviewed and merged."""
    only(demo_files, "tokenize")
    edit_script(demo_files, lambda d: d["tokenize"]["implement"][0].insert(1, {"sleep": 1}))
    with endpoint_for(ChatEndpoint, demo_files) as endpoint:
        settings = settings_for(endpoint, demo_files)
        approve(demo_files, settings)
        outcome, killed_at = run_killing_mid_task(
            endpoint,
            demo_files,
            settings,
            tmux_socket,
            lambda argv, _st: any(b"vibe-rs" in a for a in argv[:1]),
        )
    assert killed_at, "no Vibe process was found below the pane"
    assert outcome.state == "review", outcome.message
    review = integration.review(demo_files.repo)
    integration.merge(demo_files.repo, review)
    replies = endpoint.logged(kind="reply")
    assert sorted(sessions_by_task(replies)) == ["tokenize"]
    # its own bash tool did the work and ran the signals
    assert {r["call"] for r in replies if r["call"]} == {"bash"}
    assert {(r["prompt"], r["prompt_kind"]) for r in replies} >= {(1, "plan"), (2, "implement")}
    # the relaunched Vibe carried its conversation: after the kill its requests hold the
    # plan prompt before the implement prompt (a fresh start would hold one prompt)
    after = [r for r in replies if r["at"] > killed_at[0]]
    assert after and min(r["prompt"] for r in after) >= 2, [r["prompt"] for r in after]
    assert not ledger(demo_files.repo, "nudged")
    status = Store(RunDir(demo_files.repo)).read_status("tokenize")
    assert status.phase == Phase.INTEGRATED and status.relaunches == 1
    # one session, resumed: every prompt lo-orch confirmed is a user message of its store
    store = vibe.store_dir({"VIBE_HOME": str(demo_files.root / "vibe-home")})
    sessions = vibe.sessions_for(store, Path(str(status.worktree)))
    assert len(sessions) == 1
    said = list(vibe.user_messages(sessions[0]).values())
    delivered = ledger(demo_files.repo, "prompt_delivered")
    assert len(delivered) == 3 and len(said) == 3
    # the plan prompt once; the implement prompt again after the relaunch (lo-orch cannot
    # tell the resumed turn carries on), each its own message, confirmed each time
    firsts = sorted(p.split("\n")[0][:40] for p in said)
    assert firsts == [
        "Task `tokenize`: your plan is accepted. ",
        "Task `tokenize`: your plan is accepted. ",
        "You are task `tokenize` of the lo-orch r",
    ]
    # its tokens: the store's count is every reply's, but for at most one the kill cut
    # before Vibe saved it (the kill follows a reply as soon as the endpoint sent it: the
    # Write's, which Vibe may not have stored yet); lo-orch read them, unpriced
    tokens = vibe.session_usage(sessions[0])
    assert tokens is not None
    total = (
        sum(r["usage"]["prompt_tokens"] for r in replies),
        sum(r["usage"]["completion_tokens"] for r in replies),
    )
    cut = {
        (total[0] - r["usage"]["prompt_tokens"], total[1] - r["usage"]["completion_tokens"])
        for r in replies
        if r["at"] <= killed_at[0]
    }
    assert (tokens["input_tokens"], tokens["output_tokens"]) in {total} | cut, (tokens, total)
    assert status.usage is not None and status.usage["cost_known"] is False
    assert 0 < status.usage["output_tokens"] <= tokens["output_tokens"]
    merged = git(demo_files.repo, "show", f"{review.feature}:textstats/tokenize.py")
    assert "def tokenize" in merged


SID = "846e0f10-bb37-81fb-d3dd-f3f6bd7fd740"


def _session(store: Path, worktree: Path, sid: str = SID, start: str = "2026-12-01T20:15") -> Path:
    """A session folder as Vibe 3.0.2 lays it out (meta.json, journal, chunks)."""
    folder = store / sid
    (folder / "journal").mkdir(parents=True)
    (folder / "chunks").mkdir()
    meta = {
        "session_id": sid,
        "start_time": start,
        "environment": {"working_directory": str(worktree)},
    }
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return folder


def _turn(folder: Path, entry_id: str, text: str, segment: int = 1) -> None:
    """A prompt as Vibe's journal records it when it takes it (``turn/start``)."""
    record = {
        "type": "command_reserved",
        "sequence": 1,
        "payload": {
            "method": "turn/start",
            "params": {
                "entries": [
                    {
                        "content": [{"text": text, "type": "text"}],
                        "entryId": entry_id,
                        "role": "user",
                    }
                ],
                "sessionId": folder.name,
            },
        },
    }
    path = folder / "journal" / f"{segment:016d}.jsonl"
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def _envelope(tokens: int, at: int) -> dict[str, Any]:
    usage = {"cachedInputTokens": 10, "inputTokens": tokens, "outputTokens": 7, "totalTokens": 0}
    return {"session": {"tokenUsage": usage, "contextUsage": usage, "updatedAt": at}}


def _ctx(root: Path, config: AgentConfig) -> AgentContext:
    """Task api's context (worktree wt), without the sandbox."""
    return AgentContext.create(
        task="api",
        run_name="r",
        repo=root,
        worktree=root / "wt",
        run_dir=root / ".orchestration",
        brief_path=root / "b.md",
        settings=config,
    )


def _vibe(tmp_path: Path, **agent: Any) -> tuple[VibeAdapter, AgentConfig, Path]:
    home = tmp_path / "vh"
    config = AgentConfig(kind="vibe", command="/bin/true", env={"VIBE_HOME": str(home)}, **agent)
    return VibeAdapter(config, tmp_path), config, vibe.store_dir({"VIBE_HOME": str(home)})


def test_vibe_kind_is_selectable_and_refuses_modes_it_cannot_run(tmp_path: Path) -> None:
    settings = Settings(agent=AgentConfig(kind="vibe"), auditor=AuditorConfig(llm="off"))
    assert isinstance(make_adapter(settings, tmp_path), VibeAdapter)
    with pytest.raises(ConfigError, match="permission_mode 'acceptEdits'"):
        VibeAdapter(AgentConfig(kind="vibe", permission_mode="acceptEdits"), tmp_path)
    missing = VibeAdapter(AgentConfig(kind="vibe", env={"PATH": str(tmp_path)}), tmp_path)
    with pytest.raises(AgentError, match="vibe not found") as info:
        missing.prepare(_ctx(tmp_path, missing.settings))
    assert "uv tool install mistral-vibe" in str(info.value.hint)


def test_vibe_launch_trusts_quietly_and_resumes_only_its_worktrees_session(
    tmp_path: Path,
) -> None:
    adapter, config, store = _vibe(tmp_path, model="devstral")
    ctx = _ctx(tmp_path, config)
    spec = adapter.launch_spec(ctx, resume=True)
    # nothing recorded for the worktree yet: a fresh start
    assert spec.argv == ["/bin/true", "--auto-approve", "--trust"]
    assert spec.env["VIBE_ENABLE_UPDATE_CHECKS"] == "false"
    assert spec.env["VIBE_ACTIVE_MODEL"] == "devstral"
    # another folder's session, and a folder that is no session id, are not resumed
    _session(store, tmp_path / "elsewhere", "0b5e6c2a-8a59-4c1e-9a39-2f4f1f1f0a11")
    (store / "not-an-id").mkdir()
    (store / "not-an-id" / "meta.json").write_text(
        json.dumps(
            {"session_id": "not-an-id", "environment": {"working_directory": str(ctx.worktree)}}
        ),
        encoding="utf-8",
    )
    assert "--resume" not in adapter.launch_spec(ctx, resume=True).argv
    _session(store, ctx.worktree, SID, start="2026-12-01T20:15")
    newer = "9d1f3c2a-0000-4000-8000-000000000001"
    _session(store, ctx.worktree, newer, start="2026-12-01T21:00")
    assert adapter.launch_spec(ctx, resume=True).argv[-2:] == ["--resume", newer]
    assert "--resume" not in adapter.launch_spec(ctx, resume=False).argv
    # the user's own setting wins; without pretrust, no --trust (its dialog then stops)
    own = VibeAdapter(
        AgentConfig(
            kind="vibe",
            command="/bin/true",
            pretrust=False,
            env={"VIBE_HOME": str(tmp_path / "vh"), "VIBE_ENABLE_UPDATE_CHECKS": "true"},
        ),
        tmp_path,
    )
    spec = own.launch_spec(_ctx(tmp_path, own.settings), resume=False)
    assert "--trust" not in spec.argv and spec.env["VIBE_ENABLE_UPDATE_CHECKS"] == "true"


def test_vibe_prompt_is_confirmed_only_by_a_new_record_of_its_text(tmp_path: Path) -> None:
    adapter, _config, store = _vibe(tmp_path)
    worktree = tmp_path / "wt"
    folder = _session(store, worktree)
    prompt = "Task `api`.\nPhase: implementing\n\nDo it."
    # the same prompt taken before (a nudge sent twice): the old record confirms nothing
    _turn(folder, "rs-1", prompt)
    check = adapter.prompt_check(worktree, prompt)
    assert not check()
    # another session's (folder's) record of it confirms nothing either
    _turn(
        _session(store, tmp_path / "other", "0b5e6c2a-8a59-4c1e-9a39-2f4f1f1f0a11"), "rs-2", prompt
    )
    _turn(folder, "rs-3", "Task `api`. Something else")
    assert not check()
    # Vibe took it (its text as the TUI kept it: wrapped differently)
    _turn(folder, "rs-4", "Task `api`. Phase: implementing\nDo it.", segment=9)
    assert check()
    # a prompt found only in the conversation's chunks (its journal rotated away)
    again = adapter.prompt_check(worktree, "second prompt")
    chunk = [
        {
            "message": {
                "content": [
                    {
                        "_meta": {"vibe_client_message_id": "rs-5"},
                        "text": "second prompt",
                        "type": "text",
                    }
                ],
                "role": "user",
            },
            "source": "history",
        },
        {"message": {"content": [{"text": "second prompt", "type": "text"}], "role": "assistant"}},
    ]
    (folder / "chunks" / "ab.json").write_text(json.dumps(chunk), encoding="utf-8")
    assert again()
    assert vibe.user_messages(folder)["rs-5"] == "second prompt"


def test_vibe_tokens_are_its_newest_cumulative_count(tmp_path: Path) -> None:
    folder = _session(tmp_path, tmp_path / "wt")
    assert vibe.session_usage(folder) is None
    generation = folder / "generations" / "0000000000000008"
    generation.mkdir(parents=True)
    (generation / "projection-state.json").write_text(
        json.dumps({"snapshot": _envelope(4780, 100)}), encoding="utf-8"
    )
    (folder / "CURRENT").write_text(json.dumps({"generation": "0000000000000008"}), "utf-8")
    assert vibe.session_usage(folder) == {
        "input_tokens": 4780,
        "output_tokens": 7,
        "cached_tokens": 10,
    }
    delta = {"op": "set_envelope", "state": _envelope(9000, 200)}
    older = {"op": "set_envelope", "state": _envelope(1, 50)}
    lines = [{"type": "projection_delta", "payload": {"delta": [older, delta]}}]
    (folder / "journal" / "0000000000000009.jsonl").write_text(
        "\n".join(json.dumps(x) for x in lines) + "\n{half a line", encoding="utf-8"
    )
    assert vibe.session_usage(folder) == {
        "input_tokens": 9000,
        "output_tokens": 7,
        "cached_tokens": 10,
    }


def test_vibe_failed_turns_are_noticed_once_and_a_429_parks(tmp_path: Path) -> None:
    folder = _session(tmp_path, tmp_path / "wt")

    def failed(action: str, status: int | None) -> dict[str, Any]:
        # as Vibe 3.0.2 recorded a scripted 429 after its retries
        details: dict[str, Any] = {
            "exceptionType": "HTTPStatusError",
            "model": "scripted",
            "provider": "local",
        }
        if status is not None:
            details["httpStatus"] = status
        error = {"code": "model_stream_failed", "details": details, "message": f"{status} x"}
        return {
            "type": "action_result",
            "payload": {
                "action_id": action,
                "result": {"action_id": action, "error": error, "type": "completion_failed"},
                "state": "failed",
            },
        }

    ok = {
        "type": "action_result",
        "payload": {"action_id": "a0", "result": {"type": "completion_succeeded"}},
    }
    segment = folder / "journal" / "0000000000000001.jsonl"
    segment.write_text("\n".join(json.dumps(x) for x in [ok, failed("a1", 429)]) + "\n", "utf-8")
    errors = vibe.session_errors(folder)
    assert errors == [{"id": "a1", "status": 429, "code": "model_stream_failed", "error": "429 x"}]
    # first look (a supervisor started again): old news
    assert vibe.new_failures(errors, None) == ([], None)
    seen = {"a1"}
    with segment.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(failed("a2", 500)) + "\n")
    new, limited = vibe.new_failures(vibe.session_errors(folder), seen)
    assert [e["id"] for e in new] == ["a2"] and limited is None
    with segment.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(failed("a3", 429)) + "\n" + json.dumps(failed("a4", None)) + "\n")
    new, limited = vibe.new_failures(vibe.session_errors(folder), {"a1", "a2"})
    assert [e["status"] for e in new] == [429, None] and limited == "429 x"


READY = """
 ⢠⢢    ⡔⢄⠔⡄   Mistral Vibe v3.0.2
 ⢸⢸⣀⡔⢉⠱⣃⡐⣔⡣   scripted[off]
──────────────────────────────────────────── accept edits · auto-approve ─
>
────────────────────────────────────────────────────────────────────────
/tmp/v33/d1/textstats [PID 13006]                      0/200k tokens (0%)
"""


def test_vibe_screens_ready_busy_and_the_ones_that_stop_it(tmp_path: Path) -> None:
    adapter, _config, _store = _vibe(tmp_path)
    assert adapter.is_ready(READY)
    assert not adapter.is_ready(READY.replace(" · auto-approve", ""))  # still starting
    assert not adapter.is_ready(READY.replace(">\n", " ⣆ Initializing…\n>\n"))
    assert vibe.BUSY_RE.search(" ⣤ Retrying… (2s Esc/Ctrl+C to interrupt)")
    onboarding = "│   Welcome to Mistral Vibe - Let's get you started!   │\n\n   Enter continue"
    splash = "│   Welcome to Mistral Vibe - Let's get you started!   │\n  Starting the app server…"
    trust = "│   Trust this folder?   │\n│  1. Trust folder    2. Don't trust  │"
    stops = [
        what
        for pattern, what, _hint in vibe.VIBE_SCREENS
        for s in [onboarding, trust, splash]
        if pattern.search(s)
    ]
    assert stops == [
        "Mistral Vibe is not set up: no API key for its provider",
        "Mistral Vibe asks whether to trust the task's worktree",
    ]


def test_doctor_says_whether_vibes_provider_key_is_there(tmp_path: Path) -> None:
    home = tmp_path / "vh"
    settings = Settings(agent=AgentConfig(kind="vibe", env={"VIBE_HOME": str(home)}))
    # no config: Vibe's own Mistral provider and its key
    check = check_login(settings, {})
    assert check.status == "warn" and "MISTRAL_API_KEY is not set" in check.detail
    assert check_login(settings, {"MISTRAL_API_KEY": "k"}).status == "ok"
    home.mkdir()
    script = tmp_path / "s.yaml"
    script.write_text("alpha:\n  plan:\n    - say: {text: hi}\n", encoding="utf-8")
    with ChatEndpoint(load_script(script, model=True)) as endpoint:
        env = endpoint.vibe_env(home)
        url = endpoint.url
    assert vibe.provider_key(home, {}) == ("lo-orch", "LO_ORCH_SCRIPTED_KEY", f"{url}/v1")
    assert check_login(settings, {}).status == "warn"
    (home / ".env").write_text("LO_ORCH_SCRIPTED_KEY=t\n", encoding="utf-8")
    assert "in " in check_login(settings, {}).detail
    (home / ".env").unlink()
    ok = Settings(agent=AgentConfig(kind="vibe", env=env))
    assert check_login(ok, {}).status == "ok"
    (home / "config.toml").write_text("active_model = [", encoding="utf-8")
    assert "cannot be read" in check_login(ok, {}).detail


def test_a_turn_vibe_gave_up_on_a_429_parks_its_task_once(
    demo_files: demo.DemoFiles, tmp_path: Path
) -> None:
    """The supervisor's side: a failed turn in the task's Vibe store becomes an event, a
    429 parks the task (a rate limit); what was in the store before is old news."""
    only(demo_files, "tokenize")
    home = tmp_path / "vh"
    settings = Settings(
        agent=AgentConfig(kind="vibe", command="/bin/true", env={"VIBE_HOME": str(home)}),
        auditor=AuditorConfig(llm="off"),
    )
    approve(demo_files, settings)
    sup = Supervisor(demo_files.repo, settings)
    worktree = tmp_path / "wt"
    sup.journal.set("tokenize", worktree=str(worktree))
    sup.journal.move("tokenize", Event.RELEASE)
    sup.journal.move("tokenize", Event.READY)
    folder = _session(vibe.store_dir({"VIBE_HOME": str(home)}), worktree)
    segment = folder / "journal" / "0000000000000001.jsonl"

    def fail(action: str, status: int) -> None:
        error = {
            "code": "model_stream_failed",
            "details": {"httpStatus": status},
            "message": f"{status} scripted",
        }
        result = {"type": "completion_failed", "error": error}
        record = {"type": "action_result", "payload": {"action_id": action, "result": result}}
        with segment.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")

    fail("old", 429)  # before lo-orch first looked
    assert not sup.accounting.notice_failed_turns("tokenize")
    fail("a1", 503)
    assert not sup.accounting.notice_failed_turns("tokenize")  # read again only after 5 s
    sup.accounting.store_due.clear()
    assert not sup.accounting.notice_failed_turns("tokenize")  # a 503: noticed, not parked
    fail("a2", 429)
    sup.accounting.store_due.clear()
    assert sup.accounting.notice_failed_turns("tokenize")
    st = sup.journal.task("tokenize")
    assert st.limit_until and st.limit_kind == "rate_limit" and st.limit_hits == 1
    sup.accounting.store_due.clear()
    assert not sup.accounting.notice_failed_turns("tokenize")  # parked: not again
    events = [e for e in ledger(demo_files.repo, "agent_api_error") if e["task"] == "tokenize"]
    assert [e["status"] for e in events] == [503, 429]
    assert [e["error"] for e in ledger(demo_files.repo, "limit_hit")] == ["rate_limit"]


def test_the_vibe_demo_without_vibe_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LoOrchError, match="needs `vibe` on PATH") as info:
        demo.run_demo(agent="vibe", workdir=tmp_path)
    assert "uv tool install mistral-vibe" in str(info.value.hint)
    assert list(tmp_path.iterdir()) == []  # nothing half-made


def test_a_resumed_vibe_busy_with_its_turn_is_ready_while_its_spinner_runs(
    tmp_path: Path, tmux_socket: str
) -> None:
    """A stand-in for Vibe's screen (a test program, not the CLI): the ready composer with
    a spinner that never stops, as a resumed Vibe finishing its interrupted turn shows. It
    is ready after about a second, not when the turn ends; a start-up screen is not."""
    program = tmp_path / "screen.py"
    busy_screen = " 7 Working… (Esc/Ctrl+C to interrupt)\n" + READY
    starting_screen = READY.replace(">\n", " ⣆ Initializing…\n>\n")
    program.write_text(
        "import itertools, sys, time\n"
        f"screens = {{'busy': {busy_screen!r}, 'start': {starting_screen!r}}}\n"
        "for i in itertools.count():\n"
        "    text = screens[sys.argv[1]].replace('7', str(i % 10))\n"
        "    sys.stdout.write('\\x1b[2J\\x1b[H' + text)\n"
        "    sys.stdout.flush()\n"
        "    time.sleep(0.1)\n",
        encoding="utf-8",
    )
    adapter, _config, _store = _vibe(tmp_path)
    backend = TmuxBackend("t", socket=tmux_socket)
    busy = backend.launch(
        LaunchSpec(task="a", cwd=tmp_path, argv=[sys.executable, str(program), "busy"], env={})
    )
    started = time.monotonic()
    adapter.wait_ready(backend, busy, timeout=10)
    assert 0.9 <= time.monotonic() - started < 5
    assert vibe.BUSY_RE.search(backend.capture(busy, 0))
    starting = backend.launch(
        LaunchSpec(task="b", cwd=tmp_path, argv=[sys.executable, str(program), "start"], env={})
    )
    with pytest.raises(AgentStartError, match=r"not ready after 1\.5s"):
        adapter.wait_ready(backend, starting, timeout=1.5)

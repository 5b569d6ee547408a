"""The opencode preset at the unit level: its plugin (run under node with opencode's event
shapes, as opencode 1.18.33 sent them), its config, launch, database and doctor row."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from loop_orchestrator.agents.contract import AgentContext
from loop_orchestrator.agents.opencode import (
    CONFIG_ENV,
    DB_ENV,
    OpencodeAdapter,
    config_content,
    db_errors,
    db_usage,
    find_session,
    plugin_text,
    task_db,
)
from loop_orchestrator.agents.registry import make_adapter
from loop_orchestrator.config import AgentConfig, AuditorConfig, Settings
from loop_orchestrator.errors import AgentError, ConfigError, LoOrchError
from loop_orchestrator.readiness import check_login
from loop_orchestrator.simulator import demo_flow as demo

SID = "0b5e6c2a-8a59-4c1e-9a39-2f4f1f1f0a11"
NODE = shutil.which("node")


def run_plugin(tmp_path: Path, calls: str, env: dict[str, str] | None = None) -> list[Any]:
    """Load lo-orch's plugin in node with a launcher that records what it is sent, make
    ``calls`` (JS, ``hooks`` being what the plugin returned); the launches recorded."""
    assert NODE, "node is needed (it comes with npm, which scripts/bootstrap --agents needs)"
    log = tmp_path / "launches.jsonl"
    launcher = tmp_path / "lo-hook"
    launcher.write_text(
        f'#!/bin/sh\nprintf \'{{"event": "%s", "payload": \' "$1" >> {log}\n'
        f"cat >> {log}\necho '}}' >> {log}\n",
        encoding="utf-8",
    )
    launcher.chmod(0o755)
    plugin = tmp_path / "plugin.mjs"
    plugin.write_text(plugin_text(launcher), encoding="utf-8")
    driver = tmp_path / "driver.mjs"
    driver.write_text(
        f"import {{ LoOrch }} from {json.dumps(str(plugin))};\n"
        "const hooks = await LoOrch({ directory: '/w/t' });\n"
        "const ev = (type, properties) => hooks.event({ event: { type, properties } });\n"
        + textwrap.dedent(calls),
        encoding="utf-8",
    )
    base = {"PATH": "/usr/bin:/bin", "LO_ORCH_TASK": "alpha"}
    subprocess.run(
        [NODE, str(driver)], env=env if env is not None else base, check=True, timeout=30
    )
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def test_the_plugin_reports_opencodes_events_as_hook_events(tmp_path: Path) -> None:
    got = run_plugin(
        tmp_path,
        """
        const parts = [
          { type: "text", text: "plan the task" },
          { type: "text", text: "Called the Read tool", synthetic: true },
        ];
        await hooks["chat.message"]({ sessionID: "ses_a" }, { message: {}, parts });
        await hooks["tool.execute.before"](
          { tool: "bash", sessionID: "ses_a", callID: "call_1" }, { args: { command: "ls" } });
        // a subagent's session: its prompt and its idle are not the task's
        await ev("session.created", { info: { id: "ses_sub", parentID: "ses_a" } });
        await hooks["chat.message"](
          { sessionID: "ses_sub" }, { parts: [{ type: "text", text: "x" }] });
        await ev("session.idle", { sessionID: "ses_sub" });
        await ev("session.status", { sessionID: "ses_a",
          status: { type: "retry", attempt: 1, message: "scripted rate_limit_error",
                    next: Date.now() + 1000 } });
        await ev("session.status", { sessionID: "ses_a", status: { type: "retry", attempt: 3,
          message: "over your limit", next: Date.UTC(2099, 11, 2, 14, 5) } });
        await ev("session.error", { sessionID: "ses_a",
          error: { name: "APIError", data: { message: "bad key", statusCode: 401 } } });
        await ev("session.error", { sessionID: "ses_a", error: { name: "MessageAbortedError" } });
        await ev("session.idle", { sessionID: "ses_a" });
        """,
    )
    events = [(g["event"], g["payload"].get("session_id")) for g in got]
    assert events == [
        ("SessionStart", None),
        ("UserPromptSubmit", "ses_a"),
        ("PreToolUse", "ses_a"),
        ("Notification", "ses_a"),
        ("StopFailure", "ses_a"),
        ("StopFailure", "ses_a"),
        ("Stop", "ses_a"),
    ]
    start, prompt, tool, retry, limit, auth, stop = (g["payload"] for g in got)
    assert start["cwd"] == "/w/t" and start["source"] == "startup"
    # the prompt as typed: opencode's own synthetic parts are not part of it
    assert prompt["prompt"] == "plan the task"
    assert (tool["tool_name"], tool["tool_input"], tool["tool_use_id"]) == (
        "bash",
        {"command": "ls"},
        "call_1",
    )
    assert retry["notification_type"] == "api_retry" and "attempt 1" in retry["message"]
    # a long wait (due in 2099, whenever the test runs): a limit, with the time opencode
    # retries at in the form lo-orch reads
    assert limit["error"] == "rate_limit"
    assert limit["last_assistant_message"].endswith("limit · resets Dec 2, 14:05 (UTC))")
    assert (auth["error"], auth["last_assistant_message"]) == ("authentication_failed", "bad key")
    assert stop["stop_hook_active"] is True


def test_the_limit_the_plugin_reports_is_parked_until_opencode_retries(tmp_path: Path) -> None:
    """What the plugin says of a long retry is read by lo-orch's limit parser (the retry is
    due in 2099: a long wait whenever the test runs; the message names no year)."""
    from datetime import UTC, datetime

    from loop_orchestrator.cost.limits import usage_limit_reset

    (limit,) = run_plugin(
        tmp_path,
        """
        await ev("session.status", { sessionID: "ses_a", status: { type: "retry", attempt: 1,
          message: "m", next: Date.UTC(2099, 11, 2, 14, 5) } });
        """,
    )[1:]
    said = limit["payload"]["last_assistant_message"]
    now = datetime(2026, 12, 2, 13, 0, tzinfo=UTC)
    assert usage_limit_reset(said, now) == datetime(2026, 12, 2, 14, 5, tzinfo=UTC)


def test_the_plugin_is_silent_in_a_session_lo_orch_does_not_run(tmp_path: Path) -> None:
    got = run_plugin(
        tmp_path,
        """
        if (Object.keys(hooks).length !== 0) throw new Error("hooks in an unmanaged session");
        """,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert got == []


def test_a_plugin_whose_launcher_is_gone_never_breaks_opencode(tmp_path: Path) -> None:
    plugin = tmp_path / "p.mjs"
    plugin.write_text(plugin_text(tmp_path / "missing" / "lo-hook"), encoding="utf-8")
    driver = tmp_path / "d.mjs"
    driver.write_text(
        f"import {{ LoOrch }} from {json.dumps(str(plugin))};\n"
        "const hooks = await LoOrch({ directory: '/w' });\n"
        "await hooks['chat.message']({ sessionID: 's' }, { parts: [] });\n"
        "console.log('still here');\n",
        encoding="utf-8",
    )
    assert NODE
    out = subprocess.run(
        [NODE, str(driver)],
        env={"PATH": "/usr/bin:/bin", "LO_ORCH_TASK": "a"},
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert out.stdout.strip() == "still here"


def test_config_content_adds_the_plugin_and_keeps_the_users_own(tmp_path: Path) -> None:
    plugin = tmp_path / "run" / "p.js"
    own = json.dumps({"plugin": ["mine", plugin.as_uri()], "autoupdate": True, "theme": "x"})
    config = json.loads(config_content(plugin, own))
    # written twice, the plugin is not there twice; opencode cannot update itself
    assert config == {
        "plugin": ["mine", plugin.as_uri()],
        "autoupdate": False,
        "theme": "x",
        "share": "disabled",
    }
    assert json.loads(config_content(plugin, None))["plugin"] == [plugin.as_uri()]
    with pytest.raises(AgentError, match="is not JSON"):
        config_content(plugin, "{")


def _ctx(root: Path, config: AgentConfig, session_id: str | None) -> AgentContext:
    return AgentContext.create(
        task="api",
        run_name="r",
        repo=root,
        worktree=root / "wt",
        run_dir=root / ".orchestration",
        brief_path=root / "b.md",
        settings=config,
        session_id=session_id,
    )


def _db(path: Path, sessions: list[tuple[str, str | None, int]], messages: list[Any]) -> None:
    """A database with opencode 1.18.33's session and message tables (their columns used)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE session (id text PRIMARY KEY, parent_id text, time_updated integer)"
        )
        conn.execute(
            "CREATE TABLE message (id text PRIMARY KEY, session_id text, time_created integer,"
            " data text)"
        )
        conn.executemany("INSERT INTO session VALUES (?, ?, ?)", sessions)
        conn.executemany(
            "INSERT INTO message VALUES (?, 's', ?, ?)",
            [
                (f"m{i}", i, m if isinstance(m, str) else json.dumps(m))
                for i, m in enumerate(messages)
            ],
        )


def test_opencode_launch_resumes_the_session_in_the_tasks_own_database(tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = AgentConfig(
        kind="opencode",
        command="/bin/true",
        env={"XDG_DATA_HOME": str(data), CONFIG_ENV: '{"theme": "t"}'},
        model="p/m",
    )
    adapter = OpencodeAdapter(config, tmp_path)
    ctx = _ctx(tmp_path, config, SID)
    adapter.prepare(ctx)
    spec = adapter.launch_spec(ctx, resume=True)
    # nothing recorded yet: a fresh session
    assert spec.argv == ["/bin/true", "--auto", "--model", "p/m"]
    db = data / "opencode" / "lo-orch" / f"{SID}.db"
    assert spec.env[DB_ENV] == str(db)
    plugin = tmp_path / ".orchestration" / "agents" / "opencode-plugin.js"
    assert json.loads(spec.env[CONFIG_ENV]) == {
        "theme": "t",
        "plugin": [plugin.as_uri()],
        "autoupdate": False,
        "share": "disabled",
    }
    assert "lo-hook" in plugin.read_text(encoding="utf-8")
    assert "__LAUNCHER__" not in plugin.read_text(encoding="utf-8")
    # the newest top-level session is resumed, never a subagent's or an older one
    _db(
        db,
        [
            ("ses_old0000000000", None, 1),
            ("ses_new0000000000", None, 5),
            ("ses_sub0000000000", "ses_new0000000000", 9),
        ],
        [],
    )
    assert adapter.launch_spec(ctx, resume=True).argv[-2:] == ["--session", "ses_new0000000000"]
    assert "--session" not in adapter.launch_spec(ctx, resume=False).argv
    # a session id no one could have chosen names no file outside the folder
    with pytest.raises(AgentError, match="cannot name an opencode database"):
        adapter.launch_spec(_ctx(tmp_path, config, "../../etc/x"), resume=True)


def test_a_session_id_written_into_the_database_is_not_passed_on_as_an_option(
    tmp_path: Path,
) -> None:
    """The database is the session's own (under its home): what it says is checked."""
    db = tmp_path / "t.db"
    _db(db, [("--dangerous-flag", None, 9)], [])
    assert find_session(db) is None
    assert find_session(tmp_path / "none.db") is None


def test_opencode_tokens_and_errors_from_its_database(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    tokens = {"input": 100, "output": 7, "reasoning": 3, "cache": {"read": 40, "write": 5}}
    _db(
        db,
        [],
        [
            {"role": "user"},
            {"role": "assistant", "tokens": tokens},
            {"role": "assistant", "tokens": {"input": 5, "output": 1}},
            {
                "role": "assistant",
                "tokens": {"input": 0, "output": 0},
                "error": {"name": "APIError", "data": {"message": "slow down", "statusCode": 429}},
            },
            "not json",
            '["a list"]',
        ],
    )
    assert db_usage(db) == {
        "input_tokens": 105,
        "output_tokens": 11,
        "cache_read": 40,
        "cache_write": 5,
        "messages": 3,
    }
    assert db_errors(db) == [{"name": "APIError", "status": 429, "error": "slow down"}]
    assert db_usage(tmp_path / "missing.db")["messages"] == 0


def test_opencode_kind_is_selectable_and_refuses_modes_it_cannot_run(tmp_path: Path) -> None:
    settings = Settings(agent=AgentConfig(kind="opencode"), auditor=AuditorConfig(llm="off"))
    assert isinstance(make_adapter(settings, tmp_path), OpencodeAdapter)
    with pytest.raises(ConfigError, match="permission_mode 'plan'"):
        OpencodeAdapter(AgentConfig(kind="opencode", permission_mode="plan"), tmp_path)
    assert task_db({"HOME": "/h"}, SID) == Path(f"/h/.local/share/opencode/lo-orch/{SID}.db")


def test_opencode_login_row_says_which_model_and_whether_its_key_is_there(
    tmp_path: Path,
) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path / "c"), "XDG_DATA_HOME": str(tmp_path / "d")}
    settings = Settings.model_validate({"agent": {"kind": "opencode", "env": env}})
    row = check_login(settings, {})
    assert (row.name, row.status) == ("opencode login", "warn") and "no model" in row.detail
    config = tmp_path / "c" / "opencode" / "opencode.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"model": "anthropic/claude-x"}), encoding="utf-8")
    row = check_login(settings, {})
    assert row.status == "warn" and "ANTHROPIC_API_KEY" in row.detail
    assert "opencode providers login" in str(row.hint)
    assert check_login(settings, {"ANTHROPIC_API_KEY": "k"}).status == "ok"
    auth = tmp_path / "d" / "opencode" / "auth.json"
    auth.parent.mkdir(parents=True)
    auth.write_text(json.dumps({"anthropic": {"type": "api", "key": "k"}}), encoding="utf-8")
    assert check_login(settings, {}).status == "ok"
    provider = {"lo": {"options": {"apiKey": "k"}}}
    config.write_text(json.dumps({"model": "lo/m", "provider": provider}), encoding="utf-8")
    row = check_login(settings, {})
    assert row.status == "ok" and "lo/m" in row.detail


def test_the_opencode_demo_without_opencode_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LoOrchError, match="needs `opencode` on PATH") as info:
        demo.run_demo(agent="opencode", workdir=tmp_path)
    assert "npm install -g opencode-ai" in str(info.value.hint)
    assert list(tmp_path.iterdir()) == []  # nothing half-made

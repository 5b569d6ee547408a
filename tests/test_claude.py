"""The Claude Code adapter: argv, root refusal, pre-trust, screens; and the real CLI in tmux.

The real-CLI tests run Claude Code 2.1.332 offline in a throwaway HOME on a private tmux
server: never logged in, so a submitted prompt ends in "Not logged in", which is what the
adapter must turn into a clear error. No test logs in or reaches the API.
"""

# ruff: noqa: RUF001, RUF003  "❯" is Claude Code's own prompt glyph, not a typo for ">"
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import threading
import time
import uuid
from pathlib import Path

import pytest
from helpers.agents import agent_cli
from helpers.git import git
from helpers.served import serve
from helpers.wait import wait_for

from loop_orchestrator import resources
from loop_orchestrator.agents.claude import (
    BYPASS_SETTINGS,
    SCREENS,
    ClaudeAdapter,
    claude_config_path,
    match_screen,
    pretrust,
)
from loop_orchestrator.agents.contract import AgentContext
from loop_orchestrator.agents.registry import make_adapter
from loop_orchestrator.config import AgentConfig, Settings
from loop_orchestrator.errors import AgentError, AgentStartError, NotLoggedInError
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.journal import Record
from loop_orchestrator.runstate.state import Phase, RunDir, Store, TaskStatus
from loop_orchestrator.sessions.delivery import Deliverer, prompt_confirmation
from loop_orchestrator.sessions.tmux import TmuxBackend
from loop_orchestrator.supervisor.lifecycle import NOT_LOGGED_IN_ERROR

# Screens as Claude Code 2.1.332 draws them in a 200-column tmux pane (captured by hand).
RULE = "─" * 120
READY_SCREEN = f""" ▐▛███▜▌   Claude Code v2.1.332
▝▜█████▛▘  Opus · API Usage Billing
  ▘▘ ▝▝    /tmp/repo/.worktrees/alpha
{RULE}
❯\u00a0
{RULE}
  ⏵⏵ bypass permissions on (shift+tab to cycle) · ← for agents        Not logged in · run /login
"""
TRUST_SCREEN = f"""{RULE}
 Accessing workspace:
 /tmp/repo/.worktrees/alpha
 Quick safety check: Is this a project you created or one you trust? (Like your own code, a
 folder first.
 Claude Code'll be able to read, edit, and execute files here.
 Security guide
 ❯ No, exit
   Yes, I trust this folder
 Enter to confirm · Esc to cancel
"""
UNKNOWN_DIALOG = f"""{RULE}
 Something new happened: pick one
 ❯ 1. Keep going
   2. Stop
 Enter to confirm · Esc to cancel
"""

# these tests run the real Claude Code CLI (or the adapter built around its path)
pytestmark = pytest.mark.claude


def claude() -> Path:
    return agent_cli("claude")


def agent(**changes: object) -> AgentConfig:
    # Claude Code keeps a folder per working folder in $TMPDIR/claude-<uid>: in the test's
    # throwaway HOME, not in /tmp
    tmp = Path(os.environ["HOME"]) / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {"IS_SANDBOX": "1", "TMPDIR": str(tmp)}
    base: dict[str, object] = {"command": str(claude()), "env": env}
    base.update(changes)
    return AgentConfig.model_validate(base)


def context(
    repo: Path, config: AgentConfig, task: str = "alpha", session_id: str | None = None
) -> AgentContext:
    rundir = RunDir(repo)
    worktree = rundir.worktree_path("t", task)
    if not worktree.exists():
        git(repo, "worktree", "add", "-q", "-b", f"lo/t/{task}", str(worktree))
    if Record.exists(repo, "demo"):  # a served run: the record publishes the status
        runs.open_record(repo).update_task(task, worktree=str(worktree))
    else:
        Store(rundir).write_status(
            TaskStatus(task=task, phase=Phase.PLANNING, worktree=str(worktree))
        )
    brief = rundir.brief_path(task)
    brief.parent.mkdir(parents=True, exist_ok=True)
    brief.write_text("# Brief\n", encoding="utf-8")
    return AgentContext.create(
        task=task,
        run_name="t",
        repo=repo,
        worktree=worktree,
        run_dir=rundir.root,
        brief_path=brief,
        settings=config,
        session_id=session_id,
    )


# argv ---------------------------------------------------------------------------------------


def test_make_adapter_gives_the_claude_adapter(git_repo: Path) -> None:
    adapter = make_adapter(Settings(agent=agent()), git_repo)
    assert isinstance(adapter, ClaudeAdapter)
    assert adapter.name == "claude"
    assert adapter.uses_hooks is True


def test_first_launch_argv(git_repo: Path) -> None:
    config = agent(args=["--verbose"], model="sonnet")
    ctx = context(git_repo, config)
    spec = ClaudeAdapter(config, git_repo).launch_spec(ctx, resume=False)
    argv = spec.argv
    assert argv[0] == str(claude())
    assert argv[1] == "--verbose"
    assert argv[argv.index("--plugin-dir") + 1] == str(resources.plugin_dir())
    assert (resources.plugin_dir() / ".claude-plugin" / "plugin.json").is_file()
    assert argv[argv.index("--permission-mode") + 1] == "bypassPermissions"
    assert json.loads(argv[argv.index("--settings") + 1]) == {
        "skipDangerousModePermissionPrompt": True
    }
    assert argv[argv.index("--model") + 1] == "sonnet"
    # a new session id, recorded on the context for a later --resume
    assert ctx.session_id is not None
    assert argv[argv.index("--session-id") + 1] == ctx.session_id
    uuid.UUID(ctx.session_id)
    assert "--resume" not in argv
    assert spec.cwd == ctx.worktree
    assert spec.env["LO_ORCH_TASK"] == "alpha"
    assert spec.env["IS_SANDBOX"] == "1"


def test_relaunch_resumes_the_same_session(git_repo: Path) -> None:
    config = agent(permission_mode="acceptEdits")
    sid = str(uuid.uuid4())
    ctx = context(git_repo, config, session_id=sid)
    argv = ClaudeAdapter(config, git_repo).launch_spec(ctx, resume=True).argv
    assert argv[argv.index("--resume") + 1] == sid
    assert "--session-id" not in argv
    assert argv[argv.index("--permission-mode") + 1] == "acceptEdits"
    assert "--settings" not in argv and BYPASS_SETTINGS not in argv
    assert "--model" not in argv


def test_resume_without_a_session_id_and_bad_ids_are_refused(git_repo: Path) -> None:
    config = agent()
    adapter = ClaudeAdapter(config, git_repo)
    with pytest.raises(AgentError, match="no session id to resume"):
        adapter.launch_spec(context(git_repo, config), resume=True)
    with pytest.raises(AgentError, match="not a session id"):
        adapter.launch_spec(context(git_repo, config, session_id="x; rm -rf /"), resume=False)


def test_missing_claude_command_is_a_clear_error(git_repo: Path) -> None:
    config = agent(command="claude-does-not-exist-here")
    with pytest.raises(AgentError, match="claude-does-not-exist-here not found") as info:
        ClaudeAdapter(config, git_repo).launch_spec(context(git_repo, config), resume=False)
    assert "npm install -g @anthropic-ai/claude-code" in (info.value.hint or "")


# root ----------------------------------------------------------------------------------------


def test_bypass_as_root_needs_is_sandbox(git_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.delenv("IS_SANDBOX", raising=False)
    config = agent(env={})
    adapter = ClaudeAdapter(config, git_repo)
    ctx = context(git_repo, config)
    with pytest.raises(AgentError, match="bypassPermissions mode as root") as info:
        adapter.prepare(ctx)
    assert 'env = { IS_SANDBOX = "1" }' in (info.value.hint or "")
    with pytest.raises(AgentError, match="as root"):
        adapter.launch_spec(ctx, resume=False)
    assert not claude_config_path().exists()  # refused before touching anything
    # the process environment counts too, and is passed on to the pane explicitly
    monkeypatch.setenv("IS_SANDBOX", "1")
    assert adapter.launch_spec(ctx, resume=False).env["IS_SANDBOX"] == "1"
    # other permission modes are fine as root
    monkeypatch.delenv("IS_SANDBOX")
    manual = agent(env={}, permission_mode="acceptEdits")
    ClaudeAdapter(manual, git_repo).launch_spec(context(git_repo, manual), resume=False)


def test_bypass_as_normal_user_needs_nothing(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.delenv("IS_SANDBOX", raising=False)
    config = agent(env={})
    spec = ClaudeAdapter(config, git_repo).launch_spec(context(git_repo, config), resume=False)
    assert "IS_SANDBOX" not in spec.env


# pre-trust -----------------------------------------------------------------------------------


def test_prepare_pretrusts_the_main_checkout(git_repo: Path) -> None:
    config = agent()
    ClaudeAdapter(config, git_repo).prepare(context(git_repo, config))
    path = Path(os.environ["HOME"]) / ".claude.json"
    data = json.loads(path.read_text())
    assert data == {
        "projects": {str(git_repo): {"hasTrustDialogAccepted": True}},
        "hasCompletedOnboarding": True,
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_pretrust_keeps_every_other_key_and_writes_once(tmp_path: Path) -> None:
    path = tmp_path / ".claude.json"
    original = {
        "numStartups": 7,
        "theme": "light",
        "hasCompletedOnboarding": False,
        "oauthAccount": {"emailAddress": "x@example.com"},
        "projects": {
            "/other": {"hasTrustDialogAccepted": False, "allowedTools": ["Bash"]},
            "/repo": {"allowedTools": ["Edit"], "lastCost": 1.5},
        },
    }
    path.write_text(json.dumps(original), encoding="utf-8")
    path.chmod(0o644)
    assert pretrust(path, [Path("/repo")]) is True
    data = json.loads(path.read_text())
    expected = json.loads(json.dumps(original))
    expected["projects"]["/repo"]["hasTrustDialogAccepted"] = True
    assert data == expected  # onboarding false stays false: the user's value
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    before = path.read_bytes(), path.stat().st_mtime_ns
    assert pretrust(path, [Path("/repo")]) is False
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


def test_pretrust_follows_a_symlinked_config(tmp_path: Path) -> None:
    target = tmp_path / "dotfiles" / "claude.json"
    target.parent.mkdir()
    target.write_text('{"theme": "dark"}', encoding="utf-8")
    link = tmp_path / ".claude.json"
    link.symlink_to(target)
    pretrust(link, [Path("/r")])
    assert link.is_symlink()
    assert json.loads(target.read_text())["projects"] == {"/r": {"hasTrustDialogAccepted": True}}


def test_config_dir_from_claude_config_dir(tmp_path: Path) -> None:
    assert claude_config_path({"HOME": "/h"}) == Path("/h/.claude.json")
    assert claude_config_path({"HOME": "/h", "CLAUDE_CONFIG_DIR": str(tmp_path)}) == (
        tmp_path / ".claude.json"
    )


def test_prepare_uses_claude_config_dir_from_agent_env(git_repo: Path, tmp_path: Path) -> None:
    config = agent(env={"IS_SANDBOX": "1", "CLAUDE_CONFIG_DIR": str(tmp_path / "cfg")})
    ClaudeAdapter(config, git_repo).prepare(context(git_repo, config))
    data = json.loads((tmp_path / "cfg" / ".claude.json").read_text())
    assert data["projects"][str(git_repo)]["hasTrustDialogAccepted"] is True
    assert not (Path(os.environ["HOME"]) / ".claude.json").exists()


def test_pretrust_opt_out_writes_nothing(git_repo: Path) -> None:
    config = agent(pretrust=False)
    ClaudeAdapter(config, git_repo).prepare(context(git_repo, config))
    assert not (Path(os.environ["HOME"]) / ".claude.json").exists()


def test_pretrust_refuses_a_broken_config(tmp_path: Path) -> None:
    path = tmp_path / ".claude.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(AgentError, match="not valid JSON") as info:
        pretrust(path, [Path("/r")])
    assert "pretrust = false" in (info.value.hint or "")
    assert path.read_text() == "{not json"
    path.write_text('{"projects": []}', encoding="utf-8")
    with pytest.raises(AgentError, match="`projects` object"):
        pretrust(path, [Path("/r")])


def test_pretrust_waits_for_claude_codes_lock(tmp_path: Path) -> None:
    path = tmp_path / ".claude.json"
    lock = tmp_path / ".claude.json.lock"
    lock.mkdir()  # held by a running Claude Code (proper-lockfile)
    with pytest.raises(AgentError, match="locked by another process"):
        pretrust(path, [Path("/r")], timeout=0.3)
    assert not path.exists()
    released: list[float] = []

    def release() -> None:
        time.sleep(0.4)
        released.append(time.monotonic())
        lock.rmdir()

    t = threading.Thread(target=release)
    t.start()
    assert pretrust(path, [Path("/r")], timeout=10) is True
    t.join()
    assert released, "pretrust wrote while the lock was held"
    assert not lock.exists()
    # a stale lock (not refreshed for > 10 s: its holder died) is taken over
    lock.mkdir()
    old = time.time() - 60
    os.utime(lock, (old, old))
    assert pretrust(path, [Path("/s")], timeout=2) is True


def test_concurrent_pretrusts_lose_no_root(tmp_path: Path) -> None:
    path = tmp_path / ".claude.json"
    roots = [Path(f"/repo{i}") for i in range(8)]
    threads = [threading.Thread(target=pretrust, args=(path, [r])) for r in roots]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    data = json.loads(path.read_text())
    assert sorted(data["projects"]) == sorted(str(r) for r in roots)


# screens ---------------------------------------------------------------------------------------


def test_screen_table(git_repo: Path) -> None:
    adapter = ClaudeAdapter(agent(), git_repo)
    assert adapter.is_ready(READY_SCREEN)
    assert not adapter.is_ready(TRUST_SCREEN)  # "❯ No, exit" is not the prompt box
    assert not adapter.is_ready(UNKNOWN_DIALOG)
    trust = match_screen(TRUST_SCREEN)
    assert trust is not None and trust.kind == "dialog" and trust.dialog is not None
    assert trust.dialog.choose == "Yes, I trust this folder"
    older = match_screen("Do you trust the files in this folder?\n❯ 1. Yes, proceed\n 2. No")
    assert older is not None and older.kind == "dialog"
    unknown = match_screen(UNKNOWN_DIALOG)
    assert unknown is not None and unknown.kind == "unknown_dialog"
    assert match_screen(READY_SCREEN, ("not_logged_in", "fatal", "unknown_dialog")) is None
    assert len({s.name for s in SCREENS}) == len(SCREENS)


def test_check_session_reports_not_logged_in(git_repo: Path) -> None:
    adapter = ClaudeAdapter(agent(), git_repo)
    adapter.check_session(READY_SCREEN, TaskStatus(task="a"))  # the footer alone is no error
    with pytest.raises(NotLoggedInError, match="not logged in") as info:
        adapter.check_session("", TaskStatus(task="a", error=NOT_LOGGED_IN_ERROR))
    assert info.value.hint == "Run `claude` and type /login, then `lo-orch run` again."
    with pytest.raises(NotLoggedInError):
        adapter.check_session("❯ hi\n  ⎿  Not logged in · Please run /login\n")


# the real Claude Code in tmux -----------------------------------------------------------------


def launch(
    backend: TmuxBackend, adapter: ClaudeAdapter, ctx: AgentContext, *, resume: bool = False
) -> str:
    adapter.prepare(ctx)
    return backend.launch(adapter.launch_spec(ctx, resume=resume))


def hear_hooks(stack: contextlib.ExitStack, repo: Path, backend: TmuxBackend) -> None:
    """Listen to the session's hooks as the supervisor does (its pane's process tree)."""
    served = stack.enter_context(
        serve(repo, {"alpha": {"phase": Phase.PLANNING}}, extra_panes=backend.task_pids)
    )
    served.panes.clear()


def hooks_seen(store: Store, hook: str) -> list[dict[str, object]]:
    return [r for r in store.read_ledger() if r["event"] == "hook" and r["hook_event"] == hook]


@pytest.mark.claude
@pytest.mark.slow
def test_real_claude_session_end_to_end(
    git_repo: Path, tmux_socket: str, stack: contextlib.ExitStack
) -> None:
    config = agent()
    adapter = ClaudeAdapter(config, git_repo)
    backend = TmuxBackend("t", socket=tmux_socket)
    hear_hooks(stack, git_repo, backend)
    ctx = context(git_repo, config)
    store = Store.for_repo(git_repo)
    pane = launch(backend, adapter, ctx)
    try:
        data = json.loads((Path(os.environ["HOME"]) / ".claude.json").read_text())
        assert data["projects"][str(git_repo)]["hasTrustDialogAccepted"] is True

        adapter.wait_ready(backend, pane, timeout=60)
        screen = backend.capture(pane, 0)
        assert adapter.is_ready(screen)
        assert match_screen(screen, ("dialog", "unknown_dialog", "fatal")) is None
        # the plugin's SessionStart hook reached `lo-orch hook` through LO_ORCH_BIN
        wait_for(lambda: bool(hooks_seen(store, "SessionStart")), 20, "SessionStart")
        start = hooks_seen(store, "SessionStart")[0]
        assert start["source"] == "startup"
        assert start["session_id"] == ctx.session_id
        wait_for(
            lambda: store.read_status("alpha").session_id == ctx.session_id,
            20,
            "the session id in the status",
        )

        brief = (
            "Task alpha: implement the parser.\nRead the brief at .orchestration/briefs.\n"
            "Then run `$LO_ORCH_BIN signal plan_ready`."
        )
        Deliverer(stagger=0).deliver(
            backend,
            pane,
            brief,
            confirmed=prompt_confirmation(store.read_status, "alpha"),
            timeout=30,
        )
        status = store.read_status("alpha")
        assert status.last_event in ("UserPromptSubmit", "StopFailure", "Stop")
        [submit] = hooks_seen(store, "UserPromptSubmit")
        assert submit["prompt_chars"] == len(brief)
        assert submit["prompt_sha256"] == hashlib.sha256(brief.encode()).hexdigest()[:16]

        # never logged in: the turn fails, StopFailure says so, the adapter raises
        wait_for(
            lambda: store.read_status("alpha").error == NOT_LOGGED_IN_ERROR, 20, "not logged in"
        )
        assert hooks_seen(store, "StopFailure")[0]["error"] == "authentication_failed"
        with pytest.raises(NotLoggedInError):
            adapter.check_session(backend.capture(pane, 0), store.read_status("alpha"))
        wait_for(
            lambda: "Not logged in · Please run /login" in backend.capture(pane, 0),
            20,
            "the screen's login notice",
        )
        with pytest.raises(NotLoggedInError):
            adapter.check_session(backend.capture(pane, 0))

        backend.paste(pane, "/exit")
        time.sleep(0.3)
        backend.send_keys(pane, "Enter")
        wait_for(lambda: bool(hooks_seen(store, "SessionEnd")), 20, "SessionEnd")
        assert hooks_seen(store, "SessionEnd")[0]["reason"] == "prompt_input_exit"
        wait_for(lambda: not backend.state(pane).alive, 20, "the pane to die")
        wait_for(
            lambda: store.read_status("alpha").last_event == "SessionEnd",
            20,
            "SessionEnd in the status",
        )

        # relaunch in the same pane resumes the same conversation
        backend.respawn(pane, adapter.launch_spec(ctx, resume=True))
        adapter.wait_ready(backend, pane, timeout=60)
        wait_for(lambda: len(hooks_seen(store, "SessionStart")) == 2, 20, "SessionStart on resume")
        resumed = hooks_seen(store, "SessionStart")[1]
        assert resumed["source"] == "resume"
        assert resumed["session_id"] == ctx.session_id
    finally:
        backend.kill_session()


@pytest.mark.claude
@pytest.mark.slow
def test_real_claude_trust_dialog_is_answered_on_screen(
    git_repo: Path, tmux_socket: str, stack: contextlib.ExitStack
) -> None:
    # a user who has used Claude Code before, but never in this repository
    config_file = Path(os.environ["HOME"]) / ".claude.json"
    config_file.write_text(json.dumps({"hasCompletedOnboarding": True}))
    config = agent(pretrust=False)
    adapter = ClaudeAdapter(config, git_repo)
    backend = TmuxBackend("t", socket=tmux_socket)
    hear_hooks(stack, git_repo, backend)
    ctx = context(git_repo, config)
    pane = launch(backend, adapter, ctx)
    try:
        wait_for(
            lambda: "Yes, I trust this folder" in backend.capture(pane, 0), 60, "the trust dialog"
        )
        adapter.wait_ready(backend, pane, timeout=60)
        assert adapter.is_ready(backend.capture(pane, 0))
        assert backend.state(pane).alive  # "No, exit" would have ended it
        # Claude Code itself recorded the "Yes" for the main checkout
        data = json.loads(config_file.read_text())
        assert data["projects"][str(git_repo)]["hasTrustDialogAccepted"] is True
        wait_for(
            lambda: bool(hooks_seen(Store.for_repo(git_repo), "SessionStart")), 20, "SessionStart"
        )
    finally:
        backend.kill_session()


@pytest.mark.claude
@pytest.mark.slow
def test_real_claude_unknown_dialog_fails_with_the_screen(git_repo: Path, tmux_socket: str) -> None:
    """A dialog lo-orch has no answer for fails fast, with the screen, instead of timing out.

    Here: approving a project's MCP server (2.1.332: "New MCP server found in this project"),
    which only a human may decide.
    """
    (git_repo / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"demo": {"command": "/bin/true", "args": []}}})
    )
    git(git_repo, "add", ".mcp.json")
    git(git_repo, "commit", "-q", "--no-gpg-sign", "-m", "mcp")
    config = agent()
    adapter = ClaudeAdapter(config, git_repo)
    ctx = context(git_repo, config)
    backend = TmuxBackend("t", socket=tmux_socket)
    pane = launch(backend, adapter, ctx)
    try:
        started = time.monotonic()
        with pytest.raises(AgentStartError) as info:
            adapter.wait_ready(backend, pane, timeout=60)
        assert time.monotonic() - started < 30
        assert "New MCP server found in this project: demo" in info.value.screen
        assert "dialog" in info.value.message
        assert backend.state(pane).alive  # nothing was chosen for the user
    finally:
        backend.kill_session()

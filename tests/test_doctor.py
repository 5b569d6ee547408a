"""`lo-orch doctor`: real git, tmux and Claude Code CLI; a throwaway HOME for login/plugin."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import REPO_ROOT
from helpers.agents import agent_cli
from helpers.git import git

from loop_orchestrator import resources
from loop_orchestrator.cli.main import run_cli
from loop_orchestrator.config import Settings
from loop_orchestrator.readiness import check_login, check_plugin_installed

# these tests run the real Claude Code CLI (or the adapter built around its path)
pytestmark = pytest.mark.claude


def claude() -> Path:
    return agent_cli("claude")


def write_config(repo: Path, text: str) -> None:
    """The repository's own ``.loop-orchestrator/config.toml``."""
    folder = repo / ".loop-orchestrator"
    folder.mkdir(exist_ok=True)
    (folder / "config.toml").write_text(text, encoding="utf-8")


def configure(repo: Path, extra: str = "") -> None:
    write_config(repo, f'[agent]\ncommand = "{claude()}"\nenv = {{ IS_SANDBOX = "1" }}\n{extra}')


@dataclass
class Run:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


@pytest.fixture
def doctor(capsys: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    """`lo-orch doctor ARGS` through the real entry (error mapping, exit codes)."""

    def invoke(*args: str) -> Run:
        code = run_cli(["doctor", *args])
        out, err = capsys.readouterr()
        return Run(code, out, err)

    return invoke


def rows(output: str) -> dict[str, tuple[str, str]]:
    """check name -> (status, detail) from the plain-text table."""
    found: dict[str, tuple[str, str]] = {}
    for line in output.splitlines()[1:]:
        if not line.strip():
            break
        parts = [p for p in line.split("  ") if p.strip()]
        found[parts[0].strip()] = (parts[1].strip(), "  ".join(parts[2:]).strip())
    return found


def test_doctor_on_a_ready_machine(git_repo: Path, doctor: Callable[..., Run]) -> None:
    configure(git_repo)
    result = doctor("--repo", str(git_repo))
    assert result.exit_code == 0, result.output
    table = rows(result.output)
    git_version = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout
    assert table["git"] == ("ok", git_version.strip())
    tmux_version = subprocess.run(["tmux", "-V"], capture_output=True, text=True).stdout
    assert table["tmux"] == ("ok", tmux_version.strip())
    assert table["agent CLI"][0] == "ok"
    assert "2.1.332 (Claude Code)" in table["agent CLI"][1]
    assert table["claude login"][0] == "warn"
    assert table["bundled plugin"] == ("ok", str(resources.plugin_dir()))
    assert table["plugin (your sessions)"][0] == "-"
    assert "claude plugin install loop-orchestrator@loop-orchestrator" in result.output
    assert table["repository"][1] == f"{git_repo}; branch main; clean; no run yet"


def test_doctor_reports_repository_state(git_repo: Path, doctor: Callable[..., Run]) -> None:
    configure(git_repo)
    git(git_repo, "switch", "-q", "-c", "feature")
    (git_repo / "README.md").write_text("changed\n", encoding="utf-8")
    orch = git_repo / ".orchestration"
    orch.mkdir()
    (orch / "run.json").write_text(json.dumps({"name": "demo", "phase": "running"}))
    result = doctor("--repo", str(git_repo))
    assert rows(result.output)["repository"][1] == (
        f"{git_repo}; branch feature; 1 uncommitted change; run demo (running)"
    )


def test_doctor_fails_when_a_required_tool_is_missing(
    git_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, doctor: Callable[..., Run]
) -> None:
    configure(git_repo)
    only_git = tmp_path / "bin"
    only_git.mkdir()
    git_exe = shutil.which("git")
    assert git_exe is not None
    (only_git / "git").symlink_to(git_exe)
    monkeypatch.setenv("PATH", str(only_git))
    result = doctor("--repo", str(git_repo))
    assert result.exit_code == 1
    table = rows(result.stdout)
    assert table["tmux"] == ("FAIL", "tmux not found on PATH")
    assert table["git"][0] == "ok"
    assert "tmux: Install tmux 3.0 or newer" in result.stdout
    assert result.stderr.startswith("Error: 1 required check failed: tmux")


def test_doctor_fails_without_the_agent_cli(git_repo: Path, doctor: Callable[..., Run]) -> None:
    write_config(git_repo, '[agent]\ncommand = "/nowhere/claude"\n')
    result = doctor("--repo", str(git_repo))
    assert result.exit_code == 1
    assert rows(result.stdout)["agent CLI"] == ("FAIL", "/nowhere/claude not found on PATH")
    assert "agent CLI" in result.stderr


def test_doctor_flags_bypass_as_root_without_sandbox(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch, doctor: Callable[..., Run]
) -> None:
    write_config(git_repo, f'[agent]\ncommand = "{claude()}"\n')
    monkeypatch.delenv("IS_SANDBOX", raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    result = doctor("--repo", str(git_repo))
    assert result.exit_code == 1
    assert rows(result.stdout)["root + bypass"][0] == "FAIL"
    assert 'env = { IS_SANDBOX = "1" }' in result.stdout
    configure(git_repo)
    again = doctor("--repo", str(git_repo))
    assert again.exit_code == 0, again.output
    assert rows(again.stdout)["root + bypass"] == ("ok", "IS_SANDBOX=1 is set")


def test_doctor_outside_a_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, doctor: Callable[..., Run]
) -> None:
    monkeypatch.chdir(tmp_path)
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "loop-orchestrator" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'[agent]\ncommand = "{claude()}"\nenv = {{ IS_SANDBOX = "1" }}\n')
    result = doctor()
    assert result.exit_code == 0, result.output
    assert rows(result.stdout)["repository"] == ("-", "not inside a git repository")


def test_doctor_reports_a_broken_config(git_repo: Path, doctor: Callable[..., Run]) -> None:
    write_config(git_repo, "[agent\n")
    result = doctor("--repo", str(git_repo))
    assert result.exit_code == 1
    assert rows(result.stdout)["config"][0] == "FAIL"
    assert "invalid TOML" in rows(result.stdout)["config"][1]


def test_login_state_is_read_offline(tmp_path: Path) -> None:
    settings = Settings()
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    env = {"HOME": str(home)}
    assert check_login(settings, env).status == "warn"
    (home / ".claude.json").write_text(json.dumps({"oauthAccount": {"emailAddress": "a@b.c"}}))
    login = check_login(settings, env)
    assert (login.status, login.detail) == ("ok", "account a@b.c (token not checked)")
    (home / ".claude.json").unlink()
    creds = home / ".claude" / ".credentials.json"
    creds.write_text(json.dumps({"claudeAiOauth": {"accessToken": "x"}}))
    assert check_login(settings, env).detail == f"credentials in {creds}"
    assert "x" not in check_login(settings, env).detail.replace(str(creds), "")
    other = tmp_path / "cfg"
    other.mkdir()
    assert check_login(settings, {**env, "CLAUDE_CONFIG_DIR": str(other)}).status == "warn"
    assert check_login(settings, {**env, "ANTHROPIC_API_KEY": "k"}).detail == (
        "credentials in the environment"
    )


@pytest.mark.claude
def test_doctor_sees_the_plugin_installed_with_the_real_cli(
    git_repo: Path, tmp_path: Path, doctor: Callable[..., Run]
) -> None:
    """Install the plugin the way users do (marketplace add + install), offline."""
    source = tmp_path / "plugin-src"
    for part in (".claude-plugin", "skills", "agents", "hooks"):
        shutil.copytree(REPO_ROOT / part, source / part)
    for argv in (
        ["plugin", "marketplace", "add", str(source)],
        ["plugin", "install", "loop-orchestrator@loop-orchestrator"],
    ):
        done = subprocess.run(
            [str(claude()), *argv], capture_output=True, text=True, timeout=120, cwd=tmp_path
        )
        assert done.returncode == 0, done.stdout + done.stderr
    check = check_plugin_installed(os.environ)
    assert (check.status, check.detail) == ("ok", "loop-orchestrator@loop-orchestrator (enabled)")
    configure(git_repo)
    result = doctor("--repo", str(git_repo))
    assert rows(result.stdout)["plugin (your sessions)"][0] == "ok"


def test_doctor_says_how_well_each_agent_kind_is_supported(
    git_repo: Path, doctor: Callable[..., Run]
) -> None:
    codex = os.environ.get("LO_ORCH_TEST_CODEX") or str(
        REPO_ROOT / ".cache" / "codex" / "node_modules" / ".bin" / "codex"
    )
    if not Path(codex).exists():
        pytest.fail("the Codex CLI is missing: `scripts/bootstrap --agents` installs it")
    write_config(git_repo, f'[agent]\nkind = "codex"\ncommand = "{codex}"\n')
    result = doctor("--repo", str(git_repo))
    assert result.exit_code == 0, result.output
    table = rows(result.output)
    assert table["agent CLI"][0] == "ok" and "codex-cli 0.171.0" in table["agent CLI"][1]
    status, detail = table["agent support"]
    # honest: no hooks, resume by Codex's own thread id, cost unknown (never $0)
    assert status == "-"  # the table shows info rows as "-"
    assert "status from lo-orch signal and the pane" in detail
    assert "codex resume" in detail and "cost: unknown" in detail
    # the other kinds are listed too
    for kind in ("claude:", "gemini:", "command:"):
        assert kind in result.output
    assert table["codex login"][0] == "-"
    # a missing Codex CLI fails with the command that installs it
    write_config(git_repo, '[agent]\nkind = "codex"\ncommand = "/nowhere/codex"\n')
    missing = doctor("--repo", str(git_repo))
    assert missing.exit_code != 0
    assert "npm install -g @openai/codex" in missing.output


def test_doctor_rows_for_qwen_code(
    git_repo: Path, tmp_path: Path, doctor: Callable[..., Run]
) -> None:
    """Installed and its version, the key it would use (checked offline), the sandbox."""
    qwen = agent_cli("qwen")
    home = tmp_path / "qh"
    home.mkdir()
    (home / "settings.json").write_text(
        '{"security": {"auth": {"selectedType": "openai"}}}', encoding="utf-8"
    )
    agent = f'[agent]\nkind = "qwen"\ncommand = "{qwen}"\n'
    write_config(git_repo, f'{agent}env = {{ QWEN_HOME = "{home}", OPENAI_API_KEY = "" }}\n')
    table = rows(doctor("--repo", str(git_repo)).output)
    assert table["agent CLI"][0] == "ok" and "0.15.10" in table["agent CLI"][1]
    assert "hooks (SessionStart, UserPromptSubmit" in table["agent support"][1]
    assert "tokens from its chat file" in table["agent support"][1]
    # the settings choose an OpenAI-compatible key, and none is set: said, with the fix
    assert table["qwen login"][0] == "warn" and "OPENAI_API_KEY" in table["qwen login"][1]
    assert "agent sandbox" in table


def test_doctor_rows_for_opencode(
    git_repo: Path, tmp_path: Path, doctor: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Installed and its version, the model and key it would use (offline), the sandbox."""
    opencode = agent_cli("opencode")
    # `opencode --version` unpacks its native libraries into $TMPDIR and leaves them there
    (tmp_path / "t").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "t"))
    config = tmp_path / "c"
    agent = f'[agent]\nkind = "opencode"\ncommand = "{opencode}"\nmodel = "lo/m"\n'
    write_config(git_repo, f'{agent}env = {{ XDG_CONFIG_HOME = "{config}", LO_API_KEY = "" }}\n')
    table = rows(doctor("--repo", str(git_repo)).output)
    assert table["agent CLI"][0] == "ok" and "1.18.33" in table["agent CLI"][1]
    assert "lo-orch's plugin" in table["agent support"][1]
    assert table["opencode login"][0] == "warn" and "LO_API_KEY" in table["opencode login"][1]
    assert "agent sandbox" in table


def test_qwen_login_row_says_which_auth_and_whether_its_key_is_there(tmp_path: Path) -> None:
    home = tmp_path / "qh"
    home.mkdir()
    settings = Settings.model_validate({"agent": {"kind": "qwen", "env": {"QWEN_HOME": str(home)}}})
    row = check_login(settings, {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "http://h/v1"})
    assert (row.name, row.status) == ("qwen login", "ok") and "http://h/v1" in row.detail
    row = check_login(settings, {})
    assert row.status == "warn" and "qwen auth" in str(row.hint)
    (home / "settings.json").write_text(
        '{"security": {"auth": {"selectedType": "qwen-oauth"}}}', encoding="utf-8"
    )
    assert check_login(settings, {}).status == "info"
    (home / "oauth_creds.json").write_text("{}", encoding="utf-8")
    assert check_login(settings, {}).status == "ok"

"""Shared fixtures: isolation from the user's machine, real git repos, private tmux servers.

Every test runs with a throwaway HOME and XDG folders, a pinned git identity and config,
no ``TMUX``/``TMUX_PANE`` and a ``TMUX_TMPDIR`` inside pytest's own temporary folder (so
nothing can reach the user's tmux servers) and its own ``LO_ORCH_TMUX_SOCKET``. A tmux
server started on that socket is killed at teardown by
its socket name, never by a prefix.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from loop_orchestrator.sessions import wait_until

if TYPE_CHECKING:
    from loop_orchestrator.demo import DemoFiles

REPO_ROOT = Path(__file__).resolve().parent.parent

#: the keys of status/<task>.json (contract, DESIGN.md section 3), written out by hand so a
#: renamed model field fails the tests
STATUS_KEYS = (
    "task",
    "phase",
    "wave",
    "updated_at",
    "worktree",
    "branch",
    "pane_id",
    "session_id",
    "rework_count",
    "last_event",
    "note",
    "error",
    "commit",
)


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    home = tmp_path_factory.mktemp("home")
    gitconfig = home / ".gitconfig-test"
    gitconfig.write_text(
        "[user]\n\tname = Test User\n\temail = test@example.com\n"
        "[commit]\n\tgpgsign = false\n[tag]\n\tgpgsign = false\n"
        "[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("SHELL", "/bin/sh")
    monkeypatch.setenv("LO_ORCH_LOG_DIR", str(home / "logs"))
    # tmux keeps its sockets in $TMUX_TMPDIR/tmux-<uid>: one folder inside this pytest run's
    # own temporary tree, so no test can reach the user's servers even by a default name,
    # and no socket file is left in /tmp.
    tmux_dir = tmp_path_factory.getbasetemp() / "tmux"
    tmux_dir.mkdir(exist_ok=True)
    monkeypatch.setenv("TMUX_TMPDIR", str(tmux_dir))
    for var in (
        "TMUX",
        "TMUX_PANE",
        "CLAUDE_CONFIG_DIR",
        "CODEX_HOME",
        "LO_ORCH_TASK",
        "LO_ORCH_RUN_DIR",
        "LO_ORCH_BRIEF",
        "LO_ORCH_BIN",
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
    ):
        monkeypatch.delenv(var, raising=False)
    for var in list(os.environ):
        if (
            var.startswith("LO_ORCH_")
            and var != "LO_ORCH_LOG_DIR"
            and not var.startswith("LO_ORCH_TEST_")
        ):
            monkeypatch.delenv(var, raising=False)
    return home


@pytest.fixture
def stack() -> Iterator[contextlib.ExitStack]:
    """Context managers entered by a test, exited at its teardown (servers, processes)."""
    with contextlib.ExitStack() as st:
        yield st


@pytest.fixture
def tmux_socket(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A private tmux socket name for this test; its server is killed at teardown."""
    name = f"lo-test-{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("LO_ORCH_TMUX_SOCKET", name)
    yield name
    subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True, check=False)
    socket = Path(os.environ["TMUX_TMPDIR"]) / f"tmux-{os.getuid()}" / name
    socket.unlink(missing_ok=True)


def git(cwd: Path, *args: str) -> str:
    """Run git in ``cwd`` for a test and return stdout (raises on failure)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GIT_") or k.startswith("GIT_CONFIG")
    }
    out = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {out.stderr}")
    return out.stdout


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    """A real git repository on branch main with one commit (a README and a tiny package)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("# sample\n", encoding="utf-8")
    (repo / "app").mkdir()
    (repo / "app" / "__init__.py").write_text("", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-gpg-sign", "-m", "initial")
    return repo


def claude_binary() -> Path | None:
    """The real Claude Code CLI installed by scripts/test (or LO_ORCH_TEST_CLAUDE)."""
    explicit = os.environ.get("LO_ORCH_TEST_CLAUDE")
    if explicit:
        return Path(explicit)
    candidate = REPO_ROOT / ".cache" / "claude-code" / "node_modules" / ".bin" / "claude"
    if candidate.exists():
        return candidate
    found = shutil.which("claude")
    return Path(found) if found else None


def wait_for(pred: Callable[[], bool], timeout: float, what: str) -> None:
    """Wait for ``pred`` (polled every 0.1 s); fail the test naming ``what`` on timeout."""
    if not wait_until(pred, timeout, interval=0.1):
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def edit_script(files: DemoFiles, change: Callable[[dict[str, Any]], None]) -> None:
    """Change the demo's scripted-agent script (a YAML mapping) in place."""
    data = yaml.safe_load(files.script.read_text(encoding="utf-8"))
    change(data)
    files.script.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that starts a tmux server or needs the real Claude Code CLI (mark
    ``claude``) is ``slow`` by rule (it waits for real processes), so ``scripts/test
    --fast`` leaves it out without a hand mark."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        uses_tmux = "tmux_socket" in fixtures
        if (uses_tmux or item.get_closest_marker("claude")) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)

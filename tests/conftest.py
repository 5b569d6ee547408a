"""Shared fixtures and hooks (what else the tests share is in tests/helpers/): isolation
from the user's machine, real git repos, demo projects, private tmux servers.

Every test runs with a throwaway HOME and XDG folders, a pinned git identity and config,
no ``TMUX``/``TMUX_PANE`` and a ``TMUX_TMPDIR`` inside pytest's own temporary folder (so
nothing can reach the user's tmux servers) and its own ``LO_ORCH_TMUX_SOCKET``. A tmux
server started on that socket is killed at teardown by
its socket name, never by a prefix.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.git import init_repo
from helpers.intake import FakeClaude
from helpers.runs import one_task_files
from helpers.schedule import OWN_CLUSTER_MODULES, check_groups_kept, longest_first

from loop_orchestrator.simulator.demo_flow import DemoFiles, prepare_demo


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
    # The test projects' checks run this virtual environment's pytest, which would load the
    # suite's own plugins into each of those processes (hypothesis alone is most of a
    # second of start-up there: the checks compile without a bytecode cache). No test
    # project uses them. (Set per test: the suite's own workers keep theirs.)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    # The processes a test starts (`lo-orch` commands, supervisors, scripted agents,
    # `lo-orch signal` from a session) keep their byte code in one folder of this worker,
    # as an installed lo-orch has it compiled: with PYTHONDONTWRITEBYTECODE (set in some
    # shells) each of them compiled the whole package again, seconds apiece on a loaded
    # machine. Outside every checkout, so no __pycache__ shows up in a repository; the
    # verification checks still run without any cache (verify.checkout.check_env).
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path_factory.getbasetemp() / "pycache"))
    for var in (
        "TMUX",
        "TMUX_PANE",
        "CLAUDE_CONFIG_DIR",
        "CODEX_HOME",
        "LO_ORCH_TASK",
        "LO_ORCH_RUN_DIR",
        "LO_ORCH_BRIEF",
        "LO_ORCH_BIN",
        "LO_ORCH_HOOK",
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
    # the scripted agents' transcripts (a file a session) stay in this run's own temporary
    # tree too, not in /tmp/lo-scripted
    scripted = tmp_path_factory.getbasetemp() / "lo-scripted"
    monkeypatch.setenv("LO_ORCH_SCRIPTED_TRANSCRIPTS", str(scripted))
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


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    """A real git repository on branch main with one commit (a README and a tiny package)."""
    return init_repo(tmp_path / "repo")


@pytest.fixture
def demo_files(tmp_path: Path, tmux_socket: str) -> DemoFiles:
    """The demo project (plan and scripted-agent script beside it) in ``tmp_path``; its
    sessions run on this test's private tmux socket."""
    return prepare_demo(tmp_path)


@pytest.fixture
def one_task(tmp_path: Path, tmux_socket: str) -> DemoFiles:
    """The demo project with a plan of its first task only, a committed config for
    `lo-orch run` in a subprocess and the user's uncommitted edit in the main checkout."""
    files = one_task_files(tmp_path, "demo", ("tokenize",))
    (files.repo / "NOTES.md").write_bytes(b"uncommitted notes of the user\n")
    return files


@pytest.fixture
def fake_log(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The stand-in for headless Claude Code (helpers.intake.FakeClaude) as ``[agent] command``,
    answering with the ``issue_plan`` scenario; the file its calls are logged to."""
    fake = FakeClaude(monkeypatch, tmp_path)
    fake.answers("issue_plan")
    return fake.log


@pytest.hookimpl(tryfirst=True)  # before xdist names the groups (its hook, in the workers)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that starts a tmux server or needs the real Claude Code CLI (mark
    ``claude``) is ``slow`` by rule (it waits for real processes), so ``scripts/test
    --fast`` leaves it out without a hand mark."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        uses_tmux = "tmux_socket" in fixtures
        if (uses_tmux or item.get_closest_marker("claude")) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
        # the OWN_CLUSTER_MODULES start Ray clusters of their own
        own_cluster = item.path.stem in OWN_CLUSTER_MODULES
        if "ray_env" in fixtures or own_cluster:
            # One Ray cluster at a time: a head takes fixed ports, and the module fixture
            # (a 3-node cluster, about a minute to start) is built once, not per worker.
            item.add_marker(pytest.mark.xdist_group("ray"))
    longest_first(items)


@pytest.hookimpl(optionalhook=True)  # (an xdist hook, run where the workers are started)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    check_groups_kept(node.config.getoption("dist"), ids)

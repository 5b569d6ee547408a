"""The tmux backend and prompt delivery, on a private tmux server with real programs."""

from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from helpers.wait import wait_for

from loop_orchestrator.agents import cline, opencode, qwen
from loop_orchestrator.agents.aider import AiderAdapter
from loop_orchestrator.agents.claude import ClaudeAdapter
from loop_orchestrator.agents.codex import CodexAdapter
from loop_orchestrator.agents.command import CommandAdapter
from loop_orchestrator.agents.contract import AgentAdapter, AgentContext
from loop_orchestrator.agents.dialogs import READY_POLL_UNTIL_WOKEN, wait_until_ready
from loop_orchestrator.agents.gemini import GeminiAdapter
from loop_orchestrator.agents.scripted import ScriptedAdapter
from loop_orchestrator.agents.vibe import VibeAdapter
from loop_orchestrator.config import AgentConfig
from loop_orchestrator.errors import DeliveryError, PaneGoneError, TmuxError
from loop_orchestrator.sessions.backend import LaunchSpec, PaneState
from loop_orchestrator.sessions.delivery import Deliverer, sanitize_prompt
from loop_orchestrator.sessions.tmux import TmuxBackend
from loop_orchestrator.sessions.tmuxargs import THEN, Sep, command_line, commands


def tmux(socket: str, *args: str) -> str:
    out = subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, check=True)
    return out.stdout


class Agents:
    """Launches scripted agents for a test (real program, real tmux)."""

    def __init__(self, tmp: Path, backend: TmuxBackend, script_text: str = "default: {}\n"):
        self.tmp = tmp
        self.backend = backend
        self.run_dir = tmp / "run" / ".orchestration"
        self.record = tmp / "received"
        self.script = tmp / "script.yaml"
        self.script.write_text(script_text, encoding="utf-8")
        plugin = tmp / "plugin"
        plugin.mkdir(exist_ok=True)  # no hooks/hooks.json: the agent runs no hooks
        self.adapter = ScriptedAdapter(
            AgentConfig(
                kind="scripted",
                script=str(self.script),
                args=["--plugin-dir", str(plugin), "--record-dir", str(self.record)],
            ),
            tmp,
        )

    def spec(self, task: str) -> LaunchSpec:
        worktree = self.tmp / "wt" / task
        worktree.mkdir(parents=True, exist_ok=True)
        ctx = AgentContext.create(
            task=task,
            run_name="t",
            repo=self.tmp,
            worktree=worktree,
            run_dir=self.run_dir,
            brief_path=self.run_dir / "briefs" / f"{task}.md",
            settings=self.adapter.settings,
        )
        return self.adapter.launch_spec(ctx, resume=False)

    def start(self, task: str) -> str:
        pane = self.backend.launch(self.spec(task))
        self.adapter.wait_ready(self.backend, pane, timeout=30)
        return pane

    def received(self, task: str) -> list[Path]:
        return sorted(self.record.glob(f"{task}-*.txt"))

    def events(self, task: str) -> list[str]:
        path = self.record / f"{task}.events"
        if not path.exists():
            return []
        return [line.split(" ", 1)[1] for line in path.read_text().splitlines()]


def big_prompt(task: str, size: int = 10_000) -> str:
    """A prompt full of what breaks naive delivery: quotes, $(), backticks, non-ASCII, lines."""
    line = (
        f"[{task}] echo \"$(rm -rf /)\" and `whoami`; it's 'quoted' \\n \\\\ $HOME ${{X}} "
        "naïve café 日本語 ✓ — Ünïcödé; tab\there % %% #{pane_id} ;\n"
    )
    text = f"Task {task}: implement it.\n"
    while len(text) < size:
        text += line
    return text[:size]


@pytest.fixture
def served() -> bool:
    """Whether ``backends`` makes serving supervisors' backends (``BOTH_WAYS``)."""
    return False


@pytest.fixture
def backends(served: bool, tmux_socket: str) -> Iterator[Callable[..., TmuxBackend]]:
    """``TmuxBackend(...)``: as a command's (a tmux process per call), or, ``served``, as a
    serving supervisor's (its calls through one control-mode client), which then must
    lose no client."""
    serving: list[TmuxBackend] = []

    def make(*args: Any, **kwargs: Any) -> TmuxBackend:
        made = TmuxBackend(*args, **kwargs)
        if served:
            made.serve(lambda request: None, lambda *a, **k: None)
            serving.append(made)
        return made

    yield make
    attached = [made.channel.control is not None for made in serving]
    for made in serving:
        losses = made.channel.losses
        made.stop()
        assert losses == 0
    assert not serving or any(attached)  # (calls went through a client: a session's)


#: a test run both ways: tmux processes, and a supervisor's control-mode client
BOTH_WAYS = pytest.mark.parametrize("served", [False, True], ids=["process", "control"])


@pytest.fixture
def backend(backends: Callable[..., TmuxBackend]) -> TmuxBackend:
    return backends("t")


@BOTH_WAYS
def test_eight_agents_each_receive_their_10k_prompt_once_whole(
    backend: TmuxBackend, tmux_socket: str, tmp_path: Path
) -> None:
    agents = Agents(tmp_path, backend)
    tasks = [f"task-{i}" for i in range(8)]
    panes = {task: backend.launch(agents.spec(task)) for task in tasks}
    for task in tasks:  # launched all at once, then waited for
        agents.adapter.wait_ready(backend, panes[task], timeout=40)

    paste_times: list[float] = []

    class Recording(TmuxBackend):
        def paste(self, pane_id: str, text: str, *, bracketed: bool = True) -> None:
            paste_times.append(time.monotonic())
            super().paste(pane_id, text, bracketed=bracketed)

    recording = Recording("t")
    deliverer = Deliverer(stagger=0.3)
    prompts = {task: big_prompt(task) for task in tasks}

    def deliver(task: str) -> None:
        deliverer.deliver(
            recording,
            panes[task],
            prompts[task],
            confirmed=lambda: bool(agents.received(task)),
            timeout=40,
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(deliver, tasks))

    for task in tasks:
        files = agents.received(task)
        assert len(files) == 1, f"{task} received {len(files)} prompts"
        assert files[0].read_bytes() == prompts[task].encode("utf-8"), f"{task} prompt differs"
    # staggered: no two pastes closer than the configured gap
    gaps = [b - a for a, b in zip(sorted(paste_times), sorted(paste_times)[1:], strict=False)]
    assert len(paste_times) == 8
    assert min(gaps) >= 0.29
    # the delivery buffers were deleted after pasting
    assert tmux(tmux_socket, "list-buffers").strip() == ""
    # tiled, at most four agent panes per window, and every pane found by its task tag
    windows = backend.windows()
    assert sorted(len(p) for p in windows.values()) == [4, 4]
    assert backend.list_panes() == {pane: task for task, pane in panes.items()}


def test_at_most_four_panes_per_window_and_tiled(
    backend: TmuxBackend, tmp_path: Path, tmux_socket: str
) -> None:
    panes = [backend.launch(LaunchSpec(f"s{i}", tmp_path, ["sleep", "60"])) for i in range(5)]
    windows = backend.windows()
    assert [len(p) for p in windows.values()] == [4, 1]
    assert set(backend.list_panes()) == set(panes)
    first = next(iter(windows))
    sizes = tmux(tmux_socket, "list-panes", "-t", first, "-F", "#{pane_width} #{pane_height}")
    # tiled: a 2x2 grid of the 240x60 window, not four slices of one column
    for line in sizes.split("\n")[:-1]:
        width, height = map(int, line.split())
        assert 110 <= width <= 120 and 25 <= height <= 30, sizes


@BOTH_WAYS
def test_dead_pane_is_seen_within_a_second_with_its_status(
    backend: TmuxBackend, tmp_path: Path
) -> None:
    trigger = tmp_path / "go"
    code = (
        "import os, sys, time\n"
        f"while not os.path.exists({str(trigger)!r}): time.sleep(0.01)\n"
        "sys.exit(7)\n"
    )
    pane = backend.launch(LaunchSpec("dies", tmp_path, [sys.executable, "-c", code]))
    state = backend.state(pane)
    assert state.exists and state.alive and state.pid is not None and state.dead_status is None
    trigger.touch()
    start = time.monotonic()
    wait_for(lambda: not backend.state(pane).alive, 5, "the pane to exit", interval=0.02)
    assert time.monotonic() - start < 1.0
    state = backend.state(pane)
    assert state.exists and state.dead_status == 7 and state.pid is None
    assert "Pane is dead" in backend.capture(pane, 0)  # remain-on-exit kept it


def test_instant_exit_keeps_the_pane_and_status(backend: TmuxBackend, tmp_path: Path) -> None:
    pane = backend.launch(LaunchSpec("fast", tmp_path, ["sh", "-c", "exit 5"]))
    wait_for(lambda: not backend.state(pane).alive, 5, "the pane to exit")
    assert backend.state(pane).dead_status == 5


def test_killed_by_signal_reports_128_plus_signal(backend: TmuxBackend, tmp_path: Path) -> None:
    pane = backend.launch(LaunchSpec("sig", tmp_path, ["sleep", "60"]))
    pid = backend.state(pane).pid
    assert pid is not None
    os.kill(pid, 9)
    wait_for(lambda: not backend.state(pane).alive, 5, "the pane to exit")
    assert backend.state(pane).dead_status == 137


@BOTH_WAYS
def test_argv_and_env_reach_the_program_literally(backend: TmuxBackend, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    tricky = ["a b", "$(touch pwned)", "`id`", "'single'", '"double"', "semi;colon", "*", "ü日"]
    env = {"LO_X": "$HOME `id` 'q' \"d\" ;|&", "LO_EMPTY": ""}
    code = (
        "import json, os, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'x': os.environ.get('LO_X'), "
        f"'empty': os.environ.get('LO_EMPTY'), 'cwd': os.getcwd()}}, "
        f"open({str(out)!r}, 'w'))\n"
    )
    work = tmp_path / "dir with space"
    work.mkdir()
    backend.launch(LaunchSpec("argv", work, [sys.executable, "-c", code, *tricky], env))
    wait_for(out.exists, 10, "the output file")
    wait_for(lambda: out.read_text().endswith("}"), 5, "the whole output")
    data = json.loads(out.read_text())
    assert data == {"argv": tricky, "x": env["LO_X"], "empty": "", "cwd": str(work)}
    assert not (work / "pwned").exists()


def test_a_call_separates_commands_only_where_lo_orch_puts_then() -> None:
    """Every word ending in ``;`` is escaped, a lone ``;`` (the key) too; only ``THEN``
    becomes tmux's separator."""
    words: list[str | Sep] = ["send-keys", "-t", "%1", ";", "a;", "b\\;", THEN, "kill-pane", "x"]
    assert command_line(words) == [
        *("send-keys", "-t", "%1", "\\;", "a\\;", "b\\\\;", ";"),
        *("kill-pane", "x"),
    ]
    assert commands(words) == ["send-keys", "kill-pane"]


@BOTH_WAYS
def test_values_ending_in_a_semicolon_reach_the_program_as_written(
    backend: TmuxBackend, tmp_path: Path
) -> None:
    """tmux ends a command at an argument ending in ``;``: an ``[agent] env`` value such as
    ``PS1='$ ;'`` made the rest of the split-window a command of its own ("unknown command:
    -P") and the task never started."""
    out = tmp_path / "out.json"
    env = {"LO_SEMI": "a;", "LO_ESCAPED": "b\\;", "LO_ONLY": ";"}
    code = (
        "import json, os\n"
        f"json.dump({{k: os.environ.get(k) for k in {sorted(env)!r}}}, open({str(out)!r}, 'w'))\n"
    )
    work = tmp_path / "ends;"
    work.mkdir()
    backend.launch(LaunchSpec("semi", work, [sys.executable, "-c", code], env))
    wait_for(lambda: out.exists() and out.read_text().endswith("}"), 10, "the output")
    assert json.loads(out.read_text()) == env


def test_panes_are_found_again_by_a_new_backend_and_respawned_in_place(
    backend: TmuxBackend, tmp_path: Path
) -> None:
    first = backend.launch(LaunchSpec("alpha", tmp_path, ["sleep", "60"]))
    second = backend.launch(LaunchSpec("beta", tmp_path, ["sh", "-c", "exit 3"]))
    again = TmuxBackend("t")  # a restarted supervisor
    assert again.list_panes() == {first: "alpha", second: "beta"}
    wait_for(lambda: not again.state(second).alive, 5, "the second pane to exit")
    again.respawn(second, LaunchSpec("beta", tmp_path, ["sleep", "60"]))
    wait_for(lambda: again.state(second).alive, 5, "the second pane to be respawned")
    assert again.list_panes() == {first: "alpha", second: "beta"}


@BOTH_WAYS
def test_killing_the_last_agent_pane_keeps_pane_ids_unique(
    backend: TmuxBackend, tmp_path: Path
) -> None:
    """The run's session outlives its last agent pane: if it ended, the tmux server would
    exit and a new one would hand out the same pane ids again (a stale id in a status file
    would then name another task's pane)."""
    first = backend.launch(LaunchSpec("alpha", tmp_path, ["sleep", "60"]))
    backend.kill_pane(first)
    assert backend.session_exists()
    assert backend.list_panes() == {}  # only the keeper is left, and it is no agent
    second = backend.launch(LaunchSpec("beta", tmp_path, ["sleep", "60"]))
    assert second != first
    assert backend.list_panes() == {second: "beta"}
    assert not backend.state(first).exists


class KilledWhileLooking(TmuxBackend):
    """A real backend whose pane a person kills (raw tmux, as the test did in CI) right
    before the tmux call that captures it (the ownership check and the capture are one
    call when the pane is there, or two when that call failed: before either)."""

    killed = False

    def _tmux(self, *args: str | Sep, input: str | None = None, check: bool = True):  # type: ignore[no-untyped-def]
        if "capture-pane" in args and not self.killed:
            self.killed = True
            capture = list(args[args.index("capture-pane") :])
            pane_id = str(capture[capture.index("-t") + 1])
            subprocess.run(["tmux", "-L", str(self.socket), "kill-pane", "-t", pane_id], check=True)
        return super()._tmux(*args, input=input, check=check)


@pytest.mark.parametrize("last", [True, False], ids=["last pane", "one of two"])
def test_a_pane_killed_mid_capture_is_gone_not_a_tmux_failure(
    tmux_socket: str, tmp_path: Path, last: bool
) -> None:
    """A pane can go between any two tmux calls. Killed after the ownership check, its
    capture raises PaneGoneError (what the supervisor treats as "nothing to see"), also
    when it was the session's last pane and the session (and server) went with it; a
    plain TmuxError there stopped a whole run (CI, test_relaunch_budget)."""
    backend = KilledWhileLooking("t")
    pane = backend.launch(LaunchSpec("a", tmp_path, ["sleep", "60"]))
    if not last:
        backend.launch(LaunchSpec("b", tmp_path, ["sleep", "60"]))
    with pytest.raises(PaneGoneError):
        backend.capture(pane)
    assert not TmuxBackend("t").state(pane).exists
    with pytest.raises(PaneGoneError):  # and once gone, the ownership check says so
        TmuxBackend("t").capture(pane)


def test_kill_session_uses_the_exact_name(tmux_socket: str, tmp_path: Path) -> None:
    mine = TmuxBackend("demo")
    other = TmuxBackend("demox")  # session lo-demox: a prefix match of lo-demo would hit it
    mine.launch(LaunchSpec("a", tmp_path, ["sleep", "60"]))
    other.launch(LaunchSpec("b", tmp_path, ["sleep", "60"]))
    mine.kill_session()
    assert not mine.session_exists()
    assert other.session_exists()
    assert tmux(tmux_socket, "list-sessions", "-F", "#{session_name}").split() == ["lo-demox"]
    mine.kill_session()  # no session: nothing to do, no error


def test_session_exists_is_exact(tmux_socket: str, tmp_path: Path) -> None:
    TmuxBackend("demox").ensure_session()
    assert not TmuxBackend("demo").session_exists()


def test_pane_of_another_session_is_not_ours(tmux_socket: str, tmp_path: Path) -> None:
    mine = TmuxBackend("demo")
    other = TmuxBackend("other")
    mine.ensure_session()
    foreign = other.launch(LaunchSpec("b", tmp_path, ["sleep", "60"]))
    assert mine.state(foreign).exists is False
    with pytest.raises(TmuxError, match="not a pane of session lo-demo"):
        mine.kill_pane(foreign)
    with pytest.raises(TmuxError, match="not a pane of session lo-demo"):
        mine.paste(foreign, "x")
    assert other.state(foreign).alive
    other.kill_pane(foreign)
    assert not other.state(foreign).exists
    other.kill_pane(foreign)  # already gone: no error


def test_send_keys_takes_key_names_only(backend: TmuxBackend, tmp_path: Path) -> None:
    pane = backend.launch(LaunchSpec("k", tmp_path, ["sleep", "60"]))
    for text in ("hello world", "line\nbreak", "ab"):
        with pytest.raises(TmuxError, match="key names"):
            backend.send_keys(pane, text)
    backend.send_keys(pane, "Down", "Enter", "C-c", "1")


def test_every_single_character_key_is_sent_as_that_key(
    backend: TmuxBackend, tmp_path: Path
) -> None:
    """A lone ``;`` is what ends a tmux command: sent as a key it sent nothing."""
    out = tmp_path / "keys.txt"
    pane = backend.launch(LaunchSpec("k", tmp_path, ["sh", "-c", f"head -n 1 > {out}"]))
    wait_for(lambda: backend.state(pane).alive, 5, "the pane")
    backend.send_keys(pane, "a", ";", "b", "\\", "Enter")
    wait_for(lambda: out.exists() and out.read_text().endswith("\n"), 10, "the line")
    assert out.read_text() == "a;b\\\n"


def test_bad_names_and_ids_are_refused(tmux_socket: str, tmp_path: Path) -> None:
    with pytest.raises(TmuxError, match="cannot name a tmux session"):
        TmuxBackend("bad:name")
    backend = TmuxBackend("t")
    with pytest.raises(TmuxError, match="not a tmux pane id"):
        backend.state("=lo-t")
    with pytest.raises(TmuxError, match="invalid environment variable"):
        backend.launch(LaunchSpec("x", tmp_path, ["true"], {"BAD-NAME": "1"}))
    with pytest.raises(TmuxError, match="does not exist"):
        backend.launch(LaunchSpec("x", tmp_path / "missing", ["true"]))


def test_tmux_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TmuxError) as info:
        TmuxBackend("t").ensure_session()
    assert info.value.message == "tmux not found"
    assert info.value.hint is not None and "apt-get install tmux" in info.value.hint


# delivery -----------------------------------------------------------------------------


def test_swallowed_enter_is_overcome_by_the_enter_retry(
    backend: TmuxBackend, tmp_path: Path
) -> None:
    agents = Agents(tmp_path, backend, "default: {swallow_first_enter: true}\n")
    pane = agents.start("sw")
    prompt = "first line\nsecond line with $(x)\n"
    Deliverer().deliver(backend, pane, prompt, timeout=12, enter_retries=3)  # screen-confirmed
    wait_for(lambda: bool(agents.received("sw")), 10, "the agent to receive the prompt")
    assert agents.events("sw") == ["paste #1", "swallowed-enter", "submit"]
    assert [p.read_text() for p in agents.received("sw")] == [prompt]


def test_swallowed_enter_without_retries_fails_with_the_screen(
    backend: TmuxBackend, tmp_path: Path
) -> None:
    agents = Agents(tmp_path, backend, "default: {swallow_first_enter: true}\n")
    pane = agents.start("sw")
    with pytest.raises(DeliveryError) as info:
        Deliverer().deliver(backend, pane, "a\nb\n", timeout=3, enter_retries=0)
    assert "[Pasted text #1 +2 lines]" in info.value.screen
    assert agents.received("sw") == []


def test_never_confirmed_delivery_raises_with_the_screen(
    backend: TmuxBackend, tmp_path: Path
) -> None:
    agents = Agents(tmp_path, backend)
    pane = agents.start("nc")
    start = time.monotonic()
    with pytest.raises(DeliveryError) as info:
        Deliverer().deliver(
            backend, pane, "hello\nthere", confirmed=lambda: False, timeout=3, enter_retries=2
        )
    assert time.monotonic() - start < 8
    assert "scripted agent (not a real model)" in info.value.screen
    assert "not confirmed" in info.value.message
    assert "Last screen of the pane" in info.value.render()


def test_delivery_to_a_dead_pane_fails_fast(backend: TmuxBackend, tmp_path: Path) -> None:
    pane = backend.launch(LaunchSpec("d", tmp_path, ["sh", "-c", "echo bye; exit 4"]))
    wait_for(lambda: not backend.state(pane).alive, 5, "the pane to exit")
    with pytest.raises(DeliveryError, match="status 4"):
        Deliverer().deliver(backend, pane, "x", timeout=10)
    with pytest.raises(DeliveryError, match="does not exist"):
        Deliverer().deliver(backend, "%999", "x", timeout=10)


def test_agent_dying_during_delivery_is_reported(backend: TmuxBackend, tmp_path: Path) -> None:
    agents = Agents(tmp_path, backend, "default: {implement: [[{exit: 9}]]}\n")
    pane = agents.start("crash")
    with pytest.raises(DeliveryError, match="status 9"):
        Deliverer().deliver(backend, pane, "implement it\n", confirmed=lambda: False, timeout=10)


def test_escape_sequences_cannot_break_out_of_the_paste(
    backend: TmuxBackend, tmp_path: Path
) -> None:
    agents = Agents(tmp_path, backend)
    pane = agents.start("esc")
    hostile = "before\x1b[201~\rafter\r\nend\x07\x9b"
    Deliverer().deliver(backend, pane, hostile, confirmed=lambda: bool(agents.received("esc")))
    assert [p.read_text() for p in agents.received("esc")] == ["before[201~\nafter\nend"]
    assert sanitize_prompt(hostile) == "before[201~\nafter\nend"


def test_deliveries_to_one_pane_are_serialized(backend: TmuxBackend, tmp_path: Path) -> None:
    agents = Agents(tmp_path, backend)
    pane = agents.start("ser")
    deliverer = Deliverer(stagger=0)
    texts = [f"prompt {i}\nsecond line {i}\n" for i in range(3)]

    def send(text: str) -> None:
        deliverer.deliver(
            backend,
            pane,
            text,
            confirmed=lambda: any(p.read_text() == text for p in agents.received("ser")),
        )

    threads = [threading.Thread(target=send, args=(t,)) for t in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    got = sorted(p.read_text() for p in agents.received("ser"))
    assert got == sorted(texts)  # three prompts, none merged into another


def test_a_second_run_of_the_same_name_on_a_shared_server_takes_nothing_of_the_first(
    tmux_socket: str, tmp_path: Path
) -> None:
    """Two repositories whose plans are both named ``feat`` on the one server a user chose
    (``LO_ORCH_TMUX_SOCKET=default``): the session ``lo-feat`` is the first run's. The
    second neither adopts, nor attests by, nor kills its panes, and says what to do."""
    first = TmuxBackend("feat", owner="run-a", repo="/work/repo-a")
    pane = first.launch(LaunchSpec("tokenize", tmp_path, ["sleep", "60"]))
    (pid,) = first.task_pids()
    second = TmuxBackend("feat", owner="run-b", repo="/work/repo-b")
    assert second.list_panes() == {}
    assert second.task_pids() == {}
    assert second.state(pane).exists is False
    with pytest.raises(TmuxError, match="not a pane of session lo-feat"):
        second.kill_pane(pane)
    with pytest.raises(TmuxError, match=r"lo-feat of another run \(of /work/repo-a\)") as info:
        second.launch(LaunchSpec("tokenize", tmp_path, ["sleep", "60"]))
    assert "unset LO_ORCH_TMUX_SOCKET" in str(info.value.hint)
    second.kill_session()  # its own cleanup leaves the other run's session alone
    assert first.list_panes() == {pane: "tokenize"}
    assert first.task_pids() == {pid: "tokenize"}
    # a restarted supervisor of the first run finds its panes again
    assert TmuxBackend("feat", owner="run-a").list_panes() == {pane: "tokenize"}
    first.kill_session()
    assert not first.session_exists()


def test_a_session_is_known_by_its_pane_from_its_first_instant(
    backend: TmuxBackend, tmp_path: Path
) -> None:
    """A session's first hook may come before lo-orch has tagged its new pane with the task
    (the next tmux call after the split): the inbox, asking for the run's panes then, must
    find it, not refuse an honest session's message."""
    missed: list[str] = []
    stop = threading.Event()

    def ask_as_each_session_starts() -> None:
        while not stop.is_set():
            for started in tmp_path.glob("*.pid"):
                pid = int(started.read_text() or 0)
                if pid and pid not in backend.task_pids():
                    missed.append(started.stem)
                started.unlink()

    asker = threading.Thread(target=ask_as_each_session_starts)
    asker.start()
    try:
        for i in range(12):
            # (the pane's process writes its own pid as it starts: a hook's first instant)
            script = f"echo $$ > {tmp_path}/t{i}.tmp && mv {tmp_path}/t{i}.tmp {tmp_path}/t{i}.pid"
            backend.launch(LaunchSpec(f"t{i}", tmp_path, ["sh", "-c", f"{script}; exec sleep 60"]))
        wait_for(lambda: not list(tmp_path.glob("*.pid")), 10, "every start seen")
    finally:
        stop.set()
        asker.join(10)
    assert missed == []


def test_a_session_made_before_runs_were_tagged_is_still_its_runs(
    tmux_socket: str, tmp_path: Path
) -> None:
    """A run started by an lo-orch that did not tag its session keeps its panes after an
    upgrade: an untagged session is taken as this run's."""
    pane = TmuxBackend("feat").launch(LaunchSpec("tokenize", tmp_path, ["sleep", "60"]))
    assert TmuxBackend("feat", owner="run-a").list_panes() == {pane: "tokenize"}


@BOTH_WAYS
def test_a_look_is_the_state_and_the_screen_together(
    tmux_socket: str, tmp_path: Path, backends: Callable[..., TmuxBackend]
) -> None:
    """``look`` says what ``state`` and ``capture`` say, for a live pane, a pane whose
    program exited, a pane killed and another run's pane (gone to this run: no text of it
    is read back, whatever it shows)."""
    mine, other = backends("demo"), backends("other")
    live = mine.launch(LaunchSpec("a", tmp_path, ["sh", "-c", "echo hello-from-a; sleep 60"]))
    # b exits once its last line is on its screen: a pane that exits at once may be seen
    # dead by tmux before its last output is read (under load, "bye" was missing once)
    go = tmp_path / "go"
    last = f"echo bye; while [ ! -e {shlex.quote(str(go))} ]; do sleep 0.05; done; exit 3"
    dead = mine.launch(LaunchSpec("b", tmp_path, ["sh", "-c", last]))
    killed = mine.launch(LaunchSpec("c", tmp_path, ["sleep", "60"]))
    foreign = other.launch(LaunchSpec("x", tmp_path, ["sh", "-c", "echo secret-x; sleep 60"]))
    wait_for(lambda: "hello-from-a" in mine.capture(live, 0), 10, "a's greeting")
    wait_for(lambda: "bye" in mine.capture(dead, 0), 10, "b's last line")
    go.touch()
    wait_for(lambda: not mine.state(dead).alive, 10, "b to exit")
    wait_for(lambda: "secret-x" in other.capture(foreign, 0), 10, "x's line")
    mine.kill_pane(killed)

    state, screen = mine.look(live)
    assert state == mine.state(live) and state.alive and "hello-from-a" in screen
    # (with its history: the panes split after it shrink it, and tmux scrolls its first
    # lines into the history to keep "Pane is dead" on the screen)
    state, screen = mine.look(dead, 50)
    assert state == mine.state(dead) and not state.alive and state.dead_status == 3
    assert "bye" in screen and "Pane is dead" in screen
    for gone in (killed, foreign):
        state, screen = mine.look(gone)
        assert not state.exists and not state.alive and screen == ""
    assert other.look(foreign)[0].alive  # its own run sees it


def _ready_on_trigger(tmp_path: Path, name: str) -> tuple[TmuxBackend, str, Path, list[float]]:
    """A pane whose program prints READY once the returned file exists, on a real backend
    that counts its looks: (backend, pane, the file to make, the looks' times)."""
    trigger = tmp_path / f"go-{name}"
    code = (
        "import os, time\n"
        f"while not os.path.exists({str(trigger)!r}): time.sleep(0.01)\n"
        "print('READY', flush=True)\n"
        "time.sleep(60)\n"
    )
    looks: list[float] = []

    class Counting(TmuxBackend):  # the real backend; each look is counted
        def look(self, pane_id: str, lines: int = 0) -> tuple[PaneState, str]:
            looks.append(time.monotonic())
            return super().look(pane_id, lines)

    counting = Counting("t")
    pane = counting.launch(LaunchSpec(name, tmp_path, [sys.executable, "-c", code]))
    return counting, pane, trigger, looks


def test_a_slow_start_is_polled_less_often_and_its_ready_screen_seen_soon(
    backend: TmuxBackend, tmp_path: Path
) -> None:
    """``wait_until_ready`` polls 0.1 s after the last, then half as long again each time,
    at most 0.3 s apart: a start of 2 s costs a dozen tmux calls fewer than at a steady
    0.1 s, and the ready screen is still seen within 0.3 s of showing."""
    counting, pane, trigger, looks = _ready_on_trigger(tmp_path, "slow")
    shown = threading.Timer(2.0, trigger.touch)
    began = time.monotonic()
    shown.start()
    wait_until_ready(counting, pane, is_ready=lambda s: "READY" in s, timeout=20)
    seen = time.monotonic()
    shown.join()
    assert trigger.exists()
    assert seen - began >= 2.0
    assert seen - began < 2.0 + 0.3 + 0.5  # (the print and one look, on a loaded machine)
    assert len(looks) <= 11  # a steady 0.1 s: 20 or more
    gaps = [b - a for a, b in itertools.pairwise(looks)]
    assert max(gaps) < 0.3 + 0.2


def test_a_sessions_report_wakes_the_wait_for_its_start_and_only_its_screen_ends_it(
    backend: TmuxBackend, tmp_path: Path
) -> None:
    """With ``woken`` (the supervisor's: a session's first report, its SessionStart hook)
    the screen is looked at 1 s apart until the report comes, and at once when it does:
    fewer tmux calls than the polls' usual pace, the ready screen seen as soon. A report
    that comes before the ready screen (or a wake left over) ends nothing: the screen alone
    says ready, at the usual pace from the wake on, never in a busy loop."""

    def start(name: str, after: float, report_at: float) -> tuple[list[float], float, float]:
        counting, pane, trigger, looks = _ready_on_trigger(tmp_path, name)
        heard = threading.Event()
        shown = threading.Timer(after, trigger.touch)
        reported = threading.Timer(report_at, heard.set)
        began = time.monotonic()
        shown.start()
        reported.start()
        wait_until_ready(
            counting, pane, is_ready=lambda s: "READY" in s, timeout=20, woken=heard.wait
        )
        seen = time.monotonic()
        shown.join()
        reported.join()
        return looks, began, seen

    # the report comes as the ready screen does (2 s): seen at once, in a few looks
    looks, began, seen = start("woken", 2.0, 2.0)
    assert 2.0 <= seen - began < 2.0 + 0.5
    assert len(looks) <= 5  # (0 s, 1 s, 2 s, the wake's look, one more): the usual pace, 8
    gaps = [b - a for a, b in itertools.pairwise(looks)]
    assert max(gaps) < READY_POLL_UNTIL_WOKEN + 0.2

    # the report comes first (0.3 s) and stays set: the wait goes on until the screen says
    # ready, at the usual pace (at most 0.3 s apart), not in a loop of looks
    looks, began, seen = start("early", 2.0, 0.3)
    assert 2.0 <= seen - began < 2.0 + 0.3 + 0.5
    assert 4 <= len(looks) <= 12
    assert max(b - a for a, b in itertools.pairwise(looks[2:])) < 0.3 + 0.2


def test_the_agents_whose_start_wakes_the_wait_are_those_whose_hooks_report_it() -> None:
    """``reports_start`` (the wait for the ready screen woken by the session's first
    report) holds for exactly the agents whose hooks send SessionStart as they start, as
    each adapter's own hook set up says: with it where none comes, the ready screen would
    be seen up to 1 s late; without it where one comes, polled for nothing."""
    root = Path(__file__).resolve().parent.parent
    plugin_hooks = json.loads((root / "hooks" / "hooks.json").read_text(encoding="utf-8"))
    opencode_plugin = (root / "loop_orchestrator" / "agents" / "opencode_plugin.js").read_text(
        encoding="utf-8"
    )
    sends_start: dict[type[AgentAdapter], bool] = {
        ClaudeAdapter: "SessionStart" in plugin_hooks["hooks"],
        ScriptedAdapter: "SessionStart" in plugin_hooks["hooks"],  # (the same plugin hooks)
        qwen.QwenAdapter: "SessionStart" in qwen.HOOK_EVENTS,
        cline.ClineAdapter: "SessionStart" in cline.HOOKS.values(),
        opencode.OpencodeAdapter: 'send("SessionStart"' in opencode_plugin,
    }
    assert {cls: cls.reports_start for cls in sends_start} == sends_start
    assert set(sends_start.values()) == {True, False}  # (both kinds are there)
    hookless: tuple[type[AgentAdapter], ...] = (
        AiderAdapter,
        CodexAdapter,
        CommandAdapter,
        GeminiAdapter,
        VibeAdapter,
    )
    for cls in hookless:
        assert not cls.uses_hooks and not cls.reports_start  # (no hooks: nothing wakes)


@BOTH_WAYS
def test_a_paste_never_reaches_an_exited_pane_nor_another_runs_and_keys_neither(
    tmux_socket: str, tmp_path: Path, backends: Callable[..., TmuxBackend]
) -> None:
    """tmux 3.3a's server exits when a paste reaches a pane whose program exited, and every
    session on it goes: the server itself checks, in the command that pastes, that the pane
    is this run's and alive (a check in a call before left a window: the deliverer's
    stagger alone is 0.3 s). Keys go only to this run's panes, also judged by the server in
    the call that sends them. A refused paste leaves no buffer behind."""
    first = backends("feat", owner="run-a")
    mine = first.launch(LaunchSpec("a", tmp_path, ["cat"]))
    done = first.launch(LaunchSpec("b", tmp_path, ["true"]))
    wait_for(lambda: not first.state(done).alive, 5, "the second pane to exit")
    with pytest.raises(PaneGoneError, match="its program exited"):
        first.paste(done, "hello")
    assert first.state(mine).alive  # the server lives on, and the run's other session
    second = backends("feat", owner="run-b")  # the same name: another run's backend
    with pytest.raises(PaneGoneError, match="not a pane of session lo-feat"):
        second.paste(mine, "forged-by-b")
    with pytest.raises(PaneGoneError, match="not a pane of session lo-feat"):
        second.send_keys(mine, "x", "Enter")
    with pytest.raises(PaneGoneError, match="not a pane of session lo-other"):
        backends("other").send_keys(mine, "Enter")
    with pytest.raises(PaneGoneError, match="not a pane of session lo-feat"):
        first.paste("%999", "nobody")  # (no such pane)
    assert tmux(tmux_socket, "list-buffers") == ""
    first.paste(mine, "from-a", bracketed=False)
    first.send_keys(mine, "Enter")
    wait_for(lambda: first.capture(mine, 0).count("from-a") == 2, 5, "cat to echo the line")
    assert "forged" not in first.capture(mine, 50)
    # a run tag a tmux format cannot hold as it is: whose pane it is is asked in a call of
    # its own, and the server still judges that the pane is alive in the call that pastes
    dotted = backends("dotted", owner="run.a")
    ended = dotted.launch(LaunchSpec("c", tmp_path, ["true"]))
    wait_for(lambda: not dotted.state(ended).alive, 5, "the dotted run's pane to exit")
    with pytest.raises(PaneGoneError, match="its program exited"):
        dotted.paste(ended, "hello")
    with pytest.raises(PaneGoneError, match="not a pane of session lo-dotted"):
        dotted.paste(mine, "forged-by-dotted")
    assert first.state(mine).alive and tmux(tmux_socket, "list-buffers") == ""


def test_the_servers_judgement_of_whose_pane_it_is_is_the_supervisors(
    tmux_socket: str, tmp_path: Path
) -> None:
    """A paste and keys are judged by the tmux server (``_ours_format``), every other look
    by lo-orch from the pane's fields (``_ours``): one rule written twice, held here to
    the same answers on real panes: this run's, an untagged session's (an earlier lo-orch),
    another run's of the same name, another session's, and by a backend without a tag."""
    from loop_orchestrator.sessions.tmuxargs import PANE_FIELDS, parse_pane_line

    tagged = TmuxBackend("feat", owner="run-a").launch(LaunchSpec("a", tmp_path, ["sleep", "60"]))
    untagged = TmuxBackend("old").launch(LaunchSpec("b", tmp_path, ["sleep", "60"]))
    backends = {
        "feat/run-a": TmuxBackend("feat", owner="run-a"),
        "feat/run-b": TmuxBackend("feat", owner="run-b"),
        "feat/untagged": TmuxBackend("feat"),
        "old/run-a": TmuxBackend("old", owner="run-a"),
        "other/run-a": TmuxBackend("other", owner="run-a"),
    }
    seen: dict[tuple[str, str], bool] = {}
    for label, backend in backends.items():
        fmt = backend._ours_format()
        assert fmt is not None
        for pane in (tagged, untagged):
            info = parse_pane_line(
                tmux(tmux_socket, "display-message", "-p", "-t", pane, PANE_FIELDS).rstrip("\n")
            )
            assert info is not None
            by_server = tmux(tmux_socket, "display-message", "-p", "-t", pane, fmt).strip() == "1"
            assert by_server == backend._ours(info), (label, pane)
            seen[(label, pane)] = by_server
    assert [k for k, ours in seen.items() if ours] == [
        ("feat/run-a", tagged),
        ("feat/untagged", tagged),
        ("old/run-a", untagged),
    ]
    assert TmuxBackend("feat", owner="run.a")._ours_format() is None  # (asked in Python)

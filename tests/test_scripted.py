"""The scripted agent: its script format, its terminal input, and its behaviour in tmux."""

from __future__ import annotations

import contextlib
import json
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.agents import bare_context
from helpers.served import serve, working
from helpers.wait import wait_for

from loop_orchestrator import proc, templating
from loop_orchestrator.agents import scripted as scripted_adapter
from loop_orchestrator.agents.contract import AgentContext
from loop_orchestrator.agents.dialogs import Dialog, answer_dialog, find_dialog
from loop_orchestrator.agents.registry import make_adapter
from loop_orchestrator.agents.scripted import ScriptedAdapter
from loop_orchestrator.config import AgentConfig, Settings
from loop_orchestrator.errors import AgentStartError, ConfigError, DeliveryError
from loop_orchestrator.sessions.delivery import Deliverer
from loop_orchestrator.sessions.tmux import TmuxBackend
from loop_orchestrator.simulator import script as scripts
from loop_orchestrator.simulator.agent import READY_RE, record_dir_for
from loop_orchestrator.simulator.keys import InputParser
from loop_orchestrator.simulator.script import (
    ExitAction,
    HangAction,
    SayAction,
    SignalAction,
    WriteAction,
    load_script,
    parse_script,
)

# script format --------------------------------------------------------------------------


def test_script_short_forms_and_rounds() -> None:
    script = parse_script(
        {
            "default": {"plan": ["hang"]},
            "api": {
                "trust_dialog": True,
                "plan": [{"say": "hi"}, {"signal": "plan_ready"}],
                "implement": [{"write": {"path": "a.py", "content": "x"}}, {"exit": 3}],
            },
        },
        "s.yaml",
    )
    api = script.for_task("api")
    assert api.trust_dialog is True
    assert [type(a) for a in api.actions_for("plan")] == [SayAction, SignalAction]
    assert api.actions_for("plan")[1].signal.phase == "plan_ready"
    # a flat implement list is one round, and the last round repeats
    for round_no in (0, 1, 5):
        assert [type(a) for a in api.actions_for("implement", round_no)] == [
            WriteAction,
            ExitAction,
        ]
    assert [type(a) for a in script.for_task("other").actions_for("plan")] == [HangAction]
    assert parse_script({}, "s").for_task("x").actions_for("implement", 0) == []


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({"t": {"implement": [[{"write": {"path": "x"}}]]}}, "t.implement[0][0].write.content"),
        ({"t": {"plan": [{"bogus": 1}]}}, "t.plan[0]: an action is a mapping with exactly one"),
        ({"t": {"plan": [{"say": "a", "write": {}}]}}, "t.plan[0]: an action is a mapping"),
        ({"t": {"plann": []}}, "t.plann: Extra inputs are not permitted"),
        ({"t": {"plan": [{"sleep": -1}]}}, "t.plan[0].sleep.seconds"),
        ({"t": {"implement": [[], [{"run": {"argv": []}}]]}}, "t.implement[1][0].run.argv"),
        ({"t": {"swallow_first_enter": "maybe"}}, "t.swallow_first_enter"),
    ],
)
def test_script_errors_name_the_field(data: dict[str, Any], where: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_script(data, "s.yaml")
    assert where in info.value.message
    assert info.value.message.startswith("s.yaml: invalid scripted-agent script")


def test_a_script_reads_alike_by_libyaml_and_by_pure_python(tmp_path: Path) -> None:
    """The script is read by libyaml where PyYAML has it (its pure-Python reader took 70 ms
    of a 64-task script, in the supervisor and in every session): the same data as the
    pure-Python safe reader gives, for the demo's script and one with every kind of scalar,
    quoting and block a script may hold."""
    samples = [
        (Path(__file__).parent.parent / "examples" / "demo" / "script.yaml").read_text(
            encoding="utf-8"
        ),
        "default:\n"
        "  plan:\n"
        "    - say: 'it''s \\u00e9t\u00e9: \"quoted\" # not a comment'\n"
        "    - run: {argv: [sh, -c, 'echo 1 && exit 0'], timeout: 1.5}\n"
        "  implement:\n"
        "    - write:\n"
        "        path: a/b.py\n"
        "        text: |\n"
        "          x = 1\n"
        "\n"
        "          y = 'z'\n"
        "    - write:\n"
        "        path: c.txt\n"
        "        text: >-\n"
        "          folded\n"
        "          text\n"
        "    - signal: impl_done\n"
        "t1: {plan: [hang], implement: [~, yes, no, 0o17, 0x1f, 1e3, .inf, 2026-12-06]}\n",
    ]
    # libyaml's reader wherever PyYAML has it (this suite's PyYAML has)
    assert scripts._SAFE_LOADER is (yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader)
    for text in samples:
        assert yaml.load(text, Loader=scripts._SAFE_LOADER) == yaml.load(
            text, Loader=yaml.SafeLoader
        )
    path = tmp_path / "s.yaml"
    path.write_text(samples[0], encoding="utf-8")
    by_python = parse_script(yaml.load(samples[0], Loader=yaml.SafeLoader), str(path))
    assert load_script(path) == by_python


def test_launches_at_once_read_the_script_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every launch validates the script unless its file is unchanged since: the first
    launches of a run come at once, and only one of them reads it (each read all of it)."""
    path = tmp_path / "s.yaml"
    path.write_text("default: {plan: [hang]}\n", encoding="utf-8")
    reads: list[Path] = []

    def slow_read(where: Path, **kwargs: Any) -> None:
        reads.append(where)
        time.sleep(0.2)

    monkeypatch.setattr(scripted_adapter, "load_script", slow_read)
    adapter = ScriptedAdapter(AgentConfig(kind="scripted", script=str(path)), tmp_path)
    ctx = bare_context(tmp_path, Settings())
    launches = [threading.Thread(target=adapter.prepare, args=(ctx,)) for _ in range(6)]
    for launch in launches:
        launch.start()
    for launch in launches:
        launch.join()
    assert reads == [path]
    path.write_text("default: {plan: [hang, hang]}\n", encoding="utf-8")  # changed: read again
    adapter.prepare(ctx)
    assert reads == [path, path]


def test_script_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_script(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("default: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_script(bad)
    bad.write_text("- a list\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="a mapping of task id"):
        load_script(bad)


def test_the_program_in_the_pane_imports_nothing_of_the_supervisors() -> None:
    """The scripted agent starts in every pane of every scripted run (the demo, the tests,
    the benchmarks): its adapter's config models, session backend and dialogs, and
    asyncio, are not what it loads (they were a third of each start's CPU)."""
    code = (
        "import sys\n"
        "import loop_orchestrator.simulator.agent\n"
        "print([m for m in ('loop_orchestrator.config', 'loop_orchestrator.agents.contract',"
        " 'loop_orchestrator.agents.dialogs', 'loop_orchestrator.sessions.backend',"
        " 'loop_orchestrator.agents.scripted', 'asyncio') if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# raw input --------------------------------------------------------------------------------


def test_input_parser_keeps_pastes_whole_across_reads() -> None:
    parser = InputParser()
    text = "héllo\r$(x) `y`\r日本"
    raw = b"\x1b[200~" + text.encode() + b"\x1b[201~\r"
    events: list[tuple[str, str]] = []
    for i in range(len(raw)):  # one byte at a time: every split point
        events += parser.feed(raw[i : i + 1])
    assert events == [("paste", text), ("key", "Enter")]


def test_input_parser_keys_and_text() -> None:
    parser = InputParser()
    events = parser.feed("ab€\x1b[B\x1b[A\x7f\x03".encode())
    assert events == [
        ("text", "ab€"),
        ("key", "Down"),
        ("key", "Up"),
        ("key", "BSpace"),
        ("key", "C-c"),
    ]
    assert parser.feed(b"\x1b") == []  # could be the start of a sequence
    assert parser.flush() == [("key", "Escape")]
    assert parser.feed(b"\x1b[20") == []  # half a paste marker waits
    assert parser.feed(b"0~x\x1b[201~") == [("paste", "x")]


# in tmux ----------------------------------------------------------------------------------

HOOK_RECORDER = """\
#!/bin/sh
# records each hook payload as one line
cat >> "$LO_TEST_HOOK_LOG"
printf '\\n' >> "$LO_TEST_HOOK_LOG"
"""
SIGNAL_RECORDER = """\
#!/bin/sh
printf '%s\\n' "$*" >> "$LO_TEST_SIGNAL_LOG"
"""


class Harness:
    """A scripted agent in a real tmux pane, with a recording plugin and a fake lo-orch."""

    def __init__(
        self, tmp: Path, script: str, *, stop_hook: str | None = None, args: tuple[str, ...] = ()
    ) -> None:
        self.tmp = tmp
        self.backend = TmuxBackend("s")
        self.run_dir = tmp / "repo" / ".orchestration"
        (self.run_dir / "status").mkdir(parents=True)
        self.worktree = tmp / "wt"
        self.worktree.mkdir()
        self.hook_log = tmp / "hooks.jsonl"
        self.signal_log = tmp / "signals.txt"
        plugin = tmp / "plugin"
        (plugin / "hooks").mkdir(parents=True)
        (plugin / "rec.sh").write_text(HOOK_RECORDER, encoding="utf-8")
        command = "sh ${CLAUDE_PLUGIN_ROOT}/rec.sh"
        events = ["SessionStart", "UserPromptSubmit", "Stop", "SessionEnd"]
        hooks: dict[str, Any] = {
            e: [{"hooks": [{"type": "command", "command": command}]}] for e in events
        }
        hooks["SessionStart"][0]["matcher"] = "startup|resume"
        if stop_hook:
            hooks["Stop"][0]["hooks"].append({"type": "command", "command": stop_hook})
        (plugin / "hooks" / "hooks.json").write_text(json.dumps({"hooks": hooks}))
        recorder = tmp / "lo-orch-fake"
        recorder.write_text(SIGNAL_RECORDER, encoding="utf-8")
        self.script = tmp / "script.yaml"
        self.script.write_text(script, encoding="utf-8")
        self.adapter = ScriptedAdapter(
            AgentConfig(
                kind="scripted", script="script.yaml", args=["--plugin-dir", str(plugin), *args]
            ),
            tmp,
        )
        self.ctx = AgentContext.create(
            task="api",
            run_name="s",
            repo=tmp / "repo",
            worktree=self.worktree,
            run_dir=self.run_dir,
            brief_path=self.run_dir / "briefs" / "api.md",
            settings=self.adapter.settings,
            session_id="0f5e8f1c-1111-4222-8333-444455556666",
        )
        self.ctx.env["LO_ORCH_BIN"] = shlex.join(["sh", str(recorder)])
        self.ctx.env["LO_TEST_HOOK_LOG"] = str(self.hook_log)
        self.ctx.env["LO_TEST_SIGNAL_LOG"] = str(self.signal_log)
        self.pane = ""

    def launch(self) -> str:
        self.adapter.prepare(self.ctx)
        self.pane = self.backend.launch(self.adapter.launch_spec(self.ctx, resume=False))
        return self.pane

    def start(self) -> str:
        self.launch()
        self.adapter.wait_ready(self.backend, self.pane, timeout=30)
        return self.pane

    def set_phase(self, phase: str, rework: int = 0) -> None:
        status = {"task": "api", "phase": phase, "rework_count": rework}
        (self.run_dir / "status" / "api.json").write_text(json.dumps(status))

    def received(self) -> list[str]:
        folder = record_dir_for(self.run_dir)
        files = sorted(folder.glob("api-*.txt"), key=lambda p: int(p.stem.split("-")[-1]))
        return [p.read_text(encoding="utf-8") for p in files]

    def hooks(self) -> list[dict[str, Any]]:
        if not self.hook_log.exists():
            return []
        lines = self.hook_log.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def signals(self) -> list[str]:
        if not self.signal_log.exists():
            return []
        return self.signal_log.read_text(encoding="utf-8").splitlines()

    def prompt(self, text: str) -> None:
        count = len(self.received())
        Deliverer().deliver(
            self.backend,
            self.pane,
            text,
            confirmed=lambda: len(self.received()) > count,
            timeout=20,
        )

    def wait_stops(self, count: int) -> None:
        wait_for(
            lambda: sum(h["hook_event_name"] == "Stop" for h in self.hooks()) >= count,
            20,
            f"{count} Stop hooks",
            shown=lambda: self.backend.capture(self.pane, 0),
        )


SCRIPT = """\
api:
  plan:
    - write: {path: PLAN.md, content: "1. model\\n"}
    - signal: {phase: plan_ready, note: "it's planned"}
  implement:
    - - write: {path: app/model.py, content: "X = 1\\n"}
      - run: {argv: [python3, -c, "print('ran ok')"]}
      - say: round zero done
      - signal: impl_done
    - - patch: {path: app/model.py, old: "X = 1", new: "X = 2"}
      - write: {path: tests/test_model.py, content: "def test_x():\\n    pass\\n"}
      - write: {path: ../outside.txt, content: "not owned"}
      - signal: impl_done
"""


def test_phases_and_rounds_drive_the_script_and_hooks_are_claude_shaped(
    tmux_socket: str, tmp_path: Path
) -> None:
    h = Harness(tmp_path, SCRIPT)
    h.start()
    screen = h.backend.capture(h.pane, 0)
    assert "scripted agent (not a real model)" in screen
    assert READY_RE.search(screen)

    h.set_phase("planning")
    h.prompt("Plan the task.\nWrite your plan.\n")
    h.wait_stops(1)
    assert (h.worktree / "PLAN.md").read_text() == "1. model\n"
    assert h.signals() == ["signal plan_ready --note it's planned"]

    h.set_phase("implementing")
    h.prompt("Your plan is approved: go ahead.\nMore text.")
    h.wait_stops(2)
    assert (h.worktree / "app" / "model.py").read_text() == "X = 1\n"
    assert h.signals()[-1] == "signal impl_done"
    assert "ran ok" in h.backend.capture(h.pane, 0)

    for rework in (1, 2):  # round 1, then round 1 again (the last round repeats)
        (h.worktree / "app" / "model.py").write_text("X = 1\n")
        h.set_phase("implementing", rework)
        h.prompt(f"Rework {rework}:\nfix the findings.")
        h.wait_stops(2 + rework)
        assert (h.worktree / "app" / "model.py").read_text() == "X = 2\n"
    assert (h.worktree / "tests" / "test_model.py").read_text().endswith("pass\n")
    assert (tmp_path / "outside.txt").read_text() == "not owned"  # an edit it does not own
    assert len(h.signals()) == 4

    h.set_phase("impl_done")  # a prompt in a phase with nothing scripted does nothing
    h.prompt("Anything else?\nNo.")
    h.wait_stops(5)
    assert len(h.signals()) == 4

    h.backend.paste(h.pane, "/exit")
    h.backend.send_keys(h.pane, "Enter")
    wait_for(lambda: not h.backend.state(h.pane).alive, 20, "the pane to exit")
    assert h.backend.state(h.pane).dead_status == 0

    hooks = h.hooks()
    names = [x["hook_event_name"] for x in hooks]
    assert names[0] == "SessionStart" and names[-1] == "SessionEnd"
    assert names.count("UserPromptSubmit") == 5 and names.count("Stop") == 5
    common = {"session_id", "transcript_path", "cwd", "hook_event_name", "permission_mode"}
    for payload in hooks:
        assert common <= set(payload), payload
        assert payload["session_id"] == "0f5e8f1c-1111-4222-8333-444455556666"
        assert payload["cwd"] == str(h.worktree)
        assert payload["permission_mode"] == "bypassPermissions"
    assert hooks[0]["source"] == "startup"
    submits = [x for x in hooks if x["hook_event_name"] == "UserPromptSubmit"]
    assert submits[0]["prompt"] == "Plan the task.\nWrite your plan.\n"
    stops = [x for x in hooks if x["hook_event_name"] == "Stop"]
    assert stops[1]["last_assistant_message"] == "round zero done"
    assert all(s["stop_hook_active"] is False for s in stops)
    assert hooks[-1]["reason"] == "prompt_input_exit"
    assert Path(hooks[0]["transcript_path"]).exists()
    assert h.received()[0] == "Plan the task.\nWrite your plan.\n"


def test_keywords_choose_the_actions_without_a_status_file(
    tmux_socket: str, tmp_path: Path
) -> None:
    h = Harness(tmp_path, SCRIPT)
    h.start()
    h.prompt("Please plan this change.\nThanks.")
    h.wait_stops(1)
    assert (h.worktree / "PLAN.md").exists()
    assert not (h.worktree / "app").exists()
    h.prompt("Now implement it.\nThanks.")
    h.wait_stops(2)
    assert (h.worktree / "app" / "model.py").read_text() == "X = 1\n"


def test_the_signal_again_prompt_is_answered_with_that_signal_once_more(
    tmux_socket: str, tmp_path: Path
) -> None:
    """lo-orch's request to repeat a report it could not confirm (a restart) makes the
    agent run that signal, as a model does, even though its round's work is done."""
    h = Harness(tmp_path, SCRIPT)
    h.start()
    h.set_phase("implementing")
    h.prompt("Your plan is approved: go ahead.\nMore text.")
    h.wait_stops(1)
    assert h.signals() == ["signal impl_done"]
    again = templating.render("prompt_signal_again.md.j2", task="api", signal="impl_done")
    h.prompt(again)
    h.wait_stops(2)
    assert h.signals() == ["signal impl_done", "signal impl_done"]
    assert (h.worktree / "app" / "model.py").read_text() == "X = 1\n"  # no work redone


def test_a_blocking_stop_hook_is_honoured_a_bounded_number_of_times(
    tmux_socket: str, tmp_path: Path
) -> None:
    h = Harness(tmp_path, "api: {}\n", stop_hook="echo 'signal first' >&2; exit 2")
    h.start()
    h.prompt("hello\nthere")
    h.wait_stops(4)
    stops = [x for x in h.hooks() if x["hook_event_name"] == "Stop"]
    assert [s["stop_hook_active"] for s in stops] == [False, True, True, True]
    assert "signal first" in h.backend.capture(h.pane, 0)


def at_trust_dialog(tmp_path: Path, *args: str) -> tuple[Harness, Dialog]:
    """A scripted agent showing its trust dialog (extra ``args`` for the agent)."""
    h = Harness(tmp_path, "api: {}\n", args=("--trust-dialog", *args))
    h.launch()
    wait_for(
        lambda: "Quick safety check" in h.backend.capture(h.pane, 0),
        20,
        "the trust dialog on the screen",
    )
    dialog = find_dialog(h.backend.capture(h.pane, 0))
    assert dialog is not None
    return h, dialog


def test_trust_dialog_enter_alone_exits_with_status_1(tmux_socket: str, tmp_path: Path) -> None:
    h = Harness(tmp_path, "api: {trust_dialog: true}\n")
    h.launch()
    wait_for(
        lambda: "Yes, I trust this folder" in h.backend.capture(h.pane, 0),
        20,
        "the trust dialog drawn again",
    )
    screen = h.backend.capture(h.pane, 0)
    assert "\u276f 1. No, exit" in screen  # the cursor on "No": Enter alone means No
    assert not h.adapter.is_ready(screen)
    h.backend.send_keys(h.pane, "Enter")
    wait_for(lambda: not h.backend.state(h.pane).alive, 10, "the pane to exit")
    assert h.backend.state(h.pane).dead_status == 1
    assert h.hooks() == []  # no session started


def test_trust_dialog_is_answered_with_yes_by_wait_ready(tmux_socket: str, tmp_path: Path) -> None:
    h, _ = at_trust_dialog(tmp_path)
    h.adapter.wait_ready(h.backend, h.pane, timeout=20)
    assert h.backend.state(h.pane).alive
    wait_for(
        lambda: [x["hook_event_name"] for x in h.hooks()] == ["SessionStart"],
        10,
        "the SessionStart hook",
    )


def test_trust_dialog_mounted_again_while_answering_is_answered_again(
    tmux_socket: str, tmp_path: Path
) -> None:
    """Claude Code 2.1.332 mounts its trust dialog twice, resetting the cursor to "No".

    Enter goes only after the cursor has stayed on "Yes" for ``hold`` seconds; here the
    second mount lands inside that hold, so the answerer must see it and press Down again.
    Pressing Enter as soon as "Yes" shows would have answered the first mount only.
    """
    h, dialog = at_trust_dialog(tmp_path, "--trust-remount-after", "1.5")
    answer_dialog(h.backend, h.pane, dialog, settle=0, hold=2.5)
    wait_for(
        lambda: [x["hook_event_name"] for x in h.hooks()] == ["SessionStart"],
        10,
        "the SessionStart hook",
    )
    events = (record_dir_for(h.run_dir) / "api.events").read_text(encoding="utf-8")
    names = [line.split(" ", 1)[1] for line in events.splitlines()]
    assert names == [
        "trust dialog key Down",
        "trust dialog mounted again",
        "trust dialog key Down",
        "trust dialog key Enter",
    ]


def test_an_agent_exiting_during_a_dialog_fails_at_once_with_its_screen(
    tmux_socket: str, tmp_path: Path
) -> None:
    h, dialog = at_trust_dialog(tmp_path)
    h.backend.send_keys(h.pane, "Escape")  # the user (or a stray key) said no
    wait_for(lambda: not h.backend.state(h.pane).alive, 10, "the pane to exit")
    started = time.monotonic()
    with pytest.raises(AgentStartError) as info:
        answer_dialog(h.backend, h.pane, dialog, settle=0, timeout=30)
    assert time.monotonic() - started < 5  # not after the 30 s timeout
    assert "exited" in info.value.message
    assert "Quick safety check" in info.value.screen


def test_crash_is_seen_with_its_status_and_a_hang_fails_the_next_delivery(
    tmux_socket: str, tmp_path: Path
) -> None:
    h = Harness(tmp_path, "api: {plan: [{say: working}, {exit: 3}], implement: [[hang]]}\n")
    h.start()
    h.set_phase("planning")
    h.prompt("plan\nit")
    wait_for(lambda: not h.backend.state(h.pane).alive, 20, "the pane to exit")
    assert h.backend.state(h.pane).dead_status == 3
    assert "SessionEnd" not in [x["hook_event_name"] for x in h.hooks()]  # a crash

    h.backend.respawn(h.pane, h.adapter.launch_spec(h.ctx, resume=True))
    h.adapter.wait_ready(h.backend, h.pane, timeout=30)
    # the hook runs after the ready screen is drawn: wait for it, do not race it
    wait_for(
        lambda: (
            [x.get("source") for x in h.hooks() if x["hook_event_name"] == "SessionStart"]
            == ["startup", "resume"]
        ),
        10,
        "SessionStart hooks of a startup and a resume",
    )
    h.set_phase("implementing")
    h.prompt("implement\nit")
    wait_for(lambda: "hanging" in h.backend.capture(h.pane, 0), 20, "the agent to say it hangs")
    with pytest.raises(DeliveryError) as info:
        Deliverer().deliver(h.backend, h.pane, "are you there?\nhello", timeout=1, enter_retries=1)
    assert "hanging" in info.value.screen


def test_invalid_script_fails_prepare_and_the_start(tmux_socket: str, tmp_path: Path) -> None:
    h = Harness(tmp_path, "api: {plan: [{write: {path: x}}]}\n")
    with pytest.raises(ConfigError, match=r"api\.plan\[0\]\.write\.content"):
        h.adapter.prepare(h.ctx)
    pane = h.backend.launch(h.adapter.launch_spec(h.ctx, resume=False))
    with pytest.raises(AgentStartError) as info:
        h.adapter.wait_ready(h.backend, pane, timeout=20)
    assert "exited with status 2" in info.value.message
    assert "api.plan[0].write.content" in info.value.screen


def test_adapter_launch_spec_and_factory(tmp_path: Path) -> None:
    settings = Settings.model_validate(
        {"agent": {"kind": "scripted", "script": "demo/script.yaml", "args": ["--x"]}}
    )
    adapter = make_adapter(settings, tmp_path)
    assert isinstance(adapter, ScriptedAdapter)
    assert adapter.uses_hooks is True
    ctx = bare_context(tmp_path, settings)
    spec = adapter.launch_spec(ctx, resume=True)
    assert spec.cwd == tmp_path / "wt"
    assert spec.argv[-5:] == [
        "--script",
        str(tmp_path / "demo" / "script.yaml"),
        "--resume",
        "sid",
        "--x",
    ]
    assert adapter.launch_spec(ctx, resume=False).argv[-3:-1] == ["--session-id", "sid"]
    assert spec.env["LO_ORCH_TASK"] == "api"
    assert spec.env["LO_ORCH_RUN_DIR"] == str(tmp_path / ".orchestration")
    assert spec.env["LO_ORCH_BRIEF"] == str(tmp_path / "b.md")
    # LO_ORCH_BIN runs this lo-orch through sh -c from any folder
    result = proc.run(
        ["sh", "-c", spec.env["LO_ORCH_BIN"] + " --version"], cwd=tmp_path, check=False, timeout=60
    )
    assert result.ok and "lo-orch" in result.stdout, result.stderr
    with pytest.raises(ConfigError, match="needs \\[agent\\] script"):
        ScriptedAdapter(AgentConfig(kind="scripted"), tmp_path)


@pytest.mark.slow
def test_with_the_real_plugin_hooks_and_lo_orch_signal(
    tmux_socket: str, git_repo: Path, stack: contextlib.ExitStack
) -> None:
    """The whole path the supervisor relies on: real hooks.json, `lo-orch hook`/`signal`
    through the inbox, the pane's process tree telling which task reports."""
    from loop_orchestrator.runstate.state import Phase, RunDir, Store

    backend = TmuxBackend("r")
    served = stack.enter_context(
        serve(
            git_repo,
            {"api": {**working(Phase.PLANNING), "session_id": "sid-1"}},
            extra_panes=backend.task_pids,
        )
    )
    served.panes.clear()  # only the real pane speaks for the task
    rundir = RunDir(git_repo)
    store = Store(rundir)
    worktree = rundir.worktree_path("r", "api")
    worktree.mkdir(parents=True)
    (git_repo / "script.yaml").write_text(
        "api:\n  plan:\n    - write: {path: PLAN.md, content: plan}\n"
        "    - signal: {phase: plan_ready, note: done planning}\n",
        encoding="utf-8",
    )
    settings = Settings.model_validate({"agent": {"kind": "scripted", "script": "script.yaml"}})
    adapter = make_adapter(settings, git_repo)  # default plugin dir: this checkout
    ctx = AgentContext.create(
        task="api",
        run_name="r",
        repo=git_repo,
        worktree=worktree,
        run_dir=rundir.root,
        brief_path=rundir.brief_path("api"),
        settings=settings,
        session_id="sid-1",
    )
    pane = backend.launch(adapter.launch_spec(ctx, resume=False))
    adapter.wait_ready(backend, pane, timeout=30)
    wait_for(
        lambda: served.status("api").last_event == "SessionStart",
        20,
        "api's SessionStart to be reported",
    )

    def submitted() -> bool:
        return served.status("api").prompt_submitted_at is not None

    Deliverer().deliver(backend, pane, "Plan it.\nThen signal.", confirmed=submitted, timeout=30)
    wait_for(
        lambda: store.read_status("api").phase == Phase.PLAN_READY,
        30,
        "api to reach plan_ready",
        shown=lambda: backend.capture(pane, 0),
    )
    status = store.read_status("api")
    assert status.note == "done planning"
    assert (worktree / "PLAN.md").read_text() == "plan"
    wait_for(lambda: store.read_status("api").last_event == "Stop", 20, "api's Stop to be reported")
    events = [r.get("hook_event") or r["event"] for r in store.read_ledger()]
    assert "UserPromptSubmit" in events and "signal" in events

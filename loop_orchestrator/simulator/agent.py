"""The scripted agent: a terminal program that imitates Claude Code's surface (its adapter,
which the supervisor uses, is ``agents/scripted.py``).

Run as ``python -m loop_orchestrator.simulator.agent --script FILE [--trust-dialog]
[--plugin-dir DIR] [--session-id ID | --resume ID] [--record-dir DIR] [--task T]``.
It is a stand-in for a model, for tests and the demo, and says so on screen. It exercises
the real session path: an optional trust dialog worded like Claude Code 2.1.332 ("No, exit"
preselected, so Enter alone exits with status 1), a ready prompt box with the prompt
character (U+276F), bracketed paste read from a raw tty (a multi-line paste shows
``[Pasted text #N +K lines]`` and does not submit; a separate Enter does), and the plugin's
hooks run through ``sh -c`` with Claude-shaped JSON on stdin (SessionStart,
UserPromptSubmit, Stop, SessionEnd).

After each prompt it performs the actions of its YAML script (``script.py``) chosen
by the task's phase in ``$LO_ORCH_RUN_DIR/status/$LO_ORCH_TASK.json`` (planning -> ``plan``;
implementing -> ``implement`` round ``rework_count``), else by keywords in the prompt.
lo-orch's "run `... signal X` again" (a restarted supervisor that could not confirm a
report) is answered with that signal, as a model does (``replies.py``).
Every submitted prompt is saved to ``<record-dir>/<task>-<N>.txt`` and notable input
events are appended to ``<record-dir>/<task>.events``. The default record dir
(``record_dir_for``) is ``received/<run>`` beside the transcripts. Its transcripts (one
file a session, never removed: Claude Code keeps its own too) are in
``$LO_ORCH_SCRIPTED_TRANSCRIPTS`` when that is set (the tests, the benchmarks and the demo
set it inside their own temporary trees), else in ``lo-scripted`` in the temporary folder:
places any agent may write, so the sandbox grants the simulator nothing a real agent lacks.
Terminal input is parsed by ``agents/terminal.py``, actions are done by
``scripted_actions.py``, the plugin's hooks run by ``scripted_hooks.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import hashlib
import json
import os
import re
import select
import signal
import sys
import tempfile
import termios
import textwrap
import time
import tty
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from loop_orchestrator import resources
from loop_orchestrator.errors import ConfigError
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.simulator.actions import ActionRunner, ScriptExit
from loop_orchestrator.simulator.keys import InputParser
from loop_orchestrator.simulator.plugin_hooks import Hooks
from loop_orchestrator.simulator.replies import SIGNAL_AGAIN_RE
from loop_orchestrator.simulator.script import (
    SignalAction,
    TaskScript,
    load_script,
)

LABEL = "scripted agent (not a real model)"
#: Claude Code's prompt and menu cursor character (HEAVY RIGHT-POINTING ANGLE ...)
PROMPT = "\u276f"
#: the ready prompt box's input line (the trust dialog's cursor has no box border)
READY_RE = re.compile("^│ " + PROMPT, re.MULTILINE)
#: pastes longer than this, or with a line break, show as a placeholder (as Claude Code)
PLACEHOLDER_CHARS = 800
TRUST_OPTIONS = ("No, exit", "Yes, I trust this folder")
#: seconds after it first appears that the trust dialog is mounted again (2.1.332, measured)
TRUST_REMOUNT_AFTER = 0.15


def transcript_dir() -> Path:
    """The folder of the scripted agents' transcripts (see the module's docstring)."""
    chosen = os.environ.get("LO_ORCH_SCRIPTED_TRANSCRIPTS")
    return Path(chosen) if chosen else Path(tempfile.gettempdir()) / "lo-scripted"


def record_dir_for(run_dir: Path) -> Path:
    """Where a scripted agent of the run in ``run_dir`` records what it got (unless
    ``--record-dir`` says): beside its transcripts (``transcript_dir``), one folder per
    run, never under ``.orchestration/`` (which the sandbox keeps read-only)."""
    digest = hashlib.sha256(str(run_dir.resolve()).encode("utf-8")).hexdigest()[:16]
    return transcript_dir() / "received" / digest


# the program ---------------------------------------------------------------------------


@dataclass
class _Paste:
    number: int
    text: str

    @property
    def placeholder(self) -> str:
        return f"[Pasted text #{self.number} +{len(self.text.splitlines())} lines]"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


@contextlib.contextmanager
def _raw_terminal(fd_in: int, fd_out: int) -> Iterator[None]:
    saved = termios.tcgetattr(fd_in)
    tty.setraw(fd_in)
    _write_all(fd_out, b"\x1b[?2004h\x1b[2J")  # bracketed paste on, like Claude Code
    try:
        yield
    finally:
        _write_all(fd_out, b"\x1b[?2004l\r\n")
        termios.tcsetattr(fd_in, termios.TCSADRAIN, saved)


class ScriptedAgent:
    def __init__(self, args: argparse.Namespace, fd_in: int = 0, fd_out: int = 1) -> None:
        self.fd_in = fd_in
        self.fd_out = fd_out
        self.script_path = Path(args.script)
        self.task = args.task or os.environ.get("LO_ORCH_TASK") or "default"
        self.cwd = Path.cwd()
        self.actions = ActionRunner(self.cwd, self.say)
        run_dir = os.environ.get("LO_ORCH_RUN_DIR")
        self.run_dir = Path(run_dir) if run_dir else None
        self.session_id = args.resume or args.session_id or str(uuid.uuid4())
        self.source = "resume" if args.resume else "startup"
        self.permission_mode = args.permission_mode
        self.force_trust_dialog = bool(args.trust_dialog)
        self.trust_remount_after = float(args.trust_remount_after)
        if args.record_dir:
            self.record_dir: Path | None = Path(args.record_dir)
        else:
            self.record_dir = record_dir_for(self.run_dir) if self.run_dir else None
        self.transcript = transcript_dir() / f"{self.session_id}.jsonl"
        self.log_lines: list[str] = []
        self.segments: list[str | _Paste] = []
        self.paste_count = 0
        self.swallowed = False
        self.done: set[tuple[str, int]] = set()
        self.implement_prompts = 0
        self.mode = "prompt"
        self.selection = 0
        self.dirty = True
        self.resized = False
        self.script = TaskScript()
        self.parser = InputParser()
        plugin_dir = Path(args.plugin_dir) if args.plugin_dir else resources.plugin_dir()
        self.hooks = Hooks(self, plugin_dir)

    # screen --------------------------------------------------------------------------
    def say(self, text: str) -> None:
        self.log_lines.extend(text.split("\n"))
        del self.log_lines[:-500]
        self.dirty = True
        self.draw()

    def _size(self) -> tuple[int, int]:
        try:
            size = os.get_terminal_size(self.fd_out)
        except OSError:
            return 80, 24
        return max(size.columns, 24), max(size.lines, 10)

    def input_display(self) -> str:
        return "".join(s.placeholder if isinstance(s, _Paste) else s for s in self.segments)

    def _wrapped(self, lines: list[str], cols: int) -> list[str]:
        out: list[str] = []
        for line in lines:
            out.extend(textwrap.wrap(line, cols, drop_whitespace=False) or [""])
        return out

    def draw(self) -> None:
        cols, rows = self._size()
        width = cols - 1  # never the last column: writing there arms the terminal's wrap
        header = [f"✻ {LABEL} · task {self.task}", f"  cwd: {self.cwd}"]
        cursor = (1, 1)
        if self.mode == "trust":
            lines = header + self._wrapped(self._trust_lines(), width)
        else:
            inner = width - 4
            content = f"{PROMPT} " + self.input_display()
            if len(content) > inner:
                content = f"{PROMPT} …" + content[-(inner - 3) :]
            box = [
                "╭" + "─" * (width - 2) + "╮",
                "│ " + content.ljust(inner) + " │",
                "╰" + "─" * (width - 2) + "╯",
                f"  ⏵⏵ {self.permission_mode} · {LABEL}",
            ]
            room = rows - len(header) - len(box)
            log_rows = self._wrapped(self.log_lines, width)[-room:] if room > 0 else []
            body = log_rows + [""] * (room - len(log_rows))
            lines = header + body + box
            cursor = (len(header) + len(body) + 2, min(3 + len(content), width))
        lines = lines[:rows]
        frame = "\x1b[H" + "\r\n".join(line[:width] + "\x1b[K" for line in lines) + "\x1b[J"
        frame += f"\x1b[{cursor[0]};{cursor[1]}H"
        _write_all(self.fd_out, frame.encode("utf-8"))
        self.dirty = False

    def _trust_lines(self) -> list[str]:
        options = []
        for index, option in enumerate(TRUST_OPTIONS):
            mark = PROMPT if index == self.selection else " "
            options.append(f" {mark} {index + 1}. {option}")
        return [
            "",
            " Accessing workspace:",
            "",
            f" {self.cwd}",
            "",
            " Quick safety check: Is this a project you created or one you trust?",
            " (Like your own code, a well-known open source project, or work from your team).",
            " If not, take a moment to review what's in this folder first.",
            "",
            f" The {LABEL} will read, edit, and execute files here.",
            "",
            *options,
            "",
            " Enter to confirm · Esc to cancel",
        ]

    # events --------------------------------------------------------------------------
    def _event(self, name: str) -> None:
        if self.record_dir is None:
            return
        self.record_dir.mkdir(parents=True, exist_ok=True)
        with (self.record_dir / f"{self.task}.events").open("a", encoding="utf-8") as fh:
            fh.write(f"{time.time():.3f} {name}\n")

    def _read_events(self, *, ticks: bool = False) -> Iterator[tuple[str, str]]:
        """Input events as they come; redraws on resize and once a second.

        With ``ticks`` a ``("tick", "")`` event comes at least every 50 ms without input.
        """
        last_draw = 0.0
        while True:
            now = time.monotonic()
            if self.dirty or self.resized or now - last_draw > 1.0:
                self.resized = False
                self.draw()
                last_draw = now
            ready, _, _ = select.select([self.fd_in], [], [], 0.05 if ticks else 0.25)
            if not ready:
                yield from self.parser.flush()
                if ticks:
                    yield "tick", ""
                continue
            data = os.read(self.fd_in, 65536)
            if not data:
                raise ScriptExit(0, "other")
            yield from self.parser.feed(data)

    def trust_dialog(self) -> bool:
        """Claude Code 2.1.332's trust dialog, including its second mount.

        The real dialog is mounted again about 0.1 s after it first appears, with "No, exit"
        selected afresh: a Down pressed before that is lost, and an Enter after it exits.
        """
        self.mode, self.selection = "trust", 0
        mounted, remounted = time.monotonic(), False
        for kind, value in self._read_events(ticks=True):
            if not remounted and time.monotonic() - mounted >= self.trust_remount_after:
                remounted, self.selection, self.dirty = True, 0, True
                self._event("trust dialog mounted again")
            if kind == "tick":
                continue
            self.dirty = True
            self._event(f"trust dialog {kind} {value}")
            if kind == "key" and value in ("Up", "Down"):
                self.selection = (self.selection + (1 if value == "Down" else -1)) % 2
            elif kind == "text" and value.strip() in ("1", "2"):
                self.selection = int(value.strip()) - 1
                return self.selection == 1
            elif kind == "key" and value == "Enter":
                return self.selection == 1
            elif kind == "key" and value in ("Escape", "C-c"):
                return False
        return False  # pragma: no cover  _read_events never ends without raising

    def handle(self, kind: str, value: str) -> None:
        self.dirty = True
        if kind == "paste":
            text = value.replace("\r\n", "\n").replace("\r", "\n")
            if "\n" in text or len(text) > PLACEHOLDER_CHARS:
                self.paste_count += 1
                self.segments.append(_Paste(self.paste_count, text))
                self._event(f"paste #{self.paste_count}")
            else:
                self._type(text)
        elif kind == "text":
            self._type(value)
        elif value == "Enter":
            self.on_enter()
        elif value == "BSpace" and self.segments:
            last = self.segments[-1]
            if isinstance(last, _Paste) or len(last) <= 1:
                self.segments.pop()
            else:
                self.segments[-1] = last[:-1]
        elif value == "C-c":
            if not self.segments:
                raise ScriptExit(0, "other")
            self.segments = []
        elif value == "C-d" and not self.segments:
            raise ScriptExit(0, "other")

    def _type(self, text: str) -> None:
        if self.segments and isinstance(self.segments[-1], str):
            self.segments[-1] += text
        else:
            self.segments.append(text)

    def on_enter(self) -> None:
        has_paste = any(isinstance(s, _Paste) for s in self.segments)
        if has_paste and self.script.swallow_first_enter and not self.swallowed:
            self.swallowed = True  # scripted misbehaviour: nothing shows on screen
            self._event("swallowed-enter")
            return
        prompt = "".join(s.text if isinstance(s, _Paste) else s for s in self.segments)
        display = self.input_display()
        self.segments = []
        if not prompt.strip():
            return
        if prompt.strip() in ("/exit", "/quit"):
            raise ScriptExit(0, "prompt_input_exit")
        self.submit(prompt, display)

    # a prompt ------------------------------------------------------------------------
    def submit(self, prompt: str, display: str) -> None:
        self.say(f"{PROMPT} {display}")
        outcome = self.hooks.fire("UserPromptSubmit", prompt=prompt)
        if outcome.blocked:
            self.say(f"  ⎿ prompt blocked by a hook: {outcome.reason}")
            return
        self._record(prompt)
        self._transcript("user", prompt)
        actions, why = self._choose(prompt)
        self.say(f"● {why}")
        last = self.actions.perform(actions)
        self._transcript("assistant", last)
        for attempt in range(4):
            outcome = self.hooks.fire(
                "Stop", stop_hook_active=attempt > 0, last_assistant_message=last
            )
            if not outcome.blocked:
                break
            self.say(f"  ⎿ Stop hook asked to continue: {outcome.reason}")

    def _record(self, prompt: str) -> None:
        self._event("submit")
        if self.record_dir is None:
            return
        self.record_dir.mkdir(parents=True, exist_ok=True)
        count = len(list(self.record_dir.glob(f"{glob.escape(self.task)}-*.txt")))
        atomic_write_text(self.record_dir / f"{self.task}-{count + 1}.txt", prompt)

    def _transcript(self, role: str, text: str) -> None:
        self.transcript.parent.mkdir(parents=True, exist_ok=True)
        with self.transcript.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"type": role, "message": {"role": role, "content": text}}) + "\n")

    def _status(self) -> dict[str, Any] | None:
        if self.run_dir is None:
            return None
        path = self.run_dir / "status" / f"{self.task}.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        return data if isinstance(data, dict) else None

    def _choose(self, prompt: str) -> tuple[list[Any], str]:
        again = SIGNAL_AGAIN_RE.search(prompt)
        if again:
            # asked to say a report again: whatever the phase, the signal it names
            action = SignalAction.model_validate({"signal": {"phase": again.group(1)}})
            return [action], f"asked to signal {again.group(1)} again"
        status = self._status()
        key: tuple[str, int]
        if status is not None:
            phase = str(status.get("phase"))
            rework = int(status.get("rework_count") or 0)
            if phase == "planning":
                key = ("plan", 0)
            elif phase == "implementing":
                key = ("implement", rework)
            else:
                return [], f"phase {phase}: nothing scripted for it"
            source = f"phase {phase}"
        else:
            lowered = prompt.lower()
            if any(word in lowered for word in ("rework", "review", "implement")):
                key = ("implement", self.implement_prompts)
            elif "plan" in lowered:
                key = ("plan", 0)
            else:
                return [], "no phase known and no keyword in the prompt: nothing to do"
            source = "keywords in the prompt"
        if key in self.done:
            return [], f"{key[0]} round {key[1]} was already done in this session"
        self.done.add(key)
        if key[0] == "implement" and status is None:
            self.implement_prompts += 1
        actions = self.script.actions_for("plan" if key[0] == "plan" else "implement", key[1])
        label = "plan" if key[0] == "plan" else f"implement round {key[1]}"
        return actions, f"{label} ({source}): {len(actions)} scripted actions"

    # main ----------------------------------------------------------------------------
    def run(self) -> int:
        try:
            self.script = load_script(self.script_path).for_task(self.task)
        except ConfigError as exc:
            sys.stdout.write(f"{LABEL}\nError: {exc.render()}\n")
            sys.stdout.flush()
            return 2
        if not os.isatty(self.fd_in):
            sys.stderr.write(f"{LABEL}: needs a terminal (run it in a tmux pane)\n")
            return 2
        signal.signal(signal.SIGWINCH, self._on_resize)
        with _raw_terminal(self.fd_in, self.fd_out):
            try:
                if self.force_trust_dialog or self.script.trust_dialog:
                    if not self.trust_dialog():
                        self.mode = "exiting"
                        return 1
                    self.mode = "prompt"
                self.say(f"{LABEL} — session {self.session_id}")
                self.hooks.fire(
                    "SessionStart", subject=self.source, source=self.source, model="scripted"
                )
                self.say("Paste a prompt and press Enter; /exit quits.")
                for kind, value in self._read_events():
                    self.handle(kind, value)
            except ScriptExit as stop:
                if stop.reason is not None:
                    self.hooks.fire("SessionEnd", subject=stop.reason, reason=stop.reason)
                return stop.code
        return 0  # pragma: no cover  the loop only ends by ScriptExit

    def _on_resize(self, signum: int, frame: FrameType | None) -> None:
        self.resized = True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loop_orchestrator.simulator.agent",
        description=f"The {LABEL}: imitates Claude Code's terminal and runs a YAML script.",
    )
    parser.add_argument("--script", required=True, help="the YAML script")
    parser.add_argument("--trust-dialog", action="store_true", help="show the trust dialog")
    parser.add_argument(
        "--trust-remount-after",
        type=float,
        default=TRUST_REMOUNT_AFTER,
        metavar="SECONDS",
        help="when the trust dialog is mounted again, resetting its selection",
    )
    parser.add_argument("--plugin-dir", help="plugin folder whose hooks/hooks.json is run")
    parser.add_argument("--session-id", help="session id (default: a new UUID)")
    parser.add_argument("--resume", metavar="ID", help="resume this session id")
    parser.add_argument("--permission-mode", default="bypassPermissions")
    parser.add_argument("--record-dir", help="where submitted prompts are saved")
    parser.add_argument("--task", help="task id (default: $LO_ORCH_TASK)")
    args = parser.parse_args(argv)
    return ScriptedAgent(args).run()


if __name__ == "__main__":
    sys.exit(main())

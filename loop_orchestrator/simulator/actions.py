"""The scripted agent's actions (``script.py``) done in its working folder: write,
patch, delete, run a command, signal lo-orch, sleep, say, crash (``exit``) or hang. Each
says on screen what it does, as Claude Code's tool calls do.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loop_orchestrator import proc
from loop_orchestrator.errors import LoOrchError
from loop_orchestrator.simulator.script import (
    DeleteAction,
    ExitAction,
    HangAction,
    PatchAction,
    RunAction,
    SayAction,
    SignalAction,
    SleepAction,
    WriteAction,
)


class ScriptExit(Exception):
    """The program ends with ``code``."""

    def __init__(self, code: int, reason: str | None) -> None:
        super().__init__(code)
        self.code = code
        self.reason = reason  # None: a crash, no SessionEnd hook


class ActionFailed(Exception):
    """An action could not be done: the turn stops there, the program goes on."""


class ActionRunner:
    """Does a list of actions in ``cwd``, telling the screen through ``say``."""

    def __init__(self, cwd: Path, say: Callable[[str], None]) -> None:
        self.cwd = cwd
        self.say = say

    def perform(self, actions: list[Any]) -> str:
        """Do ``actions`` in order; the last thing said (what the turn answers)."""
        last = "Done."
        for action in actions:
            try:
                said = self._do(action)
            except ActionFailed as exc:
                self.say(f"  ✗ {exc}")
                return f"Stopped: {exc}"
            if said is not None:
                last = said
        self.say("● Done.")
        return last

    def _path(self, rel: str) -> Path:
        return self.cwd / rel

    def _do(self, action: Any) -> str | None:
        if isinstance(action, WriteAction):
            path = self._path(action.write.path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(action.write.content, encoding="utf-8")
            self.say(f"● Write({action.write.path}) {len(action.write.content)} chars")
        elif isinstance(action, PatchAction):
            path = self._path(action.patch.path)
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as exc:
                msg = f"patch {action.patch.path}: {exc.strerror}"
                raise ActionFailed(msg) from exc
            if action.patch.old not in text:
                msg = f"patch {action.patch.path}: text to replace not found"
                raise ActionFailed(msg)
            path.write_text(text.replace(action.patch.old, action.patch.new, 1), encoding="utf-8")
            self.say(f"● Update({action.patch.path})")
        elif isinstance(action, DeleteAction):
            try:
                self._path(action.delete.path).unlink()
            except OSError as exc:
                msg = f"delete {action.delete.path}: {exc.strerror}"
                raise ActionFailed(msg) from exc
            self.say(f"● Delete({action.delete.path})")
        elif isinstance(action, RunAction):
            self._run(action)
        elif isinstance(action, SignalAction):
            self._signal(action)
        elif isinstance(action, SleepAction):
            self.say(f"● Sleep {action.sleep.seconds:g}s")
            time.sleep(action.sleep.seconds)
        elif isinstance(action, SayAction):
            self.say(f"● {action.say.text}")
            return action.say.text
        elif isinstance(action, ExitAction):
            self.say(f"✗ exiting with status {action.exit.code} (scripted crash)")
            raise ScriptExit(action.exit.code, None)
        elif isinstance(action, HangAction):
            self.say("… hanging: no more output, no input read (scripted misbehaviour)")
            while True:
                time.sleep(3600)
        return None

    def _run(self, action: RunAction) -> None:
        shown = shlex.join(action.run.argv)
        self.say(f"● Bash({shown})")
        try:
            result = proc.run(
                action.run.argv, cwd=self.cwd, timeout=action.run.timeout, check=False
            )
        except LoOrchError as exc:
            msg = f"{shown}: {exc.message}"
            raise ActionFailed(msg) from exc
        status = "timed out" if result.returncode is None else f"exit {result.returncode}"
        tail = (result.stdout + result.stderr).strip().splitlines()[-5:]
        self.say("\n".join([f"  ⎿ {status}", *(f"    {line}" for line in tail)]))
        if action.run.check and not result.ok:
            msg = f"{shown} failed ({status})"
            raise ActionFailed(msg)

    def _signal(self, action: SignalAction) -> None:
        lo_bin = os.environ.get("LO_ORCH_BIN")
        if not lo_bin:
            msg = "cannot signal: LO_ORCH_BIN is not set"
            raise ActionFailed(msg)
        command = f"{lo_bin} signal {shlex.quote(action.signal.phase)}"
        if action.signal.note is not None:
            command += f" --note {shlex.quote(action.signal.note)}"
        for code in action.signal.dispute:
            command += f" --dispute {shlex.quote(code)}"
        self.say(f"● Bash(lo-orch signal {action.signal.phase})")
        result = proc.run(["sh", "-c", command], cwd=self.cwd, timeout=120, check=False)
        if not result.ok:
            detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
            msg = f"signal {action.signal.phase} failed: {detail}"
            raise ActionFailed(msg)
        self.say("  ⎿ signalled")

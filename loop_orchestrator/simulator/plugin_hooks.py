"""The scripted agent's hooks: the commands of a Claude Code plugin's ``hooks.json`` run
through ``sh -c`` with Claude-shaped JSON on stdin, as Claude Code runs them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from loop_orchestrator import proc


class HookHost(Protocol):
    """What the hooks read of the scripted agent running them, and how they speak."""

    session_id: str
    transcript: Path
    cwd: Path
    permission_mode: str

    def say(self, text: str) -> None: ...


@dataclass
class HooksDecision:
    """What the hooks of one event decided: ``blocked`` (with the reason they gave)."""

    blocked: bool = False
    reason: str = ""


class Hooks:
    """The plugin's ``hooks/hooks.json``, run as Claude Code runs them."""

    def __init__(self, agent: HookHost, plugin_dir: Path) -> None:
        self.agent = agent
        self.plugin_dir = plugin_dir
        self.config: dict[str, Any] = {}
        path = plugin_dir / "hooks" / "hooks.json"
        if path.is_file():  # absent: no hooks (as Claude Code with a plugin without hooks)
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                self.config = data.get("hooks", {}) if isinstance(data, dict) else {}
            except (OSError, json.JSONDecodeError) as exc:
                agent.say(f"  ✗ {path} is not valid JSON ({exc}); hooks disabled")

    def _commands(self, event: str, subject: str | None) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        groups = self.config.get(event, [])
        for group in groups if isinstance(groups, list) else []:
            if not isinstance(group, dict):
                continue
            matcher = str(group.get("matcher") or "")
            if matcher not in ("", "*") and subject is not None:
                try:
                    if not re.fullmatch(matcher, subject):
                        continue
                except re.error:
                    if matcher != subject:
                        continue
            for hook in group.get("hooks", []):
                if isinstance(hook, dict) and hook.get("type") == "command" and hook.get("command"):
                    out.append((str(hook["command"]), float(hook.get("timeout", 60))))
        return out

    def fire(self, event: str, subject: str | None = None, **fields: Any) -> HooksDecision:
        agent = self.agent
        payload = {
            "session_id": agent.session_id,
            "transcript_path": str(agent.transcript),
            "cwd": str(agent.cwd),
            "hook_event_name": event,
            "permission_mode": agent.permission_mode,
            **fields,
        }
        commands = self._commands(event, subject)
        if not commands:
            return HooksDecision()
        env = dict(os.environ)
        env["CLAUDE_PROJECT_DIR"] = str(agent.cwd)
        env["CLAUDE_PLUGIN_ROOT"] = str(self.plugin_dir)
        outcome = HooksDecision()
        for command, timeout in commands:
            line = command.replace("${CLAUDE_PLUGIN_ROOT}", str(self.plugin_dir))
            result = proc.run(
                ["sh", "-c", line],
                cwd=agent.cwd,
                env=env,
                input=json.dumps(payload),
                timeout=timeout,
                check=False,
            )
            if result.returncode == 0:
                text = result.stdout.strip()
                if text.startswith("{"):
                    with contextlib.suppress(json.JSONDecodeError):
                        answer = json.loads(text)
                        if isinstance(answer, dict) and answer.get("decision") == "block":
                            outcome = HooksDecision(True, str(answer.get("reason", "")))
                continue
            if result.returncode == 2:
                outcome = HooksDecision(True, result.stderr.strip())
            else:
                status = "timed out" if result.returncode is None else f"exit {result.returncode}"
                detail = (result.stderr.strip().splitlines() or [""])[-1]
                agent.say(f"  ⎿ {event} hook error ({status}) {detail}".rstrip())
        agent.say(f"  ⎿ {event} hook" + (f": blocked: {outcome.reason}" if outcome.blocked else ""))
        return outcome

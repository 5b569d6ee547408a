"""Claude Code headless (``claude -p``) as a read-only planner with a JSON-schema answer.

The command line (Claude Code 2.1.332, see shared/reference/claude-code.md)::

    <agent.command> -p <prompt> --output-format json --json-schema <schema>
        --permission-mode dontAsk --allowedTools Read,Grep,Glob
        --disallowedTools Bash,Edit,Write,NotebookEdit [--model M] [--resume SESSION]

``dontAsk`` denies every tool that is not pre-approved, and only Read, Grep and Glob are:
the planner can read the repository and change nothing. (``plan`` mode was not chosen: it
asks the model to present a plan for approval through its own tool, which a headless run
cannot give.) The JSON result carries ``structured_output`` (the schema-validated answer),
``result`` (text), ``session_id``, ``num_turns``, ``duration_ms``, ``total_cost_usd``,
``is_error`` and ``subtype``; errors become an ``IntakeError`` that says what to do.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loop_orchestrator import proc
from loop_orchestrator.config import Settings
from loop_orchestrator.errors import IntakeError, NotLoggedInError
from loop_orchestrator.intake.trackers import executable_exists

log = logging.getLogger(__name__)

READ_ONLY_TOOLS = "Read,Grep,Glob"
DENIED_TOOLS = "Bash,Edit,Write,NotebookEdit"
#: a headless planning call may read a large repository; it still has to end
TIMEOUT = 1200.0
#: prompts longer than this go on stdin (one argv string is limited to 128 KiB on Linux)
ARGV_PROMPT_LIMIT = 100_000

_LOGIN = re.compile(
    r"not logged in|please run /login|invalid api key|authentication[_ ]failed|"
    r"oauth token (?:has )?expired",
    re.IGNORECASE,
)


class AgentNotLoggedInError(NotLoggedInError, IntakeError):
    """The planning agent (Claude Code) is not logged in."""


@dataclass
class PlanningUsage:
    """What the planning calls cost, summed over calls."""

    calls: int = 0
    turns: int = 0
    duration_ms: int = 0
    cost_usd: float = 0.0
    session_ids: list[str] = field(default_factory=list)

    def add(self, answer: Answer) -> None:
        self.calls += 1
        self.turns += answer.num_turns
        self.duration_ms += answer.duration_ms
        self.cost_usd += answer.cost_usd
        if answer.session_id and answer.session_id not in self.session_ids:
            self.session_ids.append(answer.session_id)

    def line(self) -> str:
        calls = f"{self.calls} call{'s' if self.calls != 1 else ''}"
        turns = f"{self.turns} turn{'s' if self.turns != 1 else ''}"
        session = f", session {self.session_ids[-1]}" if self.session_ids else ""
        return (
            f"Planning agent: {calls}, {turns}, {self.duration_ms / 1000:.1f} s, "
            f"${self.cost_usd:.4f}{session}"
        )


@dataclass(frozen=True)
class Answer:
    """One headless call's JSON result."""

    structured_output: Any
    result: str
    session_id: str | None
    num_turns: int
    duration_ms: int
    cost_usd: float
    raw: dict[str, Any]


def agent_argv(settings: Settings) -> list[str]:
    """The agent's executable and fixed leading arguments, from ``[agent] command``.

    For ``kind = "command"`` or ``"scripted"`` the sessions' command is not Claude Code, so
    planning uses ``claude`` from PATH.
    """
    command = settings.agent.command if settings.agent.kind == "claude" else "claude"
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        msg = f"[agent] command {command!r} cannot be parsed: {exc}"
        raise IntakeError(msg, hint="Fix it in .loop-orchestrator/config.toml.") from exc
    if not argv:
        msg = "[agent] command is empty"
        raise IntakeError(
            msg, hint='Set it, e.g. command = "claude", in .loop-orchestrator/config.toml.'
        )
    return argv


def build_argv(
    settings: Settings, prompt: str | None, schema: dict[str, Any], resume: str | None = None
) -> list[str]:
    """The full headless command line; ``prompt=None`` means it goes on stdin."""
    argv = agent_argv(settings)
    argv.append("-p")
    if prompt is not None:
        argv.append(prompt)
    argv += [
        "--output-format",
        "json",
        "--json-schema",
        json.dumps(schema, separators=(",", ":")),
        "--permission-mode",
        "dontAsk",
        "--allowedTools",
        READ_ONLY_TOOLS,
        "--disallowedTools",
        DENIED_TOOLS,
    ]
    if settings.agent.model:
        argv += ["--model", settings.agent.model]
    if resume:
        argv += ["--resume", resume]
    return argv


def _parse_json_result(stdout: str) -> dict[str, Any] | None:
    """The ``type: result`` object in the output (the whole text, or its last JSON line)."""
    text = stdout.strip()
    candidates = [text] + [
        line for line in reversed(text.splitlines()) if line.lstrip().startswith("{")
    ]
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and ("result" in data or data.get("type") == "result"):
            return data
    return None


def _number(value: Any, kind: type[int] | type[float]) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return kind(0)
    return kind(value)


def _raise_for_error(data: dict[str, Any]) -> None:
    subtype = str(data.get("subtype") or "")
    is_error = bool(data.get("is_error")) or subtype.startswith("error")
    if not is_error:
        return
    result = str(data.get("result") or "")
    errors = data.get("errors")
    detail = "; ".join(str(e) for e in errors) if isinstance(errors, list) else ""
    said = " ".join(x for x in (result, detail) if x).strip()
    if _LOGIN.search(said) or data.get("error") == "authentication_failed":
        msg = f"Claude Code is not logged in (it answered: {said or subtype})"
        raise AgentNotLoggedInError(
            msg,
            hint="Run `claude` in a terminal and type `/login`, then run this command again.",
        )
    if subtype == "error_max_turns":
        msg = (
            f"the planning agent ran out of turns after {data.get('num_turns', '?')} turns "
            "without answering"
        )
        raise IntakeError(
            msg,
            hint="Give a narrower goal, or write the plan file yourself (see examples/plan.yaml) "
            "and run `lo-orch plan FILE`.",
        )
    if subtype == "error_during_execution":
        raise IntakeError(
            "the planning agent failed while running" + (f": {said}" if said else ""),
            hint="Run the same goal again; if it keeps failing, write the plan file yourself.",
        )
    raise IntakeError(
        f"the planning agent reported an error ({subtype or 'is_error'})"
        + (f": {said}" if said else ""),
        hint="Run the same goal again; if it keeps failing, write the plan file yourself.",
    )


def ask(
    repo: Path,
    settings: Settings,
    prompt: str,
    schema: dict[str, Any],
    *,
    resume: str | None = None,
    timeout: float = TIMEOUT,
) -> Answer:
    """One headless call in ``repo``; agent errors become ``IntakeError``."""
    head = agent_argv(settings)
    if not executable_exists(head[0], repo):
        msg = f"the agent command {head[0]!r} was not found"
        raise IntakeError(
            msg,
            hint="Install Claude Code (`npm install -g @anthropic-ai/claude-code`) or set "
            "[agent] command in .loop-orchestrator/config.toml to its path.",
        )
    on_stdin = len(prompt.encode("utf-8")) > ARGV_PROMPT_LIMIT
    argv = build_argv(settings, None if on_stdin else prompt, schema, resume)
    env = dict(os.environ)
    env.update(settings.agent.env)
    log.info("planning agent started", extra={"resume": resume, "stdin": on_stdin})
    result = proc.run(
        argv, cwd=repo, env=env, input=prompt if on_stdin else "", timeout=timeout, check=False
    )
    if result.returncode is None:
        msg = f"the planning agent did not answer within {timeout:g} s"
        raise IntakeError(
            msg,
            hint="Give a narrower goal, or write the plan file yourself.",
        )
    data = _parse_json_result(result.stdout)
    if data is None:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
        if _LOGIN.search(tail):
            msg = "Claude Code is not logged in"
            raise AgentNotLoggedInError(
                msg,
                hint="Run `claude` in a terminal and type `/login`, then run this command again.",
            )
        raise IntakeError(
            f"the planning agent printed no JSON result (exit code {result.returncode})"
            + (f":\n{tail}" if tail else ""),
            hint=f"Check that `{head[0]}` is Claude Code and supports "
            "`-p --output-format json --json-schema`.",
        )
    _raise_for_error(data)
    session = data.get("session_id")
    return Answer(
        structured_output=data.get("structured_output"),
        result=str(data.get("result") or ""),
        session_id=session if isinstance(session, str) and session else None,
        num_turns=_number(data.get("num_turns"), int),
        duration_ms=_number(data.get("duration_ms"), int),
        cost_usd=_number(data.get("total_cost_usd"), float),
        raw=data,
    )

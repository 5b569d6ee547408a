"""The scripted model's replies: which reply a request to a scripted endpoint gets from the
script, whatever the API (``endpoint.py`` serves them as the Messages API; an endpoint for
another API turns a request into a ``Conversation`` and sends each ``Step`` in its own
format). Pure: requests in, replies out.

How a reply is chosen
---------------------
The script is the scripted agent's (``script.py``): one entry per task id
(or ``default``, or an entry whose ``match`` regex the session's first prompt contains).
A session is known by Claude Code's ``X-Claude-Code-Session-Id`` header. Its task is the
one its lo-orch prompts name (``task `ID```). Each user prompt of the conversation (a user
text that is not a ``<system-reminder>`` nor a tool result) selects a list of actions:

- ``Phase: planning`` -> the entry's ``plan``;
- ``Phase: implementing`` -> ``implement`` round 0, ``(rework N)`` -> round N;
- lo-orch's "run `... signal X` again" -> a Bash call of that signal;
- any other prompt -> the entry's ``turns``, in order (a coordinator's conversation).

Each action becomes one reply (``write`` of an existing file and ``patch`` become two: a
Read first, as Claude Code requires): ``write`` -> Write, ``patch`` -> Edit, ``delete``
and ``run`` and ``signal`` -> Bash, ``tool`` -> that tool call, ``say`` -> text before the
next tool call, ``sleep`` -> a delay, ``stop`` -> the turn ends here (what follows is the
answer to a Stop hook that sends the session back), ``api_error``/``drop``/``hang`` -> a
fault served once before the next reply. The reply to a request is the action whose index
is the number of assistant messages since the prompt; when the list is done the turn ends
with a short text. So a ``--resume``d conversation carries on where it was.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loop_orchestrator.simulator.script import (
    ApiErrorAction,
    DeleteAction,
    DropAction,
    ExitAction,
    HangAction,
    PatchAction,
    RunAction,
    SayAction,
    SignalAction,
    SleepAction,
    StopAction,
    ToolAction,
    WriteAction,
)

#: the error type Anthropic's API gives with each status
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


TASK_RE = re.compile(r"\btask `([^`\s]+)`", re.IGNORECASE)
_REWORK_RE = re.compile(r"Phase: implementing \(rework (\d+)\)")
SIGNAL_AGAIN_RE = re.compile(r"run `\$LO_ORCH_BIN signal (\w+)` again")
_CWD_RE = re.compile(r"Primary working directory: (\S+)")
REMINDER = "<system-reminder>"


@dataclass(frozen=True)
class Fault:
    """An answer that is not a reply: an API error, a dropped connection or a hang."""

    kind: str  # "error" | "drop" | "hang"
    status: int = 0
    type: str = ""
    message: str = ""
    retry_after: float | None = None
    #: a usage limit: it resets this many seconds after the answer is sent
    resets_in: float | None = None
    limit: str = "five_hour"

    @classmethod
    def error(
        cls,
        status: int,
        type_: str | None = None,
        message: str | None = None,
        retry_after: float | None = None,
        *,
        resets_in: float | None = None,
        limit: str = "five_hour",
    ) -> Fault:
        kind = type_ or ERROR_TYPES.get(status, "api_error")
        return cls(
            "error", status, kind, message or f"scripted {kind}", retry_after, resets_in, limit
        )

    @classmethod
    def usage_limit(
        cls, resets_in: float, limit: str = "five_hour", retry_after: float | None = None
    ) -> Fault:
        """A subscriber's usage limit, as Anthropic's API answers it: 429 with the unified
        rate-limit headers ``status: rejected``, the ``reset`` time (Unix seconds) and the
        limit hit (``representative-claim``). Claude Code 2.1.332 reads exactly these
        (its ``anthropic-ratelimit-unified-*`` parser) and, with no retry, shows
        ``You've hit your 5-hour limit · resets <time> (<zone>)``. Its ``retry-after`` is
        the time to the reset unless ``retry_after`` says otherwise: under 60 s Claude Code
        waits for the reset and asks again by itself instead of giving up."""
        return cls.error(
            429,
            message="This request would exceed your account's rate limit. Please try again later.",
            retry_after=retry_after,
            resets_in=resets_in,
            limit=limit,
        )

    def limit_headers(self, now: float) -> dict[str, str]:
        """The ``anthropic-ratelimit-unified-*`` headers of a usage-limit answer."""
        if self.resets_in is None:
            return {}
        reset = str(round(now + self.resets_in))
        return {
            "anthropic-ratelimit-unified-status": "rejected",
            "anthropic-ratelimit-unified-reset": reset,
            "anthropic-ratelimit-unified-representative-claim": self.limit,
            "retry-after": str(
                max(0, round(self.resets_in if self.retry_after is None else self.retry_after))
            ),
        }


@dataclass
class Step:
    """One reply of the model: text and at most one tool call, after ``delay`` seconds."""

    text: str = ""
    tool: tuple[str, dict[str, Any]] | None = None
    delay: float = 0.0
    faults: list[Fault] = field(default_factory=list)
    served_faults: int = 0

    @property
    def stop_reason(self) -> str:
        return "tool_use" if self.tool is not None else "end_turn"


@dataclass(frozen=True)
class Conversation:
    """What a request says about its session: prompts, where the last one is, the folder."""

    prompts: list[str]
    #: assistant messages since the last prompt
    replies_since: int
    cwd: str | None

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> Conversation:
        prompts: list[str] = []
        since = 0
        cwd = None
        skill_ids: set[str] = set()
        # a user text with or right after a Skill tool's result is the loaded skill
        # (Claude Code 2.1.332 sends it so), not something the user said
        after_skill = False
        for message in body.get("messages") or []:
            role = message.get("role")
            content = message.get("content")
            blocks = (
                [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
            )
            if role == "assistant":
                since += 1
                skill_ids |= {
                    str(b.get("id"))
                    for b in blocks
                    if b.get("type") == "tool_use" and b.get("name") == "Skill"
                }
                after_skill = False
                continue
            texts = message_texts(content)
            if role == "system":
                for text in texts:
                    found = _CWD_RE.search(text)
                    cwd = found.group(1) if found else cwd
                continue
            results = [b for b in blocks if b.get("type") == "tool_result"]
            if results:
                after_skill = any(str(b.get("tool_use_id")) in skill_ids for b in results)
            spoken = [t for t in texts if not t.lstrip().startswith(REMINDER)]
            # a prompt sent while the model works arrives beside the next tool result
            # ("The user sent a new message while you were working: ...")
            if role == "user" and spoken and not after_skill:
                prompts.append("\n".join(spoken))
                since = 0
            if not results:
                after_skill = False
        if cwd is None:
            found = _CWD_RE.search(json.dumps(body.get("system", "")))
            cwd = found.group(1) if found else None
        return cls(prompts, since, cwd)


def message_texts(content: Any) -> list[str]:
    """The text blocks of a message's content (a plain string is one block)."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]


def classify(prompt: str) -> tuple[str, int]:
    """Which list of actions a prompt selects: (``plan``|``implement``|``signal:X``|
    ``turn``, round)."""
    if "Phase: planning" in prompt:
        return "plan", 0
    rework = _REWORK_RE.search(prompt)
    if rework:
        return "implement", int(rework.group(1))
    if "Phase: implementing" in prompt:
        return "implement", 0
    again = SIGNAL_AGAIN_RE.search(prompt)
    if again:
        return f"signal:{again.group(1)}", 0
    return "turn", 0


def steps_for(actions: list[Any], cwd: str | None, exists: Callable[[str], bool]) -> list[Step]:
    """The replies that carry out ``actions`` in a session whose folder is ``cwd``."""
    steps: list[Step] = []
    text: list[str] = []
    delay = 0.0
    faults: list[Fault] = []

    def path(rel: str) -> str:
        return rel if Path(rel).is_absolute() or cwd is None else str(Path(cwd) / rel)

    def add(tool: tuple[str, dict[str, Any]] | None, *, say: str | None = None) -> None:
        nonlocal delay
        words = [*text, say] if say else text
        steps.append(Step("\n\n".join(words), tool, delay, list(faults)))
        text.clear()
        faults.clear()
        delay = 0.0

    def bash(command: str, what: str, timeout: float | None = None) -> None:
        spec: dict[str, Any] = {"command": command, "description": what}
        if timeout is not None:
            spec["timeout"] = int(min(timeout, 600) * 1000)
        add(("Bash", spec))

    for action in actions:
        if isinstance(action, WriteAction):
            target = path(action.write.path)
            if exists(target):
                add(("Read", {"file_path": target}))
            add(("Write", {"file_path": target, "content": action.write.content}))
        elif isinstance(action, PatchAction):
            target = path(action.patch.path)
            add(("Read", {"file_path": target}))
            add(
                (
                    "Edit",
                    {
                        "file_path": target,
                        "old_string": action.patch.old,
                        "new_string": action.patch.new,
                    },
                )
            )
        elif isinstance(action, DeleteAction):
            bash(f"rm -f -- {shlex.quote(action.delete.path)}", "Delete a file")
        elif isinstance(action, RunAction):
            bash(shlex.join(action.run.argv), "Run a check", action.run.timeout)
        elif isinstance(action, SignalAction):
            command = f"$LO_ORCH_BIN signal {shlex.quote(action.signal.phase)}"
            if action.signal.note:
                command += f" --note {shlex.quote(action.signal.note)}"
            bash(command, "Report to the supervisor")
        elif isinstance(action, ToolAction):
            add((action.tool.name, dict(action.tool.input)))
        elif isinstance(action, SayAction):
            text.append(action.say.text)
        elif isinstance(action, SleepAction):
            delay += action.sleep.seconds
        elif isinstance(action, StopAction):
            add(None, say=action.stop.text)
        elif isinstance(action, ExitAction):
            # the Bash tool's shell is a child of the claude process: a crash without
            # SessionEnd, as the scripted agent's `exit`
            bash("kill -9 $PPID", "Crash (scripted)")
        elif isinstance(action, ApiErrorAction):
            a = action.api_error
            faults.append(
                Fault.error(
                    a.status, a.type, a.message, a.retry_after, resets_in=a.resets_in, limit=a.limit
                )
            )
        elif isinstance(action, DropAction):
            faults.append(Fault("drop"))
        elif isinstance(action, HangAction):
            faults.append(Fault("hang"))
    add(None, say="Done." if not text else None)
    return steps


def last_tool_result(body: Mapping[str, Any]) -> dict[str, Any]:
    """The tool result this request answers, if any: its text (cut) and error flag."""
    for message in reversed(body.get("messages") or []):
        if not isinstance(message, dict) or message.get("role") == "assistant":
            break
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                inner = block.get("content")
                text = inner if isinstance(inner, str) else "\n".join(message_texts(inner))
                return {"result": text[:4000], "result_error": bool(block.get("is_error"))}
        if message.get("role") == "user" and any(
            not t.lstrip().startswith(REMINDER) for t in message_texts(content)
        ):
            break  # it answers a prompt (or a loaded skill), not a tool result
    return {}


def metadata_session(body: Mapping[str, Any]) -> str:
    """The session id a request carries in its metadata (``unknown`` without one)."""
    raw = (body.get("metadata") or {}).get("user_id", "")
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        found = json.loads(raw).get("session_id")
        if found:
            return str(found)
    return "unknown"

"""The scripted model endpoint as the Gemini API, for the real Gemini CLI: a test double,
kept with the tests (the package ships only what ``lo-orch demo`` needs).

The script, the choice of replies and the faults are the simulator's
(``loop_orchestrator.simulator.replies``, served by ``simulator.endpoint.ModelEndpoint``),
as for Claude Code and Codex CLI
(``codex_endpoint.py``). Claude Code's tool calls of a step become Gemini CLI's
``write_file``, ``replace``, ``read_file`` and ``run_shell_command``.

``GeminiEndpoint`` serves ``POST /v1beta/models/<model>:streamGenerateContent`` (and
``generateContent`` for Gemini CLI's side calls); its ``env`` writes a ``settings.json``
choosing API key authentication. Gemini CLI sends no session id: a session is known by its
workspace folder (one worktree per task).
"""

from __future__ import annotations

import http.server
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from helpers.codex_endpoint import codex_call, send_json
from loop_orchestrator.simulator.endpoint import DEFAULT_TOKEN, ModelEndpoint
from loop_orchestrator.simulator.replies import Conversation, Fault, Step
from loop_orchestrator.simulator.serving import drop_or_hang, send_events

#: a user text of Gemini CLI's own (its session context, reminders), not a prompt
_GEMINI_CONTEXT_RE = re.compile(r"^\s*<[a-z_ -]+>")
_GEMINI_CWD_RE = re.compile(r"Workspace Directories:\**\s*\n\s*- (\S[^\n]*)")


def _inside(path: str, cwd: str | None) -> bool:
    if cwd is None:
        return False
    try:
        Path(path).resolve().relative_to(Path(cwd).resolve())
    except ValueError:
        return False
    return True


def gemini_call(tool: tuple[str, dict[str, Any]], cwd: str | None) -> tuple[str, dict[str, Any]]:
    """A Claude Code tool call as Gemini CLI's (name, args).

    Gemini's file tools refuse paths outside its workspace: a Write or Edit elsewhere (the
    run folder) goes through its shell tool, as Codex's does.
    """
    name, spec = tool
    if name in ("Write", "Edit", "Read") and not _inside(str(spec["file_path"]), cwd):
        _, args = codex_call(tool, cwd)
        return "run_shell_command", {"command": args["cmd"], "description": f"{name} a file"}
    if name == "Write":
        return "write_file", {"file_path": spec["file_path"], "content": spec["content"]}
    if name == "Edit":
        return "replace", {
            "file_path": spec["file_path"],
            "old_string": spec["old_string"],
            "new_string": spec["new_string"],
            "instruction": "Apply the scripted edit.",
        }
    if name == "Read":
        return "read_file", {"file_path": spec["file_path"]}
    if name == "Bash":
        args = {"command": spec["command"], "description": spec.get("description") or "Run"}
        return "run_shell_command", args
    return name, dict(spec)


def gemini_conversation(body: Mapping[str, Any]) -> Conversation:
    """A Gemini API request's conversation: user prompts, model replies since, workspace."""
    prompts: list[str] = []
    since = 0
    cwd = None
    for content in body.get("contents") or []:
        if not isinstance(content, dict):
            continue
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
        if content.get("role") == "model":
            since += 1
            continue
        texts = [str(p["text"]) for p in parts if "text" in p]
        for text in texts:
            found = _GEMINI_CWD_RE.search(text)
            cwd = found.group(1).strip() if found and cwd is None else cwd
        spoken = [t for t in texts if not _GEMINI_CONTEXT_RE.match(t)]
        if spoken and not any("functionResponse" in p for p in parts):
            prompts.append("\n".join(spoken))
            since = 0
    return Conversation(prompts, since, cwd)


class GeminiEndpoint(ModelEndpoint):
    """The scripted model as the Gemini API, for the real Gemini CLI."""

    def conversation(self, body: Mapping[str, Any]) -> Conversation:
        return gemini_conversation(body)

    def env(self, gemini_home: Path | None = None) -> dict[str, str]:
        """``GEMINI_CLI_HOME`` whose settings choose API key auth; this endpoint's URL."""
        if gemini_home is None:
            msg = "GeminiEndpoint.env needs the folder to keep Gemini CLI's settings in"
            raise ValueError(msg)
        settings = gemini_home / ".gemini" / "settings.json"
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(
            json.dumps(
                {
                    "security": {"auth": {"selectedType": "gemini-api-key"}},
                    "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
                    "privacy": {"usageStatisticsEnabled": False},
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
        return {
            "GEMINI_CLI_HOME": str(gemini_home),
            "GOOGLE_GEMINI_BASE_URL": self.url,
            "GEMINI_API_KEY": self.token or DEFAULT_TOKEN,
        }

    def handle_post(
        self, handler: http.server.BaseHTTPRequestHandler, raw: bytes, headers: Mapping[str, str]
    ) -> bool:
        base: dict[str, Any] = {"path": handler.path, "user_agent": headers.get("user-agent", "")}
        method = handler.path.split("?", 1)[0].rsplit(":", 1)[-1]
        if "/models/" not in handler.path or method not in (
            "streamGenerateContent",
            "generateContent",
            "countTokens",
        ):
            self._log({**base, "kind": "unknown path", "status": 404})
            _gemini_error(handler, 404, f"no such endpoint {handler.path}")
            return True
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._log({**base, "kind": "bad json", "status": 400})
            _gemini_error(handler, 400, "the body is not JSON")
            return True
        if self.token is not None and headers.get("x-goog-api-key") != self.token:
            self._log({**base, "kind": "unauthorised", "status": 401})
            _gemini_error(handler, 401, "API key not valid")
            return True
        if method == "countTokens":
            send_json(handler, 200, {"totalTokens": max(1, len(raw) // 4)})
            return True
        convo = gemini_conversation(body)
        session_id = convo.cwd or "unknown"
        base["session"] = session_id
        config = body.get("generationConfig") or {}
        if method != "streamGenerateContent" or not body.get("tools"):
            # a side call (routing, a title, a summary): JSON when JSON is asked for
            self._log({**base, "kind": "side call", "status": 200})
            text = "Scripted session"
            if config.get("responseMimeType") == "application/json":
                text = json.dumps(
                    _schema_sample(config.get("responseJsonSchema") or config.get("responseSchema"))
                )
            _gemini_answer(handler, body, Step(text), None, stream=method.startswith("stream"))
            return True
        answer, info = self.answer(session_id, body)
        record = {**base, **info, "messages": len(body.get("contents") or [])}
        if isinstance(answer, Fault):
            self._log({**record, "kind": answer.kind, "status": answer.status or None})
            if answer.kind == "error":
                _gemini_error(handler, answer.status, answer.message)
            else:
                drop_or_hang(handler, answer, self)
            return True
        call = gemini_call(answer.tool, convo.cwd) if answer.tool else None
        self.reply(
            record,
            answer,
            lambda: _gemini_answer(handler, body, answer, call, stream=True),
            call=call[0] if call else None,
        )
        return True


def _schema_sample(schema: Any) -> Any:
    """A value of a JSON schema (Gemini CLI's router asks for a complexity score)."""
    if not isinstance(schema, dict):
        return {}
    kind = str(schema.get("type", "object")).lower()
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: _schema_sample(v) for k, v in props.items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 50
    if kind == "boolean":
        return False
    if schema.get("enum"):
        return schema["enum"][0]
    return "scripted"


def _gemini_error(handler: http.server.BaseHTTPRequestHandler, status: int, message: str) -> None:
    names = {
        400: "INVALID_ARGUMENT",
        401: "UNAUTHENTICATED",
        403: "PERMISSION_DENIED",
        404: "NOT_FOUND",
        429: "RESOURCE_EXHAUSTED",
        500: "INTERNAL",
        503: "UNAVAILABLE",
    }
    send_json(
        handler,
        status,
        {"error": {"code": status, "message": message, "status": names.get(status, "UNKNOWN")}},
    )


def _gemini_answer(
    handler: http.server.BaseHTTPRequestHandler,
    body: Mapping[str, Any],
    step: Step,
    call: tuple[str, dict[str, Any]] | None,
    *,
    stream: bool,
) -> dict[str, int]:
    """Send ``step`` as a Gemini API answer (an SSE stream of one chunk, or JSON)."""
    input_tokens = max(1, len(json.dumps(body.get("contents", []))) // 4)
    parts: list[dict[str, Any]] = []
    if step.text:
        parts.append({"text": step.text})
    if call is not None:
        parts.append({"functionCall": {"name": call[0], "args": call[1]}})
    output_tokens = max(1, len(json.dumps(parts)) // 4)
    chunk = {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {
            "promptTokenCount": input_tokens,
            "candidatesTokenCount": output_tokens,
            "totalTokenCount": input_tokens + output_tokens,
        },
        "modelVersion": str(body.get("model") or "scripted"),
    }
    if not stream:
        send_json(handler, 200, chunk)
    else:
        send_events(handler, [(None, chunk)], end="\r\n\r\n")
    return {"input_tokens": input_tokens, "output_tokens": output_tokens}

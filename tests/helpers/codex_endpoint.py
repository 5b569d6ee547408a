"""The scripted model endpoint as the OpenAI Responses API, for the real Codex CLI: a test
double, kept with the tests (the package ships only what ``lo-orch demo`` needs).

The script, the choice of replies and the faults are the simulator's
(``loop_orchestrator.simulator.replies``, served by ``simulator.endpoint.ModelEndpoint``):
the same YAML drives Claude Code, Codex CLI and Gemini CLI (``gemini_endpoint.py``). Only
the wire differs: how a request tells its session, its prompts and its folder (a
``Conversation``), and how one reply (a ``Step``: text and at most one tool call) is sent.
Codex CLI runs everything through its shell tool ``exec_command``, so Claude Code's tool
calls of a step become shell commands (a Write is a base64 decode into the file, an Edit a
one-line Python replace, a Read a ``cat``).

``ResponsesEndpoint`` serves ``POST /v1/responses`` (streamed); its ``env`` writes a Codex
``config.toml`` with a ``scripted`` model provider pointing here.
"""

from __future__ import annotations

import base64
import http.server
import json
import re
import shlex
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loop_orchestrator.simulator.endpoint import DEFAULT_TOKEN, ModelEndpoint
from loop_orchestrator.simulator.replies import Conversation, Fault, Step
from loop_orchestrator.simulator.serving import drop_or_hang, send_events

#: the environment variable Codex CLI reads the scripted provider's key from
CODEX_KEY_ENV = "LO_ORCH_SCRIPTED_MODEL"
#: a user text of Codex CLI's own (its environment, AGENTS.md, instructions), not a prompt
_CODEX_CONTEXT_RE = re.compile(r"^\s*(<[a-z_ ]+>|# AGENTS\.md instructions)")
_CODEX_CWD_RE = re.compile(r"<cwd>([^<]+)</cwd>")
#: how long exec_command waits for a command before handing back a running session id
CODEX_YIELD_MS = 600_000

_EDIT_PY = (
    "import base64,pathlib,sys;p=pathlib.Path(sys.argv[1]);"
    "o,n=(base64.b64decode(a).decode() for a in sys.argv[2:4]);t=p.read_text();"
    "o in t or sys.exit('the old text is not in '+sys.argv[1]);"
    "p.write_text(t.replace(o,n,1))"
)


def send_json(
    handler: http.server.BaseHTTPRequestHandler,
    status: int,
    data: Any,
    extra: Mapping[str, str] | None = None,
) -> None:
    """Answer ``status`` with ``data`` as JSON (and the ``extra`` headers)."""
    raw = json.dumps(data).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(raw)))
    for key, value in (extra or {}).items():
        handler.send_header(key, value)
    handler.end_headers()
    handler.wfile.write(raw)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def codex_call(tool: tuple[str, dict[str, Any]], cwd: str | None) -> tuple[str, dict[str, Any]]:
    """A Claude Code tool call as Codex CLI's ``exec_command`` call (name, arguments)."""
    name, spec = tool
    if name == "Write":
        path = shlex.quote(str(spec["file_path"]))
        cmd = (
            f'mkdir -p -- "$(dirname -- {path})" && '
            f"printf %s {_b64(str(spec['content']))} | base64 -d > {path}"
        )
    elif name == "Edit":
        cmd = shlex.join(
            [
                "python3",
                "-c",
                _EDIT_PY,
                str(spec["file_path"]),
                _b64(str(spec["old_string"])),
                _b64(str(spec["new_string"])),
            ]
        )
    elif name == "Read":
        cmd = shlex.join(["cat", "--", str(spec["file_path"])])
    elif name == "Bash":
        cmd = str(spec["command"])
    else:
        return name, dict(spec)
    args: dict[str, Any] = {"cmd": cmd, "yield_time_ms": CODEX_YIELD_MS}
    if cwd:
        args["workdir"] = cwd
    return "exec_command", args


def _item_texts(item: Mapping[str, Any]) -> list[str]:
    content = item.get("content")
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [
        str(c.get("text", ""))
        for c in content
        if isinstance(c, dict) and c.get("type") in ("input_text", "output_text", "text")
    ]


def codex_conversation(body: Mapping[str, Any]) -> Conversation:
    """A Responses API request's conversation: user prompts, replies since the last, cwd.

    One reply of the model is the run of output items (message, reasoning, function call)
    between two inputs (a prompt or a tool's output).
    """
    prompts: list[str] = []
    since = 0
    cwd = None
    in_reply = False
    for item in body.get("input") or []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        role = item.get("role")
        if kind == "message" and role in ("user", "developer", "system"):
            texts = _item_texts(item)
            for text in texts:
                found = _CODEX_CWD_RE.search(text)
                cwd = found.group(1).strip() if found else cwd
            spoken = [t for t in texts if not _CODEX_CONTEXT_RE.match(t)]
            if role == "user" and spoken:
                prompts.append("\n".join(spoken))
                since = 0
            in_reply = False
        elif kind.endswith("_output"):
            in_reply = False
        elif not in_reply:  # an assistant message, reasoning, a tool call
            since += 1
            in_reply = True
    return Conversation(prompts, since, cwd)


class ResponsesEndpoint(ModelEndpoint):
    """The scripted model as an OpenAI Responses API, for the real Codex CLI."""

    def conversation(self, body: Mapping[str, Any]) -> Conversation:
        return codex_conversation(body)

    def env(self, codex_home: Path | None = None) -> dict[str, str]:
        """``CODEX_HOME`` with a config whose ``scripted`` provider is this endpoint."""
        if codex_home is None:
            msg = "ResponsesEndpoint.env needs the CODEX_HOME folder to write the config into"
            raise ValueError(msg)
        codex_home.mkdir(parents=True, exist_ok=True)
        config = codex_home / "config.toml"
        config.write_text(
            'model = "scripted"\nmodel_provider = "scripted"\n\n'
            "[model_providers.scripted]\n"
            'name = "lo-orch scripted model"\n'
            f'base_url = "{self.url}/v1"\n'
            f'env_key = "{CODEX_KEY_ENV}"\n'
            'wire_api = "responses"\n'
            "request_max_retries = 0\n"
            "stream_max_retries = 0\n",
            encoding="utf-8",
        )
        return {"CODEX_HOME": str(codex_home), CODEX_KEY_ENV: self.token or DEFAULT_TOKEN}

    def handle_post(
        self, handler: http.server.BaseHTTPRequestHandler, raw: bytes, headers: Mapping[str, str]
    ) -> bool:
        base: dict[str, Any] = {"path": handler.path, "user_agent": headers.get("user-agent", "")}
        if not handler.path.rstrip("/").endswith("/responses"):
            self._log({**base, "kind": "unknown path", "status": 404})
            send_json(
                handler,
                404,
                {
                    "error": {
                        "message": f"no such endpoint {handler.path}",
                        "type": "invalid_request_error",
                    }
                },
            )
            return True
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._log({**base, "kind": "bad json", "status": 400})
            send_json(
                handler,
                400,
                {"error": {"message": "the body is not JSON", "type": "invalid_request_error"}},
            )
            return True
        session_id = headers.get("session-id") or headers.get("thread-id") or "unknown"
        base["session"] = session_id
        if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
            self._log({**base, "kind": "unauthorised", "status": 401})
            send_json(
                handler,
                401,
                {"error": {"message": "invalid api key", "type": "invalid_request_error"}},
            )
            return True
        if not body.get("tools"):
            # a side call (the thread's title, asked with a JSON schema): not a turn
            self._log({**base, "kind": "side call", "status": 200})
            _responses_stream(handler, body, Step(json.dumps({"title": "Scripted session"})), None)
            return True
        answer, info = self.answer(session_id, body)
        record = {**base, **info, "messages": len(body.get("input") or [])}
        if isinstance(answer, Fault):
            self._log({**record, "kind": answer.kind, "status": answer.status or None})
            _responses_fault(handler, answer, self)
            return True
        convo = codex_conversation(body)
        call = codex_call(answer.tool, convo.cwd) if answer.tool else None
        self.reply(
            record,
            answer,
            lambda: _responses_stream(handler, body, answer, call),
            call=call[0] if call else None,
        )
        return True


def _responses_fault(
    handler: http.server.BaseHTTPRequestHandler, fault: Fault, endpoint: ModelEndpoint
) -> None:
    if fault.kind == "error":
        extra = {} if fault.retry_after is None else {"retry-after": f"{fault.retry_after:g}"}
        send_json(
            handler,
            fault.status,
            {"error": {"message": fault.message, "type": fault.type, "code": fault.type}},
            extra,
        )
    else:
        drop_or_hang(handler, fault, endpoint)


def _responses_stream(
    handler: http.server.BaseHTTPRequestHandler,
    body: Mapping[str, Any],
    step: Step,
    call: tuple[str, dict[str, Any]] | None,
) -> dict[str, int]:
    """Send ``step`` as a streamed Responses API answer; the usage reported."""
    input_tokens = max(1, len(json.dumps(body.get("input", []))) // 4)
    stamp = time.monotonic_ns()
    items: list[dict[str, Any]] = []
    if step.text:
        items.append(
            {
                "type": "message",
                "id": f"msg_scripted_{stamp}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": step.text, "annotations": []}],
            }
        )
    if call is not None:
        items.append(
            {
                "type": "function_call",
                "id": f"fc_scripted_{stamp}",
                "call_id": f"call_scripted_{stamp}",
                "name": call[0],
                "arguments": json.dumps(call[1]),
                "status": "completed",
            }
        )
    output_tokens = max(1, len(json.dumps(items)) // 4)
    usage = {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }
    rid = f"resp_scripted_{stamp}"
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": rid, "status": "in_progress"}}
    ]
    for index, item in enumerate(items):
        # only "done" items: Codex CLI 0.171 takes an item whole from them
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append(
        {
            "type": "response.completed",
            "response": {"id": rid, "status": "completed", "output": items, "usage": usage},
        }
    )
    send_events(handler, [(event["type"], event) for event in events])
    return {"input_tokens": input_tokens, "output_tokens": output_tokens}

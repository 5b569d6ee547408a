"""The scripted model endpoint as the OpenAI Chat Completions API, for the agent CLIs that
speak it to a configurable base URL (Qwen Code, opencode, Mistral Vibe, ...).

The script, the choice of replies and the faults are the simulator's (``replies.py``,
served by ``endpoint.ModelEndpoint``): the same YAML drives Claude Code and these CLIs.
Only the wire differs: how a request tells its prompts and its folder (``chat_conversation``)
and how a reply is sent (``chat_stream``: ``data:`` chunks, ``[DONE]``; or one JSON object
without ``stream``). Each CLI names its tools its own way, so a step's tool call is made
with the shell tool the request offers (``shell_call``): a Write is a base64 decode into
the file, an Edit a one-line Python replace, a Read a ``cat``, a Bash the command itself.

``ChatEndpoint`` serves ``POST .../chat/completions``. A request carries no session id in
this API: a session is known by its folder (one worktree per task), else by a header a
CLI sends (``session_header``). Every answer carries OpenAI's ``x-ratelimit-*`` headers; a
scripted 429 or 5xx comes with ``retry-after``, and a usage limit (``resets_in``) as a 429
``insufficient_quota`` whose ``x-ratelimit-reset-requests`` says when it resets.
"""

from __future__ import annotations

import base64
import http.server
import json
import re
import shlex
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from loop_orchestrator.simulator import aider_replies as aider
from loop_orchestrator.simulator.endpoint import DEFAULT_TOKEN, ModelEndpoint
from loop_orchestrator.simulator.replies import Conversation, Fault, Step
from loop_orchestrator.simulator.serving import drop_or_hang, send_events

#: the names CLIs give their shell tool (Qwen Code, opencode/Vibe/Crush, Cline, Codex;
#: Cline's CLI 3.x: ``run_commands``, a list of commands)
SHELL_TOOLS = (
    "run_shell_command",
    "bash",
    "shell",
    "execute_command",
    "exec_command",
    "run_commands",
)
#: the folder a CLI's system prompt or context names (Qwen Code, opencode, Vibe, Claude)
_CWD_RES = (
    re.compile(r"I'm currently working in the directory: (\S+)"),
    re.compile(r"[Ww]orking [Dd]irectory: (\S+)"),
    re.compile(r"<cwd>([^<]+)</cwd>"),
    re.compile(r"Primary working directory: (\S+)"),
    re.compile(r"^Absolute path: (\S+)", re.MULTILINE),
)
#: a user text that is a CLI's own context, not a prompt (a tag first, as Qwen Code's
#: ``<session_context>``, or its "This is the Qwen Code" set-up message)
_CONTEXT_RE = re.compile(r"^\s*(<[a-z_ -]+>|This is the Qwen Code\b)")
#: the requests a minute the headers announce
RATE_LIMIT = 600

_EDIT_PY = (
    "import base64,pathlib,sys;p=pathlib.Path(sys.argv[1]);"
    "o,n=(base64.b64decode(a).decode() for a in sys.argv[2:4]);t=p.read_text();"
    "o in t or sys.exit('the old text is not in '+sys.argv[1]);"
    "p.write_text(t.replace(o,n,1))"
)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def as_shell(tool: tuple[str, dict[str, Any]]) -> str | None:
    """A Claude Code tool call (Write, Edit, Read, Bash) as one shell command; None for
    another tool."""
    name, spec = tool
    if name == "Write":
        path = shlex.quote(str(spec["file_path"]))
        return (
            f'mkdir -p -- "$(dirname -- {path})" && '
            f"printf %s {_b64(str(spec['content']))} | base64 -d > {path}"
        )
    if name == "Edit":
        return shlex.join(
            [
                "python3",
                "-c",
                _EDIT_PY,
                str(spec["file_path"]),
                _b64(str(spec["old_string"])),
                _b64(str(spec["new_string"])),
            ]
        )
    if name == "Read":
        return shlex.join(["cat", "--", str(spec["file_path"])])
    if name == "Bash":
        command = str(spec["command"])
        # Qwen Code 0.15.10 refuses a command whose first word is a variable ("Could not
        # identify command root"), as `$LO_ORCH_BIN signal ...`: a shell runs it instead
        return shlex.join(["sh", "-c", command]) if command.startswith("$") else command
    return None


def _functions(tools: Any) -> dict[str, dict[str, Any]]:
    """The request's function tools: name -> JSON schema of its parameters."""
    found: dict[str, dict[str, Any]] = {}
    for tool in tools if isinstance(tools, list) else []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            found[fn["name"]] = params if isinstance(params, dict) else {}
    return found


def shell_call(tool: tuple[str, dict[str, Any]], offered: Any) -> tuple[str, dict[str, Any]] | None:
    """``tool`` as a call of the shell tool among ``offered`` (a request's ``tools``):
    (name, arguments), the command in its ``command``/``cmd`` property and every other
    required property given a plain value. None when it offers no shell tool; a tool that
    is not Claude Code's (a scripted ``tool`` action) goes as it is."""
    command = as_shell(tool)
    functions = _functions(offered)
    if command is None:
        return tool[0], dict(tool[1])
    name = next((n for n in SHELL_TOOLS for f in functions if f.lower() == n), None)
    if name is None:
        return None
    name = next(f for f in functions if f.lower() == name)
    schema = functions[name]
    props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    assert isinstance(props, dict)
    key = "cmd" if "cmd" in props and "command" not in props else "command"
    args: dict[str, Any] = {key: command}
    listed = props.get("commands")
    if "command" not in props and isinstance(listed, dict) and listed.get("type") == "array":
        args = {"commands": [command]}
    required = schema.get("required")
    for prop in required if isinstance(required, list) else []:
        if prop in args or not isinstance(prop, str):
            continue
        kind = props.get(prop, {}).get("type") if isinstance(props.get(prop), dict) else None
        if kind == "boolean":
            args[prop] = False
        elif kind in ("integer", "number"):
            args[prop] = 600_000 if "timeout" in prop else 0
        else:
            args[prop] = "Run a scripted step"
    return name, args


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [
        str(p.get("text", ""))
        for p in content
        if isinstance(p, dict) and p.get("type") in ("text", "input_text")
    ]


def chat_conversation(body: Mapping[str, Any]) -> Conversation:
    """A Chat Completions request's conversation: user prompts, assistant messages since
    the last, and the folder its system prompt or context names."""
    prompts: list[str] = []
    since = 0
    cwd = None
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        texts = _texts(message.get("content"))
        if role in ("system", "developer", "user"):
            for text in texts:
                for pattern in _CWD_RES:
                    found = pattern.search(text)
                    if found:
                        cwd = found.group(1).strip().rstrip(".")
                        break
        if role == "assistant":
            since += 1
        elif role == "user":
            spoken = [t for t in texts if t.strip() and not _CONTEXT_RE.match(t)]
            if spoken:
                prompts.append("\n".join(spoken))
                since = 0
    return Conversation(prompts, since, cwd)


def usage_of(body: Mapping[str, Any], reply: Any) -> dict[str, int]:
    """The usage figures of a reply (derived from the sizes, as the other endpoints do)."""
    prompt = max(1, len(json.dumps(body.get("messages", []))) // 4)
    completion = max(1, len(json.dumps(reply)) // 4)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def rate_headers(fault: Fault | None, now: float) -> dict[str, str]:
    """OpenAI's ``x-ratelimit-*`` headers: requests left, and when they reset (a usage
    limit: none left until ``resets_in`` from ``now``), and ``retry-after`` of a fault."""
    headers = {
        "x-ratelimit-limit-requests": str(RATE_LIMIT),
        "x-ratelimit-remaining-requests": str(RATE_LIMIT - 1),
        "x-ratelimit-reset-requests": "0.1s",
    }
    if fault is not None and fault.resets_in is not None:
        headers["x-ratelimit-remaining-requests"] = "0"
        headers["x-ratelimit-reset-requests"] = f"{max(0, round(fault.resets_in))}s"
        headers["x-ratelimit-reset-at"] = str(round(now + fault.resets_in))
        headers["retry-after"] = str(max(0, round(fault.resets_in)))
    elif fault is not None and fault.retry_after is not None:
        headers["retry-after"] = f"{fault.retry_after:g}"
    return headers


def error_body(fault: Fault) -> dict[str, Any]:
    """An OpenAI error object for ``fault``: a usage limit is ``insufficient_quota``."""
    if fault.resets_in is not None:
        kind, code = "insufficient_quota", "insufficient_quota"
    elif fault.status == 429:
        kind, code = "rate_limit_exceeded", "rate_limit_exceeded"
    elif fault.status >= 500:
        kind, code = "server_error", None
    else:
        kind, code = "invalid_request_error", None
    return {"error": {"message": fault.message, "type": kind, "param": None, "code": code}}


def completion_chunks(
    body: Mapping[str, Any], step: Step, call: tuple[str, dict[str, Any]] | None
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """``step`` as the chunks of a streamed answer (role, text, the tool call in two
    argument pieces, the finish with the usage), and that usage."""
    stamp = time.monotonic_ns()
    cid = f"chatcmpl-scripted-{stamp}"
    model = str(body.get("model") or "scripted")

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }

    chunks = [chunk({"role": "assistant", "content": ""})]
    if step.text:
        chunks.append(chunk({"content": step.text}))
    if call is not None:
        arguments = json.dumps(call[1])
        half = len(arguments) // 2
        chunks.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": f"call_scripted_{stamp}",
                            "type": "function",
                            "function": {"name": call[0], "arguments": arguments[:half]},
                        }
                    ]
                }
            )
        )
        chunks.append(
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]})
        )
    usage = usage_of(body, [step.text, call])
    chunks.append(chunk({}, "tool_calls" if call is not None else "stop", usage=usage))
    return chunks, usage


def completion_object(
    body: Mapping[str, Any], step: Step, call: tuple[str, dict[str, Any]] | None
) -> tuple[dict[str, Any], dict[str, int]]:
    """``step`` as one ``chat.completion`` object (a request without ``stream``)."""
    stamp = time.monotonic_ns()
    message: dict[str, Any] = {"role": "assistant", "content": step.text or None}
    if call is not None:
        message["tool_calls"] = [
            {
                "id": f"call_scripted_{stamp}",
                "type": "function",
                "function": {"name": call[0], "arguments": json.dumps(call[1])},
            }
        ]
    usage = usage_of(body, [step.text, call])
    return {
        "id": f"chatcmpl-scripted-{stamp}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(body.get("model") or "scripted"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if call is not None else "stop",
            }
        ],
        "usage": usage,
    }, usage


def _send_json(
    handler: http.server.BaseHTTPRequestHandler,
    status: int,
    data: Any,
    headers: Mapping[str, str],
) -> None:
    raw = json.dumps(data).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(raw)))
    for key, value in headers.items():
        handler.send_header(key, value)
    handler.end_headers()
    handler.wfile.write(raw)


class ChatEndpoint(ModelEndpoint):
    """The scripted model as an OpenAI Chat Completions API."""

    #: request headers a CLI names its session in (the folder otherwise)
    session_headers: tuple[str, ...] = (
        "x-session-id",
        "session-id",
        "x-session-affinity",
        "x-affinity",  # Mistral Vibe's session id
    )

    def conversation(self, body: Mapping[str, Any]) -> Conversation:
        return aider.aider_conversation(body) if aider.is_aider(body) else chat_conversation(body)

    def shape(self, body: Mapping[str, Any], steps: list[Step]) -> list[Step]:
        """aider takes one answer a prompt: its steps in one (``aider_replies.combined``)."""
        return [aider.combined(steps, as_shell)] if aider.is_aider(body) else steps

    def aider_env(self, home: Path) -> dict[str, str]:
        """The environment of an aider session on this endpoint: a throwaway ``HOME``
        whose model metadata file knows the scripted model (aider would fetch litellm's
        model list from GitHub for it otherwise), the base URL and the key."""
        home.mkdir(parents=True, exist_ok=True)
        metadata = {
            "openai/scripted": {
                "max_input_tokens": 1_000_000,
                "max_output_tokens": 32_000,
                "input_cost_per_token": 0,
                "output_cost_per_token": 0,
                "litellm_provider": "openai",
                "mode": "chat",
            }
        }
        (home / ".aider.model.metadata.json").write_text(json.dumps(metadata, indent=2), "utf-8")
        return {
            "HOME": str(home),
            "OPENAI_API_KEY": self.token or DEFAULT_TOKEN,
            "AIDER_OPENAI_API_BASE": f"{self.url}/v1",
            "AIDER_MODEL": "openai/scripted",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }

    def qwen_env(self, home: Path) -> dict[str, str]:
        """The environment of a Qwen Code session on this endpoint: a throwaway
        ``QWEN_HOME`` whose settings choose the OpenAI-compatible provider."""
        home.mkdir(parents=True, exist_ok=True)
        settings = {
            "security": {"auth": {"selectedType": "openai"}},
            "general": {"enableAutoUpdate": False},
            "privacy": {"usageStatisticsEnabled": False},
        }
        (home / "settings.json").write_text(json.dumps(settings, indent=2) + "\n", "utf-8")
        return {
            "QWEN_HOME": str(home),
            "OPENAI_API_KEY": self.token or DEFAULT_TOKEN,
            "OPENAI_BASE_URL": f"{self.url}/v1",
            "OPENAI_MODEL": "scripted",
        }

    def cline_env(self, home: Path) -> dict[str, str]:
        """The environment of a Cline CLI session on this endpoint: a throwaway Cline
        folder (``CLINE_DIR``, ``<home>/.cline``) whose data has this endpoint as its
        ``openai-compatible`` provider (what ``cline auth -p openai-compatible -k KEY -m
        scripted -b URL`` writes); its terminal UI's files under ``<home>/.local/share``."""
        settings = home / ".cline" / "data" / "settings"
        settings.mkdir(parents=True, exist_ok=True)
        provider = {
            "provider": "openai-compatible",
            "apiKey": self.token or DEFAULT_TOKEN,
            "model": "scripted",
            "baseUrl": f"{self.url}/v1",
        }
        stored = {
            "version": 1,
            "lastUsedProvider": "openai-compatible",
            "modes": {},
            "providers": {
                "openai-compatible": {
                    "settings": provider,
                    "updatedAt": "2026-01-01T00:00:00.000Z",
                    "tokenSource": "manual",
                }
            },
        }
        (settings / "providers.json").write_text(json.dumps(stored, indent=2) + "\n", "utf-8")
        return {
            "CLINE_DIR": str(home / ".cline"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            # its terminal UI (Bun-compiled) unpacks native libraries into $TMPDIR at every
            # start and never removes them (three files, 40 MB)
            "TMPDIR": str(self.session_tmp()),
        }

    def vibe_env(self, home: Path) -> dict[str, str]:
        """The environment of a Mistral Vibe session on this endpoint: a throwaway
        ``VIBE_HOME`` whose config.toml names it as the provider of the active model."""
        home.mkdir(parents=True, exist_ok=True)
        config = (
            'active_model = "scripted"\n'
            "enable_update_checks = false\n"
            "enable_telemetry = false\n\n"
            "[[providers]]\n"
            'name = "lo-orch"\n'
            f"api_base = {json.dumps(self.url + '/v1')}\n"
            'api_key_env_var = "LO_ORCH_SCRIPTED_KEY"\n\n'
            "[[models]]\n"
            'name = "scripted"\n'
            'provider = "lo-orch"\n'
            'alias = "scripted"\n'
        )
        (home / "config.toml").write_text(config, "utf-8")
        return {"VIBE_HOME": str(home), "LO_ORCH_SCRIPTED_KEY": self.token or DEFAULT_TOKEN}

    def opencode_env(self, home: Path) -> dict[str, str]:
        """The environment of an opencode session on this endpoint: throwaway XDG folders
        under ``home`` whose global config names this endpoint as its provider and model."""
        config = home / "config" / "opencode"
        config.mkdir(parents=True, exist_ok=True)
        provider = {
            "npm": "@ai-sdk/openai-compatible",
            "name": "lo-orch scripted model",
            "options": {"baseURL": f"{self.url}/v1", "apiKey": self.token or DEFAULT_TOKEN},
            "models": {m: {"name": m} for m in self.models()},
        }
        settings = {
            "provider": {"lo-orch": provider},
            "model": "lo-orch/scripted",
            "small_model": "lo-orch/scripted",
        }
        (config / "opencode.json").write_text(json.dumps(settings, indent=2) + "\n", "utf-8")
        # opencode 1.18.33 npm-installs @opencode-ai/plugin (the types of plugins written
        # against it; lo-orch's needs none) into its config folder at start unless that
        # folder's node_modules exists and its package-lock.json names it: a download from
        # the registry that held the first start for 14 to 60 s (its ``Npm.install``)
        (config / "node_modules").mkdir(exist_ok=True)
        lock = {"packages": {"": {"dependencies": {"@opencode-ai/plugin": "*"}}}}
        (config / "package-lock.json").write_text(json.dumps(lock) + "\n", "utf-8")
        env = {f"XDG_{k.upper()}_HOME": str(home / k) for k in ("config", "data", "state", "cache")}
        env["TMPDIR"] = str(self.session_tmp())  # (its native libraries, as Cline's)
        # nothing this provider needs: no fetch of the model list from the network (it
        # fails offline), no other providers' plugins, no skills or CLAUDE.md looked for
        # outside the project, no language servers downloaded (start-up measured at load
        # 13 on 2 cores: 38 s without these, 28 s with them)
        quiet = (
            "MODELS_FETCH",
            "DEFAULT_PLUGINS",
            "EXTERNAL_SKILLS",
            "CLAUDE_CODE",
            "LSP_DOWNLOAD",
        )
        return {**env, **{f"OPENCODE_DISABLE_{name}": "1" for name in quiet}}

    def models(self) -> list[str]:
        """The model names ``GET .../models`` lists."""
        return ["scripted"]

    def session_of(
        self, headers: Mapping[str, str], convo: Conversation, body: Mapping[str, Any] | None = None
    ) -> str:
        if body is not None and aider.is_aider(body):
            return aider.aider_session(convo)
        for name in self.session_headers:
            if headers.get(name):
                return headers[name]
        return convo.cwd or "unknown"

    def handle_get(self, handler: http.server.BaseHTTPRequestHandler) -> bool:
        if not handler.path.rstrip("/").endswith("/models"):
            return False
        data = {
            "object": "list",
            "data": [{"id": m, "object": "model", "owned_by": "lo-orch"} for m in self.models()],
        }
        _send_json(handler, 200, data, {})
        return True

    def handle_post(
        self, handler: http.server.BaseHTTPRequestHandler, raw: bytes, headers: Mapping[str, str]
    ) -> bool:
        base: dict[str, Any] = {"path": handler.path, "user_agent": headers.get("user-agent", "")}
        now = time.time()
        if not handler.path.split("?")[0].rstrip("/").endswith("/chat/completions"):
            self._log({**base, "kind": "unknown path", "status": 404})
            fault = Fault.error(404, message=f"no such endpoint {handler.path}")
            _send_json(handler, 404, error_body(fault), {})
            return True
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._log({**base, "kind": "bad json", "status": 400})
            _send_json(handler, 400, error_body(Fault.error(400, message="not JSON")), {})
            return True
        if not self.authorised(headers):
            self._log({**base, "kind": "unauthorised", "status": 401})
            fault = Fault.error(401, message="Incorrect API key provided")
            _send_json(handler, 401, error_body(fault), {})
            return True
        convo = self.conversation(body)
        session_id = self.session_of(headers, convo, body)
        base["session"] = session_id
        stream = bool(body.get("stream"))
        if not body.get("tools") and not aider.is_aider(body):
            # a side call (a title, a summary, a next-speaker check): not a turn
            self._log({**base, "kind": "side call", "status": 200})
            self._send(handler, body, Step("Scripted session"), None, stream=stream, now=now)
            return True
        answer, info = self.answer(session_id, body)
        record = {**base, **info, "messages": len(body.get("messages") or [])}
        if isinstance(answer, Fault):
            extra = {}
            if answer.resets_in is not None:
                extra = {"resets_at": round(now + answer.resets_in), "limit": answer.limit}
            self._log({**record, "kind": answer.kind, "status": answer.status or None, **extra})
            if answer.kind == "error":
                _send_json(handler, answer.status, error_body(answer), rate_headers(answer, now))
            else:
                drop_or_hang(handler, answer, self)
            return True
        call = shell_call(answer.tool, body.get("tools")) if answer.tool else None
        if answer.tool and call is None:
            names = sorted(_functions(body.get("tools")))
            answer = Step(f"(scripted: no shell tool among {names})")
        logged: dict[str, Any] = {"call": call[0] if call else None}
        if aider.is_aider(body):
            logged["commands"] = aider.shell_commands(answer.text)
        self.reply(
            record,
            answer,
            lambda: self._send(handler, body, answer, call, stream=stream, now=now),
            **logged,
        )
        return True

    def _send(
        self,
        handler: http.server.BaseHTTPRequestHandler,
        body: Mapping[str, Any],
        step: Step,
        call: tuple[str, dict[str, Any]] | None,
        *,
        stream: bool,
        now: float,
    ) -> dict[str, int]:
        if not stream:
            data, usage = completion_object(body, step, call)
            _send_json(handler, 200, data, rate_headers(None, now))
            return usage
        chunks, usage = completion_chunks(body, step, call)
        events: list[tuple[str | None, Any]] = [(None, c) for c in chunks]
        send_events(handler, events, headers=rate_headers(None, now), done="[DONE]")
        return usage


def chunk_texts(chunks: Iterable[Mapping[str, Any]]) -> str:
    """The text a client puts together from streamed chunks (for tests and probes)."""
    return "".join(
        str(c["choices"][0]["delta"].get("content") or "") for c in chunks if c.get("choices")
    )

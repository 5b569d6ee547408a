"""A scripted model endpoint: the Anthropic Messages API on 127.0.0.1, answering the real
Claude Code CLI with replies a script decides.

It stands in for the model's judgement only. Everything else is Claude Code's own: its
tools really run (Write, Edit, Read, Bash in the session's folder), its hooks fire, its
permission modes ask, its Stop hook sends it back. Tests and ``lo-orch demo --agent
claude`` use it; no Claude login and no network is needed.

Which reply a request gets is ``replies.py``'s; this module serves it (each reply's
usage figures derived from the request's size) and logs every request. From the command
line: ``python -m loop_orchestrator.simulator.endpoint --script FILE [--port N]``.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import shlex
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from loop_orchestrator.simulator.replies import (
    TASK_RE,
    Conversation,
    Fault,
    Step,
    classify,
    last_tool_result,
    metadata_session,
    steps_for,
)
from loop_orchestrator.simulator.script import (
    Script,
    SignalAction,
    TaskScript,
    load_script,
)
from loop_orchestrator.simulator.serving import drop_or_hang, send_events

#: what the demo and tests authenticate with (Claude Code sends it as a bearer token)
DEFAULT_TOKEN = "lo-orch-scripted-model"


def gateway_token(expires: int = 4_102_444_800) -> str:
    """A bearer token (``ANTHROPIC_AUTH_TOKEN``) Claude Code 2.1.332 takes for an
    enterprise gateway's: an unsigned JWT with ``aud: claude-gateway`` (its ``S7t``). Like a
    subscriber's login, and unlike an API key, it makes the CLI show a usage-limit answer
    as ``You've hit your 5-hour limit · resets ...`` (with an API key it shows
    ``API Error: Request rejected (429)``). Pass it as ``ModelEndpoint(token=...)``."""
    import base64

    def part(data: dict[str, Any]) -> str:
        raw = json.dumps(data, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    return (
        f"{part({'alg': 'none', 'typ': 'JWT'})}."
        f"{part({'aud': 'claude-gateway', 'exp': expires})}.scripted"
    )


# the server --------------------------------------------------------------------------------


@dataclass
class _Session:
    id: str
    key: str | None = None  # the script entry
    task: str | None = None
    #: (prompt ordinal) -> its replies, made once (a write's Read depends on the disk then)
    steps: dict[int, list[Step]] = field(default_factory=dict)
    turns_used: dict[int, int] = field(default_factory=dict)


class ModelEndpoint:
    """The scripted Messages API on 127.0.0.1 (a thread of this process)."""

    def __init__(
        self,
        script: Script,
        *,
        token: str | None = DEFAULT_TOKEN,
        log_path: Path | None = None,
        port: int = 0,
        cache: bool = False,
        poll_interval: float = 0.5,
    ) -> None:
        """``poll_interval``: how often the server thread looks for ``close()`` (so how
        long a close can take)."""
        self.script = script
        #: report part of each prompt as cache reads and writes (as prompt caching would),
        #: so that all four usage figures are non-zero
        self.cache = cache
        self.token = token
        self.log_path = log_path
        self.requests: list[dict[str, Any]] = []
        self._sessions: dict[str, _Session] = {}
        self._faults: list[tuple[Fault, str | None]] = []
        self._lock = threading.Condition()
        self._closing = threading.Event()
        #: set by ``skip_delays``: replies go out without their scripted ``sleep``
        self._undelayed = threading.Event()
        #: the sessions' temporary folder (``env``), made when first asked for
        self._tmp: Path | None = None
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.endpoint = self
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            args=(poll_interval,),
            name="model-endpoint",
            daemon=True,
        )
        self._thread.start()

    # the outside ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def env(self) -> dict[str, str]:
        """The environment a Claude Code session needs to use this endpoint, offline."""
        env = {
            "ANTHROPIC_BASE_URL": self.url,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            # Claude Code keeps a folder per working folder and session, and its sockets,
            # in $TMPDIR (``claude-<uid>/``, ``cc-socks/``) and never removes them: this
            # endpoint's own folder, removed when it closes
            "TMPDIR": str(self.session_tmp()),
        }
        if self.token is not None:
            env["ANTHROPIC_AUTH_TOKEN"] = self.token
        return env

    def fail(
        self,
        status: int,
        *,
        times: int = 1,
        task: str | None = None,
        retry_after: float | None = None,
        type_: str | None = None,
        resets_in: float | None = None,
    ) -> None:
        """Answer the next ``times`` turn requests (of ``task``, or any) with an API error;
        ``resets_in``: a usage limit that resets that many seconds later (``Fault.usage_limit``;
        ``retry_after``, if given, its ``retry-after`` header)."""
        fault = (
            Fault.usage_limit(resets_in, retry_after=retry_after)
            if resets_in is not None
            else Fault.error(status, type_, None, retry_after)
        )
        with self._lock:
            self._faults += [(fault, task)] * times

    def skip_delays(self) -> None:
        """Send every reply from now on at once, without its scripted ``sleep`` (a pause
        that was only there for the caller to act in, e.g. to kill the agent mid-task: a
        relaunched session asks for the same step again and would wait it out anew)."""
        self._undelayed.set()

    def logged(self, **match: Any) -> list[dict[str, Any]]:
        """The logged requests whose fields equal ``match``."""
        with self._lock:
            return [r for r in self.requests if all(r.get(k) == v for k, v in match.items())]

    def wait_for(self, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float) -> bool:
        """Wait until ``predicate(requests)`` holds; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not predicate(self.requests):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, 0.5))
            return True

    def session_tmp(self) -> Path:
        """The temporary folder of the sessions on this endpoint (removed by ``close``)."""
        with self._lock:
            if self._tmp is None:
                self._tmp = Path(tempfile.mkdtemp(prefix="lo-model-"))
            return self._tmp

    def close(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        with self._lock:
            tmp, self._tmp = self._tmp, None
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # the inside ----------------------------------------------------------------------------
    def _log(self, record: dict[str, Any]) -> None:
        with self._lock:
            record["n"] = len(self.requests) + 1
            record["at"] = round(time.time(), 3)
            self.requests.append(record)
            self._lock.notify_all()
        if self.log_path is not None:
            with self.log_path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")

    def reply(
        self, record: dict[str, Any], answer: Step, send: Callable[[], Any], **extra: Any
    ) -> None:
        """Send a scripted reply (after its delay) with ``send`` and log it with the usage
        ``send`` returns; ``extra`` (the agent's tool call) joins the record."""
        record.update(
            kind="reply",
            status=200,
            stop_reason=answer.stop_reason,
            tool=answer.tool[0] if answer.tool else None,
            tool_input=answer.tool[1] if answer.tool else None,
            **extra,
            text=answer.text[:200],
        )
        if answer.delay and not self._undelayed.is_set():
            self.closing.wait(answer.delay)
        self._log({**record, "usage": send()})

    def authorised(self, headers: Mapping[str, str]) -> bool:
        if self.token is None:
            return True
        bearer = headers.get("authorization", "")
        return bearer == f"Bearer {self.token}" or headers.get("x-api-key") == self.token

    def conversation(self, body: Mapping[str, Any]) -> Conversation:
        """What a request says about its session (an endpoint of another API overrides it)."""
        return Conversation.of(body)

    def shape(self, body: Mapping[str, Any], steps: list[Step]) -> list[Step]:
        """The replies of one prompt as this client takes them (an endpoint for a client
        that answers a prompt in one reply overrides it)."""
        return steps

    def handle_post(
        self, handler: http.server.BaseHTTPRequestHandler, raw: bytes, headers: Mapping[str, str]
    ) -> bool:
        """Serve a POST in another API's way; False: the Messages API below serves it."""
        return False

    def handle_get(self, handler: http.server.BaseHTTPRequestHandler) -> bool:
        """Serve a GET in another API's way (a list of models); False: not found."""
        return False

    def answer(
        self, session_id: str, body: Mapping[str, Any]
    ) -> tuple[Step | Fault, dict[str, Any]]:
        """The answer to one turn request, and what to log about it."""
        convo = self.conversation(body)
        with self._lock:
            session = self._sessions.setdefault(session_id, _Session(session_id))
            if not convo.prompts:
                return Step("Hello."), {"kind": "empty"}
            ordinal = len(convo.prompts)
            prompt = convo.prompts[-1]
            if session.key is None:
                session.key = self.script.matching(convo.prompts[0])
            named = TASK_RE.search(prompt) or TASK_RE.search(convo.prompts[0])
            if named:
                session.task = named.group(1)
            entry = self.script.root.get(session.key or "") or self.script.for_task(session.task)
            kind, round_no = classify(prompt)
            if ordinal not in session.steps:
                actions = self._actions(entry, session, kind, round_no, ordinal)
                steps = steps_for(actions, convo.cwd, os.path.exists)
                session.steps[ordinal] = self.shape(body, steps)
            steps = session.steps[ordinal]
            info = {
                "session": session_id,
                "task": session.task,
                "entry": session.key,
                "prompt": ordinal,
                "prompt_kind": kind,
                "round": round_no,
                "step": convo.replies_since,
            }
            for i, (fault, task) in enumerate(self._faults):
                if task is None or task == session.task:
                    del self._faults[i]
                    return fault, info
            index = convo.replies_since
            if index >= len(steps):
                return Step("Done."), {**info, "extra": True}
            step = steps[index]
            if step.served_faults < len(step.faults):
                step.served_faults += 1
                return step.faults[step.served_faults - 1], info
            return step, info

    def _actions(
        self, entry: TaskScript, session: _Session, kind: str, round_no: int, ordinal: int
    ) -> list[Any]:
        if kind == "plan":
            return entry.actions_for("plan")
        if kind == "implement":
            return entry.actions_for("implement", round_no)
        if kind.startswith("signal:"):
            return [SignalAction.model_validate({"signal": {"phase": kind[7:]}})]
        used = len(session.turns_used)
        session.turns_used[ordinal] = used
        return list(entry.turns[used]) if used < len(entry.turns) else []

    @property
    def closing(self) -> threading.Event:
        return self._closing


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    endpoint: ModelEndpoint


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        self._plain(404, "")

    def do_GET(self) -> None:
        if not self.server.endpoint.handle_get(self):
            self._plain(404, "not found")

    def do_POST(self) -> None:
        endpoint = self.server.endpoint
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        if endpoint.handle_post(self, raw, headers):
            return
        base = {"path": self.path, "user_agent": headers.get("user-agent", "")}
        if not self.path.startswith("/v1/messages"):
            endpoint._log({**base, "kind": "unknown path", "status": 404})
            self._error(Fault.error(404, message=f"no such endpoint {self.path}"))
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            endpoint._log({**base, "kind": "bad json", "status": 400})
            self._error(Fault.error(400, message="the body is not JSON"))
            return
        session_id = headers.get("x-claude-code-session-id") or metadata_session(body)
        base["session"] = session_id
        if not endpoint.authorised(headers):
            endpoint._log({**base, "kind": "unauthorised", "status": 401})
            self._error(Fault.error(401, message="invalid x-api-key"))
            return
        if body.get("tools") == [] or not body.get("stream", False):
            # a side call (a session title, a summary): not a turn of the conversation
            endpoint._log({**base, "kind": "side call", "status": 200})
            self._stream(body, Step("Scripted session"))
            return
        answer, info = endpoint.answer(session_id, body)
        record = {
            **base,
            **info,
            "messages": len(body.get("messages") or []),
            **last_tool_result(body),
        }
        if isinstance(answer, Fault):
            sent_at = time.time()
            limit = answer.limit_headers(sent_at)
            extra = (
                {
                    "resets_at": int(limit["anthropic-ratelimit-unified-reset"]),
                    "limit": answer.limit,
                }
                if limit
                else {}
            )
            endpoint._log({**record, "kind": answer.kind, "status": answer.status or None, **extra})
            self._fault(answer, sent_at)
            return
        endpoint.reply(record, answer, lambda: self._stream(body, answer))

    # answers ---------------------------------------------------------------------------
    def _plain(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, fault: Fault, sent_at: float | None = None) -> None:
        data = json.dumps(
            {"type": "error", "error": {"type": fault.type, "message": fault.message}}
        ).encode()
        self.send_response(fault.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", f"req_scripted_{time.monotonic_ns()}")
        limit = fault.limit_headers(time.time() if sent_at is None else sent_at)
        for name, value in limit.items():
            self.send_header(name, value)
        if fault.retry_after is not None and "retry-after" not in limit:
            self.send_header("retry-after", f"{fault.retry_after:g}")
        if fault.kind == "error" and fault.status != 529:
            self.send_header("x-should-retry", "true" if fault.status >= 429 else "false")
        self.end_headers()
        self.wfile.write(data)

    def _fault(self, fault: Fault, sent_at: float) -> None:
        if fault.kind == "error":
            self._error(fault, sent_at)
        else:
            drop_or_hang(self, fault, self.server.endpoint)

    def _stream(self, body: Mapping[str, Any], step: Step) -> dict[str, int]:
        """Send ``step`` as Claude Code's accepted SSE stream; the usage reported."""
        input_tokens = max(1, len(json.dumps(body.get("messages", []))) // 4)
        blocks: list[dict[str, Any]] = []
        if step.text:
            blocks.append({"type": "text", "text": step.text})
        if step.tool is not None:
            blocks.append({"type": "tool_use", "name": step.tool[0], "input": step.tool[1]})
        output_tokens = max(1, len(json.dumps(blocks)) // 4)
        cache_read = cache_write = 0
        if self.server.endpoint.cache:
            cache_read, cache_write = input_tokens * 3 // 5, input_tokens // 5 + 1
            input_tokens = max(1, input_tokens - cache_read - cache_write + 1)
        usage = {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": cache_write,
            "cache_read_input_tokens": cache_read,
        }
        mid = f"msg_scripted_{time.monotonic_ns()}"
        events: list[tuple[str, dict[str, Any]]] = [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": mid,
                        "type": "message",
                        "role": "assistant",
                        "model": body.get("model", "scripted"),
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {**usage, "output_tokens": 1},
                    },
                },
            ),
            ("ping", {"type": "ping"}),
        ]
        for i, block in enumerate(blocks):
            start: dict[str, Any]
            delta: dict[str, Any]
            if block["type"] == "text":
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                start = {
                    "type": "tool_use",
                    "id": f"toolu_scripted_{time.monotonic_ns()}",
                    "name": block["name"],
                    "input": {},
                }
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            events += [
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": i, "content_block": start},
                ),
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": i, "delta": delta},
                ),
                ("content_block_stop", {"type": "content_block_stop", "index": i}),
            ]
        events += [
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": step.stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": output_tokens},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        send_events(self, events)
        return usage


@contextlib.contextmanager
def serving(script_path: Path, **kwargs: Any) -> Iterator[ModelEndpoint]:
    """A ``ModelEndpoint`` for the script in ``script_path`` (ConfigError if invalid)."""
    endpoint = ModelEndpoint(load_script(script_path, model=True), **kwargs)
    try:
        yield endpoint
    finally:
        endpoint.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loop_orchestrator.simulator.endpoint",
        description="Serve a scripted model on 127.0.0.1 for the real Claude Code CLI.",
    )
    parser.add_argument("--script", type=Path, required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", type=Path, default=None, help="append requests as JSON lines")
    args = parser.parse_args(argv)
    with serving(args.script, port=args.port, log_path=args.log) as endpoint:
        print(f"scripted model endpoint: {endpoint.url}", flush=True)
        for key, value in endpoint.env().items():
            print(f"  export {key}={shlex.quote(value)}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())

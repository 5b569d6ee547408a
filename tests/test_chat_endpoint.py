"""The scripted OpenAI Chat Completions endpoint (``simulator/chat_endpoint.py``) over real
HTTP on 127.0.0.1: streamed and whole answers, tool calls made with the shell tool the
request offers, usage, rate-limit headers, scripted 429/5xx and usage limits."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loop_orchestrator.simulator.chat_endpoint import (
    ChatEndpoint,
    chat_conversation,
    chunk_texts,
    shell_call,
)
from loop_orchestrator.simulator.endpoint import DEFAULT_TOKEN
from loop_orchestrator.simulator.script import load_script

SCRIPT = """\
tokenize:
  plan:
    - say: "planning tokenize"
    - write: {path: notes/plan.md, content: "the plan\\n"}
    - signal: {phase: plan_ready}
  implement:
    - api_error: {status: 503}
    - run: {argv: [python3, -c, "print(1)"]}
"""

QWEN_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_shell_command",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string"},
                    "is_background": {"type": "boolean"},
                    "description": {"type": "string"},
                },
                "required": ["command", "is_background"],
            },
        },
    },
    {"type": "function", "function": {"name": "read_file", "parameters": {}}},
]


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[ChatEndpoint]:
    script = tmp_path / "script.yaml"
    script.write_text(SCRIPT, encoding="utf-8")
    with ChatEndpoint(load_script(script, model=True), poll_interval=0.05) as ep:
        yield ep


def _body(prompts: list[str], cwd: str, *, stream: bool = True, tail: Any = ()) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "This is the Qwen Code. We are setting up the context for our chat.\n"
                    f"I'm currently working in the directory: {cwd}\n",
                }
            ],
        },
        {"role": "assistant", "content": "Got it. Thanks for the context!"},
    ]
    for prompt in prompts:
        messages.append({"role": "user", "content": prompt})
    messages += list(tail)
    return {"model": "scripted", "stream": stream, "messages": messages, "tools": QWEN_TOOLS}


def _post(
    ep: ChatEndpoint, body: dict[str, Any], *, token: str = DEFAULT_TOKEN
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(
        f"{ep.url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def _chunks(raw: bytes) -> list[dict[str, Any]]:
    lines = [ln[6:] for ln in raw.decode().split("\n\n") if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(ln) for ln in lines[:-1]]


def _call_args(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    deltas = [c["choices"][0]["delta"].get("tool_calls") for c in chunks]
    return dict(json.loads("".join(d[0]["function"]["arguments"] for d in deltas if d)))


def test_a_streamed_turn_calls_the_offered_shell_tool_with_its_required_arguments(
    endpoint: ChatEndpoint, tmp_path: Path
) -> None:
    cwd = str(tmp_path / "wt")
    status, headers, raw = _post(endpoint, _body(["Phase: planning of task `tokenize`"], cwd))
    assert status == 200 and headers["content-type"] == "text/event-stream"
    assert headers["x-ratelimit-limit-requests"] == "600"
    chunks = _chunks(raw)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunk_texts(chunks) == "planning tokenize"
    calls = [c["choices"][0]["delta"].get("tool_calls") for c in chunks]
    pieces = [c[0] for c in calls if c]
    # the arguments come in two pieces, as a model streams them; joined they are JSON
    assert len(pieces) == 2 and pieces[0]["function"]["name"] == "run_shell_command"
    args = json.loads("".join(p["function"]["arguments"] for p in pieces))
    assert args["is_background"] is False
    assert f"base64 -d > {cwd}/notes/plan.md" in args["command"]
    last = chunks[-1]
    assert last["choices"][0]["finish_reason"] == "tool_calls"
    assert last["usage"]["prompt_tokens"] > 0 and last["usage"]["total_tokens"] == (
        last["usage"]["prompt_tokens"] + last["usage"]["completion_tokens"]
    )
    (reply,) = endpoint.logged(kind="reply")
    assert reply["session"] == cwd and reply["task"] == "tokenize" and reply["prompt"] == 1
    assert reply["call"] == "run_shell_command" and reply["usage"] == last["usage"]


def test_the_next_reply_follows_the_tool_result_and_a_signal_runs_through_a_shell(
    endpoint: ChatEndpoint, tmp_path: Path
) -> None:
    cwd = str(tmp_path / "wt")
    tail = [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "type": "function"}]},
        {"role": "tool", "tool_call_id": "1", "content": "ok"},
    ]
    _, _, raw = _post(endpoint, _body(["Phase: planning of task `tokenize`"], cwd, tail=tail))
    args = _call_args(_chunks(raw))
    # a command whose first word is a variable goes through sh -c (Qwen Code refuses it)
    assert args["command"] == "sh -c '$LO_ORCH_BIN signal plan_ready'"


def test_a_whole_answer_without_stream_and_a_side_call(
    endpoint: ChatEndpoint, tmp_path: Path
) -> None:
    body = _body(["Phase: planning of task `tokenize`"], str(tmp_path), stream=False)
    status, _, raw = _post(endpoint, body)
    data = json.loads(raw)
    assert status == 200 and data["object"] == "chat.completion"
    choice = data["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "run_shell_command"
    assert data["usage"]["completion_tokens"] > 0
    side = {"model": "scripted", "messages": [{"role": "user", "content": "title?"}]}
    status, _, raw = _post(endpoint, side)
    assert status == 200 and json.loads(raw)["choices"][0]["finish_reason"] == "stop"
    assert [r["kind"] for r in endpoint.requests] == ["reply", "side call"]


def test_scripted_errors_come_with_openai_bodies_and_rate_limit_headers(
    endpoint: ChatEndpoint, tmp_path: Path
) -> None:
    cwd = str(tmp_path / "wt")
    prompts = ["Phase: planning of task `tokenize`", "Phase: implementing task `tokenize`"]
    # the script's api_error before the implement step: a 503, served once
    status, _, raw = _post(endpoint, _body(prompts, cwd))
    assert status == 503 and json.loads(raw)["error"]["type"] == "server_error"
    status, _, raw = _post(endpoint, _body(prompts, cwd))
    assert status == 200 and "python3" in raw.decode()
    endpoint.fail(429, retry_after=7)
    status, headers, raw = _post(endpoint, _body(prompts, cwd))
    assert status == 429 and headers["retry-after"] == "7"
    assert json.loads(raw)["error"]["code"] == "rate_limit_exceeded"
    endpoint.fail(429, resets_in=3600)
    status, headers, raw = _post(endpoint, _body(prompts, cwd))
    assert status == 429 and json.loads(raw)["error"]["code"] == "insufficient_quota"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-reset-requests"] == "3600s" and headers["retry-after"] == "3600"
    logged = endpoint.logged(kind="error")
    assert [r["status"] for r in logged] == [503, 429, 429] and logged[-1]["limit"] == "five_hour"
    status, _, _ = _post(endpoint, _body(prompts, cwd), token="wrong")
    assert status == 401


def test_conversation_skips_the_cli_context_and_counts_replies_since_the_prompt() -> None:
    body = _body(
        ["Phase: planning of task `a`", "Phase: implementing task `a`"],
        "/w/t",
        tail=[{"role": "assistant", "content": "x"}, {"role": "tool", "content": "r"}],
    )
    convo = chat_conversation(body)
    assert convo.prompts == ["Phase: planning of task `a`", "Phase: implementing task `a`"]
    assert convo.replies_since == 1 and convo.cwd == "/w/t"


def test_shell_call_fits_each_clis_shell_tool() -> None:
    opencode = [
        {
            "type": "function",
            "function": {
                "name": "bash",
                "parameters": {
                    "properties": {"command": {}, "description": {}, "timeout": {"type": "number"}},
                    "required": ["command", "description", "timeout"],
                },
            },
        }
    ]
    name, args = shell_call(("Read", {"file_path": "/a b"}), opencode) or ("", {})
    assert name == "bash" and args["command"] == "cat -- '/a b'"
    assert args["description"] and args["timeout"] == 600_000
    codex = [
        {
            "type": "function",
            "function": {"name": "exec_command", "parameters": {"properties": {"cmd": {}}}},
        }
    ]
    assert shell_call(("Bash", {"command": "ls"}), codex) == ("exec_command", {"cmd": "ls"})
    assert shell_call(("Bash", {"command": "ls"}), [QWEN_TOOLS[1]]) is None
    # a scripted call of a tool of the CLI's own goes as it is
    assert shell_call(("todo_write", {"x": 1}), []) == ("todo_write", {"x": 1})


def test_models_are_listed(endpoint: ChatEndpoint) -> None:
    with urllib.request.urlopen(f"{endpoint.url}/v1/models", timeout=5) as answer:
        assert json.loads(answer.read())["data"][0]["id"] == "scripted"

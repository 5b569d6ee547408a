"""The scripted model endpoint over real HTTP: the stream Claude Code accepts, which reply a
request gets, faults, usage and the request log. (Driving the real CLI with it:
tests/test_claude_runs.py.)"""

from __future__ import annotations

import http.client
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from loop_orchestrator.errors import ConfigError
from loop_orchestrator.simulator.endpoint import DEFAULT_TOKEN, ModelEndpoint
from loop_orchestrator.simulator.replies import Conversation, classify
from loop_orchestrator.simulator.script import load_script, parse_script

#: the endpoint's server looks for close() this often (0.5 s by default: every teardown
#: would wait that long)
FAST = 0.02
SESSION = "0f7c2a52-6d1e-4a43-9c53-1d3c6f0b9e11"
CWD = "/work/repo/.worktrees/alpha"
PLAN_PROMPT = (
    "You are task `alpha` of the lo-orch run `demo`. Read your brief: /b.md\n"
    "Phase: planning. Study the code you need, then write your plan."
)
IMPL_PROMPT = "Task `alpha`: your plan is accepted. Phase: implementing.\nImplement it."
REWORK_PROMPT = (
    "Task `alpha`: verification round 1 of 3 failed. Phase: implementing "
    "(rework 1).\nRead the review: r.md"
)

SCRIPT = {
    "alpha": {
        "plan": [{"say": "planning"}, {"signal": {"phase": "plan_ready", "note": "a b"}}],
        "implement": [
            [
                {"write": {"path": "app/x.py", "content": "x = 1\n"}},
                {"run": {"argv": ["python", "-m", "pytest", "-q"], "timeout": 30}},
                {"signal": "impl_done"},
            ],
            [
                {"patch": {"path": "app/x.py", "old": "1", "new": "2"}},
                "stop",
                {"signal": "impl_done"},
            ],
        ],
    },
    "coordinator": {
        "match": "with the orchestrator",
        "turns": [
            [
                {"tool": {"name": "Bash", "input": {"command": "lo-orch doctor"}}},
                {"stop": "Proceed?"},
            ],
            [
                {"say": "approving"},
                {"tool": {"name": "Bash", "input": {"command": "lo-orch approve"}}},
            ],
        ],
    },
}


def body(*messages: dict[str, Any], tools: list[Any] | None = None) -> dict[str, Any]:
    return {
        "model": "claude-opus-5-5",
        "stream": True,
        "max_tokens": 128000,
        "tools": [{"name": "Bash"}] if tools is None else tools,
        "system": [{"type": "text", "text": "You are Claude Code."}],
        "messages": [
            {"role": "system", "content": f"# Environment\n - Primary working directory: {CWD}"},
            *messages,
        ],
    }


def user(text: str) -> dict[str, Any]:
    reminder = {"type": "text", "text": "<system-reminder>\ngit status: clean\n</system-reminder>"}
    return {"role": "user", "content": [reminder, {"type": "text", "text": text}]}


def assistant(tool: str = "Bash") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": f"t-{tool}", "name": tool, "input": {}}],
    }


def result(tool: str = "Bash") -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": f"t-{tool}", "content": "ok"}],
    }


def reminder(text: str) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {
                "type": "text",
                "text": f"<system-reminder>\nStop hook feedback: {text}\n</system-reminder>",
            }
        ],
    }


def post(
    endpoint: ModelEndpoint,
    payload: dict[str, Any],
    *,
    session: str = SESSION,
    token: str | None = DEFAULT_TOKEN,
    timeout: float = 10,
) -> tuple[int, dict[str, str], bytes]:
    host, port = endpoint.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    headers = {"content-type": "application/json", "x-claude-code-session-id": session}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    conn.request("POST", "/v1/messages?beta=true", json.dumps(payload), headers)
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


def events(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for chunk in data.decode().split("\n\n"):
        if not chunk.strip():
            continue
        name, line = chunk.split("\n")
        assert name.startswith("event: ") and line.startswith("data: ")
        out.append((name[7:], json.loads(line[6:])))
    return out


def reply(endpoint: ModelEndpoint, payload: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """The message a streamed reply amounts to, put together as Claude Code does."""
    status, headers, data = post(endpoint, payload, **kw)
    assert status == 200, data
    assert headers["content-type"] == "text/event-stream"
    evs = events(data)
    names = [n for n, _ in evs]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == [
        "message_delta",
        "message_stop",
    ]
    message = evs[0][1]["message"]
    assert message["content"] == [] and message["stop_reason"] is None
    blocks: list[dict[str, Any]] = []
    for name, ev in evs:
        if name == "content_block_start":
            assert ev["index"] == len(blocks)
            blocks.append(dict(ev["content_block"]))
        elif name == "content_block_delta":
            delta = ev["delta"]
            if delta["type"] == "text_delta":
                blocks[ev["index"]]["text"] += delta["text"]
            else:
                blocks[ev["index"]]["input"] = json.loads(delta["partial_json"])
    final = evs[-2][1]
    return {
        "content": blocks,
        "stop_reason": final["delta"]["stop_reason"],
        "usage": {**message["usage"], **final["usage"]},
    }


@pytest.fixture
def endpoint(tmp_path: Path) -> Any:
    with ModelEndpoint(
        parse_script(SCRIPT, "test"), log_path=tmp_path / "requests.jsonl", poll_interval=FAST
    ) as e:
        yield e


def test_a_planning_prompt_gets_the_plan_actions_one_reply_per_request(
    endpoint: ModelEndpoint,
) -> None:
    first = reply(endpoint, body(user(PLAN_PROMPT)))
    assert first["stop_reason"] == "tool_use"
    text, tool = first["content"]
    assert text == {"type": "text", "text": "planning"}  # `say` goes before the next call
    assert tool["name"] == "Bash"
    # the command the prompt tells a model to run, unquoted as written there
    assert tool["input"]["command"] == "$LO_ORCH_BIN signal plan_ready --note 'a b'"
    second = reply(endpoint, body(user(PLAN_PROMPT), assistant(), result()))
    assert second["stop_reason"] == "end_turn"
    assert [b["type"] for b in second["content"]] == ["text"]
    # the usage figures Claude Code records: input grows with the conversation
    assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"] > 0
    assert first["usage"]["output_tokens"] > 1


def test_implement_rounds_follow_the_prompt_and_tools_get_absolute_paths(
    endpoint: ModelEndpoint,
    tmp_path: Path,
) -> None:
    convo = [user(PLAN_PROMPT), assistant(), result(), user(IMPL_PROMPT)]
    write = reply(endpoint, body(*convo))["content"][-1]
    assert write["name"] == "Write"
    assert write["input"] == {"file_path": f"{CWD}/app/x.py", "content": "x = 1\n"}
    run = reply(endpoint, body(*convo, assistant("Write"), result()))["content"][-1]
    assert run["input"]["command"] == "python -m pytest -q"
    assert run["input"]["timeout"] == 30000
    # round 1: a patch is a Read, then an Edit (Claude Code refuses to edit an unread file)
    convo += [assistant(), result(), assistant(), result(), user(REWORK_PROMPT)]
    read = reply(endpoint, body(*convo))["content"][-1]
    assert (read["name"], read["input"]) == ("Read", {"file_path": f"{CWD}/app/x.py"})
    edit = reply(endpoint, body(*convo, assistant("Read"), result()))["content"][-1]
    assert edit["name"] == "Edit"
    assert edit["input"] == {"file_path": f"{CWD}/app/x.py", "old_string": "1", "new_string": "2"}
    logged = endpoint.logged(kind="reply", prompt_kind="implement")
    assert [(r["round"], r["step"], r["tool"]) for r in logged] == [
        (0, 0, "Write"),
        (0, 1, "Bash"),
        (1, 0, "Read"),
        (1, 1, "Edit"),
    ]
    assert {r["task"] for r in logged} == {"alpha"}
    # the log says what each tool call gave back (tests read commands' outcomes there)
    assert (logged[1]["result"], logged[1]["result_error"]) == ("ok", False)
    assert "result" not in logged[0]  # a request that answers a prompt, not a tool


def test_a_stop_ends_the_turn_and_a_stop_hook_reminder_continues_it(
    endpoint: ModelEndpoint,
) -> None:
    convo = [user(REWORK_PROMPT), assistant("Read"), result(), assistant("Edit"), result()]
    stopped = reply(endpoint, body(*convo))
    assert stopped["stop_reason"] == "end_turn"
    assert stopped["content"] == [{"type": "text", "text": "Done."}]
    # the Stop hook sent it back: a reminder is not a new prompt, the script carries on
    convo += [
        {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
        reminder("task alpha has not reported yet"),
    ]
    signal = reply(endpoint, body(*convo))
    assert signal["content"][-1]["input"]["command"] == "$LO_ORCH_BIN signal impl_done"


def test_the_signal_again_prompt_is_answered_with_that_signal(endpoint: ModelEndpoint) -> None:
    again = (
        "loop-orchestrator restarted and could not confirm your last report "
        "(`signal impl_done` for task alpha): it was sent while the supervisor was "
        "not running.\nIf it still holds, run `$LO_ORCH_BIN signal impl_done` again "
        "now; otherwise carry on"
    )
    assert classify(again) == ("signal:impl_done", 0)
    out = reply(endpoint, body(user(IMPL_PROMPT), assistant(), result(), user(again)))
    assert out["content"][-1]["input"]["command"] == "$LO_ORCH_BIN signal impl_done"


def test_a_session_matched_by_its_first_prompt_follows_its_turns(
    endpoint: ModelEndpoint,
) -> None:
    ask = user("Please implement plan.yaml with the orchestrator")
    doctor = reply(endpoint, body(ask), session="c0")
    assert doctor["content"][-1]["input"] == {"command": "lo-orch doctor"}
    question = reply(endpoint, body(ask, assistant(), result()), session="c0")
    assert question["content"] == [{"type": "text", "text": "Proceed?"}]
    convo = [
        ask,
        assistant(),
        result(),
        {"role": "assistant", "content": [{"type": "text", "text": "Proceed?"}]},
        user("yes"),
    ]
    approve = reply(endpoint, body(*convo), session="c0")
    assert [b.get("text") or b["input"]["command"] for b in approve["content"]] == [
        "approving",
        "lo-orch approve",
    ]
    assert endpoint.logged(session="c0", kind="reply")[-1]["entry"] == "coordinator"


def test_a_wrong_token_is_refused_as_the_api_does(endpoint: ModelEndpoint) -> None:
    status, _, data = post(endpoint, body(user(PLAN_PROMPT)), token="stolen")
    assert status == 401
    assert json.loads(data) == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid x-api-key"},
    }
    assert endpoint.logged(kind="unauthorised")
    assert not endpoint.logged(kind="reply")


def test_scripted_faults_come_once_each_before_the_reply(tmp_path: Path) -> None:
    script = parse_script(
        {
            "alpha": {
                "plan": [
                    {"api_error": {"status": 429, "retry_after": 3}},
                    {"api_error": 529},
                    "drop",
                    {"signal": "plan_ready"},
                ]
            }
        },
        "t",
    )
    with ModelEndpoint(script, poll_interval=FAST) as endpoint:
        status, headers, data = post(endpoint, body(user(PLAN_PROMPT)))
        assert (status, headers["retry-after"]) == (429, "3")
        assert json.loads(data)["error"]["type"] == "rate_limit_error"
        status, _, data = post(endpoint, body(user(PLAN_PROMPT)))
        assert status == 529 and json.loads(data)["error"]["type"] == "overloaded_error"
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            post(endpoint, body(user(PLAN_PROMPT)))
        # the same request again, after the faults: the reply itself
        out = reply(endpoint, body(user(PLAN_PROMPT)))
        assert out["content"][-1]["input"]["command"] == "$LO_ORCH_BIN signal plan_ready"
        assert [r["kind"] for r in endpoint.requests] == ["error", "error", "drop", "reply"]


def test_fail_answers_the_next_turns_of_one_task_with_an_error(endpoint: ModelEndpoint) -> None:
    endpoint.fail(500, times=2, task="beta")
    beta = "You are task `beta` of the lo-orch run `demo`.\nPhase: planning."
    assert post(endpoint, body(user(PLAN_PROMPT)))[0] == 200  # alpha is not affected
    assert [post(endpoint, body(user(beta)), session="b")[0] for _ in range(3)] == [500, 500, 200]


def test_a_hang_holds_the_request_until_the_endpoint_closes() -> None:
    script = parse_script({"alpha": {"plan": ["hang", "stop"]}}, "t")
    endpoint = ModelEndpoint(script, poll_interval=FAST)
    outcome: list[object] = []

    def ask() -> None:
        try:
            outcome.append(post(endpoint, body(user(PLAN_PROMPT)), timeout=30)[0])
        except (OSError, http.client.HTTPException) as exc:
            outcome.append(exc)

    asker = threading.Thread(target=ask)
    asker.start()
    assert endpoint.wait_for(lambda rs: any(r["kind"] == "hang" for r in rs), timeout=5)
    time.sleep(0.5)
    assert outcome == []  # still waiting
    started = time.monotonic()
    endpoint.close()
    asker.join(timeout=10)
    assert not asker.is_alive() and time.monotonic() - started < 10
    assert outcome and outcome[0] != 200


def test_side_calls_are_not_turns(endpoint: ModelEndpoint) -> None:
    title = reply(endpoint, body(user(PLAN_PROMPT), tools=[]))
    assert title["stop_reason"] == "end_turn"
    first = reply(endpoint, body(user(PLAN_PROMPT)))
    assert first["content"][-1]["name"] == "Bash"  # the side call used up no step


def test_every_request_is_logged_to_the_file(endpoint: ModelEndpoint, tmp_path: Path) -> None:
    reply(endpoint, body(user(PLAN_PROMPT)))
    post(endpoint, body(user(PLAN_PROMPT)), token=None)
    lines = [json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert [(r["n"], r["kind"], r["status"]) for r in lines] == [
        (1, "reply", 200),
        (2, "unauthorised", 401),
    ]
    assert lines[0]["session"] == SESSION and lines[0]["tool"] == "Bash"
    assert lines[0]["usage"]["input_tokens"] > 0


def test_conversation_reads_prompts_tool_results_and_the_folder() -> None:
    convo = Conversation.of(
        body(user("one"), assistant(), result(), reminder("x"), assistant(), result())
    )
    assert convo.prompts == ["one"] and convo.replies_since == 2 and convo.cwd == CWD


def test_the_scripted_agent_refuses_what_only_a_model_can_do(tmp_path: Path) -> None:
    path = tmp_path / "script.yaml"
    path.write_text("alpha:\n  plan:\n    - stop: bye\n    - api_error: 429\n")
    with pytest.raises(ConfigError) as caught:
        load_script(path)
    assert "alpha.plan: stop" in str(caught.value)
    assert "alpha.plan: api_error" in str(caught.value)
    assert "lo-orch demo --agent claude" in (caught.value.hint or "")
    assert load_script(path, model=True).for_task("alpha").plan  # the endpoint takes it


def test_a_loaded_skill_is_tool_output_not_a_new_prompt() -> None:
    # Claude Code 2.1.332 puts a loaded skill's text in a user message right after the
    # Skill tool's result; the user said nothing new
    skill = {
        "role": "user",
        "content": [{"type": "text", "text": "Base directory for this skill: /s\n\n# Orchestrate"}],
    }
    beside = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t-Skill", "content": "Launching skill: x"},
            *skill["content"],
        ],
    }
    assert Conversation.of(body(user("go"), assistant("Skill"), beside)).prompts == ["go"]
    convo = Conversation.of(
        body(user("go with the orchestrator"), assistant("Skill"), result("Skill"), skill)
    )
    assert convo.prompts == ["go with the orchestrator"] and convo.replies_since == 1
    answered = Conversation.of(
        body(
            user("go"),
            assistant("Skill"),
            result("Skill"),
            skill,
            {"role": "assistant", "content": [{"type": "text", "text": "Proceed?"}]},
            user("yes"),
        )
    )
    assert answered.prompts == ["go", "yes"] and answered.replies_since == 0
    # a prompt after another tool's result (a turn cut short by a crash, then resumed) is
    # a prompt
    resumed = Conversation.of(body(user("go"), assistant(), result(), user("again")))
    assert resumed.prompts == ["go", "again"]


def test_a_prompt_sent_mid_turn_arrives_beside_a_tool_result(endpoint: ModelEndpoint) -> None:
    # Claude Code 2.1.332 queues a prompt pasted while the model works and sends it with
    # the next tool result, as one message
    queued = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t-Bash", "content": "planning -> plan_ready"},
            {
                "type": "text",
                "text": "The user sent a new message while you were working:\n"
                f'<pasted_content id="e2e7">\n{IMPL_PROMPT}\n'
                '</pasted_content id="e2e7">',
            },
        ],
    }
    convo = Conversation.of(body(user(PLAN_PROMPT), assistant(), queued))
    assert len(convo.prompts) == 2 and convo.replies_since == 0
    write = reply(endpoint, body(user(PLAN_PROMPT), assistant(), queued))["content"][-1]
    assert write["name"] == "Write"  # implement round 0 begins at once

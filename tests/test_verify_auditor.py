"""The LLM test-quality auditor: command-line auditors (scripted), the agent mode with a
fake Claude Code, and the real Claude Code CLI offline (not logged in)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from helpers.agents import agent_cli
from helpers.verify import off

from loop_orchestrator.config import Settings
from loop_orchestrator.errors import NotLoggedInError
from loop_orchestrator.verify.llm_auditor import (
    AuditInput,
    agent_argv,
    instructions,
    parse_verdict_text,
    run_auditor,
)
from loop_orchestrator.verify.models import CheckRun, warning

DIFF = "diff --git a/app/calc.py b/app/calc.py\n+def add(a, b):\n+    return a + b\n"


def audit_input() -> AuditInput:
    return AuditInput(
        task={
            "id": "calc",
            "title": "Calculator",
            "objective": "Add add()",
            "owns": ["app/calc.py", "tests/test_calc.py"],
            "done": [{"criterion": "add(2, 3) == 5", "check": "pytest -q tests"}],
        },
        commit="c" * 40,
        base="b" * 40,
        brief="# Brief\nAdd add().",
        diff=DIFF,
        findings=[
            warning(
                "the new test module has no boundary case",
                "tests.no-boundary-case",
                "tests/test_calc.py",
            )
        ],
        checks=[CheckRun(name="check-1", argv=["pytest", "-q", "tests"], exit_code=0)],
    )


def script(tmp_path: Path, body: str, name: str = "auditor.py") -> str:
    """A Python auditor script; returns the command line for `[auditor] llm`."""
    path = tmp_path / name
    path.write_text("import json, sys, time\n" + body, encoding="utf-8")
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(path))}"


def settings(llm: str, timeout: float = 30.0) -> Settings:
    s = off()  # (the auditor is set below)
    s.auditor.llm = llm
    s.auditor.timeout = timeout
    return s


def audit(tmp_path: Path, llm: str, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    return run_auditor(
        audit_input(), settings(llm, timeout), cwd=tmp_path, evidence=tmp_path / "evidence"
    )


def test_command_auditor_receives_the_contract_json_and_passes(tmp_path: Path) -> None:
    seen = tmp_path / "seen.json"
    llm = script(
        tmp_path,
        f"""
data = json.load(sys.stdin)
open({str(seen)!r}, "w").write(json.dumps(data))
print("Looked at everything.")
print("VERDICT: PASS")
print("REASONS: criteria covered; error case present")
""",
    )
    result = audit(tmp_path, llm)
    assert (result.mode, result.status) == ("command", "pass")
    assert result.reasons == ["criteria covered", "error case present"]
    data = json.loads(seen.read_text())
    assert {"task", "commit", "brief", "diff", "findings"} <= data.keys()
    assert data["task"] == "calc" and data["commit"] == "c" * 40 and data["diff"] == DIFF
    assert data["findings"][0]["check"] == "tests.no-boundary-case"
    assert "VERDICT: PASS" in data["prompt"]  # the rendered auditor prompt, as an extension
    assert (
        (tmp_path / "evidence" / "auditor.stdout.txt").read_text().endswith("error case present\n")
    )


def test_command_auditor_fail_verdict(tmp_path: Path) -> None:
    llm = script(tmp_path, 'print("VERDICT: FAIL")\nprint("REASONS: add() untested for 0")\n')
    result = audit(tmp_path, llm)
    assert (result.status, result.reasons) == ("fail", ["add() untested for 0"])


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ('print("The tests look great, ship it.")\n', "malformed"),
        ('print("VERDICT: MAYBE")\n', "malformed"),
        ('print("VERDICT: PASS")\nprint("VERDICT: FAIL")\n', "contradictory"),
        ('print("VERDICT: PASS")\nsys.exit(2)\n', "exited with code 2"),
        ('time.sleep(30)\nprint("VERDICT: PASS")\n', "timed out"),
    ],
)
@pytest.mark.slow
def test_anything_but_a_clean_verdict_is_fail(tmp_path: Path, body: str, why: str) -> None:
    result = audit(tmp_path, script(tmp_path, body), timeout=5)
    assert result.status == "fail"
    assert why in result.reasons[0]


def test_missing_auditor_program_is_fail(tmp_path: Path) -> None:
    result = audit(tmp_path, "/nonexistent/auditor --strict")
    assert result.status == "fail"
    assert "could not start" in result.reasons[0]


def test_auditor_off_is_recorded_as_skipped(tmp_path: Path) -> None:
    result = audit(tmp_path, "off")
    assert (result.mode, result.status, result.passed) == ("off", "skipped", True)


def test_parse_verdict_text() -> None:
    assert parse_verdict_text("x\nVERDICT: PASS\nREASONS: a; b\n") == ("pass", ["a", "b"])
    assert parse_verdict_text("  VERDICT: fail  \n") == ("fail", [])
    assert parse_verdict_text("VERDICT: PASSED\n")[0] is None
    assert parse_verdict_text("no verdict here")[0] is None


# agent mode -----------------------------------------------------------------------------

FAKE_CLAUDE = """
args = sys.argv[1:]
prompt = sys.stdin.read()
open({record!r}, "w").write(json.dumps({{"args": args, "prompt": prompt}}))
mode = {mode!r}
if mode == "pass":
    print(json.dumps({{"type": "result", "is_error": False, "result": "done",
                      "structured_output": {{"verdict": "PASS", "reasons": ["covered"]}}}}))
elif mode == "fail":
    print(json.dumps({{"type": "result", "is_error": False, "result": "done",
                      "structured_output": {{"verdict": "FAIL", "reasons": ["no error case"]}}}}))
elif mode == "error":
    print(json.dumps({{"type": "result", "is_error": True, "result": "API overloaded"}}))
    sys.exit(1)
else:
    print("this is not json")
"""


def agent_settings(tmp_path: Path, mode: str) -> tuple[Settings, Path]:
    record = tmp_path / f"claude-{mode}.json"
    s = settings("agent")
    s.agent.command = script(
        tmp_path, FAKE_CLAUDE.format(record=str(record), mode=mode), name=f"fake_claude_{mode}.py"
    )
    return s, record


@pytest.mark.parametrize(
    ("mode", "status"), [("pass", "pass"), ("fail", "fail"), ("error", "fail"), ("garbage", "fail")]
)
def test_agent_mode_runs_claude_headless_read_only(tmp_path: Path, mode: str, status: str) -> None:
    s, record = agent_settings(tmp_path, mode)
    result = run_auditor(audit_input(), s, cwd=tmp_path, evidence=tmp_path / "ev")
    assert (result.mode, result.status) == ("agent", status)
    seen = json.loads(record.read_text())
    args = seen["args"]
    for flag, value in (
        ("--output-format", "json"),
        ("--permission-mode", "dontAsk"),
        ("--tools", "Read,Grep,Glob"),
        ("--allowedTools", "Read,Grep,Glob"),
    ):
        assert args[args.index(flag) + 1] == value
    assert "-p" in args
    schema = json.loads(args[args.index("--json-schema") + 1])
    assert schema["properties"]["verdict"]["enum"] == ["PASS", "FAIL"]
    prompt = seen["prompt"]
    assert instructions()[:60] in prompt  # agents/test-quality-auditor.md, no frontmatter
    assert "name: test-quality-auditor" not in prompt
    assert DIFF in prompt and "tests.no-boundary-case" in prompt and "add(2, 3) == 5" in prompt
    if mode == "pass":
        assert result.reasons == ["covered"]


def test_agent_argv_uses_claude_for_other_agent_kinds() -> None:
    s = off()  # (the auditor is set below)
    s.agent.kind = "command"
    s.agent.command = "codex --full-auto"
    assert agent_argv(s)[0] == "claude"


@pytest.mark.claude
def test_real_claude_not_logged_in_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = agent_cli("claude")
    # Claude Code leaves a folder in $TMPDIR/claude-<uid> at every start: here, not in /tmp
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    home = Path.home()
    (home / ".claude.json").write_text('{"hasCompletedOnboarding": true}', encoding="utf-8")
    s = settings("agent", timeout=120)
    s.agent.command = shlex.quote(str(binary))
    with pytest.raises(NotLoggedInError, match="not logged in") as info:
        run_auditor(audit_input(), s, cwd=tmp_path, evidence=tmp_path / "ev")
    assert "/login" in info.value.render()

"""`lo-orch plan --goal`: headless Claude Code (a recorded stand-in), validation, one retry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers.agents import agent_cli
from helpers.intake import FIXTURES, FakeClaude, plan_cli

from loop_orchestrator.config import Settings, load_settings
from loop_orchestrator.errors import IntakeError, NotLoggedInError
from loop_orchestrator.intake import goal
from loop_orchestrator.intake import planner as agent
from loop_orchestrator.plan.loading import load_plan
from loop_orchestrator.runstate.state import RunDir

GOAL = "Add a slugify helper and a CSV export of users"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeClaude:
    return FakeClaude(monkeypatch, tmp_path)


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_goal_runs_claude_headless_read_only_and_records_the_plan(
    git_repo: Path, fake: FakeClaude, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.answers("valid_plan")
    code, out, err = plan_cli(git_repo, capsys, "--goal", GOAL)
    assert code == 0, err
    [call] = fake.calls
    argv = call["argv"]
    assert Path(call["cwd"]).resolve() == git_repo.resolve()
    assert argv[0] == "-p"
    prompt = argv[1]
    assert GOAL in prompt
    assert "three different inputs with three different expected outputs" in prompt
    assert "WITHOUT a shell" in prompt
    assert flag(argv, "--output-format") == "json"
    schema = json.loads(flag(argv, "--json-schema"))
    assert "tasks" in schema["properties"] and "tasks" in schema["required"]
    assert schema["$defs"]["Task"]["additionalProperties"] is False
    assert flag(argv, "--permission-mode") == "dontAsk"
    assert flag(argv, "--allowedTools") == "Read,Grep,Glob"
    assert "Bash" in flag(argv, "--disallowedTools").split(",")
    assert "--resume" not in argv

    draft = RunDir(git_repo).root / "plan.draft.yaml"
    assert draft.read_text(encoding="utf-8").startswith("# Drafted by `lo-orch plan --goal`")
    recorded = json.loads((RunDir(git_repo).plan_json).read_text(encoding="utf-8"))
    assert [t["id"] for t in recorded["plan"]["tasks"]] == ["slugify", "csv-export"]
    assert recorded["source"] == str(draft)
    assert load_plan(draft).sha256() == recorded["sha256"]  # the draft is what was recorded

    # the Gate 1 summary, then cost and duration from the JSON result
    assert "Run slug-export:" in out
    assert "Wave 2: csv-export" in out
    assert "Planning agent: 1 call, 7 turns, 41.2 s, $0.2143" in out
    assert "5f0c1d8e-2b7a-4c1e-9a55-3d2f6b8e9a01" in out
    assert f"Plan draft saved to {draft}" in out
    assert "Gate 1" in out


def test_a_plan_in_the_result_text_is_accepted(
    git_repo: Path, fake: FakeClaude, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.answers("valid_plan_text")
    code, _out, err = plan_cli(git_repo, capsys, "--goal", GOAL)
    assert code == 0, err
    plan = load_plan(RunDir(git_repo).root / "plan.draft.yaml")
    assert [t.id for t in plan.tasks] == ["slugify", "csv-export"]
    assert plan.tasks[1].consumes == ["slugify"]


def test_an_invalid_plan_is_sent_back_once_with_its_problems(
    git_repo: Path, fake: FakeClaude, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.answers("invalid_plan", "valid_plan_retry")
    code, out, err = plan_cli(git_repo, capsys, "--goal", GOAL)
    assert code == 0, err
    first, second = fake.calls
    argv = second["argv"]
    assert flag(argv, "--resume") == "7a1b2c3d-0000-4000-8000-000000000001"
    retry = argv[1]
    assert "dependency cycle: slugify -> csv-export -> slugify" in retry
    assert "uses shell syntax `||`" in retry
    assert GOAL not in retry  # resumed: the session already has the goal
    assert json.loads(flag(argv, "--json-schema")) == json.loads(
        flag(first["argv"], "--json-schema")
    )
    assert "first plan had 2 problems" in out
    assert "Planning agent: 2 calls, 6 turns, 39.6 s, $0.2213" in out
    assert RunDir(git_repo).plan_json.exists()


def test_retry_without_a_session_repeats_the_whole_prompt(
    tmp_path: Path, git_repo: Path, fake: FakeClaude
) -> None:
    no_session = json.loads((FIXTURES / "invalid_plan.json").read_text(encoding="utf-8"))
    no_session["session_id"] = None
    path = tmp_path / "invalid_no_session.json"
    path.write_text(json.dumps(no_session), encoding="utf-8")
    fake.answers(str(path), "valid_plan")
    draft = goal.draft_from_goal(git_repo, GOAL, load_settings(git_repo))
    assert [t.id for t in draft.plan.tasks] == ["slugify", "csv-export"]
    second = fake.calls[1]["argv"]
    assert "--resume" not in second
    assert GOAL in second[1] and "Your previous answer" in second[1]
    assert '"check": "pytest -q tests/test_text.py || true"' in second[1]  # its own answer


def test_invalid_twice_shows_the_errors_keeps_the_draft_and_records_nothing(
    git_repo: Path, fake: FakeClaude, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.answers("invalid_plan")
    code, _out, err = plan_cli(git_repo, capsys, "--goal", GOAL)
    assert code == 1
    assert len(fake.calls) == 2  # one bounded retry, no more
    assert err.startswith("Error: the agent's plan is still invalid after one retry (2 problems)")
    assert "dependency cycle: slugify -> csv-export -> slugify" in err
    assert "Traceback" not in err
    draft = RunDir(git_repo).root / "plan.draft.yaml"
    assert f"saved to {draft}" in err
    text = draft.read_text(encoding="utf-8")
    assert text.startswith("# Drafted by `lo-orch plan --goal`: INVALID after one retry.")
    assert yaml.safe_load(text)["tasks"][0]["id"] == "slugify"  # the answer, editable
    assert not RunDir(git_repo).plan_json.exists()


@pytest.mark.parametrize(
    ("answer", "words", "hint"),
    [
        (
            "not_logged_in",
            "Claude Code is not logged in (it answered: Not logged in · Please run /login)",
            "`/login`",
        ),
        ("error_max_turns", "ran out of turns after 41 turns", "narrower goal"),
        ("error_during_execution", "failed while running: API Error: 529 Overloaded", "again"),
        (
            "no_json.txt",
            "printed no JSON result (exit code 1):\nError: something went wrong",
            "--json-schema",
        ),
    ],
)
def test_agent_errors_are_clear(
    git_repo: Path,
    fake: FakeClaude,
    capsys: pytest.CaptureFixture[str],
    answer: str,
    words: str,
    hint: str,
) -> None:
    fake.answers(answer)
    code, _out, err = plan_cli(git_repo, capsys, "--goal", GOAL)
    assert code == 1
    assert err.startswith("Error: ")
    assert words in err
    assert hint in err
    assert "Traceback" not in err
    assert len(fake.calls) == 1  # errors are not retried
    assert not RunDir(git_repo).plan_json.exists()


def test_not_logged_in_is_a_not_logged_in_error(git_repo: Path, fake: FakeClaude) -> None:
    fake.answers("not_logged_in")
    with pytest.raises(NotLoggedInError) as info:
        goal.draft_from_goal(git_repo, GOAL, load_settings(git_repo))
    assert isinstance(info.value, IntakeError)


def test_missing_agent_command_and_empty_goal(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LO_ORCH_AGENT_COMMAND", "/nonexistent/claude-xyz --flag")
    code, _, err = plan_cli(git_repo, capsys, "--goal", GOAL)
    assert code == 1
    assert "Error: the agent command '/nonexistent/claude-xyz' was not found" in err
    assert "npm install -g @anthropic-ai/claude-code" in err
    code, _, err = plan_cli(git_repo, capsys, "--goal", "   ")
    assert code == 1
    assert "Error: the goal is empty" in err


def test_a_long_prompt_goes_on_stdin(git_repo: Path, fake: FakeClaude) -> None:
    fake.answers("valid_plan")
    long_goal = "Add a slugify helper. " + "Context line. " * 8000
    goal.draft_from_goal(git_repo, long_goal, load_settings(git_repo))
    [call] = fake.calls
    assert call["argv"][0] == "-p"
    assert call["argv"][1] == "--output-format"
    assert long_goal.strip() in call["stdin"]


def test_model_setting_is_passed(git_repo: Path) -> None:
    settings = Settings.model_validate({"agent": {"command": "claude --verbose", "model": "opus"}})
    argv = agent.build_argv(settings, "hi", {"type": "object"}, resume="abc")
    assert argv[:4] == ["claude", "--verbose", "-p", "hi"]
    assert flag(argv, "--model") == "opus"
    assert flag(argv, "--resume") == "abc"


@pytest.mark.claude
def test_real_claude_code_accepts_the_flags_and_reports_not_logged_in(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real CLI (offline, throwaway HOME, never logged in): the flag set is accepted
    (no "unknown option") and its not-logged-in answer becomes the clear error."""
    binary = agent_cli("claude")
    home = Path.home()  # conftest's throwaway HOME
    # Claude Code leaves a folder in $TMPDIR/claude-<uid> at every start: here, not in /tmp
    (home / "tmp").mkdir(exist_ok=True)
    monkeypatch.setenv("TMPDIR", str(home / "tmp"))
    (home / ".claude.json").write_text(
        json.dumps({"hasCompletedOnboarding": True}), encoding="utf-8"
    )
    for var in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LO_ORCH_AGENT_COMMAND", str(binary))
    code, _, err = plan_cli(git_repo, capsys, "--goal", GOAL)
    assert code == 1, err
    assert "Error: Claude Code is not logged in" in err
    assert "Run `claude` in a terminal and type `/login`" in err
    assert "unknown option" not in err

"""usage.py on transcripts written as Claude Code writes them, and the bad input around it:
a malformed line, a missing transcript, an unknown model, a budget that is not a positive
number, an agent that is not Claude Code (cost unknown, never $0)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.intake import FakeClaude, plan_cli

from loop_orchestrator.commands.plan import plan_from_file
from loop_orchestrator.config import AgentConfig, load_settings
from loop_orchestrator.cost import usage
from loop_orchestrator.errors import ConfigError
from loop_orchestrator.runstate.progress import status_document
from loop_orchestrator.runstate.state import RunDir, Store
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.supervisor.main import Supervisor

OPUS = usage.DEFAULT_PRICES["claude-opus-5-5"]
SID = "0b7e7c8e-3c55-4f0c-9a55-2f1f5d7d1e11"


def assistant(mid: str, model: str = "claude-opus-5-5", **counts: int) -> list[dict[str, Any]]:
    """Two records (a text and a tool_use block) of one message, as Claude Code writes."""
    u = {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
        **counts,
    }
    return [
        {
            "type": "assistant",
            "message": {"id": mid, "model": model, "usage": u, "content": [{"type": block}]},
        }
        for block in ("text", "tool_use")
    ]


def user(text: str) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": text}}


def write(path: Path, records: list[Any], extra_lines: tuple[str, ...] = ()) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r) for r in records] + list(extra_lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_each_message_counts_once_and_is_priced(tmp_path: Path) -> None:
    path = write(
        tmp_path / "t.jsonl",
        [
            user("Task `a`: Phase: planning"),
            *assistant(
                "m1",
                input_tokens=100,
                output_tokens=20,
                cache_read_input_tokens=1000,
                cache_creation_input_tokens=300,
            ),
            *assistant("m2", input_tokens=7, output_tokens=3),
            # an API error's synthetic message: zero usage, no model to price
            *assistant("e1", model="<synthetic>"),
        ],
    )
    got = usage.read_transcript(path, usage.DEFAULT_PRICES)
    assert got.tokens == {
        "input_tokens": 107,
        "output_tokens": 23,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 300,
    }
    assert got.cost_usd == pytest.approx((107 * 4 + 23 * 20 + 1000 * 0.2 + 300 * 5) / 1e6)
    assert got.models == ["claude-opus-5-5"] and got.notes == []


def test_rounds_follow_lo_orchs_rework_prompts_not_tool_output(tmp_path: Path) -> None:
    path = write(
        tmp_path / "t.jsonl",
        [
            *assistant("m1", input_tokens=10),
            # a tool result that prints the rework phrase is the session's own output
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "content": "Phase: implementing (rework 7)"}
                    ],
                },
            },
            *assistant("m2", input_tokens=20),
            user("Task `a`: verification round 1 of 3 failed. Phase: implementing (rework 1)."),
            *assistant("m3", input_tokens=40),
        ],
    )
    got = usage.read_transcript(path, usage.DEFAULT_PRICES)
    assert sorted(got.rounds) == [0, 1]
    assert got.rounds[0].tokens["input_tokens"] == 30
    assert got.rounds[1].tokens["input_tokens"] == 40


def test_a_malformed_line_is_skipped_and_said(tmp_path: Path) -> None:
    path = write(
        tmp_path / "t.jsonl",
        [*assistant("m1", input_tokens=5, output_tokens=1)],
        (
            '{"type": "assistant", "message": {"id": "m2"',
            "[1, 2]",
            json.dumps(
                {
                    "type": "assistant",
                    "message": {
                        "id": "m3",
                        "model": "claude-opus-5-5",
                        "usage": {"input_tokens": -40, "output_tokens": "many"},
                    },
                }
            ),
        ),
    )
    got = usage.read_transcript(path, usage.DEFAULT_PRICES)
    assert got.tokens["input_tokens"] == 5 and got.tokens["output_tokens"] == 1
    assert got.cost_usd == pytest.approx((5 * 4 + 20) / 1e6)
    assert got.notes == [
        "3 malformed transcript line(s) skipped in t.jsonl; the figures may be low"
    ]


def test_a_missing_transcript_is_unknown_not_zero(tmp_path: Path) -> None:
    got = usage.read_transcript(tmp_path / "gone.jsonl", usage.DEFAULT_PRICES)
    assert got.cost_usd is None and not got.measured
    assert got.notes == [f"transcript missing: {tmp_path / 'gone.jsonl'}"]
    assert usage.cell(got.as_json()) == "unknown"
    # a run total with one unknown part is unknown too
    known = usage.Usage(cost_usd=1.0)
    known.add(got)
    assert known.cost_usd is None and usage.money(known.cost_usd) == "unknown"


def test_an_unknown_model_has_no_price_and_says_so(tmp_path: Path) -> None:
    path = write(
        tmp_path / "t.jsonl",
        [
            *assistant("m1", input_tokens=5),
            *assistant("m2", model="claude-nova-9", output_tokens=9),
        ],
    )
    got = usage.read_transcript(path, usage.DEFAULT_PRICES)
    assert got.tokens["output_tokens"] == 9 and got.cost_usd is None
    assert got.notes == [
        'price unknown for model claude-nova-9: add [prices."claude-nova-9"] to the config'
    ]
    assert usage.cell(got.as_json()) == "unknown"


def test_the_transcript_path_is_derived_never_taken(tmp_path: Path) -> None:
    config = tmp_path / "cfg"
    cwd = Path("/tmp/a.b/work_tree")
    assert usage.transcript_path(config, cwd, SID) == (
        config / "projects" / "-tmp-a-b-work-tree" / f"{SID}.jsonl"
    )
    for bad in ("../../etc/passwd", f"{SID}/../../x", ""):
        with pytest.raises(ValueError):
            usage.transcript_path(config, cwd, bad)
    assert usage.config_dir({"CLAUDE_CONFIG_DIR": str(config)}) == config
    assert usage.config_dir({"HOME": str(tmp_path)}) == tmp_path / ".claude"


def test_prices_from_config_override_the_table(tmp_path: Path) -> None:
    cfg = tmp_path / ".loop-orchestrator" / "config.toml"
    cfg.parent.mkdir()
    cfg.write_text(
        '[prices."claude-opus-5-5"]\ninput = 1\noutput = 2\ncache_read = 0\n'
        'cache_write = 0\n[prices."claude-nova-9"]\ninput = 3\noutput = 3\n'
        "cache_read = 3\ncache_write = 3\n",
        encoding="utf-8",
    )
    prices = usage.prices_from(load_settings(tmp_path, env={"HOME": str(tmp_path)}))
    assert prices["claude-opus-5-5"] == usage.ModelPrice(1, 2, 0, 0)
    assert prices["claude-nova-9"].cost({"output_tokens": 1_000_000}) == 3


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("max_cost_usd = -5", "run.max_cost_usd: Input should be greater than 0"),
        ("max_cost_usd = 0", "run.max_cost_usd: Input should be greater than 0"),
        ('max_cost_usd = "ten"', "run.max_cost_usd: Input should be a valid number"),
        ("task_max_cost_usd = -0.5", "run.task_max_cost_usd: Input should be greater than 0"),
        ("task_max_cost_usd = nan", "run.task_max_cost_usd: Input should be a finite number"),
    ],
)
def test_a_bad_budget_in_config_is_a_clear_error(git_repo: Path, line: str, problem: str) -> None:
    cfg = git_repo / ".loop-orchestrator" / "config.toml"
    cfg.parent.mkdir(exist_ok=True)
    cfg.write_text(f"[run]\n{line}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=problem.replace("(", r"\(")):
        load_settings(git_repo)
    # through the CLI: exit 1, the file and the key named, nothing started
    result = subprocess.run(
        [sys.executable, "-m", "loop_orchestrator", "run", "--repo", str(git_repo)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert str(cfg) in result.stderr and problem in result.stderr
    assert not (git_repo / ".orchestration").exists()


def test_a_bad_price_is_a_clear_error(git_repo: Path) -> None:
    cfg = git_repo / ".loop-orchestrator" / "config.toml"
    cfg.parent.mkdir(exist_ok=True)
    cfg.write_text('[prices."claude-opus-5-5"]\ninput = -1\noutput = 1\n', encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_settings(git_repo)
    assert "prices.claude-opus-5-5.input: Input should be greater than or equal to 0" in str(
        err.value
    )
    assert "prices.claude-opus-5-5.cache_read: Field required" in str(err.value)


def test_an_agent_that_is_not_claude_code_costs_unknown_never_zero(
    tmp_path: Path,
    tmux_socket: str,
) -> None:
    """A kind `command` agent (the scripted program, driven as any command line): its
    tasks' cost is unknown in status, `status --json`, Gate 2 and the run's total."""
    files = demo.prepare_demo(tmp_path)
    settings = demo.demo_settings(files.script)
    scripted = " ".join(
        [sys.executable, "-m", "loop_orchestrator.simulator.agent", "--script", str(files.script)]
    )
    settings.agent = AgentConfig(
        kind="command", command=scripted, ready_pattern="│ \u276f", ready_timeout=20
    )
    from loop_orchestrator.runstate import create as runs

    plan_from_file(files.repo, files.plan, settings)
    runs.approve_plan(files.repo)
    outcome = Supervisor(files.repo, settings).run()
    assert outcome.state == "review", outcome.message
    doc = status_document(files.repo)
    for t in doc["tasks"]:
        assert t["usage"]["cost_usd"] is None and t["usage"]["cost_known"] is False
        assert t["usage"]["notes"] == ["the agent (kind command) records no token usage"]
    assert doc["run"]["usage"]["cost_usd"] is None
    shown = subprocess.run(
        [sys.executable, "-m", "loop_orchestrator", "status", "--repo", str(files.repo)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "COLUMNS": "250"},
    )
    assert shown.returncode == 0, shown.stderr
    rows = [line for line in shown.stdout.splitlines() if "integrated" in line]
    assert len(rows) == 4 and all("unknown" in r and "$0" not in r for r in rows), rows
    assert "Spent so far: unknown" in shown.stdout
    from loop_orchestrator.workspace import integration

    costs = integration.review(files.repo).costs
    assert costs[-1].startswith("run total: unknown")
    assert all(": unknown" in line for line in costs)
    assert Store(RunDir(files.repo)).read_status("tokenize").usage is not None


def test_a_plan_budget_is_optional_and_must_be_positive() -> None:
    from loop_orchestrator.errors import PlanError
    from loop_orchestrator.plan.loading import validate_plan_data

    def plan(**fields: Any) -> dict[str, Any]:
        return {
            "goal": "g",
            "tasks": [
                {
                    "id": "a",
                    "objective": "o",
                    "owns": ["src/a.py"],
                    "done": [{"criterion": "c", "check": "pytest -q"}],
                    **fields,
                }
            ],
        }

    assert validate_plan_data(plan()).tasks[0].max_cost_usd is None  # additive
    assert validate_plan_data(plan(max_cost_usd=2.5)).tasks[0].max_cost_usd == 2.5
    for bad in (-1, 0, "lots"):
        with pytest.raises(PlanError) as info:
            validate_plan_data(plan(max_cost_usd=bad), "plan.yaml")
        assert any("max_cost_usd" in p for p in info.value.problems), info.value.problems


def test_headless_calls_are_in_gate2s_costs(
    git_repo: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The planning agent's and the auditor's `total_cost_usd` reach Gate 2's table and
    its run total; an auditor answer without a cost makes its line unknown."""
    fake = FakeClaude(monkeypatch, tmp_path)
    fake.answers("valid_plan")
    code, _out, err = plan_cli(git_repo, capsys, "--goal", "Add a slugify helper")
    assert code == 0, err
    ledger = Store(RunDir(git_repo)).read_ledger()
    (spent,) = [e for e in ledger if e["event"] == "planning_usage"]
    assert spent["cost_usd"] == pytest.approx(0.2143) and spent["calls"] == 1
    evidence = RunDir(git_repo).evidence_dir
    for task, commit, answer in (
        ("a", "c1", {"total_cost_usd": 0.05, "result": "{}"}),
        ("b", "c2", {"total_cost_usd": 0.0125}),
    ):
        (evidence / task / commit).mkdir(parents=True)
        (evidence / task / commit / "auditor.stdout.txt").write_text(json.dumps(answer))
    lines = usage.headless_lines(evidence, ledger, "agent")
    assert [text for text, _ in lines] == [
        "planning agent: $0.2143 (1 headless call(s), total_cost_usd)",
        "auditor: $0.0625 (2 call(s), total_cost_usd)",
    ]
    assert [cost for _, cost in lines] == pytest.approx([0.2143, 0.0625])
    task_usage = usage.Usage(
        tokens={**dict.fromkeys(usage.TOKEN_KEYS, 0), "output_tokens": 1000}, cost_usd=0.02
    ).as_json()
    table = usage.summary_lines({"a": task_usage}, lines)
    assert table[-1].startswith("run total: $0.2968 — input 0, output 1,000,")
    # an auditor answer without its cost: that line and the run total are unknown
    (evidence / "b" / "c2" / "auditor.stdout.txt").write_text("not json")
    lines = usage.headless_lines(evidence, ledger, "agent")
    assert lines[1][0].startswith("auditor: unknown")
    assert usage.summary_lines({"a": task_usage}, lines)[-1].startswith("run total: unknown")


def test_gate1_shows_a_forecast_marked_as_an_estimate(
    git_repo: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from loop_orchestrator.cli.main import run_cli

    plan = git_repo / "plan.yaml"
    tasks = [
        {
            "id": tid,
            "objective": "o",
            "owns": [f"src/{tid}.py"],
            "complexity": level,
            "done": [{"criterion": "c", "check": "pytest -q"}],
        }
        for tid, level in (("a", "simple"), ("b", "complex"), ("c", "simple"))
    ]
    plan.write_text(json.dumps({"goal": "g", "tasks": tasks}), encoding="utf-8")
    cfg = git_repo / ".loop-orchestrator" / "config.toml"
    cfg.parent.mkdir(exist_ok=True)
    cfg.write_text("[run]\nmax_cost_usd = 12.5\n", encoding="utf-8")
    assert run_cli(["plan", str(plan), "--repo", str(git_repo)]) == 0
    out = capsys.readouterr().out
    expected = 2 * OPUS.cost(usage.FORECAST_TOKENS["simple"]) + OPUS.cost(
        usage.FORECAST_TOKENS["complex"]
    )
    assert (
        f"Cost forecast (an ESTIMATE from task complexity, not a measurement): about "
        f"{usage.money(expected)} for 3 task(s) (2 simple, 1 complex) on claude-opus-5-5; "
        "the run's budget is $12.5000."
    ) in out
    # a model without a price: the forecast says unknown and why, never $0
    line = usage.forecast_line(["medium"], usage.DEFAULT_PRICES, "claude-nova-9")
    assert line.startswith("Cost forecast: unknown (no price for model claude-nova-9")


def test_a_usage_limit_message_gives_its_reset_time() -> None:
    from datetime import UTC, datetime

    from loop_orchestrator.cost.limits import usage_limit_reset

    now = datetime(2026, 11, 30, 1, 30, tzinfo=UTC)
    screen = "⎿ You've hit your 5-hour limit · resets 2:11am (UTC)\n/upgrade to increase"
    assert usage_limit_reset(screen, now) == datetime(2026, 11, 30, 2, 11, tzinfo=UTC)
    # a reset time already past today is tomorrow's; pm and 24-hour forms
    assert usage_limit_reset("limit · resets 1am (UTC)", now) == datetime(
        2026, 12, 1, 1, 0, tzinfo=UTC
    )
    assert usage_limit_reset("limit · resets 11:05pm (UTC)", now) == datetime(
        2026, 11, 30, 23, 5, tzinfo=UTC
    )
    assert usage_limit_reset("limit · resets 14:05 (UTC)", now) == datetime(
        2026, 11, 30, 14, 5, tzinfo=UTC
    )
    # the last message on screen counts
    two = "limit · resets 2am (UTC)\n...\nlimit · resets 3am (UTC)"
    assert usage_limit_reset(two, now) == datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
    # no limit message, an unknown time zone, nonsense times: no reset time is guessed
    for screen in (
        "resets 2am (UTC)",
        "limit · resets 2:11am (Mars/Olympus)",
        "limit · resets 13pm (UTC)",
        "limit · resets 25:00 (UTC)",
        "API Error: 429 rate_limit_error",
    ):
        assert usage_limit_reset(screen, now) is None, screen


def test_concurrency_drops_after_repeated_rate_limits_and_recovers() -> None:
    from loop_orchestrator.cost.limits import Governor

    g = Governor(3, hits_to_lower=2, window=300, quiet=600)
    assert g.hit(0) == 3  # one hit: nothing yet
    assert g.hit(400) == 3  # the first hit is out of the window
    assert g.hit(450) == 2  # two within the window: one slot less
    assert g.hit(460) == 2 and g.hit(470) == 1
    assert g.hit(480) == 1 and g.hit(490) == 1  # never below one
    assert g.tick(490 + 599) == 1  # not quiet long enough
    assert g.tick(490 + 600) == 2  # a quiet period: one slot more
    assert g.tick(490 + 900) == 2 and g.tick(490 + 1200) == 3
    assert g.tick(10_000) == 3  # never above the configured cap

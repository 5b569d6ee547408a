"""The Claude Code plugin: manifests (validated by the real CLI), hooks, skills, the auditor."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from helpers import REPO_ROOT
from helpers.agents import agent_cli

import loop_orchestrator
from loop_orchestrator.cli.main import cli
from loop_orchestrator.plan import loading
from loop_orchestrator.sessions import hooks
from loop_orchestrator.verify.llm_auditor import AUDITOR_TOOLS, parse_verdict_text

HOOK_EVENTS = {
    "SessionStart",
    "UserPromptSubmit",
    "Stop",
    "StopFailure",
    "Notification",
    "PermissionRequest",
    "SessionEnd",
    "PreToolUse",
}  # PreToolUse: the spend book reads before each tool
SKILLS = ("orchestrate", "loop-implement")
#: docs/design.md section 5 (plus `audit`): what skills may tell a model to run
CONTRACT_COMMANDS = {
    "plan",
    "approve",
    "run",
    "status",
    "attach",
    "signal",
    "hook",
    "merge",
    "cleanup",
    "demo",
    "doctor",
    "audit",
    "retry",
}  # retry: a compatible extension of docs/design.md section 5


def claude() -> Path:
    return agent_cli("claude")


def validate(target: Path, *flags: str) -> dict[str, Any]:
    done = subprocess.run(
        [str(claude()), "plugin", "validate", "--json", *flags, str(target)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def frontmatter(path: Path) -> tuple[dict[str, Any], str]:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n"), f"{path} has no frontmatter"
    head, _, body = text[4:].partition("\n---\n")
    data = yaml.safe_load(head)
    assert isinstance(data, dict)
    return data, body


# manifests --------------------------------------------------------------------------------


@pytest.mark.claude
def test_claude_plugin_validate_passes_on_the_repo_root() -> None:
    report = validate(REPO_ROOT)
    assert report["success"] is True
    assert report["manifest"]["errors"] == []
    provides = report["provides"]
    assert {h["event"] for h in provides["hooks"]} == HOOK_EVENTS
    assert set(provides["skills"]) == {f"loop-orchestrator:{s}" for s in SKILLS}
    assert provides["agents"] == ["loop-orchestrator:test-quality-auditor"]


@pytest.mark.claude
def test_plugin_manifest_passes_strict_validation() -> None:
    report = validate(REPO_ROOT / ".claude-plugin" / "plugin.json", "--strict")
    assert report["success"] is True
    assert report["manifest"]["errors"] == []
    assert report["manifest"]["warnings"] == []


def test_manifests_name_the_plugin_and_its_version() -> None:
    manifest = json.loads((REPO_ROOT / ".claude-plugin" / "plugin.json").read_text())
    assert manifest["name"] == "loop-orchestrator"
    assert manifest["version"] == loop_orchestrator.__version__ == "0.1.0"
    assert len(manifest["description"]) > 40
    market = json.loads((REPO_ROOT / ".claude-plugin" / "marketplace.json").read_text())
    assert market["owner"]["name"]
    [entry] = market["plugins"]
    assert entry["name"] == manifest["name"]
    assert entry["source"] == "./"
    assert entry["description"]


def test_hooks_json_runs_the_launcher_for_each_event() -> None:
    doc = json.loads((REPO_ROOT / "hooks" / "hooks.json").read_text())
    assert set(doc["hooks"]) == HOOK_EVENTS
    for event, groups in doc["hooks"].items():
        [group] = groups
        [hook] = group["hooks"]
        assert hook["type"] == "command"
        assert hook["command"] == f'"${{CLAUDE_PLUGIN_ROOT}}/hooks/lo-hook" {event}'
        if event == "PermissionRequest":
            # the hook waits for a person's `lo-orch permit` (or a rule): longer than its poll
            assert hook["timeout"] > hooks.PERMISSION_WAIT
        else:
            assert 0 < hook["timeout"] <= 30


# skills -------------------------------------------------------------------------------------


@pytest.mark.parametrize("skill", SKILLS)
def test_skill_frontmatter(skill: str) -> None:
    meta, body = frontmatter(REPO_ROOT / "skills" / skill / "SKILL.md")
    assert meta["name"] == skill
    description = meta["description"]
    assert isinstance(description, str)
    assert 80 < len(description) <= 1024
    assert "Use when" in description or "Use in" in description
    assert body.lstrip().startswith("# ")


def invocations(text: str) -> list[list[str]]:
    """Every `lo-orch ...` / `$LO_ORCH_BIN ...` command in code spans and code blocks."""
    snippets = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        snippets += block.splitlines()
    found = []
    for snippet in snippets:
        for match in re.finditer(r"(?:^|[\s(])(lo-orch|\$LO_ORCH_BIN) (.+)", snippet):
            argv = shlex.split(match.group(2))
            if argv and not argv[0].startswith("&"):
                found.append(argv)
    return found


@pytest.mark.parametrize("skill", SKILLS)
def test_skill_commands_exist_with_those_options(skill: str) -> None:
    text = (REPO_ROOT / "skills" / skill / "SKILL.md").read_text(encoding="utf-8")
    calls = invocations(text)
    assert len(calls) >= (10 if skill == "orchestrate" else 3)
    for argv in calls:
        name, args = argv[0], argv[1:]
        assert name in CONTRACT_COMMANDS, f"{skill} uses `lo-orch {name}`, not a contract command"
        command = cli.commands.get(name)
        assert command is not None, f"{skill}: `lo-orch {name}` does not exist"
        known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
        for token in args:
            if token.startswith("-"):
                assert token in known, f"{skill}: `lo-orch {name}` has no option {token}"
        try:
            command.make_context(name, list(args))
        except click.ClickException as exc:
            pytest.fail(f"{skill}: `lo-orch {shlex.join(argv)}` does not parse: {exc}")


def test_orchestrate_skill_drives_both_gates() -> None:
    text = (REPO_ROOT / "skills" / "orchestrate" / "SKILL.md").read_text(encoding="utf-8")
    calls = [shlex.join(a) for a in invocations(text)]
    for needed in (
        "doctor",
        "plan --issue KEY",
        "approve",
        "run --detach",
        "status --json",
        "merge --yes",
    ):
        assert needed in calls, needed
    # Gate 1 and Gate 2 wait for the user; approve and merge only after the yes
    flat = re.sub(r"\s+", " ", text.replace("**", ""))
    gate1 = flat.index("wait for the user's yes")
    gate2 = flat.index("wait for the user's yes", gate1 + 1)
    assert gate1 < flat.index("`lo-orch approve`") < gate2 < flat.index("`lo-orch merge --yes`")
    assert "Never merge without the user" in flat
    assert "Never implement" in flat


def test_loop_implement_skill_signals_with_lo_orch_bin() -> None:
    text = (REPO_ROOT / "skills" / "loop-implement" / "SKILL.md").read_text(encoding="utf-8")
    calls = invocations(text)
    signals = {a[1] for a in calls if a[0] == "signal"}
    assert signals == {"plan_ready", "impl_done", "blocked"}
    blocked = [a for a in calls if a[:2] == ["signal", "blocked"]]
    assert all("--note" in a for a in blocked)
    assert "$LO_ORCH_BIN signal" in text
    assert re.search(r"[Nn]ever weaken tests", text)
    assert re.search(r"[Aa]t most 3 retries", text)


def test_orchestrate_skill_example_plan_is_a_valid_plan() -> None:
    text = (REPO_ROOT / "skills" / "orchestrate" / "SKILL.md").read_text(encoding="utf-8")
    [block] = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    plan = loading.validate_plan_data(loading.parse_plan_text(block, "SKILL.md"), "SKILL.md")
    assert [t.id for t in plan.tasks] == ["slugify", "article-urls"]
    checks = [d.argv() for t in plan.tasks for d in t.done if d.check]
    # the behaviour checks are argument lists with concrete expected values, no shell
    assert checks[0][:2] == ["python", "-c"]
    assert "'hello-world', 'a-b', 'uni-2'" in checks[0][2]


# the auditor agent ---------------------------------------------------------------------------


def test_auditor_agent_is_read_only_and_answers_in_the_parsed_format() -> None:
    meta, body = frontmatter(REPO_ROOT / "agents" / "test-quality-auditor.md")
    assert meta["name"] == "test-quality-auditor"
    assert len(meta["description"]) > 40
    tools = [t.strip() for t in meta["tools"].split(",")]
    assert tools == ["Read", "Grep", "Glob"]
    assert ",".join(tools) == AUDITOR_TOOLS
    blocks = re.findall(r"```\n(VERDICT: .*?)```", body, flags=re.S)
    assert len(blocks) == 2
    verdicts = [parse_verdict_text(b)[0] for b in blocks]
    assert verdicts == ["pass", "fail"]
    for block in blocks:
        lines = block.strip().splitlines()
        assert re.fullmatch(r"VERDICT: (PASS|FAIL)", lines[0])
        assert lines[1].startswith("REASONS: ")
        assert len(lines) == 2

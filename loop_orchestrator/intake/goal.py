"""Goal -> plan draft: ask the planning agent, validate, one bounded retry, save for editing.

The agent answers with the plan as ``structured_output`` (validated by Claude Code against
the JSON schema of the ``Plan`` model); an answer in ``result`` text (YAML or JSON, fenced
or not) is accepted too. Schema-valid is not plan-valid (cycles, overlapping ownership,
shell syntax in checks...), so the answer goes through ``validate_plan_data``; when that
fails, the problems go back to the agent once (``--resume`` of its session when there is
one). The result is written to ``.orchestration/plan.draft.yaml`` (atomic) for the user to
read and edit; an answer still invalid after the retry is written there too, with its
problems as comments, so the work is not lost.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from loop_orchestrator import templating
from loop_orchestrator.config import Settings, load_tool_profile
from loop_orchestrator.errors import IntakeError, PlanError
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.git import gateway as gitutil
from loop_orchestrator.intake import planner as agent
from loop_orchestrator.plan.loading import parse_plan_text, validate_plan_data
from loop_orchestrator.plan.model import Plan
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.state import RunDir, Store
from loop_orchestrator.workspace import worktrees

log = logging.getLogger(__name__)

SOURCE = "the agent's plan"
DRAFT_NAME = "plan.draft.yaml"

#: extra checks on the raw answer: (data) -> (data to validate, problems of its own)
Fixup = Callable[[Any], tuple[Any, list[str]]]


@dataclass
class Draft:
    """A validated plan written to ``path``, and what producing it cost."""

    path: Path
    plan: Plan
    usage: agent.PlanningUsage
    notes: list[str] = field(default_factory=list)


def plan_schema() -> dict[str, Any]:
    """The JSON schema of a plan file, generated from the pydantic model."""
    return Plan.model_json_schema()


def draft_path(repo: Path) -> Path:
    return RunDir(repo).root / DRAFT_NAME


def ensure_can_plan(repo: Path) -> str:
    """Refuse before any agent call what `lo-orch plan` would refuse after it.

    Returns the sha of HEAD (a repository without commits has no base to plan on). The
    in-progress rule is the one ``runs.create_run`` applies.
    """
    head = gitutil.rev_parse(repo, "HEAD")
    runs.refuse_run_in_progress(Store.for_repo(repo))
    return head


def verify_hint(repo: Path, settings: Settings) -> str | None:
    """The project's test command, if configured (helps the agent write done-checks)."""
    if settings.verify.command:
        return settings.verify.command
    role = load_tool_profile(repo).get("verify") or {}
    command = role.get("command")
    return command if isinstance(command, str) and command.strip() else None


# answers ------------------------------------------------------------------------------------

_FENCE = re.compile(r"```(?:ya?ml|json)?[ \t]*\n(?P<body>.*?)```", re.DOTALL | re.IGNORECASE)


def answer_data(answer: agent.Answer) -> Any:
    """The plan data of an answer: ``structured_output``, else the ``result`` text parsed."""
    if isinstance(answer.structured_output, dict):
        return answer.structured_output
    if isinstance(answer.structured_output, str) and answer.structured_output.strip():
        return parse_plan_text(answer.structured_output, SOURCE)
    text = answer.result.strip()
    if not text:
        raise PlanError(
            SOURCE, ["the agent answered without a plan (no structured output, no text)"]
        )
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group("body")
    data = parse_plan_text(text, SOURCE)
    if not isinstance(data, dict):
        raise PlanError(
            SOURCE,
            [
                "the answer is not a plan: expected a mapping with `goal` "
                f"and `tasks`, got: {text[:200]!r}"
            ],
        )
    return data


def check(data: Any, fixup: Fixup | None) -> Plan:
    """Validate answer data (after ``fixup``); every problem in one ``PlanError``."""
    extra: list[str] = []
    if fixup is not None:
        data, extra = fixup(data)
    try:
        plan = validate_plan_data(data, SOURCE)
    except PlanError as exc:
        raise PlanError(SOURCE, [*exc.problems, *extra]) from exc
    if extra:
        raise PlanError(SOURCE, extra)
    return plan


# the draft file --------------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (class signatures read as code, not ``\\n``)."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)


def plan_yaml(plan: Plan) -> str:
    return to_yaml(plan.model_dump(mode="json", exclude_none=True))


def write_draft(path: Path, body: str, header: list[str]) -> None:
    lines = [f"# {h}" if h else "#" for h in header]
    atomic_write_text(path, "\n".join(lines) + ("\n" if lines else "") + body)


def _invalid_body(data: Any, answer: agent.Answer) -> str:
    if isinstance(data, dict):
        return to_yaml(data)
    if answer.structured_output is not None:
        return to_yaml(answer.structured_output)
    return "".join(f"# {line}\n" for line in (answer.result or "(no answer)").splitlines())


# the loop -------------------------------------------------------------------------------------


def draft_plan(
    repo: Path,
    settings: Settings,
    prompt: str,
    *,
    fixup: Fixup | None = None,
    origin: str = "lo-orch plan --goal",
    header: list[str] | None = None,
) -> Draft:
    """Ask for a plan, validate it, retry once with the problems, write the draft;
    ``header`` lines go on top of the draft as comments (e.g. the skipped child issues)."""
    schema = plan_schema()
    path = draft_path(repo)
    worktrees.ensure_excludes(repo)
    usage = agent.PlanningUsage()
    notes: list[str] = []

    answer = agent.ask(repo, settings, prompt, schema)
    usage.add(answer)
    data: Any = None
    try:
        data = answer_data(answer)
        plan = check(data, fixup)
    except PlanError as first:
        log.info("agent plan invalid, retrying", extra={"problems": first.problems})
        write_draft(
            path,
            _invalid_body(data, answer),
            [
                f"Drafted by `{origin}`: INVALID, being retried.",
                *[f"  - {p}" for p in first.problems],
            ],
        )
        previous = (json.dumps(data, indent=1) if isinstance(data, dict) else answer.result)[
            :20_000
        ]
        retry_prompt = templating.render(
            "plan_retry.md.j2",
            problems=first.problems,
            resumed=answer.session_id is not None,
            original=prompt,
            previous=previous,
        )
        answer = agent.ask(repo, settings, retry_prompt, schema, resume=answer.session_id)
        usage.add(answer)
        data = None
        try:
            data = answer_data(answer)
            plan = check(data, fixup)
        except PlanError as second:
            write_draft(
                path,
                _invalid_body(data, answer),
                [
                    f"Drafted by `{origin}`: INVALID after one retry. Problems:",
                    *[f"  - {p}" for p in second.problems],
                    f"Fix them, then run: lo-orch plan {path}",
                ],
            )
            shown = "\n".join(f"  - {p}" for p in second.problems)
            msg = (
                f"the agent's plan is still invalid after one retry "
                f"({len(second.problems)} problem{'s' if len(second.problems) != 1 else ''}):"
                f"\n{shown}\n{usage.line()}"
            )
            raise IntakeError(
                msg,
                hint=f"The answer was saved to {path}: fix it and run `lo-orch plan {path}`.",
            ) from second
        notes.append(
            f"The agent's first plan had {len(first.problems)} problem"
            f"{'s' if len(first.problems) != 1 else ''} (first: {first.problems[0]}); "
            "it fixed them on the retry."
        )

    write_draft(
        path,
        plan_yaml(plan),
        [
            f"Drafted by `{origin}`. Edit it freely, then run: lo-orch plan {path}",
            *(header or []),
        ],
    )
    notes.append(usage.line())
    notes.append(
        f"Plan draft saved to {path}: edit it and run `lo-orch plan {path}` to "
        "record the edited version."
    )
    return Draft(path, plan, usage, notes)


def draft_from_goal(repo: Path, goal: str, settings: Settings) -> Draft:
    """`lo-orch plan --goal TEXT`: a validated plan draft for ``goal``."""
    text = goal.strip()
    if not text:
        msg = "the goal is empty"
        raise IntakeError(
            msg, hint='Say what to build, e.g. `lo-orch plan --goal "Add a CSV export"`.'
        )
    ensure_can_plan(repo)
    prompt = templating.render(
        "plan_prompt.md.j2",
        goal=text,
        issue=None,
        verify=verify_hint(repo, settings),
        concurrency=settings.run.concurrency,
    )

    def keep_goal(data: Any) -> tuple[Any, list[str]]:
        if isinstance(data, dict) and not str(data.get("goal") or "").strip():
            data = {**data, "goal": text}
        return data, []

    return draft_plan(repo, settings, prompt, fixup=keep_goal)

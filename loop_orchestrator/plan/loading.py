"""Reading a plan file: YAML or JSON to data, data to a ``Plan``.

Validation collects *every* problem before reporting, each naming the task and field and
saying how to fix it: the model's (pydantic) and the semantic ones (``validation``), the
latter also for the tasks that parsed when others did not.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from loop_orchestrator.errors import PlanError
from loop_orchestrator.plan.model import DoneCheck, DoneTask, Plan, Task
from loop_orchestrator.plan.validation import semantic_problems


class _DuplicateKey(ValueError):
    pass


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice (PyYAML silently keeps the last one)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # `<<: *anchor` merges; an explicit key may override a merged one
        key = loader.construct_object(key_node)
        try:
            duplicate = key in seen
        except TypeError:  # an unhashable key: the model check reports it
            continue
        if duplicate:
            msg = (
                f"key {key!r} is given twice (line {key_node.start_mark.line + 1}); "
                "keep one of them"
            )
            raise _DuplicateKey(msg)
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            msg = f"key {key!r} is given twice; keep one of them"
            raise _DuplicateKey(msg)
        out[key] = value
    return out


def parse_plan_text(text: str, source: str) -> Any:
    """YAML or JSON text to plain data (JSON is YAML, but its errors read better as JSON).

    A key given twice is an error in both: the second would silently replace the first.
    """
    stripped = text.lstrip()
    try:
        if stripped.startswith("{"):
            try:
                return json.loads(text, object_pairs_hook=_json_pairs)
            except json.JSONDecodeError as exc:
                # `{goal: x, tasks: [...]}` is YAML flow style, not JSON.
                try:
                    return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
                except yaml.YAMLError:
                    raise PlanError(source, [f"not valid JSON: {exc}"]) from exc
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except _DuplicateKey as exc:
        raise PlanError(source, [str(exc)]) from exc
    except yaml.YAMLError as exc:
        raise PlanError(source, [f"not valid YAML: {exc}"]) from exc


def load_plan(path: Path) -> Plan:
    """Read and fully validate a plan file; raise PlanError listing every problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise PlanError(str(path), ["file not found"]) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(str(path), [f"cannot be read: {exc}"]) from exc
    return validate_plan_data(parse_plan_text(text, str(path)), str(path))


def _where(raw_tasks: list[Any], loc: Sequence[int | str], kind: str = "tasks") -> str:
    """A human location for a pydantic error: ``task 'x' field owns`` rather than tasks.2.owns."""
    if len(loc) >= 2 and loc[0] == kind and isinstance(loc[1], int):
        idx = loc[1]
        raw = raw_tasks[idx] if idx < len(raw_tasks) else None
        tid = raw.get("id") if isinstance(raw, dict) else None
        who = f"task {tid!r}" if isinstance(tid, str) else f"{kind}[{idx}]"
        if kind == "done_tasks":
            who = "done " + who
        rest = ".".join(str(p) for p in loc[2:])
        return f"{who}, field {rest}" if rest else who
    return "field " + ".".join(str(p) for p in loc)


def _pydantic_problems(exc: ValidationError, raw: dict[str, Any]) -> list[str]:
    problems = []
    for err in exc.errors():
        loc = err["loc"]
        kind = str(loc[0]) if loc else ""
        raw_list = raw.get(kind) if kind in ("tasks", "done_tasks") else None
        where = _where(raw_list if isinstance(raw_list, list) else [], loc, kind)
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key (a typo? see the plan format in README)"
        elif err["type"] == "missing":
            msg = "required but missing"
        problems.append(f"{where}: {msg}")
    return problems


def validate_plan_data(raw: Any, source: str = "plan") -> Plan:
    """Validate plain data as a plan; every structural and semantic problem at once."""
    if not isinstance(raw, dict):
        raise PlanError(source, ["the plan must be a mapping with `goal` and `tasks`"])
    try:
        plan = Plan.model_validate(raw)
    except ValidationError as exc:
        problems = _pydantic_problems(exc, raw)
        # Still run the semantic checks on the tasks that did parse, so one run of
        # `lo-orch plan` lists everything wrong, not just the first layer.
        problems += _semantic_problems_partial(raw)
        raise PlanError(source, problems) from exc
    problems = semantic_problems(plan)
    if problems:
        raise PlanError(source, problems)
    return plan


def _known_keys(item: Any, model: type[BaseModel] = Task) -> Any:
    """``item`` without unknown keys (already reported), so its other fields still get
    checked: a typo in one key must not hide the task's other problems."""
    if not isinstance(item, dict):
        return item
    out = {k: v for k, v in item.items() if k in model.model_fields}
    if model is Task and isinstance(out.get("done"), list):
        out["done"] = [_known_keys(d, DoneCheck) for d in out["done"]]
    return out


def _semantic_problems_partial(raw: dict[str, Any]) -> list[str]:
    raw_tasks = raw.get("tasks")
    raw_done = raw.get("done_tasks")
    tasks: list[Task] = []
    # Tasks that did not parse are still known by id and outputs, so a task depending on
    # one with a typo is not also reported as depending on an "unknown task".
    unparsed: dict[str, list[str]] = {}
    for item in raw_tasks if isinstance(raw_tasks, list) else []:
        try:
            tasks.append(Task.model_validate(_known_keys(item)))
        except ValidationError:
            if isinstance(item, dict) and isinstance(item.get("id"), str):
                produces = item.get("produces")
                unparsed[item["id"]] = [
                    o
                    for o in (produces if isinstance(produces, list) else [])
                    if isinstance(o, str)
                ]
    done: list[DoneTask] = []
    for item in raw_done if isinstance(raw_done, list) else []:
        try:
            done.append(DoneTask.model_validate(_known_keys(item, DoneTask)))
        except ValidationError:
            if isinstance(item, dict) and isinstance(item.get("id"), str):
                unparsed.setdefault(item["id"], [])
    if not tasks:
        return []
    name = raw.get("name")
    stub = Plan.model_construct(
        goal=str(raw.get("goal") or "x"),
        name=name if isinstance(name, str) else None,
        tasks=tasks,
        done_tasks=done,
    )
    return semantic_problems(stub, unparsed=unparsed)

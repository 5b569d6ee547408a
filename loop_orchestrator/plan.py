"""The plan file (contract, DESIGN.md section 4): model, loading and validation.

Validation collects *every* problem before reporting, each naming the task and field and
saying how to fix it. Scheduling (waves, the ready queue) is in ``schedule``, owned-path
patterns in ``globs``.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from loop_orchestrator.errors import PlanError
from loop_orchestrator.globs import literal_prefix, patterns_overlap
from loop_orchestrator.schedule import ancestors, dependencies

ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}\Z")  # \Z: `$` would accept "id\n"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}\Z")
#: ids that would collide with the run's own branch names (lo/<run>/staging)
RESERVED_IDS = frozenset({"staging"})
#: folders a task may never own
FORBIDDEN_ROOTS = (".orchestration", ".worktrees", ".git")
#: shell syntax that has no meaning in an argument list; `cmd || true` must not pass
_SHELL_PUNCT = frozenset("();<>|&")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DoneCheck(_Model):
    criterion: str
    check: str | None = None

    def argv(self) -> list[str]:
        """The check as an argument list (run without a shell)."""
        return shlex.split(self.check or "")


_LABEL_KEY_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$")


class Task(_Model):
    id: str
    title: str = ""
    objective: str
    owns: list[str]
    produces: list[str] = Field(default_factory=list)
    consumes: list[str] = Field(default_factory=list)
    depends_on: list[str] = Field(default_factory=list)
    done: list[DoneCheck]
    complexity: Literal["simple", "medium", "complex"] = "medium"
    #: optional budget in dollars for this task's session (wins over [run]
    #: task_max_cost_usd); over it, the task is blocked at its next turn boundary
    max_cost_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    #: optional: the Ray node labels this task's session needs (``[cluster] backend = "ray"``),
    #: e.g. ``{"lo-node": "gpu"}`` for a node started with ``ray start --labels``
    node_labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("node_labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, val in value.items():
            if not _LABEL_KEY_RE.match(key) or not _LABEL_VALUE_RE.match(val):
                msg = (
                    f"node label {key!r}: {val!r} is not a Ray node label: keys are letters,"
                    " digits, '-', '_', '.', '/' (at most 63), values the same without '/'"
                )
                raise ValueError(msg)
        return value

    @property
    def label(self) -> str:
        return self.title or self.id


class DoneTask(_Model):
    id: str
    title: str = ""
    produces: list[str] = Field(default_factory=list)
    signatures: dict[str, str] = Field(default_factory=dict)


class Plan(_Model):
    goal: str
    name: str | None = None
    base: str | None = None
    concurrency: int | None = Field(default=None, ge=1, le=64)
    verify: str | None = None
    tasks: list[Task]
    done_tasks: list[DoneTask] = Field(default_factory=list)

    def task(self, task_id: str) -> Task:
        for t in self.tasks:
            if t.id == task_id:
                return t
        raise KeyError(task_id)

    @property
    def run_name(self) -> str:
        return self.name or slugify(self.goal)

    def sha256(self) -> str:
        return plan_hash(self)


def slugify(text: str, limit: int = 40) -> str:
    """A run name from free text: lower case, [a-z0-9-], at most ``limit`` characters."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    slug = slug[:limit].rstrip("-")
    return slug or "run"


def plan_hash(plan: Plan) -> str:
    """sha256 of the canonical JSON of the plan: what Gate 1 approves.

    A field added later counts only when set, so a plan approved before it existed keeps its
    hash (a run approved by an older lo-orch is not refused as "changed since approval").
    """
    data = plan.model_dump(mode="json")
    for task in data["tasks"]:
        if not task.get("node_labels"):
            task.pop("node_labels", None)
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# loading ------------------------------------------------------------------------------


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


# semantic validation -------------------------------------------------------------------


def _some(items: Sequence[str], limit: int = 12) -> str:
    """A short list for a message: the first ``limit`` items and how many more."""
    if not items:
        return "none"
    shown = ", ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown} (and {len(items) - limit} more)"


def _path_problem(path: str) -> str | None:
    if not path or not path.strip():
        return "is empty"
    if path.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:[\\/]", path):
        return "is absolute; use a path relative to the repository root"
    # the parts PurePosixPath would give, without its cost (this runs for every owns entry)
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        return "contains `..`; paths must stay inside the repository"
    if parts and parts[0] in FORBIDDEN_ROOTS:
        return f"is under {parts[0]}/, which lo-orch manages; own project files only"
    return None


def _check_problem(check: str) -> str | None:
    try:
        argv = shlex.split(check)
    except ValueError as exc:
        return f"cannot be parsed as a command line ({exc})"
    if not argv:
        return "is empty; give a runnable command such as `pytest -q tests/test_x.py`"
    if not any(c in check for c in _SHELL_PUNCT) and "`" not in check:
        return None
    # shlex.split alone keeps `-q;` or `a|b` as one word, so `pytest -q; rm x` would pass:
    # split again with punctuation_chars, which makes unquoted ; | & < > ( ) words of their own.
    lexer = shlex.shlex(check, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError as exc:  # pragma: no cover - shlex.split above raised already
        return f"cannot be parsed as a command line ({exc})"
    bad = next((w for w in words if w and all(c in _SHELL_PUNCT for c in w)), None)
    if bad is None:
        bad = next((tok for tok in ("`", "$(") for w in argv if tok in w), None)
    if bad is not None:
        return (
            f"uses shell syntax `{bad}`; done-checks run as an argument list without "
            "a shell, so `|| true` and pipes would hide failures: give one command "
            "whose exit code is the verdict"
        )
    return None


def _find_cycle(graph: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A dependency cycle as a path (first node repeated at the end), or None."""
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(graph, white)
    for start in graph:
        if color[start] != white:
            continue
        stack: list[tuple[str, Iterator[str]]] = [(start, iter(graph[start]))]
        path = [start]
        color[start] = grey
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[node] = black
                stack.pop()
                path.pop()
                continue
            if nxt not in color:
                continue
            if color[nxt] == grey:
                return [*path[path.index(nxt) :], nxt]
            if color[nxt] == white:
                color[nxt] = grey
                stack.append((nxt, iter(graph[nxt])))
                path.append(nxt)
    return None


def semantic_problems(
    plan: Plan, *, unparsed: Mapping[str, Sequence[str]] | None = None
) -> list[str]:
    """Every problem beyond the shape of the data: ids, references, cycles, ownership.

    ``unparsed`` (id -> outputs) names tasks that exist in the file but failed to parse;
    references to them are not reported again.
    """
    unparsed = unparsed or {}
    problems: list[str] = []
    if plan.name is not None and not NAME_RE.fullmatch(plan.name):
        problems.append(
            f"field name: {plan.name!r} is not a valid run name; use 1-40 characters of "
            "a-z, 0-9 and -, starting with a letter or digit"
        )
    if not plan.goal.strip():
        problems.append("field goal: is empty; say in one sentence what the run builds")
    if not plan.tasks:
        problems.append("field tasks: the plan has no tasks; add at least one")

    seen_ids: dict[str, str] = {}
    for kind, items in (("task", plan.tasks), ("done task", plan.done_tasks)):
        for item in items:
            tid = item.id
            if not ID_RE.fullmatch(tid):
                problems.append(
                    f"{kind} {tid!r}, field id: invalid id; use 1-40 characters of a-z, 0-9 "
                    "and -, starting with a letter or digit (e.g. `user-model`)"
                )
            elif tid in RESERVED_IDS:
                problems.append(
                    f"{kind} {tid!r}, field id: {tid!r} is reserved (branch lo/<run>/{tid}); "
                    "choose another id"
                )
            if tid in seen_ids:
                problems.append(
                    f"{kind} {tid!r}, field id: duplicate id (also a {seen_ids[tid]}); "
                    "every id must be unique"
                )
            else:
                seen_ids[tid] = kind

    task_ids = {t.id for t in plan.tasks} | set(unparsed)
    done_ids = {d.id for d in plan.done_tasks}
    outputs: dict[str, str] = {out: tid for tid, outs in unparsed.items() for out in outs}
    for kind, items in (("task", plan.tasks), ("done task", plan.done_tasks)):
        for item in items:
            for out in item.produces:
                if out in outputs and outputs[out] != item.id:
                    problems.append(
                        f"{kind} {item.id!r}, field produces: output {out!r} is also produced "
                        f"by {outputs[out]!r}; each output has one producer"
                    )
                else:
                    outputs.setdefault(out, item.id)
    for d in plan.done_tasks:
        for name in d.signatures:
            if name not in d.produces:
                problems.append(
                    f"done task {d.id!r}, field signatures: {name!r} is not in its produces; "
                    "add it there or fix the name"
                )

    for t in plan.tasks:
        for dep in t.depends_on:
            if dep == t.id:
                problems.append(
                    f"task {t.id!r}, field depends_on: a task cannot depend on itself; remove it"
                )
            elif dep not in task_ids and dep not in done_ids:
                problems.append(
                    f"task {t.id!r}, field depends_on: unknown task {dep!r}; "
                    f"known tasks: {_some(sorted(task_ids | done_ids))}"
                )
        for out in t.consumes:
            if out not in outputs:
                problems.append(
                    f"task {t.id!r}, field consumes: no task produces {out!r}; add it to a "
                    "task's `produces` (or to a done task's) or remove it"
                )
            elif outputs[out] == t.id:
                problems.append(
                    f"task {t.id!r}, field consumes: consumes its own output {out!r}; remove it"
                )
        if not t.owns:
            problems.append(
                f"task {t.id!r}, field owns: is empty; list the files (or globs) the task "
                "may change"
            )
        for i, path in enumerate(t.owns):
            why = _path_problem(path)
            if why:
                problems.append(f"task {t.id!r}, field owns[{i}]: {path!r} {why}")
        if not t.done:
            problems.append(
                f"task {t.id!r}, field done: no done criteria; add at least one "
                "`{criterion, check}` with a runnable check"
            )
        for i, dc in enumerate(t.done):
            if not dc.criterion.strip():
                problems.append(f"task {t.id!r}, field done[{i}].criterion: is empty")
            if dc.check is not None:
                why = _check_problem(dc.check)
                if why:
                    problems.append(f"task {t.id!r}, field done[{i}].check: {dc.check!r} {why}")
        if not t.objective.strip():
            problems.append(f"task {t.id!r}, field objective: is empty; say what the task delivers")

    deps = dependencies(plan)
    cycle = _find_cycle(deps)
    if cycle:
        problems.append(
            "dependency cycle: "
            + " -> ".join(cycle)
            + "; break it by removing one depends_on/consumes edge"
        )
    else:
        problems += ownership_problems(plan, deps)
    return problems


# ownership ----------------------------------------------------------------------------


class _PrefixNode:
    __slots__ = ("items", "kids")

    def __init__(self) -> None:
        self.items: list[tuple[int, str, str]] = []  # (order, task id, pattern)
        self.kids: dict[str, _PrefixNode] = {}


def ownership_problems(plan: Plan, deps: Mapping[str, Sequence[str]]) -> list[str]:
    """Owned paths held by two tasks that could run at the same time.

    Two patterns can only match a common path when the literal prefix of one (its segments
    before the first wildcard) is a prefix of the other's. Patterns are kept in a trie of
    those prefixes and each is compared only with the patterns on its own trie path, so a
    plan where every task owns files in its own folder costs about linear time.
    """
    index = {t.id: i for i, t in enumerate(plan.tasks)}
    anc = ancestors(plan, deps)
    root = _PrefixNode()
    entries: list[tuple[int, str, str, tuple[str, ...]]] = []
    for t in plan.tasks:
        for p in t.owns:
            if _path_problem(p):
                continue
            prefix = literal_prefix(p)
            node = root
            for seg in prefix:
                node = node.kids.setdefault(seg, _PrefixNode())
            order = len(entries)
            node.items.append((order, t.id, p))
            entries.append((order, t.id, p, prefix))

    problems: list[str] = []
    reported: set[tuple[str, str]] = set()

    def consider(ta: str, pa: str, tb: str, pb: str) -> None:
        if ta == tb:
            return
        pair = (min(ta, tb), max(ta, tb))
        if pair in reported:
            return
        ordered = (anc[ta] >> index[tb]) & 1 or (anc[tb] >> index[ta]) & 1
        if ordered or not patterns_overlap(pa, pb):
            return
        reported.add(pair)
        first, second = (pa, pb) if pair[0] == ta else (pb, pa)
        problems.append(
            f"tasks {pair[0]!r} and {pair[1]!r}, field owns: {first!r} and {second!r} overlap "
            "and the tasks could run at the same time; give the files to one task or make "
            "one depend on the other"
        )

    for order, tid, pattern, prefix in entries:
        node = root
        path_nodes = [root]
        for seg in prefix:
            node = node.kids[seg]
            path_nodes.append(node)
        for depth, at in enumerate(path_nodes):
            own_node = depth == len(path_nodes) - 1
            for other_order, other_tid, other_pattern in at.items:
                if own_node and other_order >= order:
                    break  # same node: each pair once, the earlier pattern first
                consider(other_tid, other_pattern, tid, pattern)
    return problems

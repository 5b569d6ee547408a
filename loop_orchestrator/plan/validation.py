"""The plan's meaning checked (contract, docs/design.md section 4): ids and names, dependencies
(known, no cycle), owned paths (inside the repository, not lo-orch's folders, no two
independent tasks owning the same files), done-checks (argument lists, not shell syntax).
Every problem is collected, naming the task and field; ``loading.validate_plan_data`` reports
them with the structural ones.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from loop_orchestrator.plan.globs import literal_prefix, patterns_overlap
from loop_orchestrator.plan.schedule import ancestors, dependencies

if TYPE_CHECKING:
    from loop_orchestrator.plan.model import Plan

ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}\Z")  # \Z: `$` would accept "id\n"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}\Z")
#: ids that would collide with the run's own branch names (lo/<run>/staging)
RESERVED_IDS = frozenset({"staging"})
#: folders a task may never own
FORBIDDEN_ROOTS = (".orchestration", ".worktrees", ".git")
#: shell syntax that has no meaning in an argument list; `cmd || true` must not pass
_SHELL_PUNCT = frozenset("();<>|&")


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

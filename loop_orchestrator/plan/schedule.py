"""Scheduling a plan: its dependency graph, waves, and the ready queue.

Deterministic: waves are topological levels split by the concurrency cap; the ready queue
releases a task once everything it depends on is integrated (or, with ``strict_waves``,
once every earlier wave is).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from loop_orchestrator.errors import PlanError
from loop_orchestrator.runstate.state import ACTIVE_PHASES, TERMINAL_PHASES, Phase

if TYPE_CHECKING:
    from loop_orchestrator.plan.model import Plan


def dependencies(plan: Plan) -> dict[str, list[str]]:
    """Task id -> the task ids it depends on (explicit and through ``consumes``).

    Outputs of ``done_tasks`` add no edge: they are already on the base.
    """
    producer = {out: t.id for t in plan.tasks for out in t.produces}
    ids = {t.id for t in plan.tasks}
    deps: dict[str, list[str]] = {}
    for t in plan.tasks:
        seen: dict[str, None] = {}  # ordered set: plan order of the edges, no repeats
        for d in [*t.depends_on, *(producer[c] for c in t.consumes if c in producer)]:
            if d != t.id and d in ids:
                seen[d] = None
        deps[t.id] = list(seen)
    return deps


def ancestors(plan: Plan, deps: Mapping[str, Sequence[str]] | None = None) -> dict[str, int]:
    """Task id -> bitset of its transitive dependencies (bit i = plan.tasks[i])."""
    deps = dependencies(plan) if deps is None else deps
    index = {t.id: i for i, t in enumerate(plan.tasks)}
    result: dict[str, int] = {}
    for tid in topological_order(plan, deps):
        bits = 0
        for d in deps[tid]:
            bits |= result[d] | (1 << index[d])
        result[tid] = bits
    return result


def topological_order(plan: Plan, deps: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """Task ids with every dependency before its dependents, plan order otherwise."""
    deps = dependencies(plan) if deps is None else deps
    order: list[str] = []
    placed: set[str] = set()
    pending = [t.id for t in plan.tasks]
    remaining = {tid: len(deps[tid]) for tid in pending}
    dependents: dict[str, list[str]] = {tid: [] for tid in pending}
    for tid in pending:
        for d in deps[tid]:
            dependents[d].append(tid)
    queue = [tid for tid in pending if remaining[tid] == 0]
    head = 0
    while head < len(queue):
        tid = queue[head]
        head += 1
        order.append(tid)
        placed.add(tid)
        for nxt in dependents[tid]:
            remaining[nxt] -= 1
            if remaining[nxt] == 0:
                queue.append(nxt)
    if len(order) != len(pending):
        stuck = ", ".join(t for t in pending if t not in placed)
        raise PlanError(plan.run_name, [f"dependency cycle among: {stuck}"])
    return order


def levels(plan: Plan, deps: Mapping[str, Sequence[str]] | None = None) -> dict[str, int]:
    """Task id -> topological level (0 = depends on nothing)."""
    deps = dependencies(plan) if deps is None else deps
    level: dict[str, int] = {}
    for tid in topological_order(plan, deps):
        level[tid] = 1 + max((level[d] for d in deps[tid]), default=-1)
    return level


def waves(plan: Plan, cap: int) -> list[list[str]]:
    """Topological levels, each split into chunks of at most ``cap`` tasks (plan order)."""
    if cap < 1:
        msg = f"cap must be at least 1, not {cap}"
        raise ValueError(msg)
    level = levels(plan)
    by_level: dict[int, list[str]] = {}
    for t in plan.tasks:
        by_level.setdefault(level[t.id], []).append(t.id)
    result: list[list[str]] = []
    for lvl in sorted(by_level):
        ids = by_level[lvl]
        result += [ids[i : i + cap] for i in range(0, len(ids), cap)]
    return result


def wave_of(plan: Plan, cap: int) -> dict[str, int]:
    """Task id -> its wave number, counting from 1."""
    return {tid: n for n, wave in enumerate(waves(plan, cap), start=1) for tid in wave}


def ready_tasks(
    plan: Plan,
    phases: Mapping[str, Phase],
    cap: int,
    *,
    strict_waves: bool = False,
    wave_numbers: Mapping[str, int] | None = None,
    deps: Mapping[str, Sequence[str]] | None = None,
) -> list[str]:
    """The pending tasks that may start now, in start order, respecting ``cap``.

    A task is ready when every dependency is ``integrated``; with ``strict_waves`` also
    every task of every earlier wave. Tasks whose dependency is blocked or failed never
    become ready (the rest of the run goes on). ``wave_numbers`` and ``deps`` may be passed
    in when the caller already has them (they cost O(tasks) to compute).
    """
    deps = dependencies(plan) if deps is None else deps
    active = sum(1 for p in phases.values() if p in ACTIVE_PHASES)
    room = cap - active
    if room <= 0:
        return []
    waves_by_id = dict(wave_numbers) if wave_numbers is not None else wave_of(plan, cap)
    barrier = None
    if strict_waves:
        # A blocked or failed task, and what waits on it, will not finish without a human:
        # it does not hold the barrier, so the rest of the run goes on (as without it).
        stuck = set(waiting_on(plan, phases))
        unfinished = [
            waves_by_id[t.id]
            for t in plan.tasks
            if phases.get(t.id, Phase.PENDING) not in TERMINAL_PHASES and t.id not in stuck
        ]
        barrier = min(unfinished, default=None)
    ready: list[str] = []
    for t in sorted(plan.tasks, key=lambda t: waves_by_id[t.id]):
        if phases.get(t.id, Phase.PENDING) != Phase.PENDING:
            continue
        if barrier is not None and waves_by_id[t.id] != barrier:
            continue
        if all(phases.get(d) == Phase.INTEGRATED for d in deps[t.id]):
            ready.append(t.id)
            if len(ready) == room:
                break
    return ready


def waiting_on(plan: Plan, phases: Mapping[str, Phase]) -> dict[str, list[str]]:
    """Pending task -> the blocked/failed tasks (transitively) that keep it from starting."""
    deps = dependencies(plan)
    stuck: dict[str, list[str]] = {}
    for tid in topological_order(plan, deps):
        if phases.get(tid) in (Phase.BLOCKED, Phase.FAILED):
            stuck[tid] = [tid]
            continue
        causes: list[str] = []
        for d in deps[tid]:
            for c in stuck.get(d, []):
                if c not in causes:
                    causes.append(c)
        if causes and phases.get(tid, Phase.PENDING) == Phase.PENDING:
            stuck[tid] = causes
    return {k: v for k, v in stuck.items() if phases.get(k, Phase.PENDING) == Phase.PENDING}

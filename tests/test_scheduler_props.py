"""Property tests of the scheduler over random DAG plans (hypothesis).

Every property is checked against a reference computed here from the raw plan data, not
with the scheduler's own helpers: dependencies, transitive ancestors and levels.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from loop_orchestrator.errors import PlanError
from loop_orchestrator.plan.globs import patterns_overlap
from loop_orchestrator.plan.loading import validate_plan_data
from loop_orchestrator.plan.model import Plan
from loop_orchestrator.plan.schedule import (
    dependencies,
    levels,
    ready_tasks,
    topological_order,
    waiting_on,
    wave_of,
    waves,
)
from loop_orchestrator.runstate.state import ACTIVE_PHASES, Phase

PROPS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ACTIVE = sorted(ACTIVE_PHASES)


@dataclass
class Case:
    raw: dict[str, Any]
    deps: dict[str, set[str]]  # reference: task -> direct dependencies
    cap: int
    seed: int

    @property
    def ids(self) -> list[str]:
        return [t["id"] for t in self.raw["tasks"]]


def ancestors_ref(deps: Mapping[str, set[str]]) -> dict[str, set[str]]:
    memo: dict[str, set[str]] = {}

    def visit(t: str) -> set[str]:
        if t not in memo:
            out: set[str] = set()
            for d in deps[t]:
                out |= {d} | visit(d)
            memo[t] = out
        return memo[t]

    for t in deps:
        visit(t)
    return memo


def levels_ref(deps: Mapping[str, set[str]]) -> dict[str, int]:
    memo: dict[str, int] = {}

    def visit(t: str) -> int:
        if t not in memo:
            memo[t] = 1 + max((visit(d) for d in deps[t]), default=-1)
        return memo[t]

    return {t: visit(t) for t in deps}


@st.composite
def dag_cases(draw: st.DrawFn, max_tasks: int = 18) -> Case:
    """A valid plan over a random DAG: edges as depends_on or consumes, plan order shuffled,
    each task owning its own files plus paths shared only along dependency edges."""
    n = draw(st.integers(1, max_tasks))
    names = [f"t{i}" for i in range(n)]  # index order is a topological order
    parents: dict[int, set[int]] = {}
    for j in range(n):
        parents[j] = draw(st.sets(st.integers(0, j - 1), max_size=min(j, 3))) if j else set()
    tasks: list[dict[str, Any]] = []
    for j in range(n):
        tasks.append(
            {
                "id": names[j],
                "objective": f"task {j}",
                "owns": [f"pkg/{names[j]}/**", f"tests/test_{names[j]}.py"],
                "produces": [f"out{j}"],
                "consumes": [],
                "depends_on": [],
                "done": [{"criterion": "works", "check": f"pytest -q tests/test_{names[j]}.py"}],
            }
        )
    for j in range(n):
        for p in sorted(parents[j]):
            how = draw(st.sampled_from(["depends_on", "consumes", "both"]))
            if how in ("depends_on", "both"):
                tasks[j]["depends_on"].append(names[p])
            if how in ("consumes", "both"):
                tasks[j]["consumes"].append(f"out{p}")
            # Along an edge the two tasks may share a file or a glob.
            share = draw(st.sampled_from(["none", "file", "glob"]))
            if share == "file":
                tasks[p]["owns"].append(f"shared/e{p}-{j}.py")
                tasks[j]["owns"].append(f"shared/e{p}-{j}.py")
            elif share == "glob":
                tasks[p]["owns"].append(f"shared/g{p}-{j}/x.py")
                tasks[j]["owns"].append(f"shared/g{p}-{j}/*")
    order = draw(st.permutations(range(n)))
    raw = {"goal": "random dag", "tasks": [tasks[i] for i in order]}
    deps = {names[j]: {names[p] for p in parents[j]} for j in range(n)}
    # A glob shared from one producer to two children can make siblings overlap: only
    # keep cases whose shared paths are ordered, as the strategy promises.
    anc = ancestors_ref(deps)
    owners: list[tuple[str, str]] = [(t["id"], o) for t in tasks for o in t["owns"]]
    for i, (ta, pa) in enumerate(owners):
        for tb, pb in owners[i + 1 :]:
            if ta != tb and ta not in anc[tb] and tb not in anc[ta]:
                assume(not patterns_overlap(pa, pb))
    cap = draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**32 - 1))
    return Case(raw, deps, cap, seed)


def build(case: Case) -> Plan:
    return validate_plan_data(case.raw, "random")


# waves ----------------------------------------------------------------------------------


@pytest.mark.slow
@PROPS
@given(dag_cases())
def test_dependencies_match_the_reference(case: Case) -> None:
    plan = build(case)
    got = dependencies(plan)
    assert {k: set(v) for k, v in got.items()} == case.deps
    assert all(len(v) == len(set(v)) for v in got.values())


@PROPS
@given(dag_cases())
def test_waves_respect_dependencies_and_the_cap(case: Case) -> None:
    plan = build(case)
    result = waves(plan, case.cap)
    flat = [t for w in result for t in w]
    assert sorted(flat) == sorted(case.ids)  # every task exactly once
    assert len(flat) == len(set(flat))
    assert all(1 <= len(w) <= case.cap for w in result)
    number = wave_of(plan, case.cap)
    assert set(number) == set(case.ids)
    for tid, ds in case.deps.items():
        for d in ds:
            assert number[d] < number[tid], (d, tid, result)
    # waves are the topological levels, in order, split by the cap
    level = levels(plan)
    assert level == levels_ref(case.deps)
    assert [level[w[0]] for w in result] == sorted(level[w[0]] for w in result)
    assert all(len({level[t] for t in w}) == 1 for w in result)
    # a level split by the cap uses the fewest waves possible
    per_level: dict[int, int] = {}
    for t in case.ids:
        per_level[level[t]] = per_level.get(level[t], 0) + 1
    assert len(result) == sum(-(-c // case.cap) for c in per_level.values())


@PROPS
@given(dag_cases())
def test_topological_order(case: Case) -> None:
    order = topological_order(build(case))
    assert sorted(order) == sorted(case.ids)
    pos = {t: i for i, t in enumerate(order)}
    assert all(pos[d] < pos[t] for t, ds in case.deps.items() for d in ds)


# the ready queue ------------------------------------------------------------------------


def simulate(
    case: Case, plan: Plan, *, strict: bool, blocked: frozenset[str] = frozenset()
) -> tuple[list[str], dict[str, Phase]]:
    """Drive ready_tasks like the supervisor would; check every step. Returns start order."""
    rng = random.Random(case.seed)
    phases: dict[str, Phase] = {
        t: (Phase.BLOCKED if t in blocked else Phase.PENDING) for t in case.ids
    }
    number = wave_of(plan, case.cap)
    anc = ancestors_ref(case.deps)
    owns = {t["id"]: t["owns"] for t in case.raw["tasks"]}
    started: list[str] = []
    gone = (Phase.INTEGRATED, Phase.BLOCKED, Phase.FAILED)

    def holds_barrier(t: str) -> bool:
        """Strict waves wait for a task unless it is done, stuck, or waits on a stuck one."""
        if phases[t] in gone:
            return False
        stuck_above = any(phases[a] in (Phase.BLOCKED, Phase.FAILED) for a in anc[t])
        return not (phases[t] == Phase.PENDING and stuck_above)

    for _ in range(10 * len(case.ids) + 10):
        ready = ready_tasks(plan, phases, case.cap, strict_waves=strict)
        assert len(ready) == len(set(ready))
        assert [number[t] for t in ready] == sorted(number[t] for t in ready)
        for tid in ready:
            assert phases[tid] == Phase.PENDING, (tid, phases[tid])
            assert all(phases[d] == Phase.INTEGRATED for d in case.deps[tid])
            if strict:
                earlier = [t for t in case.ids if number[t] < number[tid]]
                assert all(not holds_barrier(t) for t in earlier), (tid, phases)
            phases[tid] = rng.choice(ACTIVE)
            started.append(tid)
        active = [t for t, p in phases.items() if p in ACTIVE_PHASES]
        assert len(active) <= case.cap
        # Nothing that could run was left waiting (the queue is work-conserving).
        if len(active) < case.cap:
            for t in case.ids:
                if phases[t] != Phase.PENDING:
                    continue
                eligible = all(phases[d] == Phase.INTEGRATED for d in case.deps[t])
                if strict:
                    unfinished = [number[u] for u in case.ids if holds_barrier(u)]
                    eligible = eligible and number[t] == min(unfinished)
                assert not eligible, (t, phases)
        # Tasks running at the same time never own overlapping paths (valid plans).
        for i, a in enumerate(active):
            for b in active[i + 1 :]:
                assert a not in anc[b] and b not in anc[a]
                assert not any(patterns_overlap(x, y) for x in owns[a] for y in owns[b])
        if not active:
            break
        for tid in rng.sample(active, rng.randint(1, len(active))):
            phases[tid] = Phase.INTEGRATED
    else:
        pytest.fail("the simulation did not finish")
    return started, phases


@pytest.mark.slow
@PROPS
@given(dag_cases())
def test_ready_queue_schedules_every_task_once_in_dependency_order(case: Case) -> None:
    plan = build(case)
    started, phases = simulate(case, plan, strict=False)
    assert sorted(started) == sorted(case.ids)
    assert all(p == Phase.INTEGRATED for p in phases.values())
    pos = {t: i for i, t in enumerate(started)}
    assert all(pos[d] < pos[t] for t, ds in case.deps.items() for d in ds)


@pytest.mark.slow
@PROPS
@given(dag_cases())
def test_strict_waves_reproduce_barrier_waves(case: Case) -> None:
    plan = build(case)
    started, _ = simulate(case, plan, strict=True)
    assert sorted(started) == sorted(case.ids)
    number = wave_of(plan, case.cap)
    # start order is wave order: a barrier never lets a later wave overtake
    assert [number[t] for t in started] == sorted(number[t] for t in started)


@pytest.mark.slow
@PROPS
@given(dag_cases(), st.data())
def test_blocked_tasks_hold_back_exactly_their_dependents(case: Case, data: st.DataObject) -> None:
    plan = build(case)
    blocked = frozenset(data.draw(st.sets(st.sampled_from(case.ids), max_size=3)))
    started, phases = simulate(case, plan, strict=False, blocked=blocked)
    anc = ancestors_ref(case.deps)
    held = {t for t in case.ids if t not in blocked and anc[t] & blocked}
    assert {t for t, p in phases.items() if p == Phase.PENDING} == held
    assert set(started) == set(case.ids) - blocked - held
    waiting = waiting_on(plan, phases)
    assert set(waiting) == held

    # The causes named are the nearest blocked tasks upstream: a blocked task stands for
    # whatever blocks it in turn (that one shows up when it is dealt with).
    def nearest(t: str) -> set[str]:
        out: set[str] = set()
        for d in case.deps[t]:
            out |= {d} if d in blocked else nearest(d)
        return out

    for t, causes in waiting.items():
        assert set(causes) == nearest(t)
        assert set(causes) <= anc[t] & blocked
        assert len(causes) == len(set(causes))


@pytest.mark.slow
@PROPS
@given(dag_cases())
def test_ready_tasks_honour_a_full_cap(case: Case) -> None:
    plan = build(case)
    phases = dict.fromkeys(case.ids, Phase.PENDING)
    first = ready_tasks(plan, phases, case.cap)
    roots = [t for t in case.ids if not case.deps[t]]
    assert len(first) == min(case.cap, len(roots))
    # a cap taken by sessions of any active phase leaves no room
    for t in case.ids[: case.cap]:
        phases[t] = Phase.IMPLEMENTING
    if len(case.ids) >= case.cap:
        assert ready_tasks(plan, phases, case.cap) == []


# validation against the reference -------------------------------------------------------


@pytest.mark.slow
@PROPS
@given(dag_cases(), st.data())
def test_a_file_shared_by_unordered_tasks_is_always_reported(
    case: Case, data: st.DataObject
) -> None:
    anc = ancestors_ref(case.deps)
    pairs = [
        (a, b)
        for i, a in enumerate(case.ids)
        for b in case.ids[i + 1 :]
        if a not in anc[b] and b not in anc[a]
    ]
    assume(pairs)
    a, b = data.draw(st.sampled_from(pairs))
    shared = data.draw(
        st.sampled_from(
            [
                ("common/x.py", "common/x.py"),
                ("common/x.py", "common/*.py"),
                ("common/", "common/deep/y.py"),
                ("**/z.py", "common/z.py"),
            ]
        )
    )
    by_id = {t["id"]: t for t in case.raw["tasks"]}
    by_id[a]["owns"].append(shared[0])
    by_id[b]["owns"].append(shared[1])
    with pytest.raises(PlanError) as info:
        validate_plan_data(case.raw)
    first, second = sorted((a, b))
    assert any(
        p.startswith(f"tasks {first!r} and {second!r}, field owns:") for p in info.value.problems
    ), info.value.problems


@pytest.mark.slow
@PROPS
@given(dag_cases(), st.data())
def test_a_back_edge_is_reported_as_a_cycle(case: Case, data: st.DataObject) -> None:
    anc = ancestors_ref(case.deps)
    edges = [(t, d) for t in case.ids for d in anc[t]]
    assume(edges)
    child, ancestor = data.draw(st.sampled_from(edges))
    by_id = {t["id"]: t for t in case.raw["tasks"]}
    by_id[ancestor]["depends_on"].append(child)
    with pytest.raises(PlanError) as info:
        validate_plan_data(case.raw)
    cycles = [p for p in info.value.problems if p.startswith("dependency cycle: ")]
    assert len(cycles) == 1
    path = cycles[0].removeprefix("dependency cycle: ").split(";")[0].split(" -> ")
    assert path[0] == path[-1] and len(path) >= 3
    # each printed step is a real edge: X -> Y means X depends on Y
    new_deps = {t: set(ds) for t, ds in case.deps.items()}
    new_deps[ancestor].add(child)
    assert all(path[i + 1] in new_deps[path[i]] for i in range(len(path) - 1)), path


# owns patterns: overlap is sound ----------------------------------------------------------

SEG = st.sampled_from(["a", "b", "ab", "x.py", "y.md", "*", "*.py", "a*", "**", "?b"])
PATTERN = st.lists(SEG, min_size=1, max_size=4).map("/".join)
PATH = st.lists(
    st.sampled_from(["a", "b", "ab", "x.py", "y.md", "bb"]), min_size=1, max_size=5
).map("/".join)


@settings(max_examples=400, deadline=None)
@given(PATTERN, PATTERN, PATH)
def test_patterns_overlap_never_misses_a_common_path(a: str, b: str, path: str) -> None:
    from loop_orchestrator.plan.globs import path_matches

    if path_matches(path, [a]) and path_matches(path, [b]):
        assert patterns_overlap(a, b), (a, b, path)

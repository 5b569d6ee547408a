"""How plan validation and scheduling scale, and how good the schedules are.

Run: ``.venv/bin/python benchmarks/plan_scale.py [--sizes 100,1000,5000] [--seed 1]``

1. Validation + scheduling of random plans of 100, 1,000 and 5,000 tasks: wall time and
   peak memory (tracemalloc) of ``validate_plan_data`` (model + every semantic check,
   including pairwise ownership) and of ``waves`` / ``topological_order``.
   The plans look like real ones: a random DAG (0-3 dependencies per task, mostly on
   recent tasks, as a decomposition into modules produces), each task owning 2-4 files in
   its own folder, and along some dependency edges a shared folder where the producer owns
   a file and the consumer a glob over the folder.
2. Makespan of the ready queue and of strict waves, with random task durations, driven by
   the real ``ready_tasks`` like the supervisor drives it, against the lower bound
   ``max(critical path, total work / cap)``.

Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import functools
import heapq
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loop_orchestrator.plan.loading import validate_plan_data
from loop_orchestrator.plan.model import Plan
from loop_orchestrator.plan.schedule import (
    dependencies,
    ready_tasks,
    topological_order,
    wave_of,
    waves,
)
from loop_orchestrator.runstate.state import Phase

T = TypeVar("T")


def random_plan(n: int, rng: random.Random) -> dict[str, Any]:
    """A valid plan over a random DAG with realistic ownership (see the module doc)."""
    tasks: list[dict[str, Any]] = []
    for j in range(n):
        k = rng.choices([0, 1, 2, 3], weights=[2, 4, 3, 1])[0] if j else 0
        window = range(max(0, j - 60), j)
        parents = sorted(rng.sample(window, min(k, len(window))))
        owns = [f"pkg/m{j}/f{i}.py" for i in range(rng.randint(2, 4))]
        task: dict[str, Any] = {
            "id": f"m{j}",
            "title": f"Module {j}",
            "objective": f"Implement module {j} and its tests",
            "owns": [*owns, f"tests/m{j}/test_m{j}.py"],
            "produces": [f"api{j}"],
            "consumes": [],
            "depends_on": [],
            "done": [{"criterion": f"module {j} works", "check": f"pytest -q tests/m{j}"}],
            "complexity": rng.choice(["simple", "medium", "complex"]),
        }
        for p in parents:
            if rng.random() < 0.5:
                task["consumes"].append(f"api{p}")
            else:
                task["depends_on"].append(f"m{p}")
            if rng.random() < 0.15:  # a folder shared along this edge only
                tasks[p]["owns"].append(f"shared/m{p}-m{j}/types.py")
                task["owns"].append(f"shared/m{p}-m{j}/*.py")
        tasks.append(task)
    return {"goal": f"A random plan of {n} tasks", "name": f"bench-{n}", "tasks": tasks}


def measured(fn: Callable[[], T]) -> tuple[T, float, float]:
    """(result, seconds, peak MiB allocated while running fn).

    Time and memory come from two runs: tracemalloc slows allocation-heavy code severalfold.
    """
    start = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - start
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return result, elapsed, peak / 2**20


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def makespan(plan: Plan, cap: int, durations: dict[str, float], *, strict: bool) -> float:
    """Event simulation: start what ready_tasks releases, finish in duration order."""
    phases = {t.id: Phase.PENDING for t in plan.tasks}
    numbers = wave_of(plan, cap)
    deps = dependencies(plan)
    running: list[tuple[float, str]] = []
    now = 0.0
    done = 0
    while done < len(phases):
        for tid in ready_tasks(
            plan, phases, cap, strict_waves=strict, wave_numbers=numbers, deps=deps
        ):
            phases[tid] = Phase.IMPLEMENTING
            heapq.heappush(running, (now + durations[tid], tid))
        if not running:
            msg = "deadlock: nothing running and nothing ready"
            raise RuntimeError(msg)
        now, tid = heapq.heappop(running)
        phases[tid] = Phase.INTEGRATED
        done += 1
        while running and running[0][0] == now:
            phases[heapq.heappop(running)[1]] = Phase.INTEGRATED
            done += 1
    return now


def lower_bound(plan: Plan, cap: int, durations: dict[str, float]) -> tuple[float, float]:
    deps = dependencies(plan)
    finish: dict[str, float] = {}
    for tid in topological_order(plan, deps):
        finish[tid] = durations[tid] + max((finish[d] for d in deps[tid]), default=0.0)
    return max(finish.values()), sum(durations.values()) / cap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument(
        "--makespan-sizes",
        default="100,1000",
        help="sizes to simulate (ready_tasks is O(tasks) per call, the simulation O(tasks^2))",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--caps", default="4,8")
    parser.add_argument("--trials", type=int, default=3, help="duration draws per size and cap")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    caps = [int(c) for c in args.caps.split(",")]
    rng = random.Random(args.seed)
    began = time.perf_counter()

    print("validation and scheduling")
    print(
        f"{'tasks':>6} {'owns':>6} {'edges':>6} {'levels':>6} | {'validate s':>10} "
        f"{'peak MiB':>8} | {'waves s':>8} {'topo s':>8} {'peak MiB':>8}"
    )
    plans: dict[int, Plan] = {}
    for n in sizes:
        raw = random_plan(n, rng)
        plan, v_secs, v_peak = measured(functools.partial(validate_plan_data, raw, "bench"))
        plans[n] = plan
        _, w_secs, w_peak = measured(functools.partial(waves, plan, 8))
        _, t_secs = timed(functools.partial(topological_order, plan))
        owns = sum(len(t.owns) for t in plan.tasks)
        edges = sum(len(d) for d in dependencies(plan).values())
        levels = len(set(wave_of(plan, len(plan.tasks)).values()))
        print(
            f"{n:>6} {owns:>6} {edges:>6} {levels:>6} | {v_secs:>10.3f} {v_peak:>8.1f} | "
            f"{w_secs:>8.3f} {t_secs:>8.3f} {w_peak:>8.1f}"
        )

    print("\nmakespan with random durations (lognormal, median 1): ratio to the lower bound")
    print(
        f"{'tasks':>6} {'cap':>4} | {'bound':>8} {'(path)':>8} {'(work)':>8} | "
        f"{'ready q':>8} {'strict':>8} | {'sim s':>6}"
    )
    for n in [int(s) for s in args.makespan_sizes.split(",")]:
        plan = plans.get(n) or validate_plan_data(random_plan(n, rng))
        for cap in caps:
            ratios_ready: list[float] = []
            ratios_strict: list[float] = []
            start = time.perf_counter()
            bounds: tuple[float, float] = (0.0, 0.0)
            for _ in range(args.trials):
                durations = {t.id: rng.lognormvariate(0, 0.6) for t in plan.tasks}
                bounds = lower_bound(plan, cap, durations)
                bound = max(bounds)
                ratios_ready.append(makespan(plan, cap, durations, strict=False) / bound)
                ratios_strict.append(makespan(plan, cap, durations, strict=True) / bound)
            sim = time.perf_counter() - start
            print(
                f"{n:>6} {cap:>4} | {max(bounds):>8.1f} {bounds[0]:>8.1f} {bounds[1]:>8.1f} | "
                f"{sum(ratios_ready) / len(ratios_ready):>8.3f} "
                f"{sum(ratios_strict) / len(ratios_strict):>8.3f} | {sim:>6.1f}"
            )
    print(f"\ntotal {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()

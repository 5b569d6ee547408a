"""Cluster benchmark: the same run on local tmux and on a 3-node local Ray cluster, side by side.

One plan of N tasks (16 by default, a few waves, cap 8) with the scripted agent runs twice
in the same invocation: LOCAL (``[cluster] backend = "tmux"``, sessions in this machine's
tmux) and RAY (``[cluster] backend = "ray"``: a ``ray.cluster_utils.Cluster`` started here,
a head without session slots and three worker nodes with ``lo_session`` slots and their own
working roots, so every task's checkout arrives as a git bundle and comes back as one).
Each run is supervised in a process of its own (the supervisor in-process there, so the
Ray backend's own counters can be read). Printed per backend:

1. launch time per task, p50/p95: the journal's ``launching`` to ``planning`` (worktree or
   node checkout, the session started, the agent ready).
2. signal-to-reaction, p50/p95: from the moment a session *starts* ``lo-orch signal`` (the
   scripted agent reads the clock first, on the node for RAY) to the supervisor's
   ``reacted`` ledger line; for RAY this includes fetching the node's work back.
3. bundle bytes per task, sent (the start bundle and files) and received (work and
   checkpoints), p50/max; LOCAL moves no bytes (the worktree is on this disk).
4. supervisor CPU seconds (its process: Ray's driver threads included) and, for RAY, the
   CPU seconds of the cluster's own processes (GCS, raylets, the session actors).
5. supervisor events: ledger and journal lines, and per second of the run.

Throwaway HOME/XDG folders, private tmux sockets (killed at the end), no OS sandbox in
either run (like for like), the LLM auditor off.

    .venv/bin/python benchmarks/cluster.py [--tasks 16] [--concurrency 8] [--slots 3]
        [--only local|ray]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmarks import common  # noqa: E402
from loop_orchestrator.sessions.procinfo import cpu_and_peak_rss, parent_pid  # noqa: E402

RUN_TIMEOUT = 20 * 60.0
NODES = 3
LABELS = {"local": "local tmux", "ray": f"Ray, {NODES} nodes"}


def environment(root: Path) -> dict[str, str]:
    """The shared throwaway environment, with tmux sockets under it and this tree's code
    importable (the cluster's nodes start their workers with it)."""
    env = common.environment(root)
    (root / "home" / "tmux").mkdir()
    env.update(
        TMUX_TMPDIR=str(root / "home" / "tmux"),
        PYTHONPATH=os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
        ),
    )
    return env


def build(root: Path, n: int, concurrency: int) -> tuple[Path, Path, Path]:
    """The project, the plan and the agent script: (repo, plan, script)."""
    # some history, so a start bundle carries what a real repository's would
    repo = common.project(root, readme_lines=400)
    starts = root / "timing" / "signal-starts"
    starts.mkdir(parents=True)
    tasks: list[object] = []
    script: dict[str, object] = {}
    for i in range(n):
        tasks.append(common.task(i, 4, sys.executable))
        script[f"t{i:03d}"] = {
            "plan": [common.signal_run("plan_ready", starts)],
            "implement": common.implement(i, common.signal_run("impl_done", starts)),
        }
    plan, script_path = common.write_plan(
        root, f"cbench{n}", f"cluster benchmark with {n} tasks", concurrency, tasks, script
    )
    return repo, plan, script_path


# one measured run, in its own process ----------------------------------------------------


def run_one(root: Path, backend: str, address: str, concurrency: int) -> None:
    """Plan, approve and supervise the run under ``root`` in this process; write what was
    measured to ``root/result.json``."""
    from loop_orchestrator.cluster.ray_backend import RayBackend
    from loop_orchestrator.commands.plan import plan_from_file
    from loop_orchestrator.config import Settings
    from loop_orchestrator.runstate import create as runs
    from loop_orchestrator.runstate.state import RunDir, Store
    from loop_orchestrator.supervisor.main import Supervisor

    repo, plan_path, script = root / "bench", root / "plan.yaml", root / "script.yaml"
    settings = Settings.model_validate(
        {
            "agent": {"kind": "scripted", "script": str(script), "ready_timeout": 60},
            "auditor": {"llm": "off"},
            "sandbox": {"mode": "off"},
            "run": {"concurrency": concurrency, "stagger_seconds": 0.05, "stall_minutes": 2},
            "cluster": {
                "backend": "ray" if backend == "ray" else "tmux",
                "address": address or "auto",
            },
        }
    )
    plan_from_file(repo, plan_path, settings)
    runs.approve_plan(repo)
    supervisor = Supervisor(repo, settings)
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.monotonic()
    outcome = supervisor.run()
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    ray_backend = supervisor.backend
    assert isinstance(ray_backend, RayBackend)
    stats = ray_backend.stats
    placed: dict[str, int] = {}
    for status in Store(RunDir(repo)).list_statuses():
        where = str(getattr(status, "node", None) or "this machine")
        placed[where] = placed.get(where, 0) + 1
    result = {
        "nodes": sorted(placed.values(), reverse=True),
        "state": str(outcome.state),
        "message": str(getattr(outcome, "message", "")),
        "wall": wall,
        "cpu": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        "stats": {task: [[k, v] for k, v in values] for task, values in stats.items()},
    }
    (root / "result.json").write_text(json.dumps(result), encoding="utf-8")


# the Ray cluster ------------------------------------------------------------------------


@contextlib.contextmanager
def ray_cluster(root: Path, env: dict[str, str], slots: int) -> Iterator[Any]:
    """A head without session slots and NODES worker nodes with ``slots`` each, every node
    with its own working root; shut down on exit."""
    from ray.cluster_utils import Cluster

    node_env = {
        k: env[k]
        for k in (
            "HOME",
            "XDG_STATE_HOME",
            "XDG_CONFIG_HOME",
            "XDG_CACHE_HOME",
            "TMUX_TMPDIR",
            "SHELL",
            "PYTHONPATH",
        )
    }
    short = Path(tempfile.mkdtemp(prefix="lo-cb-", dir="/tmp"))  # Ray's socket paths
    cluster: Any = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "temp_dir": str(short / "t"),
            "env_vars": node_env,
            "include_dashboard": False,
        },
    )
    try:
        for i in range(NODES):
            cluster.add_node(
                num_cpus=1,
                resources={"lo_session": slots},
                env_vars={**node_env, "LO_ORCH_NODE_ROOT": str(root / f"node{i}")},
            )
        cluster.wait_for_nodes()
        yield cluster
    finally:
        cluster.shutdown()
        shutil.rmtree(short, ignore_errors=True)


def _descendants(pid: int) -> set[int]:
    """Every living descendant of ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (ppid := parent_pid(int(entry.name))) is not None:
            children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _cpu(pid: int) -> float | None:
    sample = cpu_and_peak_rss(pid)
    return sample[0] if sample else None


class CpuSampler:
    """CPU seconds of this process's descendants outside the subtree of ``exclude`` (the
    Ray cluster's processes), the largest reading per pid, sampled every 0.2 s."""

    def __init__(self) -> None:
        self.exclude = 0
        self.seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            mine = _descendants(self.exclude) | {self.exclude} if self.exclude else set()
            for pid in _descendants(os.getpid()) - mine:
                cpu = _cpu(pid)
                if cpu is not None:
                    self.seen[pid] = max(self.seen.get(pid, 0.0), cpu)

    def start(self) -> None:
        self.baseline = {p: c for p in _descendants(os.getpid()) if (c := _cpu(p)) is not None}
        self._thread.start()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return sum(max(0.0, c - self.baseline.get(p, 0.0)) for p, c in self.seen.items())


# measuring and printing -----------------------------------------------------------------


def measure(backend: str, n: int, concurrency: int, slots: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(
        prefix=f"lo-cbench-{backend}-", ignore_cleanup_errors=True
    ) as tmp:
        root = Path(tmp)
        env = environment(root)
        repo, _, _ = build(root, n, concurrency)
        env["LO_ORCH_TMUX_SOCKET"] = f"lo-cbench-{os.getpid()}-{backend}"
        with contextlib.ExitStack() as stack:
            address = ""
            if backend == "ray":
                cluster = stack.enter_context(ray_cluster(root, env, slots))
                address = cluster.address
            sampler = CpuSampler()
            sampler.start()
            child = subprocess.Popen(
                [
                    *(sys.executable, __file__, "--one", backend, "--root", str(root)),
                    *("--address", address, "--concurrency", str(concurrency)),
                ],
                env=env,
                cwd=root,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            sampler.exclude = child.pid
            try:
                _, err = child.communicate(timeout=RUN_TIMEOUT)
            except subprocess.TimeoutExpired:
                child.kill()
                _, err = child.communicate()
            # the measured run's own children (tmux clients, git, checks) are not Ray's
            ray_cpu = sampler.stop() if backend == "ray" else 0.0
            subprocess.run(
                ["tmux", "-L", env["LO_ORCH_TMUX_SOCKET"], "kill-server"],
                env=env,
                capture_output=True,
                check=False,
                timeout=30,
            )
        result_file = root / "result.json"
        if not result_file.exists():
            tail = "\n".join(err.strip().splitlines()[-15:])
            return {"problem": f"the run ended without a result (exit {child.returncode}):\n{tail}"}
        result: dict[str, Any] = json.loads(result_file.read_text(encoding="utf-8"))
        ledger = common.ledger(repo)
        journal = common.journals(root / "home")
        starts = common.signal_starts(root / "timing" / "signal-starts")
    return analyse(n, result, ledger, journal, starts) | {"ray_cpu": ray_cpu}


def analyse(
    n: int,
    result: dict[str, Any],
    ledger: list[dict[str, Any]],
    journal: list[dict[str, Any]],
    starts: list[tuple[str, str, float]],
) -> dict[str, Any]:
    reacted = common.reacted(ledger)
    reaction = [reacted[(t, ph)] - ts for t, ph, ts in starts if (t, ph) in reacted]
    entered: dict[tuple[str, str], float] = {}
    for entry in journal:
        changes = entry.get("data", {}).get("set", {})
        if entry.get("kind") == "task" and changes.get("phase") in ("launching", "planning"):
            entered.setdefault((entry["data"]["task"], changes["phase"]), common.ts(entry["ts"]))
    launch = [
        entered[(t, "planning")] - entered[(t, "launching")]
        for t in {t for t, _ in entered}
        if (t, "launching") in entered and (t, "planning") in entered
    ]
    sent: list[float] = []
    received: list[float] = []
    for values in result.get("stats", {}).values():
        sums: dict[str, float] = {}
        for what, value in values:
            sums[what] = sums.get(what, 0.0) + float(value)
        sent.append(sums.get("start_bundle_bytes", 0.0))
        received.append(
            sums.get("bundle_bytes", 0.0)
            + sums.get("checkpoint_bytes", 0.0)
            + sums.get("transcript_bytes", 0.0)  # a Claude Code session's transcript
        )
    integrated = {e.get("task") for e in ledger if e["event"] == "task_integrated"}
    events = len(ledger) + len(journal)
    return {
        "tasks": n,
        "state": result.get("state"),
        "message": result.get("message"),
        "launch": launch,
        "reaction": reaction,
        "signals": (len(reaction), 2 * n),
        "sent": sent,
        "received": received,
        "cpu": float(result.get("cpu", 0.0)),
        "wall": float(result.get("wall", 0.0)),
        "events": events,
        "integrated": len(integrated),
        "nodes": result.get("nodes", []),
    }


def _ms(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{1000 * common.pct(values, 0.5):.0f} / {1000 * common.pct(values, 0.95):.0f}"


def _kib(values: list[float]) -> str:
    if not values:
        return "0 (same disk)"
    return f"{common.pct(values, 0.5) / 1024:.1f} / {max(values) / 1024:.1f}"


def render(results: dict[str, dict[str, Any]], n: int, concurrency: int, slots: int) -> str:
    labels = [b for b in ("local", "ray") if b in results]
    rows: list[tuple[str, Any]] = [
        ("1 launch per task p50/p95 ms", lambda r: _ms(r["launch"])),
        ("2 signal-to-reaction p50/p95 ms", lambda r: _ms(r["reaction"])),
        ("3 bundle KiB sent per task p50/max", lambda r: _kib(r["sent"])),
        ("3 bundle KiB received per task p50/max", lambda r: _kib(r["received"])),
        ("4 supervisor CPU s", lambda r: f"{r['cpu']:.2f}"),
        ("4 Ray cluster processes CPU s", lambda r: f"{r['ray_cpu']:.2f}" if r["ray_cpu"] else "-"),
        ("5 supervisor events (ledger+journal)", lambda r: str(r["events"])),
        ("5 events per second of the run", lambda r: f"{r['events'] / max(r['wall'], 1e-9):.1f}"),
        ("  run wall s", lambda r: f"{r['wall']:.1f}"),
        ("  tasks integrated", lambda r: f"{r['integrated']}/{r['tasks']}"),
        ("  signals timed/sent", lambda r: f"{r['signals'][0]}/{r['signals'][1]}"),
        ("  tasks per place (last session)", lambda r: "/".join(map(str, r["nodes"])) or "-"),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [
        f"cluster benchmark: {n} scripted tasks, cap {concurrency}, {os.cpu_count()} cores; "
        f"Ray: a head without slots + {NODES} nodes x {slots} lo_session slots, one machine",
        "",
        "".ljust(width) + "".join(f" {LABELS[b]:>18}" for b in labels),
    ]
    for name, cell in rows:
        line = name.ljust(width)
        for b in labels:
            r = results[b]
            line += f" {cell(r) if 'problem' not in r else '-':>18}"
        lines.append(line)
    for b in labels:
        r = results[b]
        if "problem" in r:
            lines.append(f"  note: {LABELS[b]}: {r['problem']}")
        elif r["state"] != "review" or r["integrated"] != r["tasks"]:
            lines.append(f"  note: {LABELS[b]}: ended {r['state']}: {r['message']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--slots", type=int, default=3, help="session slots per Ray node")
    parser.add_argument("--only", choices=("local", "ray"), help="measure one backend")
    parser.add_argument("--one", choices=("local", "ray"), help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--address", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # the measured run's own process
        run_one(Path(args.root), args.one, args.address, args.concurrency)
        return
    results: dict[str, dict[str, Any]] = {}
    for backend in [args.only] if args.only else ["local", "ray"]:
        print(f"measuring {LABELS[backend]}...", file=sys.stderr, flush=True)
        results[backend] = measure(backend, args.tasks, args.concurrency, args.slots)
    print(render(results, args.tasks, args.concurrency, args.slots))


if __name__ == "__main__":
    main()

"""Hook and signal benchmark, BEFORE and AFTER side by side: what a session waits on lo-orch.

One run measures the same workload twice: BEFORE is a baseline revision (default 90321c1:
sessions' hooks and signals ran the standard-library Python client, ``python -I -S
.../sessions/fast_entry.py``; 1e3e895 is the one before that, ``python -m loop_orchestrator
hook``), checked out in a temporary git worktree and imported through ``PYTHONPATH``
(supervisor, panes and ``LO_ORCH_BIN`` alike; checked, and removed at the end); AFTER is
this tree, on ``PYTHONPATH`` the same way (``hooks/lo-hook`` runs ``$LO_ORCH_HOOK``: the
compiled client ``lo-session hook`` where a C compiler is found, and ``$LO_ORCH_BIN signal``
is ``lo-session signal``). Each is a real ``lo-orch run`` of ``--tasks`` scripted sessions
at once (cap = tasks) in real tmux, agents in the sandbox where bwrap works. Per version it
prints:

1. per hook event, the wall time p50/p95 and the CPU time (the launcher and everything it
   started, children's rusage) p50/mean of every call of the plugin's ``hooks/lo-hook``,
   each under a timing wrapper: the events the scripted agent fires itself through the
   plugin (SessionStart, UserPromptSubmit, Stop, SessionEnd) and, while all sessions plan
   at once, a burst per session of ``--rounds`` rounds of PreToolUse x3, Notification and
   PermissionRequest (for ``$LO_ORCH_BIN signal plan_ready``, which a fixed rule allows, so
   the answer comes back at once), with Claude-shaped JSON on stdin, one after the other as
   Claude Code runs them, ``--pause`` seconds apart (as a session's tool calls are; with 0,
   16 sessions calling back to back keep 2 cores busy and every wall time is queueing);
2. the floor, timed the same way in the same bursts: ``python -c pass`` and
   ``python -I -S -c pass`` of the same interpreter;
3. signal start -> recorded (the supervisor's ``signal`` ledger line) and -> the next phase
   (its private journal), p50/p95: from the moment a session *starts*
   ``$LO_ORCH_BIN signal PHASE`` (the scripted agent records the clock first);
4. the supervisor's own CPU while the most sessions at once make their burst (from the
   moment the last of them began it to the moment the first of them ended it: none of them
   starts, signals or is verified then), sampled from /proc every 0.1 s: in % of a core
   per session, and per hook event begun in that window. This is what working sessions
   cost the supervisor, apart from what a task's start, verification and merge cost once
   (``supervisor.py``).

Each run gets a private tmux socket (killed at the end), a throwaway HOME and XDG folders;
both versions' packages are byte-compiled first, as an installed lo-orch is.

    .venv/bin/python benchmarks/hooks.py [--tasks 16] [--rounds 6] [--pause 0.3]
        [--baseline REV | --no-baseline] [--tally]

``--tally``: each supervisor counts its own CPU by function, printed per task
(``cputally``, as ``supervisor.py --tally``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BASELINE = "90321c1"
REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmarks import common, cputally  # noqa: E402
from loop_orchestrator.sessions.procinfo import cpu_and_peak_rss  # noqa: E402

RUN_TIMEOUT = 15 * 60.0
NEXT_PHASE = {"plan_ready": "implementing", "impl_done": "verifying"}
#: the events of each round of the burst, in order
BURST = ("PreToolUse", "PreToolUse", "PreToolUse", "Notification", "PermissionRequest")
FLOORS = {"floor: python -c pass": ["-c", "pass"], "floor: python -I -S -c pass": []}

#: the timing wrapper around each timed command (stdlib only, run with ``python -I -S``):
#: ``hooktime.py LOG LABEL CMD...``; stdin and stdout pass through
TIMER = """\
import os, resource, subprocess, sys, time
log, label, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
began = time.time()
start = time.perf_counter()
rc = subprocess.call(cmd)
wall = time.perf_counter() - start
ru = resource.getrusage(resource.RUSAGE_CHILDREN)  # the one child, and what it waited for
with open(log, "a", encoding="utf-8") as fh:
    fh.write(json.dumps([os.environ.get("LO_ORCH_TASK", "-"), label, wall,
                         ru.ru_utime + ru.ru_stime, rc, began]) + "\\n")
sys.exit(rc)
""".replace("import os,", "import json, os,")


def _payload(event: str, sid: str) -> dict[str, Any]:
    base: dict[str, Any] = {
        "session_id": sid,
        "transcript_path": f"/tmp/{sid}.jsonl",
        "cwd": "/tmp",
        "hook_event_name": event,
        "permission_mode": "bypassPermissions",
    }
    if event == "PreToolUse":
        base |= {
            "tool_name": "Bash",
            "tool_input": {"command": "python -m pytest -q tests", "description": "run tests"},
            "tool_use_id": "toolu_01bench",
        }
    elif event == "Notification":
        base |= {"message": "Claude is waiting for your input", "notification_type": "idle_prompt"}
    elif event == "PermissionRequest":
        base |= {
            "tool_name": "Bash",
            "tool_input": {"command": "$LO_ORCH_BIN signal plan_ready"},
            "permission_suggestions": [],
        }
    return base


def _plugin(root: Path, version: common.Version, timer: Path, log: Path) -> Path:
    """A plugin folder whose hooks are the version's own, each under the timing wrapper."""
    return common.timed_plugin(
        root, version, lambda event: [sys.executable, "-I", "-S", str(timer), str(log), event]
    )


def _burst(
    root: Path, version: common.Version, timer: Path, log: Path, rounds: int, pause: float
) -> dict[str, Any]:
    """The ``run:`` action firing the burst of hook events (and the floors) in a session."""
    payloads = root / "payloads"
    payloads.mkdir()
    sid = "5b0f4c1e-7d7a-4b7e-9a57-3f1f0d7e2c11"
    for event in set(BURST):
        (payloads / f"{event}.json").write_text(json.dumps(_payload(event, sid)), "utf-8")
    launcher = shlex.quote(str(version.tree / "hooks" / "lo-hook"))
    time_it = shlex.join([sys.executable, "-I", "-S", str(timer), str(log)])
    lines = [f"i=0; while [ $i -lt {rounds} ]; do i=$((i + 1))"]
    for event in BURST:
        data = shlex.quote(str(payloads / f"{event}.json"))
        lines.append(f"  {time_it} {event} {launcher} {event} < {data} > /dev/null")
        lines.append(f"  sleep {pause}")
    for label, args in FLOORS.items():
        argv = [sys.executable, *args] if args else [sys.executable, "-I", "-S", "-c", "pass"]
        lines.append(f"  {time_it} {shlex.quote(label)} {shlex.join(argv)} < /dev/null")
        lines.append(f"  sleep {pause}")
    lines.append("done")
    return {"run": {"argv": ["sh", "-c", "\n".join(lines)], "timeout": 600}}


def build(root: Path, n: int, rounds: int, pause: float, version: common.Version) -> Path:
    repo = common.project(root)
    timing = root / "timing"
    starts = timing / "signal-starts"
    starts.mkdir(parents=True)
    timer = root / "hooktime.py"
    timer.write_text(TIMER, encoding="utf-8")
    log = timing / "hooks.jsonl"
    burst = _burst(root, version, timer, log, rounds, pause)
    tasks: list[object] = [common.task(i, 4, sys.executable) for i in range(n)]
    script: dict[str, object] = {}
    for i in range(n):
        plan: list[object] = [burst, common.signal_run("plan_ready", starts)]
        script[f"t{i:03d}"] = {
            "plan": plan,
            "implement": common.implement(i, common.signal_run("impl_done", starts)),
        }
    common.write_plan(root, f"hooks{n}", f"hook benchmark, {n} tasks", n, tasks, script)
    plugin = _plugin(root, version, timer, log)
    agent_env = ""
    if version.pythonpath is not None:  # the pane's own python -m must find the old code too
        agent_env = f"env = {{ PYTHONPATH = {json.dumps(str(version.pythonpath))} }}\n"
    cfg = repo / ".loop-orchestrator"
    cfg.mkdir()
    (cfg / "config.toml").write_text(
        f'[agent]\nkind = "scripted"\nscript = {json.dumps(str(root / "script.yaml"))}\n'
        f"args = {json.dumps(['--plugin-dir', str(plugin)])}\nready_timeout = 60\n{agent_env}"
        '[auditor]\nllm = "off"\n[run]\nstagger_seconds = 0.05\nstall_minutes = 2\n',
        encoding="utf-8",
    )
    return repo


def supervise(
    lo: list[str], repo: Path, env: dict[str, str], cwd: Path
) -> tuple[str | None, list[tuple[float, float]]]:
    """Run the supervisor to its end: (None or what went wrong, its CPU seconds sampled
    every 0.1 s as (clock time, CPU))."""
    samples: list[tuple[float, float]] = []
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as err:
        sup = subprocess.Popen(
            [*lo, "run", "--repo", str(repo)], env=env, cwd=cwd, stdout=subprocess.DEVNULL,
            stderr=err, text=True,
        )  # fmt: skip
        try:
            while sup.poll() is None:
                if time.monotonic() - started > RUN_TIMEOUT:
                    return f"stopped after {RUN_TIMEOUT:.0f} s", samples
                sample = cpu_and_peak_rss(sup.pid)
                if sample:
                    samples.append((time.time(), sample[0]))
                time.sleep(0.1)
        finally:
            if sup.poll() is None:
                sup.terminate()
                sup.wait(30)
        err.seek(0)
        tail = (err.read().strip().splitlines() or [""])[-1]
    problem = None if sup.returncode == 0 else f"supervisor exit {sup.returncode}: {tail}"
    return problem, samples


def while_all_work(
    calls: list[list[Any]], samples: list[tuple[float, float]]
) -> dict[str, float] | None:
    """The supervisor's CPU while the most sessions at once make their burst of hook calls
    (a task that waits for another starts later): from the moment the last of them began
    its burst to the moment the first of them ended it (none of them starts, signals or is
    verified then). ``sessions``: how many; ``share``: % of a core per session;
    ``per_event``: CPU seconds per hook event begun in that window (any session's); None
    when no window of a second or more was sampled."""
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for task, label, wall, _cpu, _rc, began, *_ in calls:
        if label in BURST:
            first[task] = min(first.get(task, began), began)
            last[task] = max(last.get(task, began + wall), began + wall)
    best: list[str] = []
    for moment in sorted(first.values()):
        busy = [t for t in first if first[t] <= moment < last[t]]
        if len(busy) > len(best):
            best = busy
    if not best:
        return None
    start, end = max(first[t] for t in best), min(last[t] for t in best)
    inside = [(t, c) for t, c in samples if start <= t <= end]
    if len(inside) < 2 or inside[-1][0] - inside[0][0] < 1.0:
        return None
    (t0, c0), (t1, c1) = inside[0], inside[-1]
    events = sum(1 for _t, label, _w, _c, _rc, b, *_ in calls if label in BURST and t0 <= b <= t1)
    return {
        "sessions": float(len(best)),
        "seconds": t1 - t0,
        "share": 100 * (c1 - c0) / (t1 - t0) / len(best),
        "per_event": (c1 - c0) / events if events else 0.0,
        "events": float(events),
    }


def measure(
    n: int, rounds: int, pause: float, version: common.Version, tally: bool = False
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(
        prefix=f"lo-bench-hooks-{version.label.lower()}-", ignore_cleanup_errors=True
    ) as tmp:
        root = Path(tmp)
        socket = f"lo-bench-hooks-{os.getpid()}-{version.label.lower()}"
        env = common.version_env(version, root, socket, drop=common.BYTECODE_VARIABLES)
        common.compile_tree(version)
        common.check_import(version, env, root)
        repo = build(root, n, rounds, pause, version)
        lo = [sys.executable, "-m", "loop_orchestrator"]
        started = time.monotonic()
        try:
            for step in (["plan", str(root / "plan.yaml")], ["approve"]):
                subprocess.run(
                    [*lo, *step, "--repo", str(repo)],
                    env=env,
                    cwd=root,
                    check=True,
                    capture_output=True,
                    timeout=300,
                )
            # with ``tally`` the supervisor counts its own CPU by function (``cputally``)
            boot, sup_env = cputally.supervisor(lo, env, root, tally)
            problem, samples = supervise(boot, repo, sup_env, root)
        finally:
            subprocess.run(
                ["tmux", "-L", socket, "kill-server"], capture_output=True, check=False, timeout=30
            )
            tmux_dir = Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}"
            (tmux_dir / socket).unlink(missing_ok=True)
        wall = time.monotonic() - started
        calls = [
            json.loads(line)
            for line in (root / "timing" / "hooks.jsonl").read_text(encoding="utf-8").splitlines()
        ]
        ledger = common.ledger(repo)
        starts = common.signal_starts(root / "timing" / "signal-starts")
        journal = common.journals(root / "home")
        by_function = cputally.counts(root, tally)
    return analyse(n, calls, ledger, starts, journal) | {
        "tally": by_function,
        "wall": wall,
        "problem": problem,
        "working": while_all_work(calls, samples),
    }


def analyse(
    n: int,
    calls: list[list[Any]],
    ledger: list[dict[str, Any]],
    starts: list[tuple[str, str, float]],
    journal: list[dict[str, Any]],
) -> dict[str, Any]:
    by_label: dict[str, list[tuple[float, float]]] = {}
    failed = 0
    for _task, label, wall, cpu, rc, *_ in calls:
        by_label.setdefault(label, []).append((float(wall), float(cpu)))
        failed += rc not in (0, 2)  # 2: a Stop block
    recorded: dict[tuple[str, str], float] = {}
    for e in ledger:
        if e["event"] == "signal":
            recorded.setdefault((str(e.get("task")), str(e.get("phase"))), common.ts(e["ts"]))
    moved: dict[tuple[str, str], float] = {}
    for entry in journal:
        changes = entry.get("data", {}).get("set", {})
        if entry.get("kind") == "task" and changes.get("phase") in NEXT_PHASE.values():
            moved.setdefault((entry["data"]["task"], changes["phase"]), common.ts(entry["ts"]))
    to_record = [recorded[(t, ph)] - at for t, ph, at in starts if (t, ph) in recorded]
    to_phase = [
        moved[(t, NEXT_PHASE[ph])] - at for t, ph, at in starts if (t, NEXT_PHASE[ph]) in moved
    ]
    integrated = {e.get("task") for e in ledger if e["event"] == "task_integrated"}
    return {
        "tasks": n,
        "calls": by_label,
        "failed": failed,
        "to_record": to_record,
        "to_phase": to_phase,
        "signals": len(starts),
        "integrated": len(integrated),
        "rejected": sum(1 for e in ledger if e["event"] in ("signal_rejected", "event_rejected")),
    }


def _ms(values: list[float], mean: bool = False) -> str:
    if not values:
        return "-"
    second = sum(values) / len(values) if mean else common.pct(values, 0.95)
    return f"{1000 * common.pct(values, 0.5):.1f} / {1000 * second:.1f}"


def render(results: dict[str, dict[str, Any]], n: int, pause: float) -> str:
    labels = list(results)
    names = sorted({k for r in results.values() for k in r["calls"]}, key=_order)
    rows: list[tuple[str, list[str]]] = []
    for name in names:
        pairs = [results[v]["calls"].get(name, []) for v in labels]
        rows.append((f"{name} wall p50/p95 ms", [_ms([w for w, _ in p]) for p in pairs]))
        rows.append((f"{name} CPU p50/mean ms", [_ms([c for _, c in p], mean=True) for p in pairs]))
    every = [
        [wc for k, v in results[label]["calls"].items() if not k.startswith("floor") for wc in v]
        for label in labels
    ]
    rows.append(("every hook event wall p50/p95 ms", [_ms([w for w, _ in e]) for e in every]))
    rows.append(("every hook event CPU p50/mean ms", [_ms([c for _, c in e], True) for e in every]))
    for name, key in (("recorded", "to_record"), ("next phase", "to_phase")):
        rows.append((f"signal start -> {name} p50/p95 ms", [_ms(results[v][key]) for v in labels]))
    working = [results[v].get("working") for v in labels]
    rows.append(
        (
            "supervisor CPU while they burst, % core/session",
            [f"{w['share']:.2f}" if w else "-" for w in working],
        )
    )
    rows.append(
        (
            "same, ms of CPU per hook event",
            [f"{1000 * w['per_event']:.2f}" if w else "-" for w in working],
        )
    )
    rows.append(
        (
            "same: sessions, window s, hook events in it",
            [
                f"{w['sessions']:.0f}, {w['seconds']:.1f}, {w['events']:.0f}" if w else "-"
                for w in working
            ],
        )
    )
    rows.append(("run wall s", [f"{results[v]['wall']:.1f}" for v in labels]))
    rows.append(
        (
            "samples: hook calls, signals timed",
            [f"{len(every[i])}, {len(results[v]['to_record'])}" for i, v in enumerate(labels)],
        )
    )
    width = max(len(name) for name, _ in rows)
    lines = [
        f"hook benchmark: {n} scripted sessions at once, {pause} s between a session's "
        f"calls, {os.cpu_count()} cores, {sys.executable} ({', '.join(labels)})",
        "",
        "".ljust(width) + "".join(f" {label:>16}" for label in labels),
    ]
    lines += [name.ljust(width) + "".join(f" {c:>16}" for c in cells) for name, cells in rows]
    for label in labels:
        r = results[label]
        if r["failed"]:
            lines.append(f"  note: {label}: {r['failed']} hook calls failed")
        if r["rejected"]:
            lines.append(f"  note: {label}: {r['rejected']} reports rejected")
        if r["integrated"] != n or r["problem"]:
            lines.append(
                f"  note: {label}: {r['integrated']} of {n} tasks integrated"
                + (f"; {r['problem']}" if r["problem"] else "")
            )
    return "\n".join(lines)


def _order(name: str) -> tuple[int, str]:
    return (1 if name.startswith("floor") else 0, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument(
        "--pause",
        type=float,
        default=0.3,
        help="seconds between one session's calls (0: back to back, every session at once)",
    )
    parser.add_argument("--baseline", default=BASELINE, metavar="REV")
    parser.add_argument("--no-baseline", action="store_true", help="measure AFTER only")
    parser.add_argument(
        "--tally",
        action="store_true",
        help="also print the supervisor's CPU by function, per task (benchmarks/cputally.py)",
    )
    args = parser.parse_args()
    results: dict[str, dict[str, Any]] = {}
    with contextlib.ExitStack() as stack:
        # on PYTHONPATH too: a checkout that is not the installed one measures itself
        versions = [common.Version("AFTER", REPO_ROOT, REPO_ROOT)]
        if not args.no_baseline:
            tree = stack.enter_context(common.baseline_tree(args.baseline))
            versions.insert(0, common.Version("BEFORE", tree, tree))
        for version in versions:
            print(f"measuring {version.label}...", file=sys.stderr, flush=True)
            results[version.label] = measure(
                args.tasks, args.rounds, args.pause, version, args.tally
            )
    print(render(results, args.tasks, args.pause))
    for label, r in results.items() if args.tally else []:
        print(f"\n{label}: the supervisor's CPU by function")
        counted = r["tally"]
        if isinstance(counted, dict):
            print("\n".join(cputally.rows(counted, args.tasks)))
        else:
            print("  (no counts: the supervisor did not end by itself)")


if __name__ == "__main__":
    main()

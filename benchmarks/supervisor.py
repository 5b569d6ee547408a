"""Supervisor benchmark, BEFORE and AFTER side by side: scripted sessions in real tmux.

One run measures the same workload (16 and 64 tasks by default, cap 16) twice: BEFORE is a
baseline revision (default 04441ab: a screen capture was two tmux calls and a readiness poll
three, a launch wrote a file per other task's branch into the session's copy of the ref
folder, every sweep read every permission request; 90321c1: the loop compared the run's refs
with the book, git lock and all, before it reacted to a signal, and the next phase was the
submitted job's first step; 1a30dd9 is one whose hook answers waited on two fsyncs under the
record's lock, 1e3e895 the one before the lean hook entry and the idle loop), checked out in
a temporary git worktree and imported through ``PYTHONPATH`` (supervisor, panes and
``LO_ORCH_BIN`` alike; checked, and removed at the end); AFTER is this tree's code (signals
and hooks go to the supervisor's inbox socket). Per size and version it prints:

1. signal latency, p50/p95: from the moment a session *starts* ``lo-orch signal`` to the
   supervisor's reaction (its ``reacted`` ledger line; the task moves to implementing after
   plan_ready, to verifying after impl_done, right after that line: in 90321c1 in the job
   submitted then, since on the loop itself).
   The start is recorded by the scripted agent itself: its signals are ``run:`` actions,
   ``sh -c 'date +%s.%N >> LOG; eval "exec $LO_ORCH_BIN signal PHASE"'``, the same
   ``sh -c "$LO_ORCH_BIN signal PHASE"`` that its ``signal:`` action runs in both versions,
   with the clock read first. A second row ends at the phase change itself, from the
   supervisor's private journal (a baseline older than the journal has none).
2. supervisor reaction after the record, p50/p95: the ``signal`` ledger line to the
   ``reacted`` line. BEFORE, ``lo-orch signal`` wrote that line itself after the status file,
   so the supervisor could react before it existed: such a reaction counts as 0.
3. hook cost: every hook the scripted agent fires (as Claude Code does, through the plugin's
   ``hooks/lo-hook`` launcher, i.e. ``sh -c "$LO_ORCH_BIN hook EVENT"``) runs under a timing
   wrapper (a plugin folder handed to the agent with ``--plugin-dir``) that records the wall
   time and the CPU time (children's rusage) of the real launcher; UserPromptSubmit is
   reported on its own and all events together. The wall of the events the supervisor
   writes a ledger line for (SessionStart, UserPromptSubmit, Stop) is split at that line:
   from the hook's start to the line (the launcher and client starting, the connection,
   the wait for the loop), and from the line to the hook's end (the answer, the client's
   exit): how much of a hook's wait is the supervisor's work and how much the machine's.
4. supervisor CPU seconds and peak RSS over the run (sampled from /proc while it runs; its
   own CPU, not its children's: git, tmux and the checks it starts), that CPU as a
   share of one core per session the cap lets work at once, and per task (what a task
   costs the supervisor whatever its session's length: the scripted sessions here live
   seconds, where an agent's live minutes); and per task with the CPU of the processes it
   started and waited for (git, tmux commands, the done-checks: ``cutime`` and ``cstime``),
   the machine's CPU the supervisor spends or causes (work moved into a child, or out of
   one, shows here; the tmux server and the sessions are not counted).

It prints the floor too: a bare ``python -I -c pass`` start here, wall and CPU; and the
supervisor's CPU while ``cap`` sessions work and report nothing (each hangs while it plans),
over ``IDLE_WINDOW`` seconds, per session (``--no-idle`` skips it).
With ``--profile DIR`` (py-spy on PATH) each supervisor is sampled by ``py-spy record``
(every thread, 100 Hz, collapsed stacks in DIR): what was hot. With ``--tally`` each
supervisor counts its own CPU by function (``cputally``: CPU time, not samples; the calls a
function makes included) and its git and tmux calls by subcommand, printed per task
(with ``LO_BENCH_CALLERS=1`` in the environment, by subcommand and caller). With
``--rounds N`` each size is measured N times per version, in ABBA order (the version
measured first in one round is measured second in the next: an order effect, such as the
page cache a first run warms, falls on both), and the runs are pooled: every sample, CPU
over all runs, and each run's own hook wall p50 and CPU per task in a note.

Each run gets a private tmux socket (killed at the end), a throwaway HOME, XDG_STATE_HOME
and XDG_CONFIG_HOME. Both versions' packages are byte-compiled first, as an installed
lo-orch is, and the byte code is used (``PYTHONDONTWRITEBYTECODE`` dropped): a fresh
baseline worktree has none, and every process of it, the supervisor's start included,
compiled each module it imported (runs before 2026-12-06 measured that too). AFTER runs
agents inside its bubblewrap sandbox where bwrap works (as shipped); BEFORE has no sandbox.

    .venv/bin/python benchmarks/supervisor.py [--sizes 16,64] [--concurrency 16]
        [--baseline REV | --no-baseline] [--no-idle] [--profile DIR] [--tally] [--rounds N]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BASELINE = "04441ab"
REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmarks import common, cputally  # noqa: E402
from loop_orchestrator.sessions.procinfo import cpu_and_peak_rss, waited_cpu  # noqa: E402

REACT_PHASES = ("plan_ready", "impl_done")
#: a run that has not ended by then is stopped (and reported as such)
RUN_TIMEOUT = 15 * 60.0
#: how long the idle measurement samples the supervisor
IDLE_WINDOW = 20.0
#: the phase the supervisor moves a task to on each signal
NEXT_PHASE = {"plan_ready": "implementing", "impl_done": "verifying"}

#: the timing wrapper around each hook command (stdlib only, run with ``python -I -S``)
HOOK_TIMER = """\
import os, resource, subprocess, sys, time
log, cmd = sys.argv[1], sys.argv[2:]
began = time.time()  # (the clock the ledger's lines are stamped with)
start = time.perf_counter()
rc = subprocess.call(cmd)
wall = time.perf_counter() - start
ru = resource.getrusage(resource.RUSAGE_CHILDREN)  # the one child, and what it waited for
with open(log, "a", encoding="utf-8") as fh:
    fh.write(f"{os.environ.get('LO_ORCH_TASK', '-')} {cmd[-1]} {wall:.6f} "
             f"{ru.ru_utime + ru.ru_stime:.6f} {rc} {began:.6f}\\n")
sys.exit(rc)
"""


def _plugin(root: Path, version: common.Version, hook_log: Path) -> Path:
    """A plugin folder whose hooks are the version's own, each under the timing wrapper."""
    timer = root / "plugin" / "hooktime.py"
    plugin = common.timed_plugin(
        root, version, lambda _event: [sys.executable, "-I", "-S", str(timer), str(hook_log)]
    )
    timer.write_text(HOOK_TIMER, encoding="utf-8")
    return plugin


def build(
    root: Path, n: int, concurrency: int, version: common.Version, *, idle: bool = False
) -> Path:
    repo = common.project(root)
    # outside the repository: the AFTER sandbox makes the repository read-only to agents
    starts = root / "timing" / "signal-starts"
    starts.mkdir(parents=True)
    # every fourth task consumes an earlier task's output: a few waves
    # (idle: none waits for another, so that all of them work at once)
    wave = n + 1 if idle else 4
    tasks: list[object] = [common.task(i, wave, sys.executable) for i in range(n)]
    script: dict[str, object] = {}
    for i in range(n):
        plan_actions: list[object] = []
        if i == 0:
            # which code the panes run: the interpreter both versions run, with the pane's
            # environment ($LO_ORCH_BIN may be the compiled client, which takes no -c)
            probe = (
                shlex.quote(sys.executable)
                + ' -c "import loop_orchestrator; print(loop_orchestrator.__file__)" > '
                + shlex.quote(str(root / "timing" / "pane-import"))
            )
            plan_actions.append({"run": {"argv": ["sh", "-c", probe], "timeout": 60}})
        # idle: every session hangs while it plans (working, silent: what the supervisor
        # spends on a run whose sessions work and report nothing)
        plan_actions.append("hang" if idle else common.signal_run("plan_ready", starts))
        script[f"t{i:03d}"] = {
            "plan": plan_actions,
            "implement": common.implement(i, common.signal_run("impl_done", starts)),
        }
    common.write_plan(root, f"bench{n}", f"benchmark with {n} tasks", concurrency, tasks, script)
    plugin = _plugin(root, version, root / "timing" / "hooks.log")
    agent_env = ""
    if version.pythonpath is not None:  # the pane's own python -m must find the old code too
        agent_env = f"env = {{ PYTHONPATH = {json.dumps(str(version.pythonpath))} }}\n"
    cfg = repo / ".loop-orchestrator"
    cfg.mkdir()
    # stall_minutes = 1: a session left waiting (a rejected signal) is nudged, then blocked,
    # in two minutes instead of holding the whole run
    (cfg / "config.toml").write_text(
        f'[agent]\nkind = "scripted"\nscript = {json.dumps(str(root / "script.yaml"))}\n'
        f"args = {json.dumps(['--plugin-dir', str(plugin)])}\nready_timeout = 60\n{agent_env}"
        '[auditor]\nllm = "off"\n[run]\nstagger_seconds = 0.05\n'
        f"stall_minutes = {30 if idle else 1}\n",
        encoding="utf-8",
    )
    return repo


def _supervise(
    lo: list[str], repo: Path, env: dict[str, str], cwd: Path, profile: Path | None = None
) -> tuple[float, float, float, int, str | None]:
    """Run the supervisor to its end or ``RUN_TIMEOUT``: (wall seconds, its CPU seconds, the
    CPU seconds of what it waited for, its peak RSS KiB, None or what went wrong). It is
    stopped on any way out."""
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as err:
        sup = subprocess.Popen(
            [*lo, "run", "--repo", str(repo)],
            env=env,
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
        )
        cpu, waited, peak = 0.0, 0.0, 0
        spy = None
        if profile is not None:  # every thread's collapsed stacks, CPU only
            out = profile / f"{repo.parent.name}.txt"
            spy_argv = ["py-spy", "record", "--pid", str(sup.pid), "--format", "raw"]
            spy = subprocess.Popen(
                [*spy_argv, "--threads", "--rate", "100", "--nonblocking", "-o", str(out)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        try:
            while sup.poll() is None and time.monotonic() - started < RUN_TIMEOUT:
                sample = cpu_and_peak_rss(sup.pid)
                if sample:  # a zombie's last sample has no VmHWM: keep the largest seen
                    cpu, peak = max(cpu, sample[0]), max(peak, sample[1])
                waited = max(waited, waited_cpu(sup.pid) or 0.0)
                time.sleep(0.1)
        finally:
            if sup.poll() is None:
                sup.terminate()
                try:
                    sup.wait(30)
                except subprocess.TimeoutExpired:
                    sup.kill()
                    sup.wait(30)
        if spy is not None:
            spy.wait(60)
        wall = time.monotonic() - started
        err.seek(0)
        tail = (err.read().strip().splitlines() or [""])[-1]
    if wall >= RUN_TIMEOUT:
        return wall, cpu, waited, peak, f"stopped after {RUN_TIMEOUT:.0f} s"
    if sup.returncode != 0:
        return wall, cpu, waited, peak, f"supervisor exit {sup.returncode}: {tail}"
    return wall, cpu, waited, peak, None


def measure(
    n: int,
    concurrency: int,
    version: common.Version,
    profile: Path | None = None,
    tally: bool = False,
) -> dict[str, object]:
    with tempfile.TemporaryDirectory(
        prefix=f"lo-bench-{version.label.lower()}-{n}-", ignore_cleanup_errors=True
    ) as tmp:
        root = Path(tmp)
        socket = f"lo-bench-{os.getpid()}-{version.label.lower()}-{n}"
        env = common.version_env(version, root, socket, drop=common.BYTECODE_VARIABLES)
        common.compile_tree(version)
        common.check_import(version, env, root)
        repo = build(root, n, concurrency, version)
        lo = [sys.executable, "-m", "loop_orchestrator"]
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
            boot, env = cputally.supervisor(lo, env, root, tally)
            wall, cpu, waited, peak, problem = _supervise(boot, repo, env, root, profile)
        finally:
            subprocess.run(
                ["tmux", "-L", socket, "kill-server"], capture_output=True, check=False, timeout=30
            )
            # the socket file outlives the server
            tmux_dir = Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}"
            (tmux_dir / socket).unlink(missing_ok=True)
        pane_import = Path((root / "timing" / "pane-import").read_text().strip()).resolve()
        if pane_import.parent != (version.tree / "loop_orchestrator").resolve():
            msg = f"{version.label}: the panes ran {pane_import}, not {version.tree}"
            raise SystemExit(msg)
        ledger = common.ledger(repo)
        starts = common.signal_starts(root / "timing" / "signal-starts")
        hooks = [line.split() for line in (root / "timing" / "hooks.log").read_text().splitlines()]
        # AFTER keeps a private journal of every phase change (BEFORE has none)
        journal = common.journals(root / "home")
        by_function = cputally.counts(root, tally)
    return analyse(n, ledger, starts, hooks, journal) | {
        "tally": by_function,
        "wall": wall,
        "cpu": cpu,
        "waited_cpu": waited,
        "peak_mib": peak / 1024,
        "problem": problem,
    }


def measure_idle(concurrency: int, version: common.Version, window: float = IDLE_WINDOW) -> float:
    """The supervisor's CPU, in % of a core per session, over ``window`` seconds while
    ``concurrency`` sessions work (each hangs while it plans: no report comes)."""
    with tempfile.TemporaryDirectory(
        prefix=f"lo-bench-idle-{version.label.lower()}-", ignore_cleanup_errors=True
    ) as tmp:
        root = Path(tmp)
        socket = f"lo-bench-{os.getpid()}-{version.label.lower()}-idle"
        env = common.version_env(version, root, socket, drop=common.BYTECODE_VARIABLES)
        common.compile_tree(version)
        repo = build(root, concurrency, concurrency, version, idle=True)
        lo = [sys.executable, "-m", "loop_orchestrator"]
        status = repo / ".orchestration" / "status"
        sup = None
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
            sup = subprocess.Popen(
                [*lo, "run", "--repo", str(repo)],
                env=env,
                cwd=root,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 300

            def planning() -> int:
                count = 0
                for path in status.glob("*.json"):
                    with contextlib.suppress(OSError, ValueError):
                        st = json.loads(path.read_text(encoding="utf-8"))
                        count += str(st.get("delivered") or "").startswith("planning")
                return count

            while planning() < concurrency:
                if time.monotonic() > deadline or sup.poll() is not None:
                    msg = f"{version.label}: the idle run's sessions did not all start"
                    raise SystemExit(msg)
                time.sleep(0.2)
            time.sleep(3.0)  # the last prompt's delivery settles
            first = cpu_and_peak_rss(sup.pid)
            start = time.monotonic()
            time.sleep(window)
            last = cpu_and_peak_rss(sup.pid)
            took = time.monotonic() - start
        finally:
            if sup is not None and sup.poll() is None:
                sup.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    sup.wait(30)
                if sup.poll() is None:
                    sup.kill()
                    sup.wait(30)
            subprocess.run(
                ["tmux", "-L", socket, "kill-server"], capture_output=True, check=False, timeout=30
            )
            tmux_dir = Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}"
            (tmux_dir / socket).unlink(missing_ok=True)
    if first is None or last is None:
        msg = f"{version.label}: the idle supervisor ended during the window"
        raise SystemExit(msg)
    return 100 * (last[0] - first[0]) / took / concurrency


def pool(runs: list[dict[str, object]]) -> dict[str, object]:
    """Several runs of one version and size as one: their samples together, CPU and wall
    summed (a share and a per-task figure over all of them), the peak RSS the highest;
    ``rounds`` keeps each run's own hook wall p50 and CPU per task, to show the spread."""
    first = runs[0]
    pooled: dict[str, object] = {"tasks": first["tasks"], "runs": len(runs)}
    for key, value in first.items():
        values = [r[key] for r in runs]
        if key == "tasks":
            continue
        if key == "peak_mib":
            pooled[key] = max(float(v) for v in values)  # type: ignore[arg-type]
        elif key == "problem":
            pooled[key] = "; ".join(str(v) for v in values if v) or None
        elif key == "tally":
            pooled[key] = _pool_tallies([v for v in values if isinstance(v, dict)], len(runs))
        elif isinstance(value, list):
            pooled[key] = [x for v in values for x in v]  # type: ignore[attr-defined]
        else:
            pooled[key] = sum(values)  # type: ignore[arg-type]
    pooled["rounds"] = [_round(r) for r in runs]
    return pooled


def _round(r: dict[str, object]) -> tuple[float, float]:
    """One run's hook wall p50 and supervisor CPU."""
    walls, cpu = r["hook_wall"], r["cpu"]
    assert isinstance(walls, list) and isinstance(cpu, float)
    return (statistics.median(walls) if walls else 0.0), cpu


def _runs(r: dict[str, object]) -> int:
    runs = r.get("runs", 1)
    assert isinstance(runs, int)
    return runs


def _pool_tallies(docs: list[dict[str, Any]], runs: int) -> dict[str, Any] | None:
    """The tallies of several runs summed (None unless every run left one)."""
    if len(docs) != runs:
        return None
    counts: dict[str, list[float]] = {}
    for doc in docs:
        for name, (cpu, calls) in doc["tally"].items():
            row = counts.setdefault(name, [0.0, 0])
            row[0] += cpu
            row[1] += calls
    pooled: dict[str, Any] = {"cpu": sum(d["cpu"] for d in docs), "tally": counts}
    if all("user" in d for d in docs):  # (a baseline's benchmark code may predate them)
        pooled.update({k: sum(d[k] for d in docs) for k in ("user", "system")})
    return pooled


def analyse(
    n: int,
    ledger: list[dict[str, Any]],
    starts: list[tuple[str, str, float]],
    hooks: list[list[str]],
    journal: list[dict[str, Any]],
) -> dict[str, object]:
    reacted = common.reacted(ledger)
    signalled: dict[tuple[str, str], float] = {}
    for e in ledger:
        key = (str(e.get("task")), str(e.get("to") or e.get("phase")))
        if e["event"] == "signal" and key[1] in REACT_PHASES:
            signalled.setdefault(key, common.ts(str(e["ts"])))
    latency = [reacted[(t, ph)] - ts for t, ph, ts in starts if (t, ph) in reacted]
    moved: dict[tuple[str, str], float] = {}
    for entry in journal:
        changes = entry.get("data", {}).get("set", {})
        if entry.get("kind") == "task" and changes.get("phase") in NEXT_PHASE.values():
            moved.setdefault((entry["data"]["task"], changes["phase"]), common.ts(entry["ts"]))
    to_phase = [
        moved[(t, NEXT_PHASE[ph])] - ts for t, ph, ts in starts if (t, NEXT_PHASE[ph]) in moved
    ]
    # BEFORE: `lo-orch signal` wrote its ledger line after the status file, so the supervisor
    # could react before that line existed; such a reaction counts as immediate (0)
    reaction = [max(0.0, reacted[k] - ts) for k, ts in signalled.items() if k in reacted]
    early = sum(1 for k, ts in signalled.items() if k in reacted and reacted[k] < ts)
    prompt = [(float(w), float(c)) for _, ev, w, c, *_ in hooks if ev == "UserPromptSubmit"]
    every = [(float(w), float(c)) for _, _, w, c, *_ in hooks]
    failed = sum(1 for _, _, _, _, rc, *_ in hooks if rc not in ("0", "2"))  # 2: a Stop block
    to_line, after_line = split_at_ledger(ledger, hooks)
    integrated = {e.get("task") for e in ledger if e["event"] == "task_integrated"}
    rejected = [
        f"{e.get('task')} {e.get('phase')} in {e.get('current')}: "
        f"{' '.join(str(e.get('message')).split())[:200]}"
        for e in ledger
        if e["event"] == "signal_rejected"
    ]
    blocked = [
        f"{e.get('task')}: {' '.join(str(e.get('message')).split())[:300]}"
        for e in ledger
        if e["event"] == "task_blocked"
    ]
    return {
        "tasks": n,
        "latency": latency,
        "to_phase": to_phase,
        "expected": 2 * n,
        "reaction": reaction,
        "early": early,
        "prompt_wall": [w for w, _ in prompt],
        "prompt_cpu": [c for _, c in prompt],
        "hook_wall": [w for w, _ in every],
        "hook_cpu": [c for _, c in every],
        "hook_failed": failed,
        "hook_to_line": to_line,
        "hook_after_line": after_line,
        "integrated": len(integrated),
        "rejected": rejected,
        "blocked": blocked,
    }


def split_at_ledger(
    ledger: list[dict[str, Any]], hooks: list[list[str]]
) -> tuple[list[float], list[float]]:
    """Each hook the ledger has a line for, its wall split at that line: (start -> line,
    line -> end). The k-th hook of an event of a task is paired with the k-th ledger line
    of that event and task (a session runs its hooks one after another); a task and event
    whose counts differ are left out."""
    lines: dict[tuple[str, str], list[float]] = {}
    for e in ledger:
        if e["event"] == "hook":
            lines.setdefault((str(e.get("task")), str(e.get("hook_event"))), []).append(
                common.ts(str(e["ts"]))
            )
    runs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for task, event, took, _cpu, _rc, *began in hooks:
        if began:
            runs.setdefault((task, event), []).append((float(began[0]), float(took)))
    to_line: list[float] = []
    after_line: list[float] = []
    for key, stamps in lines.items():
        timed = sorted(runs.get(key, []))
        if len(timed) != len(stamps):
            continue
        for (began_at, wall), line in zip(timed, stamps, strict=True):
            to_line.append(line - began_at)
            after_line.append(began_at + wall - line)
    return to_line, after_line


def _ms(values: object) -> str:
    vals = list(values) if isinstance(values, list) else []
    if not vals:
        return "-"
    return f"{1000 * common.pct(vals, 0.5):.1f} / {1000 * common.pct(vals, 0.95):.1f}"


def _mean_ms(values: object) -> str:
    vals = list(values) if isinstance(values, list) else []
    return f"{1000 * sum(vals) / len(vals):.1f}" if vals else "-"


def render(
    sizes: list[int],
    results: dict[tuple[str, int], dict[str, object]],
    labels: list[str],
    concurrency: int,
    idle: dict[str, float] | None = None,
) -> str:
    rows: list[tuple[str, str]] = [
        ("1 signal latency p50/p95 ms", "latency"),
        ("1 same, to the phase change in the journal", "to_phase"),
        ("2 supervisor signal->reacted p50/p95 ms", "reaction"),
        ("3 hook UserPromptSubmit wall p50/p95 ms", "prompt_wall"),
        ("3 hook UserPromptSubmit CPU p50/p95 ms", "prompt_cpu"),
        ("3 hook UserPromptSubmit CPU mean ms", "prompt_cpu_mean"),
        ("3 all hook events wall p50/p95 ms", "hook_wall"),
        ("3 all hook events CPU mean ms", "hook_cpu_mean"),
        ("3 same, start -> its ledger line p50/p95 ms", "hook_to_line"),
        ("3 same, ledger line -> hook's end p50/p95 ms", "hook_after_line"),
        ("4 supervisor CPU s (a run's mean)", "cpu"),
        ("4 same, % of a core per working session", "share"),
        ("4 same, ms per task", "per_task"),
        ("4 same + what it waited for, ms per task", "with_waited"),
        ("4 supervisor peak RSS MiB", "peak_mib"),
        ("  run wall s (mean)", "wall"),
        ("  samples: signals timed/sent, hook calls", "samples"),
    ]

    def cell(r: dict[str, object], key: str) -> str:
        timed = ("latency", "to_phase", "reaction", "prompt_wall", "prompt_cpu", "hook_wall")
        if key in (*timed, "hook_to_line", "hook_after_line"):
            return _ms(r[key])
        if key.endswith("_mean"):
            return _mean_ms(r[key.removesuffix("_mean")])
        if key == "samples":
            lat, hw = r["latency"], r["hook_wall"]
            assert isinstance(lat, list) and isinstance(hw, list)
            return f"{len(lat)}/{r['expected']}, {len(hw)}"
        if key == "share":
            cpu, wall = r["cpu"], r["wall"]
            assert isinstance(cpu, float) and isinstance(wall, float)
            tasks = r["tasks"]
            assert isinstance(tasks, int)
            return f"{100 * cpu / wall / min(concurrency, tasks):.2f}"
        if key == "per_task":
            cpu, tasks = r["cpu"], r["tasks"]
            assert isinstance(cpu, float) and isinstance(tasks, int)
            return f"{1000 * cpu / tasks / _runs(r):.0f}"
        if key == "with_waited":
            cpu, waited, tasks = r["cpu"], r["waited_cpu"], r["tasks"]
            assert isinstance(cpu, float) and isinstance(waited, float)
            assert isinstance(tasks, int)
            return f"{1000 * (cpu + waited) / tasks / _runs(r):.0f}"
        value = r[key]
        assert isinstance(value, float)
        if key in ("wall", "cpu"):
            value /= _runs(r)  # (a run's, on average)
        return f"{value:.2f}" if key == "cpu" else f"{value:.1f}"

    width = max(len(name) for name, _ in rows)
    wall, cpu = common.bare_python()
    lines = [
        f"supervisor benchmark: scripted agents, cap {concurrency}, "
        f"{os.cpu_count()} cores ({', '.join(labels)}); load average "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}",
        f"floor: a bare Python start (python -I -c pass), median of 20: wall "
        f"{1000 * wall:.1f} ms, CPU {1000 * cpu:.1f} ms",
    ]
    if idle:
        lines.append(
            f"idle: supervisor CPU while {concurrency} sessions work and report nothing "
            f"({IDLE_WINDOW:g} s), % of a core per session: "
            + ", ".join(f"{label} {share:.3f}" for label, share in idle.items())
        )
    for n in sizes:
        lines.append("")
        lines.append(f"{n} tasks".ljust(width) + "".join(f" {label:>18}" for label in labels))
        for name, key in rows:
            lines.append(
                name.ljust(width)
                + "".join(f" {cell(results[(label, n)], key):>18}" for label in labels)
            )
        notes = []
        for label in labels:
            r = results[(label, n)]
            if r["early"]:
                notes.append(
                    f"{label}: {r['early']} reactions before the signal's ledger line "
                    "(counted as 0)"
                )
            if r["hook_failed"]:
                notes.append(f"{label}: {r['hook_failed']} hook calls failed")
            if r["rejected"]:
                why = r["rejected"]
                assert isinstance(why, list)
                notes.append(f"{label}: {len(why)} signals rejected (not timed): {'; '.join(why)}")
            if r["integrated"] != n * _runs(r) or r["problem"]:
                notes.append(
                    f"{label}: {r['integrated']} of {n * _runs(r)} tasks integrated"
                    + (f"; {r['problem']}" if r["problem"] else "")
                )
            each = r.get("rounds") or []
            assert isinstance(each, list)
            if len(each) > 1:
                notes.append(
                    f"{label}, each run: hook wall p50 ms / supervisor CPU ms per task: "
                    + ", ".join(f"{1000 * w:.0f}/{1000 * c / n:.0f}" for w, c in each)
                )
            blocked = r["blocked"]
            assert isinstance(blocked, list)
            notes.extend(f"{label}: blocked {why}" for why in blocked)
        lines.extend(f"  note: {note}" for note in notes)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16,64")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--baseline",
        default=BASELINE,
        metavar="REV",
        help=f"the BEFORE revision (default {BASELINE})",
    )
    parser.add_argument("--no-baseline", action="store_true", help="measure AFTER only")
    parser.add_argument("--no-idle", action="store_true", help="skip the idle measurement")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure each size this many times per version, in ABBA order, pooled",
    )
    parser.add_argument(
        "--tally",
        action="store_true",
        help="also print the supervisor's CPU by function (benchmarks/cputally.py)",
    )
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="py-spy record each supervisor into DIR"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    after = common.Version("AFTER", REPO_ROOT, None)
    results: dict[tuple[str, int], dict[str, object]] = {}
    with contextlib.ExitStack() as stack:
        versions = [after]
        if not args.no_baseline:
            tree = stack.enter_context(common.baseline_tree(args.baseline))
            versions.insert(0, common.Version("BEFORE", tree, tree))
        idle: dict[str, float] = {}
        for version in versions if not args.no_idle else []:
            print(f"measuring {version.label} idle...", file=sys.stderr, flush=True)
            idle[version.label] = measure_idle(args.concurrency, version)
        for n in sizes:
            runs: dict[str, list[dict[str, object]]] = {v.label: [] for v in versions}
            for i in range(args.rounds):
                # ABBA: a version measured first in one round is measured second in the next
                for version in versions if i % 2 == 0 else versions[::-1]:
                    print(
                        f"measuring {version.label} with {n} tasks (round {i + 1})...",
                        file=sys.stderr,
                        flush=True,
                    )
                    runs[version.label].append(
                        measure(n, args.concurrency, version, args.profile, args.tally)
                    )
            for label, measured in runs.items():
                results[(label, n)] = pool(measured)
    print(render(sizes, results, [v.label for v in versions], args.concurrency, idle))
    for (label, n), r in results.items() if args.tally else []:
        counted = r["tally"]
        print(f"\n{label}, {n} tasks: the supervisor's CPU by function")
        if isinstance(counted, dict):
            print("\n".join(cputally.rows(counted, n * _runs(r))))
        else:
            print("  (no counts: the supervisor did not end by itself)")


if __name__ == "__main__":
    main()

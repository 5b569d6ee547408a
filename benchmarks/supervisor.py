"""Supervisor benchmark: scripted sessions in real tmux, 16 and 64 tasks.

Prints, per size: wall time, launch time per session (released -> pane launched, and
released -> first prompt delivered), signal-to-reaction latency (p50/p95, from ledger
timestamps: the `signal` line written by `lo-orch signal` to the supervisor's `reacted`
line), supervisor CPU seconds and peak RSS (sampled from /proc while it runs). The baseline,
in the same run and on the same signals: a loop polling the status files every 15 seconds
(the seed's design) would see each signal at its next tick; its latency is computed from the
recorded signal times with the poller's phase drawn at random.

    .venv/bin/python benchmarks/supervisor.py [--sizes 16,64] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

POLL_SECONDS = 15.0


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def build(root: Path, n: int, concurrency: int) -> Path:
    repo = root / "bench"
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    (repo / "tests" / "__init__.py").write_text("", encoding="utf-8")
    (repo / ".gitignore").write_text("__pycache__/\n", encoding="utf-8")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-q",
         "--no-gpg-sign", "-m", "initial")
    python = shlex.quote(sys.executable)
    tasks = []
    script: dict[str, object] = {}
    for i in range(n):
        tid = f"t{i:03d}"
        # every fourth task consumes an earlier task's output: a few waves
        consumes = [f"f{i - 4:03d}"] if i >= 4 and i % 4 == 0 else []
        tasks.append({
            "id": tid, "objective": f"Add f{i:03d}", "owns": [f"pkg/m{i:03d}.py",
                                                              f"tests/test_m{i:03d}.py"],
            "produces": [f"f{i:03d}"], "consumes": consumes,
            "done": [{"criterion": f"f{i:03d}(2) == {2 + i}",
                      "check": f"{python} -m unittest -q tests.test_m{i:03d}"}],
        })
        module = (f"def f{i:03d}(x: int) -> int:\n"
                  f"    if x < 0:\n        raise ValueError('negative')\n"
                  f"    return x + {i}\n")
        test = (f"import unittest\n\nfrom pkg.m{i:03d} import f{i:03d}\n\n\n"
                f"class T(unittest.TestCase):\n"
                f"    def test_adds(self):\n        self.assertEqual(f{i:03d}(2), {2 + i})\n\n"
                f"    def test_zero(self):\n        self.assertEqual(f{i:03d}(0), {i})\n\n"
                f"    def test_negative_is_rejected(self):\n"
                f"        with self.assertRaises(ValueError):\n            f{i:03d}(-1)\n")
        script[tid] = {
            "plan": [{"signal": {"phase": "plan_ready"}}],
            "implement": [[
                {"write": {"path": f"pkg/m{i:03d}.py", "content": module}},
                {"write": {"path": f"tests/test_m{i:03d}.py", "content": test}},
                {"signal": {"phase": "impl_done"}},
            ]],
        }
    plan = {"goal": f"benchmark with {n} tasks", "name": f"bench{n}",
            "concurrency": concurrency, "tasks": tasks}
    (root / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False), encoding="utf-8")
    (root / "script.yaml").write_text(yaml.safe_dump(script, sort_keys=False), encoding="utf-8")
    cfg = repo / ".loop-orchestrator"
    cfg.mkdir()
    (cfg / "config.toml").write_text(
        f'[agent]\nkind = "scripted"\nscript = "{root / "script.yaml"}"\nready_timeout = 60\n'
        '[auditor]\nllm = "off"\n[run]\nstagger_seconds = 0.05\nstall_minutes = 10\n',
        encoding="utf-8",
    )
    return repo


def _proc_sample(pid: int) -> tuple[float, int] | None:
    """(cpu seconds, peak RSS in KiB) of a running process, from /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        cpu = (int(stat[11]) + int(stat[12])) / ticks
        hwm = 0
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
        return cpu, hwm
    except (OSError, IndexError, ValueError):
        return None


def measure(n: int, concurrency: int, rng: random.Random) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix=f"lo-bench-{n}-") as tmp:
        root = Path(tmp)
        repo = build(root, n, concurrency)
        socket = f"lo-bench-{os.getpid()}-{n}"
        env = {**os.environ, "LO_ORCH_TMUX_SOCKET": socket}
        lo = [sys.executable, "-m", "loop_orchestrator"]
        try:
            subprocess.run([*lo, "plan", str(root / "plan.yaml"), "--repo", str(repo)],
                           env=env, check=True, capture_output=True)
            subprocess.run([*lo, "approve", "--repo", str(repo)], env=env, check=True,
                           capture_output=True)
            started = time.monotonic()
            sup = subprocess.Popen([*lo, "run", "--repo", str(repo)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            cpu, peak = 0.0, 0
            while sup.poll() is None:
                sample = _proc_sample(sup.pid)
                if sample:
                    cpu, peak = sample
                time.sleep(0.2)
            wall = time.monotonic() - started
            if sup.returncode != 0:
                raise SystemExit(f"supervisor failed for {n} tasks: {sup.stderr.read()[-2000:]}")
        finally:
            subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True,
                           check=False)
        ledger = [json.loads(line) for line in
                  (repo / ".orchestration" / "ledger.jsonl").read_text().splitlines()]
    released: dict[str, float] = {}
    launched: list[float] = []
    first_prompt: list[float] = []
    seen_prompt: set[str] = set()
    signals: list[tuple[str, str, float]] = []
    reacted_at: dict[tuple[str, str], float] = {}
    start_ts = _ts(ledger[0]["ts"])
    for e in ledger:
        t, task, ev = _ts(e["ts"]), e.get("task"), e["event"]
        if ev == "task_released":
            released[task] = t
        elif ev == "session_launched" and task in released:
            launched.append(t - released[task])
        elif ev == "prompt_delivered" and task in released and task not in seen_prompt:
            seen_prompt.add(task)
            first_prompt.append(t - released[task])
        elif ev == "signal" and e.get("phase") in ("plan_ready", "impl_done"):
            signals.append((task, e["phase"], t))
        elif ev == "reacted":
            reacted_at.setdefault((task, e.get("to")), t)
    # `lo-orch signal` writes the status file before its ledger line, so the supervisor can
    # react before that line exists: such a reaction counts as immediate (0).
    reactions = [max(0.0, reacted_at[(task, ph)] - t) for task, ph, t in signals
                 if (task, ph) in reacted_at]
    phase = rng.uniform(0, POLL_SECONDS)
    polled = [POLL_SECONDS - ((t - start_ts - phase) % POLL_SECONDS) for _, _, t in signals]
    return {
        "tasks": n, "wall": wall, "cpu": cpu, "peak_rss_mib": peak / 1024,
        "launch_p50": _pct(launched, 0.5), "launch_p95": _pct(launched, 0.95),
        "ready_p50": _pct(first_prompt, 0.5), "ready_p95": _pct(first_prompt, 0.95),
        "react_p50": _pct(reactions, 0.5), "react_p95": _pct(reactions, 0.95),
        "react_n": len(reactions),
        "poll_p50": _pct(polled, 0.5), "poll_p95": _pct(polled, 0.95),
        "poll_mean": statistics.fmean(polled) if polled else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16,64")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rows = [measure(int(s), args.concurrency, rng) for s in args.sizes.split(",")]
    print(f"supervisor benchmark: scripted agents, cap {args.concurrency}, "
          f"{os.cpu_count()} cores")
    print(f"{'tasks':>5} {'wall s':>7} {'sup cpu s':>9} {'peak MiB':>8} "
          f"{'launch p50/p95 s':>17} {'1st prompt p50/p95 s':>21} "
          f"{'signal->react p50/p95 s':>24} {'15s poll p50/p95 s':>19}")
    for r in rows:
        print(f"{r['tasks']:>5} {r['wall']:>7.1f} {r['cpu']:>9.2f} {r['peak_rss_mib']:>8.1f} "
              f"{r['launch_p50']:>8.2f}/{r['launch_p95']:<8.2f} "
              f"{r['ready_p50']:>10.2f}/{r['ready_p95']:<10.2f} "
              f"{r['react_p50']:>12.3f}/{r['react_p95']:<11.3f} "
              f"{r['poll_p50']:>9.2f}/{r['poll_p95']:<9.2f}")
    for r in rows:
        ratio = r["poll_p50"] / r["react_p50"] if r["react_p50"] else float("nan")
        print(f"{r['tasks']} tasks: {r['react_n']} signals; event-driven reaction is "
              f"{ratio:.0f}x faster at the median than 15 s polling")


if __name__ == "__main__":
    main()

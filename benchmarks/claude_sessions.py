"""Real Claude Code sessions on the scripted model endpoint, next to the scripted agent.

The same workload runs twice per size (4 and 8 independent tasks by default, all at once):
BASELINE with the scripted agent (a small Python program imitating Claude Code's surface),
then with the real Claude Code CLI (``.cache/claude-code`` or ``claude`` on PATH) whose
model is ``agents/model_endpoint.py`` on 127.0.0.1. Each task plans (one signal), writes a
test and a module with Claude Code's Write tool and signals; lo-orch verifies and
integrates it. Per agent and size it prints, p50/p95 over the tasks:

1. launch to ready: the pane started (``session_launched``) to the input box seen (the
   task's move to planning in the supervisor's journal);
2. paste to first tool call: the plan prompt confirmed delivered (``prompt_delivered``) to
   the endpoint's answer carrying the first tool call (real CLI only), and to the
   supervisor hearing the plan signal (both agents);
3. signal to reaction: the ``signal`` ledger line to the supervisor's ``reacted`` line;
4. peak RSS per session (the pane's whole process tree, sampled every 0.5 s), MiB;
5. wall time from the supervisor's start to the Gate 2 review.

Everything is offline: a throwaway HOME, XDG folders and tmux socket per run (the socket's
server is killed at the end), no sandbox (the figures are the agent's own).

    .venv/bin/python benchmarks/claude_sessions.py [--sizes 4,8]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from loop_orchestrator.commands.plan import plan_from_file  # noqa: E402
from loop_orchestrator.config import (  # noqa: E402
    AgentConfig,
    AuditorConfig,
    RunConfig,
    SandboxConfig,
    Settings,
)
from loop_orchestrator.runstate import create as runs  # noqa: E402
from loop_orchestrator.simulator.endpoint import ModelEndpoint  # noqa: E402
from loop_orchestrator.simulator.script import load_script  # noqa: E402
from loop_orchestrator.supervisor.main import Supervisor  # noqa: E402


def _ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def _claude() -> str:
    local = REPO_ROOT / ".cache" / "claude-code" / "node_modules" / ".bin" / "claude"
    found = str(local) if local.exists() else shutil.which("claude")
    if not found:
        sys.exit("the Claude Code CLI is missing: run scripts/bootstrap --claude")
    return found


def _workload(root: Path, n: int) -> tuple[Path, Path, Path]:
    repo = root / "repo"
    (repo / "app").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "app" / "__init__.py").write_text("")
    (repo / "tests" / "__init__.py").write_text("")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "start"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    tasks, script = [], {}
    for k in range(1, n + 1):
        tasks.append(
            {
                "id": f"t{k}",
                "objective": f"Add app/t{k}.py with double(x) times {k}",
                "owns": [f"app/t{k}.py", f"tests/test_t{k}.py"],
                "done": [
                    {
                        "criterion": f"double(2) == {2 * k}",
                        "check": f"{sys.executable} -m unittest -q tests.test_t{k}",
                    }
                ],
            }
        )
        test = (
            f"import unittest\n\nfrom app.t{k} import double\n\n\n"
            f"class T(unittest.TestCase):\n    def test_scales(self):\n"
            f"        self.assertEqual(double(2), {2 * k})\n"
            f"        self.assertEqual(double(-3), {-3 * k})\n"
        )
        script[f"t{k}"] = {
            "plan": [{"signal": "plan_ready"}],
            "implement": [
                [
                    {"write": {"path": f"tests/test_t{k}.py", "content": test}},
                    {
                        "write": {
                            "path": f"app/t{k}.py",
                            "content": f"def double(x):\n    return x * {k}\n",
                        }
                    },
                    {"signal": "impl_done"},
                ]
            ],
        }
    plan = root / "plan.yaml"
    plan.write_text(
        yaml.safe_dump(
            {"goal": "Scale numbers", "name": "bench", "concurrency": n, "tasks": tasks},
            sort_keys=False,
        )
    )
    script_path = root / "script.yaml"
    script_path.write_text(yaml.safe_dump(script, sort_keys=False))
    return repo, plan, script_path


@contextlib.contextmanager
def _isolated(root: Path) -> Iterator[str]:
    home = root / "home"
    home.mkdir()
    socket = f"lo-bench-{os.getpid()}-{root.name}"
    saved = dict(os.environ)
    os.environ.update(
        {
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_STATE_HOME": str(home / "state"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "LO_ORCH_TMUX_SOCKET": socket,
            "LO_ORCH_LOG_DIR": str(home / "logs"),
            "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"),
            "GIT_CONFIG_NOSYSTEM": "1",
        }
    )
    (home / ".gitconfig").write_text("[user]\n\tname = Bench\n\temail = b@example.com\n")
    for var in ("TMUX", "TMUX_PANE"):
        os.environ.pop(var, None)
    try:
        yield socket
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, check=False)
        os.environ.clear()
        os.environ.update(saved)


def _tree_rss(pid: int, children: dict[int, list[int]]) -> int:
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        stack += children.get(p, [])
    return total


def _sample(socket: str, peaks: dict[str, int], stop: threading.Event) -> None:
    while not stop.wait(0.5):
        panes = subprocess.run(
            ["tmux", "-L", socket, "list-panes", "-a", "-F", "#{@lo_task} #{pane_pid}"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split("\n")
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                    children.setdefault(ppid, []).append(int(entry.name))
        for line in panes:
            task, _, pid = line.partition(" ")
            if task and pid.isdigit():
                peaks[task] = max(peaks.get(task, 0), _tree_rss(int(pid), children))


def measure(agent: str, n: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"lo-bench-{agent}-{n}-"))
    try:
        with _isolated(root) as socket:
            repo, plan, script = _workload(root, n)
            endpoint = None
            if agent == "claude":
                endpoint = ModelEndpoint(load_script(script, model=True))
                config = AgentConfig(
                    kind="claude",
                    command=_claude(),
                    ready_timeout=120,
                    env={**endpoint.env(), "IS_SANDBOX": "1"},
                )
            else:
                config = AgentConfig(kind="scripted", script=str(script), ready_timeout=60)
            settings = Settings(
                agent=config,
                auditor=AuditorConfig(llm="off"),
                run=RunConfig(concurrency=n, stagger_seconds=0.1, stall_minutes=1),
                sandbox=SandboxConfig(mode="off"),
            )
            plan_from_file(repo, plan, settings)
            runs.approve_plan(repo)
            peaks: dict[str, int] = {}
            stop = threading.Event()
            sampler = threading.Thread(target=_sample, args=(socket, peaks, stop), daemon=True)
            sampler.start()
            started = time.time()
            try:
                outcome = Supervisor(repo, settings).run()
            finally:
                stop.set()
                sampler.join(timeout=5)
                if endpoint is not None:
                    endpoint.close()
            wall = time.time() - started
            ledger = [
                json.loads(x)
                for x in (repo / ".orchestration" / "ledger.jsonl").read_text().splitlines()
            ]
            journal = [
                json.loads(line)
                for p in (root / "home" / "state").glob("**/journal.jsonl")
                for line in p.read_text().splitlines()
            ]
            requests = endpoint.requests if endpoint is not None else []
            return analyse(ledger, journal, requests, peaks) | {
                "wall": wall,
                "state": outcome.state,
            }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def analyse(
    ledger: list[dict[str, Any]],
    journal: list[dict[str, Any]],
    requests: list[dict[str, Any]],
    peaks: dict[str, int],
) -> dict[str, Any]:
    launched: dict[str, float] = {}
    delivered: dict[str, float] = {}
    signalled: dict[tuple[str, str], float] = {}
    reacted: dict[tuple[str, str], float] = {}
    for e in ledger:
        task, ts = e.get("task"), e.get("ts")
        if not task or not ts:
            continue
        if e["event"] == "session_launched":
            launched.setdefault(task, _ts(ts))
        elif e["event"] == "prompt_delivered" and e.get("phase") == "planning":
            delivered.setdefault(task, _ts(ts))
        elif e["event"] == "signal":
            signalled.setdefault((task, e["phase"]), _ts(ts))
        elif e["event"] == "reacted":
            reacted.setdefault((task, e["to"]), _ts(ts))
    ready: dict[str, float] = {}
    for entry in journal:
        data = entry.get("data", {})
        if entry.get("kind") == "task" and data.get("set", {}).get("phase") == "planning":
            ready.setdefault(data["task"], _ts(entry["ts"]))
    first_tool: dict[str, float] = {}
    for r in requests:
        if r.get("kind") == "reply" and r.get("tool") and r.get("task"):
            first_tool.setdefault(r["task"], float(r["at"]))
    return {
        "launch_ready": [ready[t] - launched[t] for t in launched if t in ready],
        "paste_tool": [first_tool[t] - delivered[t] for t in delivered if t in first_tool],
        "paste_signal": [
            signalled[(t, "plan_ready")] - delivered[t]
            for t in delivered
            if (t, "plan_ready") in signalled
        ],
        "signal_react": [reacted[k] - ts for k, ts in signalled.items() if k in reacted],
        "rss_mib": [kib / 1024 for kib in peaks.values()],
    }


def _fmt(values: list[float], scale: float = 1000, unit: str = "ms") -> str:
    if not values:
        return "-"
    values = sorted(values)
    p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
    return f"{statistics.median(values) * scale:7.0f} / {p95 * scale:7.0f} {unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="4,8")
    args = parser.parse_args()
    rows = [
        ("launch to ready, p50 / p95", "launch_ready", 1000, "ms"),
        ("paste to first tool call", "paste_tool", 1000, "ms"),
        ("paste to plan signal heard", "paste_signal", 1000, "ms"),
        ("signal to reaction", "signal_react", 1000, "ms"),
        ("peak RSS per session", "rss_mib", 1, "MiB"),
    ]
    for n in (int(x) for x in args.sizes.split(",")):
        results = {agent: measure(agent, n) for agent in ("scripted", "claude")}
        print(f"\n{n} sessions at once       BASELINE scripted agent   real Claude Code")
        for label, key, scale, unit in rows:
            cells = [_fmt(results[a][key], scale, unit) for a in ("scripted", "claude")]
            print(f"  {label:<27}{cells[0]:>24}   {cells[1]:>22}")
        walls = [
            f"{results[a]['wall']:.1f} s ({results[a]['state']})" for a in ("scripted", "claude")
        ]
        print(f"  {'start to Gate 2 review':<27}{walls[0]:>24}   {walls[1]:>22}")


if __name__ == "__main__":
    main()

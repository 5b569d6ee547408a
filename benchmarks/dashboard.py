"""Dashboard benchmark: `lo-orch dashboard` next to `lo-orch status --watch`, same run.

A run of N scripted tasks (64 by default, a few waves) is supervised by `lo-orch run`
while both viewers run in real terminals (panes of a second private tmux server, 160x50),
each as its own process. Both are sampled from /proc every 0.2 s; printed per viewer:
CPU seconds and mean CPU share while the run works, CPU over a quiet period after it
reached Gate 2 (nothing changes on disk then), and peak RSS. The dashboard shows the
selected task's pane (one `tmux capture-pane` a second) on top of what `status --watch`
shows; `status --watch` redraws every second whatever happens, the dashboard rereads the
run when a file changes and on a 5 s clock.

Private tmux sockets (killed at the end), a throwaway HOME and XDG folders.

    .venv/bin/python benchmarks/dashboard.py [--tasks 64] [--concurrency 8] [--quiet 20]
        [--check-python PYTHON]
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmarks import common  # noqa: E402
from loop_orchestrator.sessions.procinfo import cpu_and_peak_rss  # noqa: E402

RUN_TIMEOUT = 20 * 60.0
SAMPLE_SECONDS = 0.2


def environment(root: Path, socket: str) -> dict[str, str]:
    env = common.environment(root)
    env.update(
        LO_ORCH_TMUX_SOCKET=socket,
        PYTHONPATH=str(REPO_ROOT),
        TERM="xterm-256color",
        GIT_CONFIG_NOSYSTEM="1",
    )
    return env


def build(root: Path, n: int, concurrency: int, check_python: str) -> Path:
    """A repository and a plan of ``n`` small tasks; the scripted agent does each."""
    repo = common.project(root)
    tasks: list[object] = [common.task(i, 8, check_python) for i in range(n)]
    script = {
        f"t{i:03d}": {
            "plan": [{"signal": {"phase": "plan_ready"}}],
            "implement": common.implement(i, {"signal": {"phase": "impl_done"}}),
        }
        for i in range(n)
    }
    common.write_plan(root, f"dash{n}", f"benchmark with {n} tasks", concurrency, tasks, script)
    cfg = repo / ".loop-orchestrator"
    cfg.mkdir()
    (cfg / "config.toml").write_text(
        f'[agent]\nkind = "scripted"\nscript = {json.dumps(str(root / "script.yaml"))}\n'
        'ready_timeout = 60\n[auditor]\nllm = "off"\n[run]\nstagger_seconds = 0.05\n',
        encoding="utf-8",
    )
    return repo


@dataclass
class Viewer:
    name: str
    pid: int
    cpu: float = 0.0
    peak: int = 0
    marks: dict[str, float] = field(default_factory=dict)

    def sample(self) -> None:
        s = cpu_and_peak_rss(self.pid)
        if s:
            self.cpu, self.peak = max(self.cpu, s[0]), max(self.peak, s[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument(
        "--quiet", type=float, default=20.0, help="seconds measured after the run reached Gate 2"
    )
    ap.add_argument(
        "--check-python",
        default=sys.executable,
        help="the interpreter of the tasks' done checks: one nobody installs into "
        "during the run (a change blocks the task: done.environment-changed)",
    )
    args = ap.parse_args()
    run_socket, view_socket = (f"lo-bench-{uuid.uuid4().hex[:8]}" for _ in range(2))
    with tempfile.TemporaryDirectory(prefix="lo-dash-bench-") as tmp:
        root = Path(tmp)
        env = environment(root, run_socket)
        repo = build(root, args.tasks, args.concurrency, args.check_python)
        lo = [sys.executable, "-m", "loop_orchestrator"]
        for step in (["plan", str(root / "plan.yaml")], ["approve"]):
            subprocess.run(
                [*lo, *step, "--repo", str(repo)], env=env, check=True, capture_output=True
            )

        def tmux(*a: str) -> str:
            return subprocess.run(
                ["tmux", "-L", view_socket, *a], env=env, check=True, capture_output=True, text=True
            ).stdout

        def start(window: str, command: list[str]) -> int:
            line = "exec " + shlex.join(command)
            if window == "dashboard":
                tmux(
                    "-f",
                    "/dev/null",
                    "new-session",
                    "-d",
                    "-s",
                    "view",
                    "-n",
                    window,
                    "-x",
                    "160",
                    "-y",
                    "50",
                    line,
                )
            else:
                tmux("new-window", "-d", "-t", "=view:", "-n", window, line)
            return int(
                tmux("display-message", "-p", "-t", f"=view:{window}", "#{pane_pid}").strip()
            )

        sup = None
        try:
            viewers = [
                Viewer("dashboard", start("dashboard", [*lo, "dashboard", "--repo", str(repo)])),
                Viewer(
                    "status --watch",
                    start("watch", [*lo, "status", "--watch", "--repo", str(repo)]),
                ),
            ]
            time.sleep(3)  # both drawn once: their start-up is not the run's cost
            for v in viewers:
                v.sample()
                v.marks["start"] = v.cpu
            began = time.monotonic()
            sup = subprocess.Popen(
                [*lo, "run", "--repo", str(repo)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            while sup.poll() is None and time.monotonic() - began < RUN_TIMEOUT:
                for v in viewers:
                    v.sample()
                time.sleep(SAMPLE_SECONDS)
            wall = time.monotonic() - began
            for v in viewers:
                v.sample()
                v.marks["run"] = v.cpu
            quiet_began = time.monotonic()
            while time.monotonic() - quiet_began < args.quiet:
                for v in viewers:
                    v.sample()
                time.sleep(SAMPLE_SECONDS)
            for v in viewers:
                v.sample()
                v.marks["quiet"] = v.cpu
            outcome = (
                "reached Gate 2"
                if sup.returncode == 0
                else f"ended with exit {sup.returncode}: "
                f"{(sup.stderr.read() if sup.stderr else '').strip()[-300:]}"
            )
        finally:
            if sup is not None and sup.poll() is None:
                sup.terminate()
                sup.wait(30)
            subprocess.run(
                ["tmux", "-L", view_socket, "kill-server"], capture_output=True, check=False
            )
            subprocess.run(
                ["tmux", "-L", run_socket, "kill-server"], capture_output=True, check=False
            )
    print(
        f"{args.tasks} tasks, at most {args.concurrency} at once: the run {outcome} in "
        f"{wall:.0f} s; then {args.quiet:.0f} s with nothing changing"
    )
    print(
        f"{'viewer':<16} {'CPU during run':>15} {'share':>7} {'CPU quiet':>10} "
        f"{'share':>7} {'peak RSS':>10}"
    )
    for v in viewers:
        run_cpu = v.marks["run"] - v.marks["start"]
        quiet_cpu = v.marks["quiet"] - v.marks["run"]
        print(
            f"{v.name:<16} {run_cpu:>13.1f} s {100 * run_cpu / wall:>6.1f}% "
            f"{quiet_cpu:>8.1f} s {100 * quiet_cpu / args.quiet:>6.1f}% "
            f"{v.peak / 1024:>7.0f} MiB"
        )


if __name__ == "__main__":
    main()

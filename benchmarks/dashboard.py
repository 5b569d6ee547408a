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
import os
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from loop_orchestrator.procinfo import cpu_and_peak_rss  # noqa: E402

RUN_TIMEOUT = 20 * 60.0
SAMPLE_SECONDS = 0.2


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


def environment(root: Path, socket: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LO_ORCH_", "GIT_")) and k not in ("TMUX", "TMUX_PANE")
    }
    home = root / "home"
    for sub in ("state", "config", "cache"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    (home / ".gitconfig").write_text(
        "[user]\n\tname = bench\n\temail = bench@localhost\n", encoding="utf-8"
    )
    env.update(
        HOME=str(home),
        XDG_STATE_HOME=str(home / "state"),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_CACHE_HOME=str(home / "cache"),
        SHELL="/bin/sh",
        LO_ORCH_TMUX_SOCKET=socket,
        PYTHONPATH=str(REPO_ROOT),
        TERM="xterm-256color",
        GIT_CONFIG_NOSYSTEM="1",
    )
    return env


def build(root: Path, n: int, concurrency: int, check_python: str) -> Path:
    """A repository and a plan of ``n`` small tasks; the scripted agent does each."""
    repo = root / "bench"
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    (repo / "tests" / "__init__.py").write_text("", encoding="utf-8")
    (repo / ".gitignore").write_text("__pycache__/\n", encoding="utf-8")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "--no-gpg-sign", "-m", "initial")
    python = shlex.quote(check_python)
    tasks, script = [], {}
    for i in range(n):
        tid, fn = f"t{i:03d}", f"f{i:03d}"
        tasks.append(
            {
                "id": tid,
                "objective": f"Add {fn}",
                "owns": [f"pkg/m{i:03d}.py", f"tests/test_m{i:03d}.py"],
                "produces": [fn],
                "consumes": [f"f{i - 8:03d}"] if i >= 8 and i % 8 == 0 else [],
                "done": [
                    {
                        "criterion": f"{fn}(2) == {2 + i}",
                        "check": f"{python} -m unittest -q tests.test_m{i:03d}",
                    }
                ],
            }
        )
        module = (
            f"def {fn}(x: int) -> int:\n    if x < 0:\n        raise ValueError('x')\n"
            f"    return x + {i}\n"
        )
        test = (
            f"import unittest\n\nfrom pkg.m{i:03d} import {fn}\n\n\n"
            f"class T(unittest.TestCase):\n"
            f"    def test_adds(self):\n        self.assertEqual({fn}(2), {2 + i})\n\n"
            f"    def test_zero(self):\n        self.assertEqual({fn}(0), {i})\n\n"
            f"    def test_negative_is_rejected(self):\n"
            f"        with self.assertRaises(ValueError):\n            {fn}(-1)\n"
        )
        script[tid] = {
            "plan": [{"signal": {"phase": "plan_ready"}}],
            "implement": [
                [
                    {"write": {"path": f"pkg/m{i:03d}.py", "content": module}},
                    {"write": {"path": f"tests/test_m{i:03d}.py", "content": test}},
                    {"signal": {"phase": "impl_done"}},
                ]
            ],
        }
    plan = {
        "goal": f"benchmark with {n} tasks",
        "name": f"dash{n}",
        "concurrency": concurrency,
        "tasks": tasks,
    }
    (root / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False), encoding="utf-8")
    (root / "script.yaml").write_text(yaml.safe_dump(script, sort_keys=False), encoding="utf-8")
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

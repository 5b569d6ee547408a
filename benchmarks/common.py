"""What the run benchmarks share: a throwaway environment, the benchmark project, its plan and
scripted-agent script, and reading what a run left behind.

``benchmarks/supervisor.py``, ``benchmarks/dashboard.py`` and ``benchmarks/cluster.py`` each
measure a run of ``n`` small tasks done by the scripted agent: task ``tNNN`` owns
``pkg/mNNN.py`` and ``tests/test_mNNN.py``, produces ``fNNN`` and every ``wave``-th task
consumes an earlier one's output, so the run comes in a few waves. Imported as
``benchmarks.common`` (each benchmark puts the repository root on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent


def git(repo: Path, *args: str) -> None:
    """``git`` in ``repo`` with a bench identity, none of the caller's ``GIT_`` variables."""
    subprocess.run(
        ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
        timeout=120,
    )


def environment(root: Path) -> dict[str, str]:
    """A throwaway HOME and XDG folders under ``root``; no inherited lo-orch, git or tmux
    variables. Callers add what their run needs (its tmux socket, PYTHONPATH, ...)."""
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
        # the scripted agents' transcripts (a file a session), not left in /tmp
        LO_ORCH_SCRIPTED_TRANSCRIPTS=str(root / "transcripts"),
    )
    return env


def project(root: Path, readme_lines: int = 0) -> Path:
    """``root/bench``: a git repository with empty ``pkg`` and ``tests`` packages, one commit
    on ``main`` (with a README of ``readme_lines`` lines when asked, for some history)."""
    repo = root / "bench"
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    (repo / "tests" / "__init__.py").write_text("", encoding="utf-8")
    (repo / ".gitignore").write_text("__pycache__/\n", encoding="utf-8")
    if readme_lines:
        text = "# bench\n" + "lorem ipsum dolor\n" * readme_lines
        (repo / "README.md").write_text(text, encoding="utf-8")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-gpg-sign", "-m", "initial")
    return repo


def task(i: int, wave: int, check_python: str) -> dict[str, object]:
    """Task ``i`` of the plan; every ``wave``-th task consumes the output of the task
    ``wave`` before it. Its done check runs under ``check_python``."""
    return {
        "id": f"t{i:03d}",
        "objective": f"Add f{i:03d}",
        "owns": [f"pkg/m{i:03d}.py", f"tests/test_m{i:03d}.py"],
        "produces": [f"f{i:03d}"],
        "consumes": [f"f{i - wave:03d}"] if i >= wave and i % wave == 0 else [],
        "done": [
            {
                "criterion": f"f{i:03d}(2) == {2 + i}",
                "check": f"{shlex.quote(check_python)} -m unittest -q tests.test_m{i:03d}",
            }
        ],
    }


def implement(i: int, signal: dict[str, object]) -> list[list[dict[str, object]]]:
    """The scripted agent's implement step for task ``i``: write the module and its test,
    then ``signal`` (the action that says impl_done)."""
    module = (
        f"def f{i:03d}(x: int) -> int:\n"
        f"    if x < 0:\n        raise ValueError('negative')\n"
        f"    return x + {i}\n"
    )
    test = (
        f"import unittest\n\nfrom pkg.m{i:03d} import f{i:03d}\n\n\n"
        f"class T(unittest.TestCase):\n"
        f"    def test_adds(self):\n        self.assertEqual(f{i:03d}(2), {2 + i})\n\n"
        f"    def test_zero(self):\n        self.assertEqual(f{i:03d}(0), {i})\n\n"
        f"    def test_negative_is_rejected(self):\n"
        f"        with self.assertRaises(ValueError):\n            f{i:03d}(-1)\n"
    )
    return [
        [
            {"write": {"path": f"pkg/m{i:03d}.py", "content": module}},
            {"write": {"path": f"tests/test_m{i:03d}.py", "content": test}},
            signal,
        ]
    ]


def signal_run(phase: str, log_dir: Path) -> dict[str, object]:
    """A ``run:`` action doing what ``signal:`` does, with its start time recorded first
    (a line ``<epoch seconds> <phase>`` in ``log_dir/<task>``)."""
    log = shlex.quote(str(log_dir)) + '/"$LO_ORCH_TASK"'
    command = f'date "+%s.%N {phase}" >> {log}; eval "exec $LO_ORCH_BIN signal {phase}"'
    return {"run": {"argv": ["sh", "-c", command], "timeout": 120}}


def write_plan(
    root: Path, name: str, goal: str, concurrency: int, tasks: list[object], script: object
) -> tuple[Path, Path]:
    """``root/plan.yaml`` and the scripted agent's ``root/script.yaml``: (plan, script)."""
    plan = {"goal": goal, "name": name, "concurrency": concurrency, "tasks": tasks}
    plan_path, script_path = root / "plan.yaml", root / "script.yaml"
    plan_path.write_text(yaml.safe_dump(plan, sort_keys=False), encoding="utf-8")
    script_path.write_text(yaml.safe_dump(script, sort_keys=False), encoding="utf-8")
    return plan_path, script_path


def ts(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank; NaN for none)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ledger(repo: Path) -> list[dict[str, Any]]:
    """The run's ledger lines."""
    path = repo / ".orchestration" / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def journals(home: Path) -> list[dict[str, Any]]:
    """Every line of the supervisors' private journals under the throwaway ``home``."""
    return [
        json.loads(line)
        for path in sorted((home / "state").glob("**/journal.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
    ]


def signal_starts(log_dir: Path) -> list[tuple[str, str, float]]:
    """What the ``signal_run`` actions recorded: (task, phase, epoch seconds)."""
    starts = []
    for file in log_dir.iterdir():
        for line in file.read_text(encoding="utf-8").splitlines():
            stamp, phase = line.split()
            starts.append((file.name, phase, float(stamp)))
    return starts


def reacted(entries: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """When the supervisor first reacted to each (task, phase) signal, from its ledger."""
    first: dict[tuple[str, str], float] = {}
    for e in entries:
        if e["event"] == "reacted":
            key = (str(e.get("task")), str(e.get("to") or e.get("phase")))
            first.setdefault(key, ts(str(e["ts"])))
    return first


# BEFORE and AFTER in one run ---------------------------------------------------------------


@dataclass(frozen=True)
class Version:
    """One version of lo-orch a benchmark runs: AFTER (this tree) or BEFORE (a baseline)."""

    label: str
    #: the source tree whose package runs (its ``hooks/lo-hook`` too)
    tree: Path
    #: put on PYTHONPATH (supervisor, panes and ``LO_ORCH_BIN``); None: the installed package
    pythonpath: Path | None


def _git_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}


@contextlib.contextmanager
def baseline_tree(rev: str) -> Iterator[Path]:
    """A temporary detached worktree of ``rev`` of this repository, removed on exit."""
    tmp = Path(tempfile.mkdtemp(prefix="lo-bench-baseline-"))
    tree = tmp / "tree"
    try:
        git(REPO_ROOT, "worktree", "add", "--detach", str(tree), rev)
        yield tree
    finally:
        for args in (["worktree", "remove", "--force", str(tree)], ["worktree", "prune"]):
            subprocess.run(
                ["git", *args],
                cwd=REPO_ROOT,
                capture_output=True,
                env=_git_env(),
                check=False,
                timeout=120,
            )
        with contextlib.suppress(OSError):
            tmp.rmdir()


def version_env(
    version: Version, root: Path, socket: str, *, drop: tuple[str, ...] = ()
) -> dict[str, str]:
    """The environment of every lo-orch command of one run of ``version`` (panes inherit
    it), without the variables ``drop`` names."""
    env = environment(root)
    for name in ("PYTHONPATH", *drop):
        env.pop(name, None)
    env["LO_ORCH_TMUX_SOCKET"] = socket
    if version.pythonpath is not None:
        env["PYTHONPATH"] = str(version.pythonpath)
    return env


def compile_tree(version: Version) -> None:
    """Byte-compile the version's package, as installing it does: a sandboxed pane cannot
    write byte code beside it, and compiling on every call would measure the compiler (a
    fresh baseline worktree has none; a tree edited since its byte code was written, only
    for what did not change)."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(version.tree / "loop_orchestrator")],
        check=True,
        capture_output=True,
        timeout=300,
    )


#: variables that would keep Python from using or writing the byte code ``compile_tree``
#: wrote (a process compiling lo-orch's modules at each start measures the compiler)
BYTECODE_VARIABLES = ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")


def check_import(version: Version, env: dict[str, str], cwd: Path) -> None:
    """Fail unless ``python -m loop_orchestrator`` here imports ``version``'s code."""
    out = subprocess.run(
        [sys.executable, "-c", "import loop_orchestrator; print(loop_orchestrator.__file__)"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    found = Path(out).resolve().parent
    if found != (version.tree / "loop_orchestrator").resolve():
        msg = f"{version.label}: imports {found}, not {version.tree}"
        raise SystemExit(msg)


def bare_python(times: int = 20) -> tuple[float, float]:
    """The median wall and CPU seconds of a bare ``python -I -c pass`` here: the floor."""
    walls, cpus = [], []
    for _ in range(times):
        before = os.times()
        start = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-c", "pass"], check=True)
        walls.append(time.perf_counter() - start)
        after = os.times()
        cpus.append(
            after.children_user
            + after.children_system
            - before.children_user
            - before.children_system
        )
    return pct(walls, 0.5), pct(cpus, 0.5)


def timed_plugin(root: Path, version: Version, prefix: Callable[[str], list[str]]) -> Path:
    """A plugin folder whose hooks are ``version``'s own, each event's command run under
    ``prefix(event)`` (a timing wrapper's argument list)."""
    plugin = root / "plugin"
    (plugin / "hooks").mkdir(parents=True)
    config = json.loads((version.tree / "hooks" / "hooks.json").read_text(encoding="utf-8"))
    launcher = shlex.quote(str(version.tree / "hooks" / "lo-hook"))
    for event, groups in config["hooks"].items():
        wrapper = shlex.join(prefix(event))
        for group in groups:
            for hook in group["hooks"]:
                hook["command"] = hook["command"].replace(
                    '"${CLAUDE_PLUGIN_ROOT}/hooks/lo-hook"', f"{wrapper} {launcher}"
                )
    (plugin / "hooks" / "hooks.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return plugin

"""Runs of the demo project for tests: its plan and script cut to size, the plan approved,
the ledger read back, ``lo-orch`` run in a subprocess, the user's files checksummed, a
notify command that records what it gets."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from helpers import REPO_ROOT
from helpers.git import git
from loop_orchestrator import config
from loop_orchestrator.commands.plan import plan_from_file
from loop_orchestrator.config import Settings
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.state import RunState, Store
from loop_orchestrator.simulator import demo_flow as demo

#: the keys of status/<task>.json (contract, docs/design.md section 3), written out by hand so a
#: renamed model field fails the tests
STATUS_KEYS = (
    "task",
    "phase",
    "wave",
    "updated_at",
    "worktree",
    "branch",
    "pane_id",
    "session_id",
    "rework_count",
    "last_event",
    "note",
    "error",
    "commit",
)

#: the demo project's config for `lo-orch run` in a subprocess: the scripted agent, no
#: auditor, the user's uncommitted edits allowed
SCRIPTED_CONFIG = (
    '[agent]\nkind = "scripted"\nscript = "{script}"\nready_timeout = 20\n'
    '[auditor]\nllm = "off"\n[run]\nstagger_seconds = 0.1\n'
    "[workspace]\nallow_dirty = true\n"
)


def run_state(repo: Path, name: str = "demo") -> RunState:
    """An approved run ``name`` of ``repo`` with made-up shas (no plan file, no git)."""
    return RunState(
        name=name,
        repo=str(repo),
        base_ref="main",
        base_sha="a" * 40,
        staging_branch=f"lo/{name}/staging",
        feature_branch=f"feat/{name}",
        plan_sha256="p" * 64,
        approved_plan_sha256="p" * 64,
        created_at="t",
    )


def edit_script(files: demo.DemoFiles, change: Callable[[dict[str, Any]], None]) -> None:
    """Change the demo's scripted-agent script (a YAML mapping) in place."""
    data = yaml.safe_load(files.script.read_text(encoding="utf-8"))
    change(data)
    files.script.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def only(files: demo.DemoFiles, *tasks: str) -> None:
    """Keep only ``tasks`` of the demo plan."""
    plan = yaml.safe_load(files.plan.read_text(encoding="utf-8"))
    plan["tasks"] = [t for t in plan["tasks"] if t["id"] in tasks]
    files.plan.write_text(yaml.safe_dump(plan, sort_keys=False), encoding="utf-8")


def write_demo_plan(plan: Path, name: str, tasks: tuple[str, ...]) -> None:
    """The demo plan (kept beside ``plan`` as full.yaml) cut down to ``tasks``."""
    full = plan.parent / "full.yaml"
    data: dict[str, Any] = yaml.safe_load(full.read_text(encoding="utf-8"))
    data["name"] = name
    data["tasks"] = [t for t in data["tasks"] if t["id"] in tasks]
    for t in data["tasks"]:
        t["consumes"] = []
    plan.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def commit_config(files: demo.DemoFiles) -> None:
    """Commit ``SCRIPTED_CONFIG`` as the demo project's .loop-orchestrator/config.toml."""
    folder = files.repo / ".loop-orchestrator"
    folder.mkdir(exist_ok=True)
    (folder / "config.toml").write_text(
        SCRIPTED_CONFIG.format(script=files.script), encoding="utf-8"
    )
    git(files.repo, "add", ".loop-orchestrator")
    git(files.repo, "commit", "-q", "--no-gpg-sign", "-m", "lo-orch config")


def one_task_files(
    root: Path, name: str = "demo", tasks: tuple[str, ...] = ("tokenize",)
) -> demo.DemoFiles:
    """The demo project with a plan of only ``tasks`` (fast: no rework round) and a
    committed config for `lo-orch run` in a subprocess."""
    files = demo.prepare_demo(root)
    (root / "full.yaml").write_text(files.plan.read_text(encoding="utf-8"), encoding="utf-8")
    write_demo_plan(files.plan, name, tasks)
    commit_config(files)
    return files


def approve(files: demo.DemoFiles, settings: Settings | None = None) -> None:
    """Plan the demo from its plan file (with ``settings``, else the project's config)
    and approve it (gate 1)."""
    chosen = settings if settings is not None else config.load_settings(files.repo)
    plan_from_file(files.repo, files.plan, chosen)
    runs.approve_plan(files.repo)


def ledger(repo: Path, event: str | None = None, task: str | None = None) -> list[dict[str, Any]]:
    """The run's ledger, only ``event`` (and only ``task``'s) when given."""
    return [
        e
        for e in Store.for_repo(repo).read_ledger()
        if (event is None or e["event"] == event) and (task is None or e.get("task") == task)
    ]


def lo_orch(cwd: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """`lo-orch ARGS` of this checkout in a subprocess in ``cwd``."""
    return subprocess.run(
        [sys.executable, "-m", "loop_orchestrator", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )


def user_snapshot(repo: Path) -> dict[str, Any]:
    """Checksums of every file of the user's (outside lo-orch's own folders) and the sha
    of every branch that is not lo-orch's."""
    files = {}
    for path in sorted(repo.rglob("*")):
        rel = path.relative_to(repo).as_posix()
        if rel.split("/")[0] in (".git", ".orchestration", ".worktrees") or not path.is_file():
            continue
        files[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    refs = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/")
    branches = {
        r: s
        for r, s in (ln.split() for ln in refs.splitlines())
        if not r.startswith(("refs/heads/lo/", "refs/heads/feat/"))
    }
    return {"files": files, "branches": branches}


def recorder(folder: Path) -> tuple[str, Path]:
    """A notify command that appends what it gets on stdin to a file; (command, file)."""
    script = folder / "record.py"
    out = folder / "received.jsonl"
    script.write_text(
        "import sys\nwith open(sys.argv[1], 'a') as fh:\n    fh.write(sys.stdin.read())\n",
        encoding="utf-8",
    )
    return shlex.join([sys.executable, str(script), str(out)]), out


def received(out: Path) -> list[dict[str, Any]]:
    """What the ``recorder`` command got, one notification a line."""
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def lo(repo: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """`lo-orch ARGS --repo REPO` in a subprocess."""
    return lo_orch(repo, *args, "--repo", str(repo), timeout=timeout)

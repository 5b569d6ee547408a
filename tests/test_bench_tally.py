"""The supervisor benchmark's CPU tally (``benchmarks/cputally.py``): what it counts, and that
a real lo-orch process started through its boot line counts what it ran."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

from benchmarks import cputally


def busy(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_cpu_is_the_threads_own_and_a_recursive_call_counts_once() -> None:
    tally = cputally.Tally()

    def work(depth: int) -> None:
        busy(0.02)
        if depth:
            counted(depth - 1)

    counted = tally.wrap("m:work", work)
    sleeper = tally.wrap("m:sleep", lambda: time.sleep(0.15))
    thread = threading.Thread(target=busy, args=(0.3,))  # another thread's CPU: not counted
    thread.start()
    counted(2)
    sleeper()
    thread.join()
    cpu, calls = tally.counts["m:work"]
    assert calls == 1  # the outer call; the two inside it are in its time
    assert 0.055 < cpu < 0.2
    assert tally.counts["m:sleep"][1] == 1 and tally.counts["m:sleep"][0] < 0.02


def test_a_gateway_is_counted_by_its_subcommand_too() -> None:
    tally = cputally.Tally()
    git = tally.wrap("gateway:git", lambda cwd, *args: None, sub_at=1)
    git(Path("/r"), "-c", "core.quotepath=false", "diff", "--name-only")
    git(Path("/r"), "for-each-ref", "refs/heads/")
    git(Path("/r"), "for-each-ref")
    assert tally.counts["gateway:git"][1] == 3
    assert tally.counts["gateway:git diff"] == [0.0, 1]
    assert tally.counts["gateway:git for-each-ref"] == [0.0, 2]


def test_every_process_started_is_counted_by_its_program() -> None:
    """``proc.run`` takes the whole argument list: its calls are counted by the program's
    name (a git the gateway starts for itself, such as ``config --list``, shows there)."""
    tally = cputally.Tally()
    run = tally.wrap("proc:run", lambda cmd, **kw: None, sub_at=cputally.BY_SUBCOMMAND["run"])
    run(["/usr/bin/git", "-c", "a=b", "config", "--list"], cwd="/r")
    run(("tmux", "-L", "sock", "list-panes"))
    run(["git", "status"])
    run([])
    assert tally.counts["proc:run"][1] == 4
    assert tally.counts["proc:run git"] == [0.0, 2]
    assert tally.counts["proc:run tmux"] == [0.0, 1]
    assert tally.counts["proc:run ?"] == [0.0, 1]


def test_a_file_written_is_counted_by_its_folder() -> None:
    tally = cputally.Tally()
    key = cputally.BY_SUBCOMMAND["atomic_write_text"]
    write = tally.wrap("files:atomic_write_text", lambda path, text: None, sub_at=key)
    write(Path("/s/run/status/t001.json"), "{}")
    write(Path("/s/run/status/t002.json"), "{}")
    write(Path("/s/run/briefs/t001.md"), "x")
    assert tally.counts["files:atomic_write_text status/"] == [0.0, 2]
    assert tally.counts["files:atomic_write_text briefs/"] == [0.0, 1]


def test_the_garbage_collector_is_counted_by_generation() -> None:
    import gc

    tally = cputally.Tally()
    before = list(gc.callbacks)
    cputally._count_gc(tally)
    try:
        gc.collect(2)
        gc.collect(0)
    finally:
        gc.callbacks[:] = before
    assert tally.counts["gc:collect_2"][1] == 1 and tally.counts["gc:collect_2"][0] > 0
    assert tally.counts["gc:collect_0"][1] >= 1


def test_a_function_a_version_lacks_is_left_out() -> None:
    module = types.ModuleType("loop_orchestrator.fake")

    class Box:
        def size(self) -> int:
            return 3

    module.Box = Box  # type: ignore[attr-defined]
    tally = cputally.Tally()
    tally.instrument(module, ["Box.size", "Box.gone", "Nothing.at_all"])
    assert Box().size() == 3
    assert list(tally.counts) == ["fake:Box.size"]


def test_rows_put_the_most_cpu_first_per_task() -> None:
    doc: dict[str, Any] = {
        "cpu": 3.0,
        "tally": {
            "proc:run": [0.4, 200],
            "journal:Record.update_task": [0.8, 40],
            "gateway:git": [0.2, 100],
            "gateway:git rev-parse": [0.0, 60],
            "gateway:git diff": [0.0, 40],
        },
    }
    lines = cputally.rows(doc, tasks=4)
    assert "200.0" in lines[1] and "10.0" in lines[1] and "20000" in lines[1]
    assert lines[1].endswith("journal:Record.update_task")
    assert lines[2].endswith("proc:run") and lines[3].endswith("gateway:git")
    assert lines[5].split() == ["15.0", "gateway:git", "rev-parse"]
    assert lines[6].split() == ["10.0", "gateway:git", "diff"]


def test_a_real_lo_orch_started_through_the_boot_line_counts_what_it_ran(
    git_repo: Path, tmp_path: Path
) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "goal: g\nname: demo\ntasks:\n  - id: alpha\n    title: A\n    objective: o\n"
        "    owns: [a.py]\n    done:\n      - criterion: c\n        check: pytest -q\n",
        encoding="utf-8",
    )
    lo = [sys.executable, "-m", "loop_orchestrator"]
    env = {**os.environ, "LO_BENCH_CALLERS": "1"}
    assert cputally.supervisor(lo, env, tmp_path, tally=False) == (lo, env)
    argv, booted = cputally.supervisor(lo, env, tmp_path, tally=True)
    done = subprocess.run(
        [*argv, "plan", str(plan)],
        cwd=git_repo,
        env=booted,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert cputally.counts(tmp_path, tally=False) is None
    doc = cputally.counts(tmp_path, tally=True)
    assert doc is not None
    assert doc["cpu"] > 0
    assert doc["tally"]["state:Store._ledger"][1] >= 1  # plan_created
    assert doc["tally"]["files:atomic_write_text"][1] >= 2  # plan.json, run.json, ...
    # LO_BENCH_CALLERS: each git call counted by who called it, the gateway left out
    calls = [name.split(" <- ") for name in doc["tally"] if name.startswith("gateway:git ")]
    assert calls and all(2 <= len(chain) <= 4 for chain in calls)
    callers = {c for chain in calls for c in chain[1:]}
    assert "workspace:repo_root" in callers, callers
    assert not any(c.startswith(("gateway:", "proc:")) for c in callers)

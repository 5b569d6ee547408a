"""Where the supervisor's own CPU goes: each chosen function's CPU time (its thread's,
``time.thread_time``, the calls it makes included) and calls, counted inside the supervisor.

``benchmarks/supervisor.py --tally`` starts the supervisor through ``BOOT``: ``install``
puts an import hook in place before any lo-orch module loads; as each module of ``TARGETS``
loads, its functions are wrapped. At exit the counts go to ``$LO_BENCH_TALLY`` as JSON
(``{"cpu": process CPU s, "tally": {name: [CPU s, calls]}}``); ``rows`` makes the table.
A function a version does not have is left out (a baseline may predate it). The git and
tmux gateways are counted per subcommand too (calls only: their CPU is in the gateway's row),
and with ``LO_BENCH_CALLERS=1`` per subcommand and caller (the three nearest lo-orch functions
above the gateway): which step makes the calls.
"""

from __future__ import annotations

import atexit
import functools
import gc
import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

#: module -> the functions (``Class.method`` or ``function``) counted in it
TARGETS: dict[str, tuple[str, ...]] = {
    "loop_orchestrator.supervisor.main": (
        "Supervisor.start",
        "Supervisor._dispatch",
        "Supervisor._loop",
        "Supervisor._check_sessions",
        "Supervisor._check_view",
    ),
    "loop_orchestrator.supervisor.inbox": ("Inbox.identify", "Inbox.receive"),
    "loop_orchestrator.supervisor.panewatch": ("PaneWatch._run",),
    "loop_orchestrator.supervisor.sessions": (
        "Sessions.start_task",
        "Sessions.deliver",
        "Sessions.context",
        "Sessions.render_brief",
        "Sessions.heal_worktree",
        "Sessions.clear_index_lock",
    ),
    "loop_orchestrator.supervisor.accounting": (
        "Accounting.over_budget",
        "Accounting.refresh_usage",
        "Accounting.await_transcript",
    ),
    "loop_orchestrator.agents.claude": ("ClaudeAdapter.prepare", "ClaudeAdapter.launch_spec"),
    "loop_orchestrator.workspace.workspace": ("Workspace.run_setup",),
    "loop_orchestrator.verify.donechecks": ("run_done_checks", "new_test_findings"),
    "loop_orchestrator.verify.redgreen": ("red_green", "judge_skips"),
    "loop_orchestrator.verify.mutation": ("mutation_check",),
    "loop_orchestrator.verify.weakproof": ("escalate",),
    "loop_orchestrator.verify.llm_auditor": ("run_auditor",),
    "loop_orchestrator.supervisor.verification": ("Verification.verify",),
    "loop_orchestrator.supervisor.integration": ("Integration.integrate",),
    "loop_orchestrator.supervisor.reports": ("Reports.handle", "Reports._hook", "Reports._signal"),
    "loop_orchestrator.supervisor.journal": ("Journal.set", "Journal.move", "Journal.event"),
    "loop_orchestrator.supervisor.refguard": ("RefGuard.check",),
    "loop_orchestrator.sessions.listener": ("Server._wire", "Server._serve", "Server._accept"),
    "loop_orchestrator.sessions.tmux": (
        "TmuxBackend._tmux",
        "TmuxBackend.look",
        "TmuxBackend.launch",
        "TmuxBackend.state",
        "TmuxBackend.paste",
    ),
    "loop_orchestrator.sessions.delivery": ("Deliverer.deliver",),
    "loop_orchestrator.agents.dialogs": ("wait_until_ready",),
    "loop_orchestrator.runstate.journal": (
        "Record.update_task",
        "Record.append",
        "Record._publish",
        "Record.task",
        "status_copy",
        "Record.sync",
    ),
    "loop_orchestrator.runstate.state": ("Store._ledger",),
    "loop_orchestrator.files": ("atomic_write_text", "fsync_path"),
    "loop_orchestrator.git.gateway": ("git",),
    "loop_orchestrator.git.refbook": ("FileRefBook.set", "FileRefBook.items"),
    "loop_orchestrator.proc": ("run", "no_git_env", "without_tokens"),
    "loop_orchestrator.sessions.sandbox": ("confine", "Policy.for_task"),
    "loop_orchestrator.workspace.ownref": ("OwnBranch.seed",),
    "loop_orchestrator.verify.testquality": ("check_tests",),
    "loop_orchestrator.agents.scripted": ("ScriptedAdapter.prepare", "ScriptedAdapter.launch_spec"),
    "loop_orchestrator.workspace.worktrees": ("Worktrees.commit_task", "Worktrees.ensure_worktree"),
    "loop_orchestrator.workspace.staging": ("Staging.merge_into_staging",),
    "loop_orchestrator.workspace.branches": (
        "Branches.watched",
        "Branches.watched_refs",
        "Branches.move",
        "list_worktrees",
    ),
    "loop_orchestrator.verify.verdict": ("verify_task", "deterministic_findings"),
    "loop_orchestrator.verify.pyenv": ("take_baseline", "changes"),
}
#: gateways whose calls are also counted by their first word (git's, tmux's subcommand;
#: for ``proc.run``, whose first argument is the whole argument list, the program's name:
#: every process the supervisor starts, git's ``config --list`` before a command included;
#: for a file written, its folder) -> the index of that word
BY_SUBCOMMAND = {"git": 1, "TmuxBackend._tmux": 1, "run": 0, "atomic_write_text": 0}

#: what the supervisor is started with: this module's hook, then ``lo-orch`` as ``-m``
BOOT = (
    "import runpy, sys; sys.path.insert(0, {where!r}); import cputally; cputally.install(); "
    "runpy.run_module('loop_orchestrator', run_name='__main__', alter_sys=True)"
)


#: ``LO_BENCH_CALLERS=1``: a gateway call is counted per caller too (the nearest lo-orch
#: functions that called it, outside the gateways themselves)
CALLERS = os.environ.get("LO_BENCH_CALLERS") == "1"


def _callers(depth: int = 3) -> str:
    """`` <- module:function`` for the nearest ``depth`` lo-orch frames above a gateway."""
    names: list[str] = []
    frame: Any = sys._getframe(2)
    while frame is not None and len(names) < depth:
        path = frame.f_code.co_filename
        if "loop_orchestrator" in path and not path.endswith(("gateway.py", "proc.py", "tmux.py")):
            names.append(f"{Path(path).stem}:{frame.f_code.co_name}")
        frame = frame.f_back
    return "".join(f" <- {n}" for n in names)


class Tally:
    """CPU seconds and calls per name, from any thread; a call inside a call of the same
    name (recursion) is counted once, in the outer one."""

    def __init__(self) -> None:
        self.counts: dict[str, list[float]] = {}
        self._lock = threading.Lock()
        self._inside = threading.local()

    def add(self, name: str, cpu: float, calls: int = 1) -> None:
        with self._lock:
            row = self.counts.setdefault(name, [0.0, 0])
            row[0] += cpu
            row[1] += calls

    def wrap(self, name: str, fn: Callable[..., Any], sub_at: int | None = None) -> Any:
        @functools.wraps(fn)
        def counted(*args: Any, **kwargs: Any) -> Any:
            if sub_at is not None:
                given = args[sub_at:]
                if given and isinstance(given[0], list | tuple):  # (an argument list)
                    given = (Path(str(given[0][0])).name,) if given[0] else ()
                elif given and isinstance(given[0], Path):  # (a file written: its folder)
                    given = (given[0].parent.name + "/",)
                words = [a for a in given if isinstance(a, str) and a[:1] != "-" and "=" not in a]
                where = _callers() if CALLERS else ""
                self.add(f"{name} {words[0] if words else '?'}{where}", 0.0)
            inside: set[str] = self._inside.__dict__.setdefault("names", set())
            if name in inside:
                return fn(*args, **kwargs)
            inside.add(name)
            began = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                inside.discard(name)
                self.add(name, time.thread_time() - began)

        return counted

    def instrument(self, module: ModuleType, names: Sequence[str]) -> None:
        short = module.__name__.rsplit(".", 1)[-1]
        for qualname in names:
            owner: Any = module
            *path, attr = qualname.split(".")
            try:
                for part in path:
                    owner = getattr(owner, part)
                fn = getattr(owner, attr)
            except AttributeError:
                continue  # (a version without it)
            wrapped = self.wrap(f"{short}:{qualname}", fn, BY_SUBCOMMAND.get(qualname))
            setattr(owner, attr, wrapped)


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps a target module's functions right after the module runs."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in TARGETS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module
        tally = self.tally

        def exec_module(module: ModuleType) -> None:
            run(module)
            tally.instrument(module, TARGETS[fullname])

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _count_gc(tally: Tally) -> None:
    """The cyclic garbage collector's CPU, per generation (``gc:collect_N``): it runs in
    whichever thread's allocation set it off, inside any counted function."""
    began: dict[int, float] = {}

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[threading.get_ident()] = time.thread_time()
        elif (start := began.pop(threading.get_ident(), None)) is not None:
            tally.add(f"gc:collect_{info['generation']}", time.thread_time() - start)

    gc.callbacks.append(timed)


def install() -> Tally:
    """Count from now on; the counts are written to ``$LO_BENCH_TALLY`` at exit."""
    tally = Tally()
    sys.meta_path.insert(0, _Finder(tally))
    _count_gc(tally)
    out = os.environ.get("LO_BENCH_TALLY")

    def dump() -> None:
        if out:
            times = os.times()
            doc = {
                "cpu": times.user + times.system,
                "user": times.user,
                "system": times.system,
                "tally": tally.counts,
            }
            Path(out).write_text(json.dumps(doc), encoding="utf-8")

    atexit.register(dump)
    return tally


def supervisor(
    lo: list[str], env: dict[str, str], root: Path, tally: bool
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment a benchmark starts its supervisor with: ``lo``, or
    with ``tally`` that same command started through ``BOOT``, its counts going to
    ``root/tally.json`` (``counts``)."""
    if not tally:
        return lo, env
    where = str(Path(__file__).resolve().parent)
    return [sys.executable, "-c", BOOT.format(where=where)], {
        **env,
        "LO_BENCH_TALLY": str(root / "tally.json"),
    }


def counts(root: Path, tally: bool) -> dict[str, Any] | None:
    """What the supervisor started by ``supervisor`` counted (None without ``tally``, or
    when it did not end by itself)."""
    found = root / "tally.json"
    if not tally or not found.exists():
        return None
    doc: dict[str, Any] = json.loads(found.read_text(encoding="utf-8"))
    return doc


def rows(doc: dict[str, Any], tasks: int, top: int = 40) -> list[str]:
    """The table: per name, ms of CPU a task, calls a task, µs a call; the most CPU first,
    then the gateways' calls by subcommand, the most first."""
    timed = [(n, c, k) for n, (c, k) in doc["tally"].items() if " " not in n]
    counted = [(n, k) for n, (_c, k) in doc["tally"].items() if " " in n]
    timed.sort(key=lambda r: (-r[1], r[0]))
    counted.sort(key=lambda r: (-r[1], r[0]))
    out = []
    if "user" in doc:  # (the kernel's share: process starts, file system calls)
        user, system = (1000 * doc[k] / tasks for k in ("user", "system"))
        out.append(f"{user:8.1f} ms/task in user space, {system:.1f} in the kernel")
    out.append(f"{'ms/task':>8} {'calls/task':>10} {'us/call':>8}  function (CPU incl. callees)")
    for name, cpu, calls in timed[:top]:
        per_call = 1e6 * cpu / calls if calls else 0.0
        out.append(f"{1000 * cpu / tasks:8.1f} {calls / tasks:10.1f} {per_call:8.0f}  {name}")
    out.append(f"{'':8} {'calls/task':>10} {'':8}  command")
    shown = counted if CALLERS else counted[:top]
    out.extend(f"{'':8} {calls / tasks:10.1f} {'':8}  {name}" for name, calls in shown)
    return out

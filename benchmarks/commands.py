"""Command gateway benchmark, BEFORE and AFTER side by side: what one git call costs the
process that makes it (``proc.run``, the gateway every git, tmux and check command goes
through).

The supervisor makes about 35 such calls a task (``supervisor.py --tally``), each with a
timeout. BEFORE is a baseline revision (default 0eef1a0: ``Popen`` searched PATH for the
program at every call), checked out in a temporary git worktree; AFTER is this tree. Each
version is measured in a process of its own that imports that version's ``proc`` through
``PYTHONPATH`` (checked) and holds about as much memory as the supervisor does (60 MiB), in
``--rounds`` rounds, ABBA order, of ``--calls`` calls per command. Per version and command
it prints:

1. the caller's CPU per call (its own user and system time: spawning, reading, waiting);
2. the wall time per call, p50 and mean (what a step of the supervisor waits per command).

The commands are those the supervisor makes most: ``git rev-parse HEAD``, ``git status
--porcelain`` and ``git worktree list --porcelain`` in a small repository, and ``sh -c
true`` as the floor of a spawn.

    .venv/bin/python benchmarks/commands.py [--calls 200] [--rounds 4]
        [--baseline REV | --no-baseline]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import REPO_ROOT, baseline_tree, git

BASELINE = "0eef1a0"

COMMANDS = {
    "git rev-parse HEAD": ["git", "rev-parse", "HEAD"],
    "git status --porcelain": ["git", "status", "--porcelain"],
    "git worktree list": ["git", "worktree", "list", "--porcelain", "-z"],
    "sh -c true": ["sh", "-c", "true"],
}

#: the measuring process: imports ``proc`` from PYTHONPATH, holds the supervisor's memory,
#: and prints {"file": where proc came from, command: [[cpu s, wall s] per call]}
PROBE = r"""
import json, resource, sys, time
from loop_orchestrator import proc
ballast = [bytearray(1024) for _ in range(60 * 1024)]
commands, calls, cwd = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
out = {"file": proc.__file__}
for name, argv in commands.items():
    rows = []
    for _ in range(calls):
        c, t = cpu(), time.perf_counter()
        proc.run(argv, cwd=cwd, timeout=60)
        rows.append([cpu() - c, time.perf_counter() - t])
    out[name] = rows
print(json.dumps(out))
"""


def measure(tree: Path, calls: int, cwd: Path) -> dict[str, list[list[float]]]:
    """One round of one version: every command ``calls`` times."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["PYTHONPATH"] = str(tree)
    res = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(COMMANDS), str(calls), str(cwd)],
        env=env,
        cwd=cwd,  # (not this repository: ``-c`` puts the working folder first on the path)
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    doc: dict[str, Any] = json.loads(res.stdout)
    found = Path(doc.pop("file")).resolve().parent
    if found != (tree / "loop_orchestrator").resolve():
        msg = f"measured {found}, not {tree}"
        raise SystemExit(msg)
    return doc


def small_repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for i in range(50):
        (repo / f"m{i}.py").write_text(f"x = {i}\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "start")
    return repo


def table(results: dict[str, dict[str, list[list[float]]]]) -> list[str]:
    labels = list(results)
    lines = [f"{'per call':42}" + "".join(f"{label:>18}" for label in labels)]
    for name in COMMANDS:
        rows = {label: results[label][name] for label in labels}
        cpu = {label: statistics.mean(r[0] for r in rows[label]) * 1e6 for label in labels}
        p50 = {label: statistics.median(r[1] for r in rows[label]) * 1e3 for label in labels}
        mean = {label: statistics.mean(r[1] for r in rows[label]) * 1e3 for label in labels}
        lines.append(f"{name + ', caller CPU us':42}" + "".join(f"{cpu[k]:18.0f}" for k in labels))
        lines.append(
            f"{name + ', wall p50 / mean ms':42}"
            + "".join(f"{p50[k]:11.2f} / {mean[k]:4.2f}" for k in labels)
        )
    return lines


def tree_of(rev: str | None) -> contextlib.AbstractContextManager[Path | None]:
    """The baseline's tree, removed on exit (None: no baseline)."""
    return contextlib.nullcontext() if rev is None else baseline_tree(rev)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--baseline", default=BASELINE, metavar="REV")
    parser.add_argument("--no-baseline", action="store_true", help="measure AFTER only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lo-bench-commands-") as tmp:
        repo = small_repo(Path(tmp))
        with tree_of(None if args.no_baseline else args.baseline) as before:
            versions = {} if before is None else {"BEFORE": before}
            versions["AFTER"] = REPO_ROOT
            pooled: dict[str, dict[str, list[list[float]]]] = {
                label: {name: [] for name in COMMANDS} for label in versions
            }
            order = list(versions)
            for i in range(args.rounds):
                for label in order if i % 2 == 0 else order[::-1]:
                    print(f"round {i + 1}: {label}...", file=sys.stderr, flush=True)
                    for name, rows in measure(versions[label], args.calls, repo).items():
                        pooled[label][name] += rows
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"command gateway benchmark: {args.rounds} rounds x {args.calls} calls a command, "
        f"{os.cpu_count()} cores, load average {load}"
        + ("" if args.no_baseline else f"; BEFORE = {args.baseline}")
    )
    print("\n".join(table(pooled)))


if __name__ == "__main__":
    main()

"""Benchmark the git workspace layer.

Generates a repository of ``--files`` files (default 10,000), then for ``--worktrees``
tasks (default 16): creates each worktree from staging, commits a change in each,
pre-checks every task against staging and pairwise, merges all into staging, and cleans
up. Prints each step's time next to a plain ``cp -r`` of the same tree.

    .venv/bin/python benchmarks/workspace.py                 # the full run
    .venv/bin/python benchmarks/workspace.py --files 500 --worktrees 4   # a quick one
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
ROOT = Path(__file__).resolve().parent.parent


class Timer:
    """Collects the duration of every call of each step."""

    def __init__(self) -> None:
        self.steps: dict[str, list[float]] = {}

    def time(self, step: str, fn: Callable[..., T], *args: Any) -> T:
        start = time.perf_counter()
        value = fn(*args)
        self.steps.setdefault(step, []).append(time.perf_counter() - start)
        return value

    def mean(self, step: str) -> float:
        return statistics.mean(self.steps[step])

    def table(self) -> str:
        rows = [f"{'step':<34}{'count':>7}{'total s':>10}{'mean ms':>10}{'max ms':>10}"]
        rows.append("-" * len(rows[0]))
        for step, times in self.steps.items():
            rows.append(
                f"{step:<34}{len(times):>7}{sum(times):>10.2f}"
                f"{statistics.mean(times) * 1000:>10.1f}{max(times) * 1000:>10.1f}"
            )
        return "\n".join(rows)


def isolate_git(tmp: Path) -> None:
    """A throwaway git identity and config, so the user's hooks and signing stay out."""
    config = tmp / "gitconfig"
    config.write_text(
        "[user]\n\tname = Bench\n\temail = bench@example.org\n"
        "[commit]\n\tgpgsign = false\n[init]\n\tdefaultBranch = main\n",
        encoding="utf-8",
    )
    os.environ["GIT_CONFIG_GLOBAL"] = str(config)
    os.environ["GIT_CONFIG_NOSYSTEM"] = "1"


def generate(repo: Path, files: int) -> None:
    per_dir = 100
    for i in range(files):
        folder = repo / "src" / f"pkg{i // per_dir:03d}"
        if i % per_dir == 0:
            folder.mkdir(parents=True)
        (folder / f"mod{i:05d}.py").write_text(
            f'"""Module {i}."""\n\nVALUE = {i}\n\n\ndef f{i}(x: int) -> int:\n    return x + {i}\n',
            encoding="utf-8",
        )
    (repo / "README.md").write_text("# benchmark\n", encoding="utf-8")


def run_git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def first_commit(repo: Path) -> None:
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-q", "-m", "generated")


def run_cmd(*argv: str | Path) -> None:
    subprocess.run([str(a) for a in argv], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--worktrees", type=int, default=16)
    parser.add_argument("--keep", action="store_true", help="keep the generated repository")
    args = parser.parse_args(argv)
    if args.files < args.worktrees or args.worktrees < 2:
        parser.error("need at least 2 worktrees and one file per worktree")

    # Run from a checkout without installing: the package lives next to benchmarks/.
    sys.path.insert(0, str(ROOT))
    from loop_orchestrator.config import WorkspaceConfig
    from loop_orchestrator.workspace.workspace import Workspace

    tmp = Path(tempfile.mkdtemp(prefix="lo-bench-"))
    try:
        isolate_git(tmp)
        repo = tmp / "repo"
        repo.mkdir()
        timer = Timer()
        timer.time("generate files", generate, repo, args.files)
        run_git(repo, "init", "-q")
        timer.time("git add + first commit", first_commit, repo)

        ws = Workspace(repo, "bench", WorkspaceConfig())
        timer.time("preflight", ws.preflight)
        timer.time("create staging", ws.create_staging, ws.resolve_base(None))
        tasks = [f"t{i:02d}" for i in range(args.worktrees)]
        paths = {t: timer.time("worktree create", ws.ensure_worktree, t) for t in tasks}
        timer.time("worktree reuse (idempotent)", ws.ensure_worktree, tasks[0])
        # cp -r is slow on small machines; three samples give a fair mean.
        for i in range(min(3, args.worktrees)):
            dest = tmp / f"copy{i:02d}"
            timer.time("cp -r of the same tree", run_cmd, "cp", "-r", paths[tasks[0]], dest)
            shutil.rmtree(dest)

        commits: dict[str, str] = {}
        step = args.files // args.worktrees
        for i, task in enumerate(tasks):
            path = paths[task]
            target = sorted((path / "src").rglob("*.py"))[i * step]
            target.write_text(
                target.read_text(encoding="utf-8") + f"# task {task}\n", encoding="utf-8"
            )
            (path / f"{task}.txt").write_text(f"new file of {task}\n", encoding="utf-8")
            commits[task] = timer.time("commit task", ws.commit_task, task, task)

        for task in tasks:
            conflicts = timer.time(
                "merge pre-check vs staging", ws.staging.merge_precheck, commits[task]
            )
            assert conflicts == [], conflicts
        pairs = timer.time("pairwise pre-check (all pairs)", ws.staging.pairwise_precheck, commits)
        assert pairs == [], pairs
        for task in tasks:
            timer.time("merge into staging", ws.merge_into_staging, task, commits[task], task)
        report = timer.time("cleanup (all worktrees)", ws.cleanup, tasks)
        assert len(report.removed) == args.worktrees, report

        version = subprocess.run(
            ["git", "--version"], capture_output=True, text=True, check=True
        ).stdout.split()[-1]
        print(f"repository: {args.files} files, {args.worktrees} worktrees (git {version})")
        print(timer.table())
        ratio = timer.mean("worktree create") / timer.mean("cp -r of the same tree")
        print(
            f"\nworktree create / cp -r: {ratio:.2f}x "
            f"({timer.mean('worktree create') * 1000:.0f} ms vs "
            f"{timer.mean('cp -r of the same tree') * 1000:.0f} ms per tree)"
        )
        total = sum(sum(t) for t in timer.steps.values())
        print(f"total: {total:.1f} s")
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

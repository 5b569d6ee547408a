"""A run's own refs of the Ray backend, ``refs/lo-orch/cluster/<run>/<task>/...``, and
when they go.

Per task: ``head`` (the node's branch as last fetched), ``wip`` (the node's last
work-in-progress checkpoint), ``out`` (what was sent at the last launch) and ``applied``
(the tree lo-orch last put into the local worktree) are lo-orch's working copies: the run's
clean-up drops them, and so does the first supervisor of a new run of the same name (an
earlier run's ``wip`` would otherwise be applied to the new run's worktree as if it were a
checkpoint of its own). ``kept/<time>`` refs hold a person's edits that lo-orch saved
before a sync replaced them (``bundles.keep_edits``): they are never dropped, only listed.

Module API: ``prefix(run)``, ``listing(repo, run) -> {ref: sha}``, ``kept(repo, run)``,
``drop(repo, run, tasks=None) -> {ref: sha}`` (working refs only; ``tasks`` limits it).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from loop_orchestrator.git.gateway import git

ROOT = "refs/lo-orch/cluster"
#: the per-task refs that are lo-orch's working copies (never a person's work)
WORKING = ("head", "wip", "out", "applied")


def prefix(run: str) -> str:
    return f"{ROOT}/{run}/"


def listing(repo: Path, run: str) -> dict[str, str]:
    """Every ref under the run's prefix, ref -> commit."""
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", prefix(run)).stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        ref, _, sha = line.partition(" ")
        if ref and sha:
            found[ref] = sha
    return found


def _parts(ref: str, run: str) -> tuple[str, str]:
    """(task, the rest) of a ref under the run's prefix."""
    task, _, rest = ref[len(prefix(run)) :].partition("/")
    return task, rest


def kept(repo: Path, run: str) -> list[str]:
    """The run's ``kept/<time>`` refs (a person's saved edits), oldest first per task."""
    return sorted(r for r in listing(repo, run) if _parts(r, run)[1].startswith("kept/"))


def drop(repo: Path, run: str, tasks: Collection[str] | None = None) -> dict[str, str]:
    """Delete the run's working refs (of ``tasks``, or of every task); ref -> the commit it
    held (so a log can name what went). ``kept/`` refs stay."""
    gone: dict[str, str] = {}
    for ref, sha in listing(repo, run).items():
        task, rest = _parts(ref, run)
        if rest not in WORKING or (tasks is not None and task not in tasks):
            continue
        # only if it still holds what was listed (nothing moved it meanwhile)
        if git(repo, "update-ref", "-d", ref, sha, check=False).ok:
            gone[ref] = sha
    return gone

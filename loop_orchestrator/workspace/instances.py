"""Which instance of its name a new run is: folders and branches of its own beside what an
earlier run of the same name kept (docs/design.md section 3, "Run instances").

A run name is *held* while the repository still has something under it: a branch
``lo/<name>`` or ``lo/<name>/...``, a worktree registered below ``.worktrees/<name>/``, or a
folder ``.worktrees/<name>`` with anything in it; a numbered name is also held by a branch
``feat/<name>`` (its feature branch must be its own). A new run takes its plan's name when
that is free, else the first free one of ``<name>-2``, ``<name>-3``, ... (``candidates``).

The choice (``choose``) is a pure function of what the repository holds (``look``), made
once by `lo-orch plan`, which creates nothing of git's: it is recorded in run.json (``name``,
and the plan's name as ``plan_name``) and in the supervisor's record at Gate 1, and every
later command and a resumed supervisor read it from there. What holds an earlier name is
never touched; `lo-orch cleanup` lists it (``earlier``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from loop_orchestrator.cluster import refs as cluster_refs
from loop_orchestrator.errors import GitError
from loop_orchestrator.files import WORKTREES_DIR
from loop_orchestrator.git.gateway import git, quote_list
from loop_orchestrator.workspace.branches import list_worktrees
from loop_orchestrator.workspace.worktrees import dirty_paths

#: the longest run name (plan field ``name``, ``branches.RUN_RE``)
MAX_NAME = 40
#: numbered names tried before giving up (a name held this often is a repository to tidy)
MAX_INSTANCE = 99


@dataclass(frozen=True)
class Holdings:
    """What the repository holds that can hold a run name (``look`` reads it)."""

    #: every local branch (short names)
    branches: frozenset[str] = frozenset()
    #: names directly in ``.worktrees/`` that are a file, a link or a non-empty folder
    folders: frozenset[str] = frozenset()
    #: every registered worktree below ``.worktrees/``, relative to it (``demo/tokenize``)
    worktrees: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Choice:
    """The name a new run gets, and what holds each name it passed over (in order)."""

    run: str
    plan_name: str
    held: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def numbered(self) -> bool:
        return self.run != self.plan_name


def candidates(name: str) -> Iterator[str]:
    """``name``, then ``name-2`` ... ``name-99`` (``name`` shortened so each is a valid
    run name of at most 40 characters)."""
    yield name
    for n in range(2, MAX_INSTANCE + 1):
        suffix = f"-{n}"
        yield name[: MAX_NAME - len(suffix)].rstrip("-") + suffix


def held(name: str, holdings: Holdings, *, numbered: bool) -> tuple[str, ...]:
    """What holds the run name ``name`` (empty: a new run may take it)."""
    lo = f"lo/{name}"
    found = [f"branch {b}" for b in sorted(holdings.branches) if b == lo or b.startswith(lo + "/")]
    if numbered:
        feat = f"feat/{name}"
        found += [
            f"branch {b}"
            for b in sorted(holdings.branches)
            if b == feat or b.startswith(feat + "/")
        ]
    trees = sorted(w for w in holdings.worktrees if w.split("/", 1)[0] == name)
    found += [f"worktree {WORKTREES_DIR}/{w}" for w in trees]
    if name in holdings.folders and not trees:
        found.append(f"folder {WORKTREES_DIR}/{name}")
    return tuple(found)


def choose(name: str, holdings: Holdings) -> Choice:
    """The first free name of ``candidates(name)``; GitError when every one is held."""
    passed: dict[str, tuple[str, ...]] = {}
    for run in candidates(name):
        what = held(run, holdings, numbered=run != name)
        if not what:
            return Choice(run, name, passed)
        passed[run] = what
    last = list(passed)[-1]
    msg = (
        f"run name {name!r} and {len(passed) - 1} numbered names after it are held by what "
        f"earlier runs kept (up to {last}: {quote_list(list(passed[last]))})"
    )
    raise GitError(
        msg,
        hint="Choose another run name (plan `name:`), or once you have saved what you need "
        "from them, remove those worktrees (`git worktree remove PATH`) and rename or "
        "delete those branches yourself.",
    )


def notice(run: str, plan_name: str, feature_branch: str) -> str:
    """What Gate 1 says of a numbered instance."""
    return (
        f"A new instance of run {plan_name}: what earlier runs of that name kept is left as "
        f"it is, and this run has branches lo/{run}/..., worktrees {WORKTREES_DIR}/{run}/ "
        f"and the feature branch {feature_branch} of its own."
    )


def look(repo: Path) -> Holdings:
    """What ``repo`` holds now that can hold a run name."""
    out = git(repo, "for-each-ref", "--format=%(refname)", "refs/heads/").stdout
    branches = frozenset(
        line[len("refs/heads/") :] for line in out.splitlines() if line.startswith("refs/heads/")
    )
    root = repo / WORKTREES_DIR
    folders: set[str] = set()
    if root.is_dir():
        with os.scandir(root) as entries:
            for entry in entries:
                if not entry.is_dir(follow_symlinks=False) or _not_empty(Path(entry.path)):
                    folders.add(entry.name)
    trees: set[str] = set()
    for info in list_worktrees(repo):
        try:
            trees.add(info.path.resolve().relative_to(root.resolve()).as_posix())
        except ValueError:
            continue
    return Holdings(branches, frozenset(folders), frozenset(trees))


def _not_empty(folder: Path) -> bool:
    """Whether ``folder`` holds anything (one that cannot be read counts as holding)."""
    try:
        return any(folder.iterdir())
    except OSError:
        return True


def earlier(repo: Path, run: str, plan_name: str | None) -> dict[str, list[str]]:
    """What still holds each earlier name of the run ``run`` (a numbered instance of
    ``plan_name``), as `lo-orch cleanup` lists it: a worktree with its uncommitted paths,
    and the ``kept/`` cluster refs (a person's saved edits) under that name. Nothing is
    changed."""
    if not plan_name or plan_name == run:
        return {}
    holdings = look(repo)
    found: dict[str, list[str]] = {}
    for name in candidates(plan_name):
        if name == run:
            break
        items = []
        for item in held(name, holdings, numbered=name != plan_name):
            kind, _, where = item.partition(" ")
            if kind == "worktree":
                try:
                    dirty = dirty_paths(repo / where)
                except GitError:
                    dirty = []
                item += f" (uncommitted changes: {quote_list(dirty)})" if dirty else " (clean)"
            items.append(item)
        items += [f"ref {ref}" for ref in cluster_refs.kept(repo, name)]  # a person's edits
        if items:
            found[name] = items
    return found

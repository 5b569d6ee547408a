"""Git bundles between the supervisor and the nodes (no shared filesystem): what a node
receives to start a task, what it sends back, and work-in-progress commits.

Every git command goes through ``gitutil.git`` (no repository hook, no agent-named filter
or merge driver runs). A bundle from a node is agent-written evidence: ``import_bundle``
verifies it, stores its objects (``git bundle unbundle`` writes no ref), and sets only the
lo-orch refs its caller names, from the bundle's own heads that the caller asked for; every
other head the bundle carries (``refs/heads/lo/<run>/staging``, tags...) is ignored.

Module API: ``create(repo, refs, exclude) -> bytes`` (b"" when nothing is new),
``import_bundle(repo, data, wanted) -> dict[str, str]`` (lo-orch ref -> commit),
``heads(repo, data) -> dict[str, str]``, ``wip_commit(checkout, message) -> str`` (the whole
working tree as a commit on HEAD, the agent's index untouched), ``apply_tree(checkout,
commit)`` (the working tree becomes that commit's tree, the index stays at HEAD).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from loop_orchestrator.errors import GitError
from loop_orchestrator.git.gateway import git

#: the identity of work-in-progress commits (never merged: only their tree is used)
WIP_IDENTITY = {
    "GIT_AUTHOR_NAME": "lo-orch checkpoint",
    "GIT_AUTHOR_EMAIL": "lo-orch@localhost",
    "GIT_COMMITTER_NAME": "lo-orch checkpoint",
    "GIT_COMMITTER_EMAIL": "lo-orch@localhost",
}
_SHA = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")
_REF = re.compile(r"^refs/[A-Za-z0-9._/-]+$")


def _check_ref(ref: str) -> str:
    if not _REF.match(ref) or ".." in ref or ref.endswith((".lock", "/", ".")):
        msg = f"{ref!r} is not a ref name lo-orch uses"
        raise GitError(msg)
    return ref


def _has_commit(repo: Path, sha: str) -> bool:
    return (
        bool(_SHA.match(sha)) and git(repo, "cat-file", "-e", f"{sha}^{{commit}}", check=False).ok
    )


def create(repo: Path, refs: Sequence[str], exclude: Sequence[str] = ()) -> bytes:
    """A bundle of ``refs`` without what ``exclude`` (commits the receiver has) reaches;
    b"" when it would be empty. Excluded commits this repository lacks are left out of the
    list (the receiver then gets more, never less)."""
    wanted = [_check_ref(r) for r in refs]
    known = [sha for sha in dict.fromkeys(exclude) if _has_commit(repo, sha)]
    with tempfile.TemporaryDirectory(prefix="lo-bundle-") as tmp:
        out = Path(tmp) / "b.bundle"
        made = git(
            repo,
            "bundle",
            "create",
            "--quiet",
            str(out),
            *wanted,
            *(f"^{k}" for k in known),
            check=False,
        )
        if not made.ok:
            if "empty bundle" in made.stderr:
                return b""
            msg = f"git bundle create failed: {made.stderr.strip()[:300]}"
            raise GitError(msg)
        return out.read_bytes()


def heads(repo: Path, data: bytes) -> dict[str, str]:
    """ref -> commit of every head a bundle carries (after ``git bundle verify`` in ``repo``:
    its prerequisites must be there)."""
    with tempfile.TemporaryDirectory(prefix="lo-bundle-") as tmp:
        path = Path(tmp) / "in.bundle"
        path.write_bytes(data)
        return _verified_heads(repo, path)


def _verified_heads(repo: Path, path: Path) -> dict[str, str]:
    verify = git(repo, "bundle", "verify", "--quiet", str(path), check=False)
    if not verify.ok:
        msg = f"a bundle from a node does not verify: {verify.stderr.strip()[:300]}"
        raise GitError(msg, hint="The node's checkout may be damaged; the task is relaunched.")
    found: dict[str, str] = {}
    for line in git(repo, "bundle", "list-heads", str(path)).stdout.splitlines():
        sha, _, ref = line.partition(" ")
        if _SHA.match(sha) and ref:
            found.setdefault(ref, sha)
    return found


def import_bundle(repo: Path, data: bytes, wanted: Mapping[str, str]) -> dict[str, str]:
    """Store a node's bundle in ``repo`` and point lo-orch refs at the heads asked for.

    ``wanted`` maps a head of the bundle (``refs/heads/<task branch>``) to the lo-orch ref to
    set (``refs/lo-orch/...``); heads the bundle does not carry are skipped, heads nobody
    asked for change nothing. Returns lo-orch ref -> commit for the refs set.
    """
    targets = {_check_ref(src): _check_ref(dst) for src, dst in wanted.items()}
    if any(not dst.startswith("refs/lo-orch/") for dst in targets.values()):
        msg = "bundle heads are only ever stored under refs/lo-orch/"
        raise GitError(msg)
    with tempfile.TemporaryDirectory(prefix="lo-bundle-") as tmp:
        path = Path(tmp) / "in.bundle"
        path.write_bytes(data)
        found = _verified_heads(repo, path)
        git(repo, "bundle", "unbundle", str(path))
    updated: dict[str, str] = {}
    for src, dst in targets.items():
        sha = found.get(src)
        if sha is None or not _has_commit(repo, sha):
            continue
        git(repo, "update-ref", "-m", "lo-orch: from a node's bundle", dst, sha)
        updated[dst] = sha
    return updated


def wip_commit(checkout: Path, message: str = "lo-orch work in progress") -> str:
    """The whole working tree (committed, changed and untracked files; not ignored ones) as
    a commit whose parent is HEAD, built in a temporary index: the agent's index, branch and
    files are not touched."""
    with tempfile.TemporaryDirectory(prefix="lo-wip-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index"), **WIP_IDENTITY}
        git(checkout, "read-tree", "HEAD", env=env)
        git(checkout, "add", "--all", "--", ".", env=env)
        tree = git(checkout, "write-tree", env=env).stdout.strip()
        head = git(checkout, "rev-parse", "HEAD").stdout.strip()
        return git(checkout, "commit-tree", tree, "-p", head, "-m", message, env=env).stdout.strip()


def keep_edits(repo: Path, checkout: Path, since: str | None, ref: str) -> str | None:
    """Before lo-orch replaces ``checkout``'s files: if they differ from ``since`` (the commit
    whose tree lo-orch last put there; None: HEAD's), keep them as a commit at ``ref`` in
    ``repo`` and return it (None: nothing to keep). A person's edits in a task's local copy
    of a remote session are never lost to the next sync."""
    now = wip_commit(checkout, "lo-orch: files found in the local worktree before a sync")
    base = since or git(checkout, "rev-parse", "HEAD").stdout.strip()
    same = git(repo, "rev-parse", f"{now}^{{tree}}", f"{base}^{{tree}}").stdout.split()
    if len(same) == 2 and same[0] == same[1]:
        return None
    git(repo, "update-ref", "-m", "lo-orch: local edits kept before a sync", ref, now)
    return now


def apply_tree(checkout: Path, commit: str) -> None:
    """Make ``checkout``'s working tree that of ``commit`` (files it lacks that are neither
    tracked nor ignored are removed), keeping HEAD and leaving the index at HEAD."""
    if not _has_commit(checkout, commit):
        msg = f"{commit} is not a commit of {checkout}"
        raise GitError(msg)
    git(checkout, "clean", "-f", "-d", "--quiet")
    git(checkout, "read-tree", "-u", "--reset", f"{commit}^{{tree}}")
    git(checkout, "reset", "--quiet")


def safe_relpath(rel: str) -> str:
    """``rel`` if it is a plain relative path inside a folder (no ``..``, not absolute)."""
    parts = Path(rel).parts
    if not rel or Path(rel).is_absolute() or any(p in ("..", "") for p in parts) or "\0" in rel:
        msg = f"{rel!r} is not a relative path inside the checkout"
        raise GitError(msg)
    return rel

"""The local worktree of a remote task as a mirror of its node's: ``Mirror``, one
collaborator of ``RayBackend``.

``sync`` fetches the node's branch and whole working tree (a git bundle) and moves the
local worktree to them, so verification, integration and both gates run on this machine
unchanged; a local edit a person made meanwhile is kept under a ``kept/`` ref first.
Checkpoints are kept as ``refs/lo-orch/cluster/<run>/<task>/wip``; a relaunch starts from
the newer of that and the local worktree (``start_point``).
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any

from loop_orchestrator.cluster import bundles
from loop_orchestrator.cluster.actors import LAUNCH_TIMEOUT, ActorCalls
from loop_orchestrator.errors import GitError
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.git.gateway import git, is_ancestor

log = logging.getLogger(__name__)


class Mirror:
    """The local worktrees of a run's remote sessions, kept in step with their nodes."""

    def __init__(self, calls: ActorCalls) -> None:
        self.calls = calls
        self.repo = calls.repo
        self.run_name = calls.run_name

    def refs(self, task: str) -> tuple[str, str]:
        """The task's head and checkpoint refs (what its node sent last)."""
        base = f"refs/lo-orch/cluster/{self.run_name}/{task}"
        return f"{base}/head", f"{base}/wip"

    def applied_ref(self, task: str) -> str:
        """The commit whose tree lo-orch last put in the task's local worktree."""
        return f"refs/lo-orch/cluster/{self.run_name}/{task}/applied"

    def start_point(self, task: str, worktree: Path) -> None:
        """Bring the newest checkpoint into the worktree when it is newer than what the
        worktree holds (a relaunch after a lost node)."""
        _head_ref, wip_ref = self.refs(task)
        wip = git(
            self.repo, "rev-parse", "--verify", "--quiet", wip_ref, check=False
        ).stdout.strip()
        if not wip:
            return
        parent = git(self.repo, "rev-parse", f"{wip}^").stdout.strip()
        tip = git(worktree, "rev-parse", "HEAD").stdout.strip()
        if parent == tip or not is_ancestor(self.repo, parent, tip):
            self.apply(task, worktree, parent, wip)

    def apply(self, task: str, worktree: Path, head: str, wip: str) -> None:
        """Move the local worktree to the node's ``head`` commit and ``wip`` tree."""
        branch = f"refs/heads/lo/{self.run_name}/{task}"
        on = git(worktree, "symbolic-ref", "--quiet", "HEAD", check=False).stdout.strip()
        if on != branch:
            log.warning("worktree not on its branch; node work not applied", extra={"task": task})
            return
        # the local worktree mirrors the node's; a person may still have edited it: what
        # differs from what lo-orch last put there is kept before it is replaced
        applied_ref = self.applied_ref(task)
        applied = git(
            self.repo, "rev-parse", "--verify", "--quiet", applied_ref, check=False
        ).stdout.strip()
        kept_ref = f"refs/lo-orch/cluster/{self.run_name}/{task}/kept/{time.time_ns()}"
        if bundles.keep_edits(self.repo, worktree, applied or None, kept_ref):
            log.warning(
                "the local worktree of a remote task had edits: kept before the sync",
                extra={"task": task, "ref": kept_ref},
            )
        git(worktree, "reset", "--quiet", "--hard", head)
        bundles.apply_tree(worktree, wip)
        git(self.repo, "update-ref", applied_ref, wip)

    def sync(self, pane_id: str) -> tuple[str, str]:
        """Fetch the node's branch and working tree and move the local worktree to them."""
        calls = self.calls
        task, _ = calls.parse(pane_id)
        worktree = calls.rundir.worktree_path(self.run_name, task)
        started = time.monotonic()
        with calls.task_lock(task):
            known = git(worktree, "rev-parse", "HEAD").stdout.strip()
            got = calls.call(pane_id, "export", [known], timeout=LAUNCH_TIMEOUT)
            head, wip = self._import(task, got)
            self.apply(task, worktree, head, wip)
            plan = got.get("plan")
            if isinstance(plan, bytes):  # where a local session writes it (agent-writable)
                atomic_write_text(
                    calls.rundir.agent_plan_path(task), plan.decode("utf-8", errors="replace")
                )
        calls.call(pane_id, "acknowledge", [head])
        calls.stat(task, "sync_seconds", time.monotonic() - started)
        return head, wip

    def keep_checkpoint(self, task: str, got: dict[str, Any]) -> None:
        """Store a checkpoint the node sent (the worktree is not moved)."""
        with self.calls.task_lock(task):
            self._import(task, got)
        self.calls.stat(task, "checkpoint_bytes", float(len(got.get("bundle") or b"")))

    def _import(self, task: str, got: dict[str, Any]) -> tuple[str, str]:
        head_ref, wip_ref = self.refs(task)
        branch = f"refs/heads/lo/{self.run_name}/{task}"
        data = got.get("bundle") or b""
        head, wip = str(got.get("head", "")), str(got.get("wip", ""))
        if data:
            self.calls.stat(task, "bundle_bytes", float(len(data)))
            # only the task branch and the checkpoint ref, into lo-orch's own refs
            got_refs = bundles.import_bundle(
                self.repo, data, {branch: head_ref, "refs/lo-orch/wip": wip_ref}
            )
            head = got_refs.get(head_ref, head)
            wip = got_refs.get(wip_ref, wip)
        for sha in (head, wip):
            if (
                not re.fullmatch(r"[0-9a-f]{40}", sha)
                or not git(self.repo, "cat-file", "-e", f"{sha}^{{commit}}", check=False).ok
            ):
                msg = f"the node of task {task} sent no usable commit ({sha[:40]!r})"
                raise GitError(msg)
        git(self.repo, "update-ref", head_ref, head)
        git(self.repo, "update-ref", wip_ref, wip)
        return head, wip

"""Comments on the staged diff at Gate 2: which task wrote the lines, what they were, and
whether a review round changed them (docs/design.md section 11).

The git side of comments: the reviewed staging commit is read as lo-orch recorded it (never
a moved ref), ``git blame`` of it names the staging commit that last changed a line (a
straight line of lo-orch's own commits, each with its task in its trailer), and ``git diff
-U0`` says whether the line changed since. Where a comment goes is ``decide.route_comment``;
the record is ``runstate/comments.py``.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path

from loop_orchestrator.config import load_settings
from loop_orchestrator.errors import GateError, StateError
from loop_orchestrator.git import gateway as gitutil
from loop_orchestrator.plan.globs import path_matches
from loop_orchestrator.plan.model import Plan
from loop_orchestrator.runstate import comments as store
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.comments import (
    EXCERPT_CONTEXT,
    EXCERPT_LINE_CHARS,
    MAX_COMMENT_CHARS,
    SOURCES,
    ChangeRequest,
    Comment,
    Source,
)
from loop_orchestrator.runstate.journal import Record
from loop_orchestrator.runstate.state import Phase, RunPhase, Store, now_iso
from loop_orchestrator.sessions.guard import refuse_in_session
from loop_orchestrator.supervisor import decide
from loop_orchestrator.workspace import workspace
from loop_orchestrator.workspace.staging import TASK_TRAILER

_HUNK = re.compile(r"^@@ -(?P<start>[0-9]+)(?:,(?P<count>[0-9]+))? \+")


def _clean_path(path: str) -> str:
    rel = path.strip()
    while rel.startswith("./"):
        rel = rel[2:]
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\n" in rel:
        msg = f"{path!r} is not a path inside the repository"
        raise StateError(msg, hint="Give the path as the diff shows it, e.g. `src/app.py:12`.")
    return rel


@dataclass(frozen=True)
class _Reviewed:
    record: Record
    plan: Plan
    commit: str
    base: str


def _at_gate2(repo: Path, command: str) -> _Reviewed:
    refuse_in_session(command)
    rec, plan = runs.load_approved(repo)
    state = rec.run
    if state.phase != RunPhase.AWAITING_MERGE_REVIEW:
        msg = f"comments are made at Gate 2, and run {state.name} is {state.phase.value}"
        raise GateError(
            msg,
            hint="`lo-orch run` brings the run to Gate 2; `lo-orch status` shows where it is.",
        )
    ws = workspace.Workspace.for_run(repo, state, load_settings(repo).workspace)
    commit = ws.branches.recorded(ws.staging_branch)
    return _Reviewed(rec, plan, commit, ws.branches.base(state.base_sha))


def changed_by(repo: Path, commit: str, base: str, path: str, line: int) -> str | None:
    """The task whose staging commit last changed ``line`` of ``path`` in ``commit``
    (None: the line is the base's)."""
    res = gitutil.git(
        repo,
        "blame",
        "--porcelain",
        "-L",
        f"{line},{line}",
        gitutil.oid(repo, commit),
        "--",
        path,
        view=True,
        check=False,
    )
    if not res.ok or not res.stdout:
        return None
    sha = res.stdout.split(" ", 1)[0]
    if not re.fullmatch(r"[0-9a-f]{40}([0-9a-f]{24})?", sha) or gitutil.is_ancestor(
        repo, sha, base
    ):
        return None
    trailer = gitutil.git(
        repo,
        "log",
        "-1",
        f"--format=%(trailers:key={TASK_TRAILER},valueonly)",
        sha,
        view=True,
    ).stdout.strip()
    return trailer.splitlines()[0].strip() if trailer else None


def _excerpt(text: str, line: int) -> tuple[int, list[str]]:
    lines = text.splitlines()
    start = max(1, line - EXCERPT_CONTEXT)
    end = min(len(lines), line + EXCERPT_CONTEXT)
    return start, [s[:EXCERPT_LINE_CHARS] for s in lines[start - 1 : end]]


def record_comment(
    repo: Path,
    path: str | None,
    line: int | None,
    text: str,
    *,
    task: str | None = None,
    source: Source = "person",
) -> Comment:
    """Record a comment on the reviewed staging diff for the task it goes to."""
    if source not in SOURCES:
        msg = f"unknown comment source {source!r}"
        raise StateError(msg, hint=f"One of: {', '.join(SOURCES)}.")
    body = text.strip()
    if not body:
        msg = "the comment is empty"
        raise StateError(msg, hint='Say what should change, e.g. `lo-orch comment a.py:3 "..."`.')
    if len(body) > MAX_COMMENT_CHARS:
        msg = f"the comment has {len(body)} characters; at most {MAX_COMMENT_CHARS} are kept"
        raise StateError(msg, hint="Split it into several comments on the lines they concern.")
    if line is not None and path is None:
        msg = "a line needs a path"
        raise StateError(msg, hint="Give it as PATH:LINE.")
    if path is None and task is None:
        msg = "a comment needs a path or a task"
        raise StateError(msg, hint='`lo-orch comment PATH[:LINE] "..."` or `--task TASK "..."`.')
    reviewed = _at_gate2(repo, "lo-orch comment")
    rec, commit = reviewed.record, reviewed.commit
    where = path or ""
    owners: list[str] = []
    found: str | None = None
    excerpt_start: int | None = None
    excerpt: list[str] = []
    if path is not None:
        path = _clean_path(path)
        where = f"{path}:{line}" if line is not None else path
        content = gitutil.file_at(repo, commit, path)
        if content is None and gitutil.file_at(repo, reviewed.base, path) is None:
            msg = f"{path} is not a file of the reviewed staging commit {commit[:12]}"
            raise StateError(msg, hint="`lo-orch merge` shows the diff; use a path from it.")
        if line is not None:
            count = len((content or "").splitlines())
            if not 1 <= line <= count:
                msg = f"{path} has {count} line(s) in {commit[:12]}; there is no line {line}"
                raise StateError(msg, hint=f"Comment on the whole file: `{path}` without a line.")
            assert content is not None
            excerpt_start, excerpt = _excerpt(content, line)
            found = changed_by(repo, commit, reviewed.base, path, line)
        owners = [t.id for t in reviewed.plan.tasks if path_matches(path, t.owns)]
    tasks = {t.id for t in reviewed.plan.tasks}
    if task is not None and task not in tasks:
        msg = f"no task {task!r} in run {rec.run.name}"
        raise StateError(msg, hint="`lo-orch status` lists the tasks.")
    routed = decide.route_comment(
        where, owners=owners, changed_by=found if found in tasks else None, task=task
    )
    if isinstance(routed, decide.Unrouted):
        raise StateError(routed.message, hint=routed.hint)
    st = rec.task(routed.task)
    if st.phase != Phase.INTEGRATED:
        msg = f"{where or 'the comment'} goes to task {routed.task}, which is {st.phase.value}"
        raise StateError(
            msg,
            hint="Only integrated work is in the reviewed diff; a blocked task goes back "
            f"to work with `lo-orch retry {routed.task}`.",
        )
    comment = Comment(
        id=uuid.uuid4().hex[:12],
        task=routed.task,
        path=path,
        line=line,
        text=body,
        source=source,
        routed_by=routed.by,
        commit=commit,
        excerpt_start=excerpt_start,
        excerpt=excerpt,
        created_at=now_iso(),
    )
    store.append_comment(rec, comment)
    Store.for_repo(repo).append_ledger(
        "comment_recorded",
        id=comment.id,
        task=comment.task,
        path=path,
        line=line,
        routed_by=comment.routed_by,
        source=source,
        chars=len(body),
    )
    return comment


def request_changes(repo: Path) -> ChangeRequest:
    """Send every recorded comment back: the addressed tasks get a review round from the
    running supervisor (or the next `lo-orch run`); the run leaves Gate 2."""
    reviewed = _at_gate2(repo, "lo-orch request-changes")
    rec = reviewed.record
    unsent = store.of(rec).unsent()
    if not unsent:
        msg = "no comments to send back"
        raise StateError(
            msg, hint='Make one first: `lo-orch comment PATH[:LINE] "what should change"`.'
        )
    limit = load_settings(repo).run.max_review_rounds
    tasks = list(dict.fromkeys(c.task for c in unsent))
    for tid in tasks:
        st = rec.task(tid)
        step = decide.review_round(
            tid,
            phase=st.phase,
            rework_count=st.rework_count,
            review_rounds=st.review_rounds,
            limit=limit,
        )
        if isinstance(step, decide.Unrouted):
            raise StateError(step.message, hint=step.hint)
    request = ChangeRequest(
        id=uuid.uuid4().hex[:12],
        commit=reviewed.commit,
        comments=[c.id for c in unsent],
        tasks=tasks,
        task_commits={t: rec.task(t).commit or "" for t in tasks},
        created_at=now_iso(),
    )
    store.append_request(rec, request)
    rec.update_run(phase=RunPhase.RUNNING)
    Store.for_repo(repo).append_ledger(
        "changes_requested",
        id=request.id,
        comments=request.comments,
        tasks=tasks,
        commit=request.commit,
    )
    return request


@dataclass(frozen=True)
class Answer:
    """A comment of the last request as Gate 2 shows it again."""

    comment: Comment
    answered: bool


def hunks(repo: Path, old: str, new: str, path: str) -> list[tuple[int, int]]:
    """The old-side (start, count) of every hunk of ``path`` from ``old`` to ``new``."""
    out = gitutil.git(
        repo,
        "--literal-pathspecs",
        "diff",
        "-U0",
        "--no-renames",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        gitutil.oid(repo, old),
        gitutil.oid(repo, new),
        "--",
        path,
        view=True,
    ).stdout
    found: list[tuple[int, int]] = []
    for text in out.splitlines():
        m = _HUNK.match(text)
        if m is not None:
            found.append((int(m["start"]), int(m["count"] if m["count"] is not None else 1)))
    return found


def answers(repo: Path, record: Record, commit: str) -> tuple[str | None, list[Answer]]:
    """The staging commit the last changes were requested on and each comment of that
    request, answered (its lines changed up to ``commit``) or not; (None, []) before any
    request."""
    state = store.of(record)
    last = state.last_request()
    if last is None:
        return None, []
    found: list[Answer] = []
    for c in state.of_request(last.id):
        if c.path is None:
            done = record.task(c.task).commit != last.task_commits.get(c.task)
        else:
            done = decide.answered(c.line, hunks(repo, c.commit, commit, c.path))
        found.append(Answer(c, done))
    return last.commit, found

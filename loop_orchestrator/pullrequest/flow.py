"""``lo-orch pr``'s effects: push the reviewed commit, open or reuse the pull request,
follow its checks and comments, answer the threads a round took up. Each decision is
``decide``'s; this module only reads, asks and carries out (docs/design.md section 12).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from loop_orchestrator import proc
from loop_orchestrator.config import Settings, load_settings
from loop_orchestrator.cost import usage
from loop_orchestrator.errors import GateError, LoOrchError, PullRequestError
from loop_orchestrator.git import gateway
from loop_orchestrator.intake.http import TrackerHttpError
from loop_orchestrator.plan.globs import path_matches
from loop_orchestrator.plan.model import Plan, plan_hash
from loop_orchestrator.pullrequest import decide
from loop_orchestrator.pullrequest import record as prrecord
from loop_orchestrator.pullrequest.decide import Feedback, PushAction, Target, TaskReport
from loop_orchestrator.pullrequest.github import GitHub
from loop_orchestrator.pullrequest.record import PrRecord, RoutedItem
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.comments import MAX_COMMENT_CHARS, Source
from loop_orchestrator.runstate.journal import Record
from loop_orchestrator.runstate.state import RunDir, RunPhase, RunState, Store
from loop_orchestrator.supervisor.decide import Routed as CommentRouted
from loop_orchestrator.supervisor.decide import Unrouted, review_round, route_comment
from loop_orchestrator.supervisor.decide import answered as review_answered
from loop_orchestrator.verify.verdict import load_verdict
from loop_orchestrator.workspace import comments as commenting
from loop_orchestrator.workspace import integration

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Opened:
    """What ``lo-orch pr`` did."""

    remote: str
    branch: str
    base: str
    commit: str
    pushed: PushAction
    number: int
    url: str
    reused: bool
    #: commits on the local feature branch beyond the reviewed one (not pushed)
    unreviewed: int = 0
    answered: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Followed:
    """What one follow of the pull request found and where it went."""

    number: int
    commit: str
    pending: int
    tasks: dict[str, list[str]] = field(default_factory=dict)  # task -> feedback ids
    person: list[RoutedItem] = field(default_factory=list)
    items: list[RoutedItem] = field(default_factory=list)  # the new ones, routed
    #: the tasks a review round was requested for (the run is back before Gate 2)
    rounds: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """What the follow found, for a person: one line per task and per item of theirs."""
        out = [f"pull request #{self.number} at {self.commit[:12]}:"]
        if self.pending:
            out.append(f"{self.pending} check(s) still running when the follow stopped.")
        out += [f"to task {task}: {', '.join(ids)}" for task, ids in self.tasks.items()]
        for item in self.person:
            first = (item.text.splitlines() or [""])[0][:200]
            why = (
                "by someone who may not push to the repository, so never sent to a session"
                if item.outside
                else "no task owns it"
            )
            out.append(f"for you ({why}): {item.title}: {first}")
        if self.rounds:
            out.append(
                f"review round requested for {', '.join(self.rounds)}: `lo-orch run` takes "
                "it; then Gate 2 (`lo-orch merge`) and `lo-orch pr` push it and answer."
            )
        if not self.items:
            out.append("nothing new on the pull request.")
        return out


def gh_hosts_text(env: Mapping[str, str]) -> str | None:
    """The ``gh`` CLI's ``hosts.yml`` (where its stored tokens are), or None."""
    if env.get("GH_CONFIG_DIR"):
        folder = Path(env["GH_CONFIG_DIR"])
    elif env.get("XDG_CONFIG_HOME"):
        folder = Path(env["XDG_CONFIG_HOME"]) / "gh"
    else:
        folder = Path(env.get("HOME") or Path.home()) / ".config" / "gh"
    try:
        return (folder / "hosts.yml").read_text(encoding="utf-8")
    except OSError:
        return None


def gh_auth_token(host: str, env: Mapping[str, str]) -> str | None:
    """``gh auth token --hostname HOST``: the token ``gh`` keeps in the system keyring
    (newer ``gh`` versions store it there, not in ``hosts.yml``); None without ``gh``."""
    exe = shutil.which("gh", path=env.get("PATH"))
    if exe is None:
        return None
    res = proc.run(
        [exe, "auth", "token", "--hostname", host],
        env={**env, "GH_PROMPT_DISABLED": "1", "NO_COLOR": "1"},
        timeout=15,
        check=False,
    )
    value = res.stdout.strip()
    return value if res.ok and value and len(value.split()) == 1 else None


def has_pull_request(repo: Path) -> bool:
    """Whether the repository's current run passed Gate 2 and ``lo-orch pr`` opened its
    pull request (what ``lo-orch run`` then follows)."""
    try:
        state = runs.open_record(repo).run
    except LoOrchError:
        return False
    if state.phase != RunPhase.MERGED:
        return False
    return prrecord.load(repo, state.name).number is not None


def merged_run(repo: Path) -> tuple[Record, RunState, str]:
    """The current run, which Gate 2 must have merged, and its reviewed commit."""
    rec = runs.open_record(repo)
    state = rec.run
    if state.phase != RunPhase.MERGED or not state.merged_commit:
        msg = f"run {state.name!r} has not passed Gate 2 yet (it is {state.phase.value})"
        raise GateError(
            msg,
            hint="A pull request holds only reviewed work: `lo-orch run` to Gate 2, "
            "`lo-orch merge` to review it, then `lo-orch pr`.",
        )
    return rec, state, state.merged_commit


def _plan(repo: Path, state: RunState) -> Plan:
    plan, _ = runs.read_plan(RunDir(repo))
    if plan_hash(plan) != state.plan_sha256:
        msg = "the recorded plan changed since the run was planned (its sha256 differs)"
        raise GateError(msg, hint="Restore .orchestration/plan.json; lo-orch reads no other.")
    return plan


def _reports(repo: Path, rec: Record, plan: Plan) -> list[TaskReport]:
    rundir = RunDir(repo)
    out = []
    for tid, st in rec.tasks().items():
        if tid in rec.run.skipped_tasks:
            continue
        verdict = load_verdict(rundir, tid, st.commit) if st.commit else None
        if verdict is not None and not rec.verdict_matches(
            tid, str(st.commit), verdict.model_dump_json()
        ):
            verdict = None  # a file the record does not hold is not its word
        title = next((t.title for t in plan.tasks if t.id == tid), "")
        out.append(
            TaskReport(
                task=tid,
                title=title,
                commit=st.commit,
                passed=None if verdict is None else verdict.passed,
                blocking=len(verdict.blocking) if verdict else 0,
                warnings=len(verdict.warnings) if verdict else 0,
                checks_passed=sum(
                    1 for c in (verdict.checks if verdict else []) if c.passed and c.criterion
                ),
                checks_run=sum(1 for c in (verdict.checks if verdict else []) if c.criterion),
                # a review round takes a round number too, but is not a verification rework
                rework_rounds=max(0, st.rework_count - st.review_rounds),
                review_rounds=st.review_rounds,
            )
        )
    return out


def _costs(repo: Path, rec: Record, settings: Settings) -> list[str]:
    return usage.summary_lines(
        {t: st.usage for t, st in rec.tasks().items()},
        usage.headless_lines(
            RunDir(repo).evidence_dir, Store.for_repo(repo).read_ledger(), settings.auditor.llm
        ),
    )


@dataclass(frozen=True)
class Connection:
    target: Target
    api: GitHub
    url: str  # the remote's push URL
    token: str


def connect(
    repo: Path,
    remote: str,
    settings: Settings,
    env: Mapping[str, str],
    clock: Callable[[], float],
) -> Connection:
    """The remote, the repository on GitHub and a client with its token; nothing pushed."""
    url = gateway.remote_url(repo, remote)
    if url is None:
        msg = f"no remote named {remote!r} in {repo}; nothing was pushed"
        raise PullRequestError(
            msg,
            hint="Add the GitHub repository as a remote (`git remote add origin "
            "git@github.com:OWNER/NAME.git`) or name one with `lo-orch pr --remote NAME` "
            "(`git remote -v` lists them).",
        )
    tgt = decide.target(remote, url, settings.pr.repo, env, settings.intake.github.hosts)
    tok = decide.token(env, tgt, gh_hosts_text(env)) or gh_auth_token(tgt.host, env)
    if tok is None:
        raise decide.no_token_error(tgt)
    return Connection(tgt, GitHub(tgt, tok, clock=clock), url, tok)


def _remote_sha(repo: Path, remote: str, branch: str, env: Mapping[str, str]) -> str | None:
    res = gateway.remote_head(repo, remote, branch, env=env)
    if not res.ok:
        raise decide.push_refused(remote, branch, res.stderr or res.stdout)
    for line in res.stdout.splitlines():
        sha, _, ref = line.partition("\t")
        if ref.strip() == f"refs/heads/{branch}":
            return sha.strip()
    return None


def _has_commit(repo: Path, sha: str) -> bool:
    res = gateway.git(repo, "cat-file", "-e", f"{sha}^{{commit}}", check=False, view=True)
    return res.ok


def _unreviewed(repo: Path, branch: str, reviewed: str) -> int:
    res = gateway.git(
        repo, "rev-list", "--count", f"{reviewed}..refs/heads/{branch}", "--", check=False
    )
    return int(res.stdout.strip()) if res.ok and res.stdout.strip().isdigit() else 0


def open_pr(
    repo: Path,
    *,
    remote: str | None = None,
    base: str | None = None,
    draft: bool = False,
    env: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.time,
) -> Opened:
    """Push the reviewed commit (a fast-forward at most) and open or reuse its pull request."""
    env = dict(os.environ if env is None else env)
    rec, state, reviewed = merged_run(repo)
    settings = load_settings(repo)
    remote = remote or settings.pr.remote
    conn = connect(repo, remote, settings, env, clock)
    store = Store.for_repo(repo)
    branch = state.feature_branch
    run_plan = _plan(repo, state)
    # everything the pull request says is known before anything is pushed
    body = decide.pr_body(
        goal=run_plan.goal,
        run=state.name,
        tasks=_reports(repo, rec, run_plan),
        skipped=state.skipped_tasks,
        costs=_costs(repo, rec, settings),
        reviewed=reviewed,
        base=state.base_sha,
    )
    try:
        info = conn.api.repo()  # the token and the repository checked before any push
    except (PullRequestError, TrackerHttpError) as exc:
        raise _unreached(exc, "nothing was pushed") from exc
    base_branch = base or str(info.get("default_branch") or "") or state.base_ref
    push_env = decide.push_env(conn.url, conn.target, conn.token)
    remote_sha = _remote_sha(repo, remote, branch, push_env)
    plan = decide.push_plan(
        remote=remote,
        feature=branch,
        base=base_branch,
        reviewed=reviewed,
        remote_sha=remote_sha,
        remote_is_ancestor=remote_sha is not None
        and _has_commit(repo, remote_sha)
        and gateway.is_ancestor(repo, remote_sha, reviewed),
    )
    prec = prrecord.load(repo, state.name)
    if plan.action != "up_to_date":
        res = gateway.push(repo, remote, plan.refspec, env=push_env)
        if not res.ok:
            raise decide.push_refused(remote, branch, res.stderr or res.stdout)
        store.append_ledger(
            "pr_pushed", remote=remote, branch=branch, commit=reviewed, before=plan.before
        )
    prec = prec.model_copy(
        update={
            "remote": remote,
            "repo": conn.target.full,
            "api": conn.target.api,
            "branch": branch,
            "base": base_branch,
            "pushed": reviewed,
        }
    )
    prrecord.save(repo, state.name, prec)
    pushed_words = (
        f"{remote}/{branch} was already at {reviewed[:12]}"
        if plan.action == "up_to_date"
        else f"pushed {reviewed[:12]} to {remote}/{branch}"
    )
    try:
        found = conn.api.open_pull(branch)
        if found is not None:
            pull = conn.api.update_pull(int(found["number"]), body) or found
        else:
            pull = conn.api.create_pull(
                branch=branch,
                base=base_branch,
                title=_title(run_plan.goal),
                body=body,
                draft=draft,
            )
        number = int(pull["number"])
        answered = _answer_threads(repo, conn.api, prec, number, reviewed, run_plan, state)
    except (PullRequestError, TrackerHttpError) as exc:
        raise _half_done(exc, pushed_words) from exc
    except (KeyError, TypeError, ValueError) as exc:
        err = PullRequestError(f"GitHub answered without a pull request number ({exc})")
        raise _half_done(err, pushed_words) from exc
    prec = prrecord.load(repo, state.name).model_copy(
        update={"number": number, "url": str(pull.get("html_url") or "")}
    )
    prrecord.save(repo, state.name, prec)
    store.append_ledger("pr_opened", number=number, url=prec.url, reused=found is not None)
    return Opened(
        remote=remote,
        branch=branch,
        base=base_branch,
        commit=reviewed,
        pushed=plan.action,
        number=number,
        url=prec.url,
        reused=found is not None,
        unreviewed=_unreviewed(repo, branch, reviewed),
        answered=answered,
    )


def _title(goal: str) -> str:
    first = " ".join(goal.split())
    return first if len(first) <= 72 else first[:69] + "..."


def _unreached(exc: LoOrchError, done: str) -> PullRequestError:
    """``exc`` saying what was not done (its reset time kept)."""
    err = PullRequestError(f"{exc.message}; {done}", hint=exc.hint)
    err.reset_at = exc.reset_at if isinstance(exc, PullRequestError) else None
    return err


def _half_done(exc: LoOrchError, pushed: str) -> PullRequestError:
    """An API failure after the push: say the push happened and that the next run goes on."""
    return PullRequestError(
        f"{pushed}, but the pull request was not opened or updated: {exc.message}",
        hint=(exc.hint + "\n" if exc.hint else "")
        + "Then run `lo-orch pr` again: the push is not repeated, the pull request is "
        "opened (or the open one reused).",
    )


def _answer_threads(
    repo: Path,
    api: GitHub,
    prec: PrRecord,
    number: int,
    reviewed: str,
    plan: Plan,
    state: RunState,
) -> list[str]:
    """Answer each routed thread whose lines changed between the commit it was about and
    the reviewed one now pushed; each once (a failure midway leaves the rest for the next
    ``lo-orch pr``)."""
    tasks = {t.id for t in plan.tasks}
    done: list[str] = []
    routed = list(prec.routed)
    for i, item in enumerate(routed):
        if item.answered or item.task not in tasks or not item.commit or item.id in done:
            continue
        if item.commit == reviewed or not gateway.is_ancestor(repo, item.commit, reviewed):
            continue
        changed = {c.path for c in gateway.changed_paths(repo, item.commit, reviewed)}
        # answered as Gate 2 judges a comment answered: the lines it points at changed
        files = [
            p
            for p, line in item.paths
            if p in changed
            and review_answered(line, commenting.hunks(repo, item.commit, reviewed, p))
        ]
        if not files:
            continue  # the round has not changed its lines: nothing to answer yet
        assert item.task is not None
        text = decide.answer(task=item.task, commit=reviewed, files=files)
        if item.kind == "review_comment" and item.reply_to is not None:
            made = api.reply(number, item.reply_to, text)
        else:
            quoted = " ".join(item.text.split())[:300]
            made = api.comment(number, f"{text}\n\n> {item.title}: {quoted}")
        done.append(item.id)
        routed[i] = item.model_copy(update={"answered": reviewed})
        own = [*prec.own, made] if made is not None else prec.own
        # saved after each answer: a failure midway never answers a thread twice
        prec = prec.model_copy(update={"routed": list(routed), "own": own})
        prrecord.save(repo, state.name, prec)
    return done


# following --------------------------------------------------------------------------------


def read_feedback(
    api: GitHub, prec: PrRecord, number: int, sha: str
) -> tuple[list[Feedback], int, dict[str, str]]:
    """Failed checks and statuses of ``sha`` and the pull request's comments, every page
    of each; how many checks are still running; the last answer's headers (for the rate
    limit)."""
    full = api.tgt.full
    every = {"per_page": 100}
    check_runs, _ = api.pages(
        api.url(f"/repos/{full}/commits/{sha}/check-runs", every),
        what="reading check runs",
        key="check_runs",
        kept=prec,
    )
    statuses, _ = api.pages(
        api.url(f"/repos/{full}/commits/{sha}/status", every),
        what="reading commit statuses",
        key="statuses",
        kept=prec,
    )
    reviews, _ = api.pages(
        api.url(f"/repos/{full}/pulls/{number}/comments", every),
        what="reading review comments",
        kept=prec,
    )
    conversation, headers = api.pages(
        api.url(f"/repos/{full}/issues/{number}/comments", every),
        what="reading comments",
        kept=prec,
    )
    items: list[Feedback] = []
    for run in check_runs:
        if decide.check_run_feedback(run, []) is None:
            continue
        ann, _ = api.pages(
            api.url(f"/repos/{full}/check-runs/{run.get('id')}/annotations", every),
            what=f"reading the annotations of check {decide.plain(str(run.get('name')))}",
            kept=prec,
        )
        fb = decide.check_run_feedback(run, ann)
        if fb is not None:
            items.append(fb)
    items += [fb for s in statuses if (fb := decide.status_feedback(s)) is not None]
    own = set(prec.own)
    items += [fb for c in reviews if (fb := decide.review_comment_feedback(c, own)) is not None]
    items += [fb for c in conversation if (fb := decide.issue_comment_feedback(c, own)) is not None]
    return items, decide.pending_checks(check_runs, statuses), headers


def _owner(repo: Path, plan: Plan, state: RunState, commit: str) -> decide.Owner:
    """Gate 2's routing of a comment (``supervisor/decide.route_comment``) for a place on
    the pushed commit: the one task owning the path, else the task whose integrated commit
    last changed the line (``git blame``); None (the person's) when neither settles it."""
    tasks = {t.id for t in plan.tasks}

    def owner(path: str, line: int | None) -> str | None:
        owners = [t.id for t in plan.tasks if path_matches(path, t.owns)]
        found = None
        if line is not None and gateway.file_at(repo, commit, path) is not None:
            found = commenting.changed_by(repo, commit, state.base_sha, path, line)
        where = f"{path}:{line}" if line is not None else path
        routed = route_comment(where, owners=owners, changed_by=found if found in tasks else None)
        return routed.task if isinstance(routed, CommentRouted) else None

    return owner


def follow(
    repo: Path,
    *,
    env: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    timeout: float | None = None,
    interval: float | None = None,
) -> Followed:
    """Read the pull request until no check runs, route what it says to the owning tasks
    (or the person), and record it; routed once each."""
    env = dict(os.environ if env is None else env)
    rec = runs.open_record(repo)
    prec = prrecord.load(repo, rec.run.name)
    if rec.run.phase == RunPhase.AWAITING_MERGE_REVIEW and _unsent(prec) and prec.number:
        # an earlier follow reopened the run and stopped before every comment was sent
        sent = _request_rounds(repo, prec)
        return Followed(prec.number, prec.pushed or "", 0, tasks=sent, rounds=sorted(sent))
    _, state, _ = merged_run(repo)
    settings = load_settings(repo)
    if prec.number is None or not prec.pushed:
        msg = f"run {state.name!r} has no pull request yet"
        raise PullRequestError(msg, hint="Open it with `lo-orch pr`.")
    conn = connect(repo, prec.remote or settings.pr.remote, settings, env, clock)
    wait = settings.pr.follow_timeout if timeout is None else timeout
    every = settings.pr.follow_interval if interval is None else interval
    deadline = clock() + wait
    while True:
        try:
            items, pending, headers = read_feedback(conn.api, prec, prec.number, prec.pushed)
        except (PullRequestError, TrackerHttpError) as exc:
            raise _unreached(exc, "nothing was routed") from exc
        if pending == 0 or clock() >= deadline:
            break
        delay = decide.poll_delay(headers, every, clock())
        if clock() + delay > deadline:
            break
        prrecord.save(repo, state.name, prec)  # the ETags, so a restart costs no limit
        sleep(delay)
    owner = _owner(repo, _plan(repo, state), state, prec.pushed)
    routed = decide.route(items, owner, [r.id for r in prec.routed])
    new: list[RoutedItem] = []
    store = Store.for_repo(repo)
    for task, fbs in [*routed.tasks.items(), (None, routed.person)]:
        for fb in fbs:
            item = RoutedItem(
                id=fb.id,
                kind=fb.kind,
                task=task,
                title=fb.title,
                text=fb.text,
                paths=list(fb.paths),
                hunk=fb.hunk,
                url=fb.url,
                reply_to=fb.reply_to,
                commit=prec.pushed,
                outside=fb.outside,
            )
            new.append(item)
            first = fb.paths[0] if fb.paths else (None, None)
            store.append_ledger(
                "pr_feedback", kind=fb.kind, id=fb.id, task=task, path=first[0], line=first[1]
            )
    prec.routed += new
    prrecord.save(repo, state.name, prec)  # kept before the rounds: a failure resumes
    sent = _request_rounds(repo, prec) if _unsent(prec) else {}
    return Followed(
        number=prec.number,
        commit=prec.pushed,
        pending=pending,
        tasks=sent or {t: [f.id for f in fbs] for t, fbs in routed.tasks.items()},
        person=[i for i in new if i.task is None],
        items=new,
        rounds=sorted(sent),
    )


def _place(repo: Path, commit: str, item: RoutedItem) -> tuple[str | None, int | None]:
    """Where a routed item's comment points on ``commit``: its first file there, and its
    line when the file has it (a check may name a line its file does not hold)."""
    for path, line in item.paths:
        content = gateway.file_at(repo, commit, path)
        if content is None:
            continue
        ok = line is not None and 1 <= line <= len(content.splitlines())
        return path, line if ok else None
    return None, None


def comment_text(item: RoutedItem) -> str:
    """The words a task gets for one item, as a Gate 2 comment carries them (bounded)."""
    if item.kind in ("check_run", "status"):
        head = f"The GitHub check `{item.title}` failed on the pull request:"
    else:
        head = f"A review comment by {item.title} on the pull request:"
    text = f"{head}\n{item.text}"
    if item.hunk:
        text += f"\n\nOn this part of the diff:\n{item.hunk}"
    return text[:MAX_COMMENT_CHARS]


def _unsent(prec: PrRecord) -> list[RoutedItem]:
    return [i for i in prec.routed if i.task is not None and not i.sent]


def _request_rounds(repo: Path, prec: PrRecord) -> dict[str, list[str]]:
    """Reopen the merged run, record each unsent item as a Gate 2 comment of its task and
    request the review rounds (``workspace/comments.py``); task -> the items sent.
    Resumable: each item is marked sent once recorded, and a run already reopened is not
    reopened again."""
    items = _unsent(prec)
    tasks = sorted({str(i.task) for i in items})
    rec = runs.open_record(repo)
    limit = load_settings(repo).run.max_review_rounds
    for tid in tasks:  # refused before anything is reopened; the items wait, unsent
        st = rec.task(tid)
        step = review_round(
            tid,
            phase=st.phase,
            rework_count=st.rework_count,
            review_rounds=st.review_rounds,
            limit=limit,
        )
        if isinstance(step, Unrouted):
            msg = f"{step.message}; the pull request's feedback for it was not sent"
            raise PullRequestError(
                msg, hint=step.hint + " Then `lo-orch pr --follow` sends it (it is kept)."
            )
    if rec.run.phase == RunPhase.MERGED:
        integration.reopen(repo, tasks)
    for item in items:
        path, line = _place(repo, item.commit or str(prec.pushed), item)
        source: Source = "github-check" if item.kind in ("check_run", "status") else "github-review"
        commenting.record_comment(
            repo, path, line, comment_text(item), task=item.task, source=source
        )
        prec.routed = [r.model_copy(update={"sent": True}) if r is item else r for r in prec.routed]
        prrecord.save(repo, rec.run.name, prec)
    commenting.request_changes(repo)
    sent: dict[str, list[str]] = {}
    for item in items:
        sent.setdefault(str(item.task), []).append(item.id)
    return sent

"""What ``lo-orch pr`` decides, pure: where the pull request lives, whether and what to
push, what GitHub's answers mean, the body, where each piece of feedback goes, the answers.

No I/O and no clock of its own (``now`` is passed in); the effects (git push, HTTP) are in
``pullrequest/flow.py`` and ``pullrequest/github.py`` (docs/design.md section 12).
"""

from __future__ import annotations

import base64
import re
import urllib.parse
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import yaml

from loop_orchestrator.errors import PullRequestError
from loop_orchestrator.intake.http import encrypted_or_local
from loop_orchestrator.plan.globs import path_matches

DEFAULT_API = "https://api.github.com"
TOKEN_HINT = (
    "Set GITHUB_TOKEN (a token that may push and open pull requests: `repo` scope, or "
    "fine-grained with Contents and Pull requests read-write), or log in with `gh auth login`."
)
ENTERPRISE_TOKEN_HINT = (
    "Set GH_ENTERPRISE_TOKEN (or GITHUB_ENTERPRISE_TOKEN) for {host}, or log in with "
    "`gh auth login --hostname {host}`."
)
#: most characters of a check's output or a comment kept for the task (GitHub allows 65535)
MAX_TEXT = 4000
#: GitHub's limit on a pull request body
MAX_BODY = 65000


# where ----------------------------------------------------------------------------------

_SCP = re.compile(r"^(?:[\w.-]+@)?(?P<host>[\w.-]+):(?P<path>[^/].*)$")
_URL = re.compile(r"^(?:ssh|https?|git)://(?:[^@/]+@)?(?P<host>[\w.-]+)(?::\d+)?/(?P<path>.+)$")


@dataclass(frozen=True)
class Slug:
    """A GitHub repository as a remote URL names it."""

    host: str  # lower case, "github.com"
    owner: str
    name: str

    @property
    def full(self) -> str:
        return f"{self.owner}/{self.name}"


def parse_remote_url(url: str) -> Slug | None:
    """``owner/name`` and host of a GitHub remote URL; None for a path or anything else."""
    url = url.strip()
    m = _URL.match(url) or (None if "://" in url else _SCP.match(url))
    if m is None:
        return None
    parts = [p for p in m["path"].strip("/").split("/") if p]
    if len(parts) != 2:
        return None
    owner, name = parts[0], parts[1].removesuffix(".git")
    if not _NAME.match(owner) or not _NAME.match(name):
        return None
    return Slug(m["host"].lower(), owner, name)


_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}\Z")
#: the user part of a URL (``https://TOKEN@github.com/``, ``https://user:pass@host/``)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")


def redact(text: str) -> str:
    """``text`` with the credentials of every URL in it replaced by ``***``: a remote URL
    may carry a token (``https://TOKEN@github.com/o/n.git``), and git repeats it."""
    return _USERINFO.sub(r"\1***@", text)


def parse_slug(text: str) -> tuple[str, str]:
    """``[pr] repo`` as (owner, name); ``PullRequestError`` when it is not ``owner/name``."""
    owner, _, name = text.strip().partition("/")
    if not _NAME.match(owner) or not _NAME.match(name):
        msg = f"[pr] repo = {text!r} is not a GitHub repository name (owner/name)"
        raise PullRequestError(msg, hint="Write it as `owner/name`, e.g. `octo/widgets`.")
    return owner, name


@dataclass(frozen=True)
class Target:
    """The repository, the API and how its token is looked for."""

    owner: str
    name: str
    api: str  # no trailing slash
    host: str  # the web host the token belongs to ("github.com", "ghe.example.com")
    enterprise: bool

    @property
    def full(self) -> str:
        return f"{self.owner}/{self.name}"


def target(
    remote: str,
    url: str,
    configured: str,
    env: Mapping[str, str],
    enterprise_hosts: Sequence[str] = (),
) -> Target:
    """Where the pull request is opened: ``[pr] repo`` or the remote's URL, and the API: a
    host other than github.com only when ``[intake.github] hosts`` names it (GitHub
    Enterprise Server), so no token is ever sent to a host nobody said is GitHub."""
    slug = parse_remote_url(url)
    if configured:
        owner, name = parse_slug(configured)
    elif slug is not None:
        owner, name = slug.owner, slug.name
    else:
        msg = f"remote {remote!r} ({redact(url)}) does not name a GitHub repository"
        raise PullRequestError(
            msg,
            hint="Point the remote at GitHub (`git remote set-url "
            f"{remote} git@github.com:OWNER/NAME.git`) or name the repository in "
            '`.loop-orchestrator/config.toml`: [pr] repo = "OWNER/NAME".',
        )
    host = slug.host if slug is not None else "github.com"
    explicit = (env.get("GITHUB_API_URL") or "").strip().rstrip("/")
    if explicit:
        return Target(owner, name, api_url(explicit), host, enterprise=host != "github.com")
    if host in ("github.com", "www.github.com"):
        return Target(owner, name, DEFAULT_API, "github.com", enterprise=False)
    if host in {h.strip().lower().removeprefix("https://").strip("/") for h in enterprise_hosts}:
        return Target(owner, name, f"https://{host}/api/v3", host, enterprise=True)
    msg = f"remote {remote!r} is on {host}, which is not github.com nor a GitHub Enterprise host"
    raise PullRequestError(
        msg + "; nothing was pushed",
        hint="If it is a GitHub Enterprise Server, name it in "
        f'`.loop-orchestrator/config.toml`: [intake.github] hosts = ["{host}"]; or set '
        "GITHUB_API_URL to its API.",
    )


def api_url(explicit: str) -> str:
    """``GITHUB_API_URL`` as given, refused unless it is https (plain http only to this
    machine: the token must never cross a network unencrypted)."""
    if encrypted_or_local(explicit):
        return explicit
    msg = (
        f"GITHUB_API_URL={redact(explicit)!r} is not an https URL: the token would travel "
        "unencrypted; nothing was pushed"
    )
    raise PullRequestError(
        msg,
        hint="Set it to the API's https URL (`https://api.github.com`, or "
        "`https://HOST/api/v3` for GitHub Enterprise Server), or unset it.",
    )


def token(env: Mapping[str, str], tgt: Target, gh_hosts: str | None) -> str | None:
    """The token for ``tgt``: the environment as intake reads it, else ``gh``'s stored one."""
    names = (
        ("GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN")
        if tgt.enterprise
        else ("GITHUB_TOKEN", "GH_TOKEN")
    )
    for name in names:
        value = (env.get(name) or "").strip()
        if value:
            return value
    if not gh_hosts:
        return None
    try:
        data = yaml.safe_load(gh_hosts)
    except yaml.YAMLError:
        return None
    entry = data.get(tgt.host) if isinstance(data, dict) else None
    stored = entry.get("oauth_token") if isinstance(entry, dict) else None
    return stored.strip() if isinstance(stored, str) and stored.strip() else None


def no_token_error(tgt: Target) -> PullRequestError:
    hint = ENTERPRISE_TOKEN_HINT.format(host=tgt.host) if tgt.enterprise else TOKEN_HINT
    msg = f"no GitHub token for {tgt.host}: a pull request cannot be opened without one"
    return PullRequestError(msg + "; nothing was pushed", hint=hint)


def push_env(remote_url: str, tgt: Target, tok: str) -> dict[str, str]:
    """Environment that gives ``git push`` the token, for an https remote on the token's
    host only (an ssh or a local remote authenticates its own way): through
    ``GIT_CONFIG_*``, never an argument another process could read in ``ps``."""
    slug = parse_remote_url(remote_url)
    if slug is None or slug.host != tgt.host or not remote_url.startswith("https://"):
        return {}
    basic = base64.b64encode(f"x-access-token:{tok}".encode()).decode()
    return {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"http.https://{slug.host}/.extraHeader",
        "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
    }


# what to push ---------------------------------------------------------------------------

PushAction = Literal["create", "fast_forward", "up_to_date"]


@dataclass(frozen=True)
class PushPlan:
    action: PushAction
    refspec: str  # "<sha>:refs/heads/<branch>"; never with "+"
    before: str | None  # the remote branch's sha before the push


def push_plan(
    *,
    remote: str,
    feature: str,
    base: str,
    reviewed: str,
    remote_sha: str | None,
    remote_is_ancestor: bool,
) -> PushPlan:
    """What ``lo-orch pr`` pushes: the reviewed commit onto the feature branch, only as a
    new branch or a fast-forward; refuses the base branch and a remote with commits the
    reviewed commit lacks (``remote_is_ancestor``: the remote sha is known here and an
    ancestor of ``reviewed``)."""
    if feature in (base, f"refs/heads/{base}"):
        msg = f"the feature branch {feature!r} is the base branch: lo-orch never pushes to it"
        raise PullRequestError(
            msg,
            hint="Set the feature branch at Gate 2 (`lo-orch merge --branch NAME`) or give "
            "the pull request another base (`lo-orch pr --base BRANCH`).",
        )
    refspec = f"{reviewed}:refs/heads/{feature}"
    if remote_sha is None:
        return PushPlan("create", refspec, None)
    if remote_sha == reviewed:
        return PushPlan("up_to_date", refspec, remote_sha)
    if remote_is_ancestor:
        return PushPlan("fast_forward", refspec, remote_sha)
    msg = (
        f"{remote}/{feature} ({remote_sha[:12]}) holds commits the reviewed commit "
        f"{reviewed[:12]} lacks; lo-orch never force-pushes, so nothing was pushed"
    )
    raise PullRequestError(
        msg,
        hint=f"Look at them: `git fetch {remote} {feature}` then `git log "
        f"{reviewed[:12]}..FETCH_HEAD`. Keep them by bringing them into a new run (or "
        f"push them yourself); drop them only if they are not wanted (`git push {remote} "
        f"--delete {feature}` is yours to run), then `lo-orch pr` again.",
    )


def push_refused(remote: str, feature: str, stderr: str) -> PullRequestError:
    """What a refused ``git push`` means for the person, in git's and GitHub's words."""
    stderr = redact(stderr)
    said = "\n".join(line for line in stderr.strip().splitlines()[-8:] if line.strip())
    said = "nothing was pushed\n" + said  # git pushes one ref all or nothing
    low = stderr.lower()
    if "gh006" in low or "protected branch" in low:
        return PullRequestError(
            f"{remote} refused the push to {feature}: the branch is protected; {said}",
            hint="Choose a feature branch the rules allow (`lo-orch merge --branch NAME` "
            "for the next run), or ask a repository admin to relax the rule for it.",
        )
    if "non-fast-forward" in low or "fetch first" in low or "[rejected]" in low:
        return PullRequestError(
            f"{remote} refused the push to {feature}: it moved meanwhile; {said}",
            hint=f"Run `lo-orch pr` again: it looks at {remote}/{feature} anew.",
        )
    if "authentication" in low or "permission" in low or "403" in low or "denied" in low:
        return PullRequestError(
            f"{remote} refused the push to {feature}: not allowed; {said}",
            hint="Check that your token or ssh key may push to the repository.",
        )
    if "could not read from remote" in low or "unable to access" in low or "resolve" in low:
        return PullRequestError(
            f"cannot reach {remote} to push {feature}; {said}",
            hint=f"Check the network and `git remote get-url {remote}`, then `lo-orch pr` again.",
        )
    return PullRequestError(
        f"git push to {remote} failed; {said}",
        hint=f"Check `git remote get-url {remote}`, then `lo-orch pr` again.",
    )


# GitHub's answers -----------------------------------------------------------------------


def fmt_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def rate_reset(status: int, headers: Mapping[str, str], detail: str, now: float) -> float | None:
    """When a rate limit an answer signals lifts (epoch seconds); None when not limited.
    ``now`` when limited without a reset time."""
    remaining = headers.get("x-ratelimit-remaining")
    retry = (headers.get("retry-after") or "").strip()
    limited = status == 429 or (
        status == 403 and (remaining == "0" or bool(retry) or "rate limit" in detail.lower())
    )
    if not limited:
        return None
    if retry.isdigit():
        return now + int(retry)
    reset = (headers.get("x-ratelimit-reset") or "").strip()
    return float(reset) if reset.isdigit() else now


def detail_of(data: Any) -> str:
    """GitHub's own words from an error body: its message and each error's message."""
    if not isinstance(data, dict):
        return ""
    parts = [str(data["message"])] if isinstance(data.get("message"), str) else []
    for err in data.get("errors") or []:
        if isinstance(err, dict):
            text = err.get("message") or " ".join(
                str(err[k]) for k in ("resource", "field", "code") if k in err
            )
            if text:
                parts.append(str(text))
        elif isinstance(err, str):
            parts.append(err)
    return "; ".join(parts)


def api_error(
    status: int,
    headers: Mapping[str, str],
    data: Any,
    what: str,
    tgt: Target,
    now: float,
) -> PullRequestError:
    """An error GitHub answered, in words that say what to do."""
    detail = detail_of(data)
    said = f": {detail}" if detail else ""
    reset = rate_reset(status, headers, detail, now)
    token_hint = ENTERPRISE_TOKEN_HINT.format(host=tgt.host) if tgt.enterprise else TOKEN_HINT
    if reset is not None:
        when = (
            f"it resets at {fmt_time(reset)} (in {max(0, int(reset - now))} s)"
            if reset > now
            else "GitHub gave no reset time"
        )
        err = PullRequestError(
            f"GitHub rate limit reached (HTTP {status}) while {what}; {when}",
            hint="Wait until then and run `lo-orch pr` again; nothing is lost.",
        )
        err.reset_at = reset
        return err
    if status == 401:
        return PullRequestError(
            f"GitHub rejected the token (HTTP 401) while {what}{said}",
            hint="The token is mistyped, expired or revoked. " + token_hint,
        )
    if status == 403:
        protected = "protected" in detail.lower()
        return PullRequestError(
            f"GitHub refused (HTTP 403) while {what}{said}",
            hint="The branch is protected: ask an admin, or use another feature branch."
            if protected
            else "The token lacks a permission on "
            f"{tgt.full} (Pull requests: write; Contents: write). " + token_hint,
        )
    if status == 404:
        return PullRequestError(
            f"GitHub: {tgt.full} not found (HTTP 404) while {what}{said}",
            hint=f"Check the repository name ({tgt.full}; [pr] repo or the remote's URL) "
            f"and GITHUB_API_URL ({tgt.api}); a private repository answers 404 to a token "
            "that cannot see it.",
        )
    if status == 422:
        return PullRequestError(
            f"GitHub refused the request (HTTP 422) while {what}{said}",
            hint="Check the base branch (`lo-orch pr --base BRANCH`) exists on GitHub and "
            "differs from the feature branch.",
        )
    if status >= 500:
        return PullRequestError(
            f"GitHub failed on its side (HTTP {status}) while {what}{said}",
            hint="Try `lo-orch pr` again later.",
        )
    return PullRequestError(
        f"GitHub answered HTTP {status} while {what}{said}",
        hint=f"Check GITHUB_API_URL ({tgt.api}).",
    )


def next_page(link: str | None, api: str) -> str | None:
    """A listing's next page (its ``Link: rel="next"``), followed only on the API's own
    scheme, host and path: the request carries the token, so a link elsewhere is refused."""
    if link is None:
        return None
    nxt, base = urllib.parse.urlsplit(link), urllib.parse.urlsplit(api)
    prefix = base.path.rstrip("/") + "/"
    same = (nxt.scheme, nxt.netloc.lower()) == (base.scheme, base.netloc.lower())
    if same and (nxt.path + "/").startswith(prefix):
        return link
    msg = (
        f"GitHub's answer named a next page outside {api} ({redact(link)}); it was not read, "
        "so the token went nowhere else"
    )
    raise PullRequestError(
        msg, hint="Check GITHUB_API_URL: it must be the API itself, not a proxy that rewrites it."
    )


def poll_delay(headers: Mapping[str, str], interval: float, now: float) -> float:
    """Seconds until the next poll: ``interval``, or until the rate limit resets when none
    is left (``x-ratelimit-remaining: 0``)."""
    if (headers.get("x-ratelimit-remaining") or "").strip() == "0":
        reset = (headers.get("x-ratelimit-reset") or "").strip()
        if reset.isdigit():
            return max(interval, float(reset) - now + 1)
    return interval


# the body ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskReport:
    """One task's line of the body, from the record."""

    task: str
    title: str
    commit: str | None
    passed: bool | None  # None: no verdict recorded at its commit
    blocking: int = 0
    warnings: int = 0
    checks_passed: int = 0
    checks_run: int = 0
    rework_rounds: int = 0
    review_rounds: int = 0


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def pr_body(
    *,
    goal: str,
    run: str,
    tasks: Sequence[TaskReport],
    skipped: Sequence[str],
    costs: Sequence[str],
    reviewed: str,
    base: str,
) -> str:
    """The pull request's description: what it is, how each task was verified, its cost."""
    lines = [
        f"Goal: {_cell(goal)}",
        "",
        f"Opened by lo-orch after Gate 2 of run `{run}`: a person reviewed the whole diff of "
        f"`{base[:12]}..{reviewed[:12]}` and set the branch to the reviewed commit "
        f"`{reviewed}`. lo-orch never merges this pull request.",
        "",
        "| task | commit | verification | findings | done-checks | rounds |",
        "|---|---|---|---|---|---|",
    ]
    for t in tasks:
        verdict = "not recorded" if t.passed is None else ("passed" if t.passed else "failed")
        rounds = f"{t.rework_rounds + 1} verification"
        if t.review_rounds:
            rounds += f", {t.review_rounds} review"
        lines.append(
            f"| {_cell(t.task)}: {_cell(t.title)} | `{(t.commit or '')[:12]}` | {verdict} | "
            f"{t.blocking} blocking, {t.warnings} warnings | "
            f"{t.checks_passed}/{t.checks_run} passed | {rounds} |"
        )
    if skipped:
        lines += ["", "Left out (blocked or failed): " + ", ".join(skipped)]
    lines += ["", "What it cost (from each session's transcript):", ""]
    lines += [f"- {_cell(c)}" for c in costs] or ["- not recorded"]
    body = "\n".join(lines) + "\n"
    return body if len(body) <= MAX_BODY else body[: MAX_BODY - 20] + "\n\n(cut short)\n"


# feedback and where it goes -------------------------------------------------------------

FeedbackKind = Literal["check_run", "status", "review_comment", "issue_comment"]


@dataclass(frozen=True)
class Feedback:
    """One thing GitHub says about the pull request that may need work."""

    kind: FeedbackKind
    id: str  # stable: "check_run:12", "review_comment:7" ...
    title: str  # the check's name, the comment's author
    text: str  # output / body, bounded
    paths: tuple[tuple[str, int | None], ...] = ()  # (path, line) it points at
    hunk: str = ""  # a review comment's diff hunk
    url: str = ""
    reply_to: int | None = None  # the review comment thread to answer
    #: written by someone who may not push to the repository: the person's to read, never
    #: sent to a session (anyone may comment on a public repository's pull request)
    outside: bool = False


#: who may push to the repository, as GitHub's ``author_association`` says it
WRITERS = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})


#: control characters but tab and newline (C0, DEL, C1) and the bidirectional overrides:
#: text anyone may write on GitHub reaches the person's terminal and a session's prompt,
#: where an ESC could drive the terminal (OSC 52 writes the clipboard) or end a bracketed
#: paste, and an override could show a line as other than it is
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def plain(text: str) -> str:
    """Text from GitHub as lo-orch passes it on: line breaks as ``\\n``, no other control
    character."""
    return _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


def _path(value: str) -> str:
    """A path from GitHub with no control character at all (no line break either); "" for
    one that is not a plain path inside the repository (``../x``, ``/etc/x``, ``a/./b``):
    a check's annotations are what the sessions' code printed in CI, and such a path must
    not pass a task's ``owns`` by a detour."""
    path = _CONTROL.sub("", value).replace("\n", "").replace("\t", "").replace("\r", "")
    parts = path.split("/")
    return "" if any(p in ("", ".", "..") for p in parts) else path


def _word(value: Any, default: str) -> str:
    """A name from GitHub (a check's, an author's, a path) on one line."""
    text = " ".join(plain(str(value or "")).split())
    return text or default


def _bounded(text: str) -> str:
    text = plain(text).strip()
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "\n(cut short)"


def check_run_feedback(run: Mapping[str, Any], annotations: Sequence[Any]) -> Feedback | None:
    """A failed check run as feedback (its output and annotations); None unless it failed."""
    if run.get("status") != "completed" or run.get("conclusion") not in (
        "failure",
        "timed_out",
        "cancelled",
        "action_required",
    ):
        return None
    out = run.get("output") if isinstance(run.get("output"), dict) else {}
    assert isinstance(out, dict)
    text = "\n".join(str(out.get(k) or "") for k in ("title", "summary", "text") if out.get(k))
    paths: list[tuple[str, int | None]] = []
    for ann in annotations:
        if not isinstance(ann, dict) or not isinstance(ann.get("path"), str):
            continue
        path = _path(ann["path"])
        line = ann.get("start_line")
        if path:
            paths.append((path, line if isinstance(line, int) else None))
        text += f"\n{path}:{line}: {ann.get('annotation_level', '')} {ann.get('message', '')}"
    return Feedback(
        "check_run",
        f"check_run:{run.get('id')}",
        _word(run.get("name"), "check"),
        _bounded(f"{run.get('conclusion')}: {text}"),
        tuple(paths),
        url=_word(run.get("html_url"), ""),
    )


def status_feedback(status: Mapping[str, Any]) -> Feedback | None:
    """A failed commit status (no files: it goes to the person unless it names one)."""
    if status.get("state") not in ("failure", "error"):
        return None
    return Feedback(
        "status",
        f"status:{_word(status.get('context'), '')}:{status.get('id')}",
        _word(status.get("context"), "status"),
        _bounded(f"{status.get('state')}: {status.get('description') or ''}"),
        url=_word(status.get("target_url"), ""),
    )


def review_comment_feedback(comment: Mapping[str, Any], own: Collection[int]) -> Feedback | None:
    """A review comment on a line, or a reply in its thread (answered in that thread), but
    the ones lo-orch wrote (their ids ``own``); by an author who may not push,
    ``outside``."""
    author = (
        (comment.get("user") or {}).get("login", "")
        if isinstance(comment.get("user"), dict)
        else ""
    )
    if comment.get("id") in own:
        return None
    if not isinstance(comment.get("path"), str):
        return None
    path = _path(comment["path"])  # "" for one outside the repository: the person's
    line = (
        comment.get("line")
        if isinstance(comment.get("line"), int)
        else comment.get("original_line")
    )
    return Feedback(
        "review_comment",
        f"review_comment:{comment.get('id')}",
        _word(author, "reviewer"),
        _bounded(str(comment.get("body") or "")),
        ((path, line if isinstance(line, int) else None),) if path else (),
        hunk=_bounded(str(comment.get("diff_hunk") or "")),
        url=_word(comment.get("html_url"), ""),
        # GitHub answers a thread under its first comment, never under a reply
        reply_to=next(
            (v for v in (comment.get("in_reply_to_id"), comment.get("id")) if isinstance(v, int)),
            None,
        ),
        outside=comment.get("author_association") not in WRITERS,
    )


def issue_comment_feedback(comment: Mapping[str, Any], own: Collection[int]) -> Feedback | None:
    """A conversation comment (no line: it goes to the person), but the ones lo-orch wrote
    (their ids ``own``: words are no proof, anyone may begin a comment with lo-orch's)."""
    user = comment.get("user") if isinstance(comment.get("user"), dict) else {}
    assert isinstance(user, dict)
    author = str(user.get("login") or "")
    body = str(comment.get("body") or "")
    if comment.get("id") in own:
        return None
    return Feedback(
        "issue_comment",
        f"issue_comment:{comment.get('id')}",
        _word(author, "commenter"),
        _bounded(body),
        url=_word(comment.get("html_url"), ""),
    )


@dataclass(frozen=True)
class Routed:
    """Where each piece of feedback goes: to tasks, or to the person."""

    tasks: dict[str, list[Feedback]] = field(default_factory=dict)
    person: list[Feedback] = field(default_factory=list)


def owner_of(path: str, owns: Mapping[str, Sequence[str]]) -> str | None:
    """The task whose ``owns`` match ``path`` (the first in plan order), or None."""
    for task, patterns in owns.items():
        if path_matches(path, patterns):
            return task
    return None


#: where one (path, line) goes: a task, or None for the person (Gate 2's comment routing)
Owner = Callable[[str, int | None], str | None]


def route(items: Sequence[Feedback], owner: Owner, seen: Sequence[str] = ()) -> Routed:
    """Each new item to the tasks ``owner`` names for the places it points at; an item
    pointing nowhere, only where no task is named, or by an author from outside the
    repository, to the person. ``seen`` ids were routed before (skipped)."""
    out = Routed()
    done = set(seen)
    for item in items:
        if item.id in done:
            continue
        done.add(item.id)
        if item.outside:
            out.person.append(item)
            continue
        named = sorted({t for p, line in item.paths if (t := owner(p, line)) is not None})
        if not named:
            out.person.append(item)
            continue
        for task in named:
            out.tasks.setdefault(task, []).append(item)
    return out


def pending_checks(runs: Sequence[Mapping[str, Any]], statuses: Sequence[Mapping[str, Any]]) -> int:
    """How many check runs and statuses have not finished."""
    return sum(1 for r in runs if r.get("status") != "completed") + sum(
        1 for s in statuses if s.get("state") == "pending"
    )


# answers --------------------------------------------------------------------------------

#: the first words of every answer lo-orch writes (it knows its own by their ids)
ANSWER_MARK = "lo-orch:"


def answer(*, task: str, commit: str, files: Sequence[str]) -> str:
    """The reply to one routed comment: what changed, in which commit."""
    changed = ", ".join(f"`{f}`" for f in files[:10]) or "no file"
    more = f" and {len(files) - 10} more" if len(files) > 10 else ""
    return (
        f"{ANSWER_MARK} task `{task}` took this up in a review round; after verification and "
        f"a person's review (Gate 2) it is in `{commit}`, which changed {changed}{more}."
    )

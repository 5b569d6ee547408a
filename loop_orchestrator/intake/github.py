"""GitHub issues: the parent issue and its sub-issues (REST, api.github.com or GHES).

``GET /repos/{o}/{r}/issues/{n}`` and ``GET /repos/{o}/{r}/issues/{n}/sub_issues``
(paginated with the ``Link`` header). An issue without sub-issues may still list its
children as a task list in its body (``- [ ] #12``, ``- [x] owner/repo#13`` or issue URLs):
those are read one by one, a ticked box or a closed issue counting as done.

A closed issue is done only when GitHub says it was completed: ``state_reason`` is
``completed`` (or null, as on issues closed before GitHub recorded reasons). Closed as
``not_planned`` or ``duplicate``, it is skipped: its code is not on the base branch. A ticked
box does not make such an issue done either.

Token: ``GITHUB_TOKEN`` or ``GH_TOKEN`` (optional for public repositories; without one
GitHub allows 60 requests an hour). Base URL: ``GITHUB_API_URL``.

GitHub Enterprise Server: a URL on a host listed in ``[intake.github] hosts`` is read from
``https://HOST/api/v3`` with ``GH_ENTERPRISE_TOKEN`` (or ``GITHUB_ENTERPRISE_TOKEN``), the
variables the ``gh`` CLI uses for such hosts. A github.com token is never sent there. A
server older than the sub-issues API answers 404 for them: its children are read from the
parent's task list.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from loop_orchestrator.errors import IntakeError
from loop_orchestrator.intake.http import (
    MAX_PAGES,
    HttpClient,
    NotFoundError,
    Service,
    next_link,
)
from loop_orchestrator.intake.trackers import Issue, IssueRef, IssueTree

log = logging.getLogger(__name__)

DEFAULT_API = "https://api.github.com"
SERVICE = Service("GitHub", "GITHUB_TOKEN (or GH_TOKEN)", "GITHUB_API_URL")
ENTERPRISE = Service(
    "GitHub Enterprise Server",
    "GH_ENTERPRISE_TOKEN (or GITHUB_ENTERPRISE_TOKEN)",
    "[intake.github] hosts",
)

#: ``state_reason`` of a closed issue whose work was not done -> the words for the user
SKIP_REASONS = {
    "not_planned": "closed as not planned",
    "duplicate": "closed as a duplicate",
}

_TASK_ITEM = re.compile(
    r"^\s*[-*+]\s+\[(?P<box>[ xX])\]\s+"
    r"(?:(?P<slug>[\w.-]+/[\w.-]+)#(?P<num>\d+)"
    r"|#(?P<local>\d+)"
    r"|https?://[^/\s]+/(?P<uslug>[\w.-]+/[\w.-]+)/issues/(?P<unum>\d+))\b",
    re.MULTILINE,
)


def client(env: Mapping[str, str], *, enterprise: bool = False) -> HttpClient:
    headers = {
        "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": "2022-11-28",
    }
    if enterprise:
        token = env.get("GH_ENTERPRISE_TOKEN") or env.get("GITHUB_ENTERPRISE_TOKEN")
    else:
        token = env.get("GITHUB_TOKEN") or env.get("GH_TOKEN")
    if token and token.strip():
        headers["Authorization"] = f"Bearer {token.strip()}"
    return HttpClient(ENTERPRISE if enterprise else SERVICE, headers=headers)


def _slug_of(data: Mapping[str, Any], fallback: str) -> str:
    """``owner/repo`` of an issue object, from ``repository_url`` or ``html_url``."""
    repo_url = data.get("repository_url")
    if isinstance(repo_url, str) and "/repos/" in repo_url:
        return repo_url.split("/repos/", 1)[1].strip("/")
    html = data.get("html_url")
    if isinstance(html, str):
        m = re.search(r"https?://[^/]+/([^/]+/[^/]+)/issues/\d+", html)
        if m:
            return m.group(1)
    return fallback


def to_issue(data: Any, fallback_slug: str) -> Issue:
    """A tracker-neutral ``Issue`` from a GitHub issue object."""
    if not isinstance(data, dict) or not isinstance(data.get("number"), int):
        msg = "GitHub answered with something that is not an issue"
        raise IntakeError(
            msg,
            hint="Check GITHUB_API_URL: it must point at the GitHub REST API.",
        )
    slug = _slug_of(data, fallback_slug)
    state = str(data.get("state") or "")
    reason = data.get("state_reason")
    closed = state == "closed"
    skipped = SKIP_REASONS.get(str(reason), "") if closed else ""
    if closed and not skipped and reason not in (None, "completed"):
        # a reason this version does not know: not proof the work was done
        skipped = f"closed ({reason})"
    return Issue(
        key=f"{slug}#{data['number']}",
        title=str(data.get("title") or ""),
        body=str(data.get("body") or ""),
        done=closed and not skipped,
        url=str(data.get("html_url") or ""),
        state=f"closed as {reason}" if closed and reason else state,
        skipped=skipped,
    )


def _list_pages(http: HttpClient, url: str, what: str) -> list[Any]:
    items: list[Any] = []
    next_url: str | None = url
    params: dict[str, str | int] | None = {"per_page": 100}
    for _ in range(MAX_PAGES):
        if next_url is None:
            break
        resp = http.get(next_url, params=params, what=what)
        params = None  # the next link carries its own query
        if not isinstance(resp.data, list):
            msg = f"GitHub answered {what} with something that is not a list"
            raise IntakeError(
                msg,
                hint="Check GITHUB_API_URL: it must point at the GitHub REST API.",
            )
        items += resp.data
        next_url = next_link(resp.headers)
    return items


def fetch(ref: IssueRef, env: Mapping[str, str]) -> IssueTree:
    """The parent issue and its sub-issues (or the issues its task list names)."""
    enterprise = bool(ref.api_url)
    api = (ref.api_url or env.get("GITHUB_API_URL") or DEFAULT_API).rstrip("/")
    http = client(env, enterprise=enterprise)
    slug = f"{ref.owner}/{ref.repo}"
    issue_url = f"{api}/repos/{slug}/issues/{ref.number}"
    data = http.get(issue_url, what=f"issue {ref.key}").data
    if isinstance(data, dict) and data.get("pull_request"):
        msg = f"{ref.key} is a pull request, not an issue"
        raise IntakeError(msg, hint="Give the parent issue that lists the work as sub-issues.")
    parent = to_issue(data, slug)
    try:
        raw_children = _list_pages(http, f"{issue_url}/sub_issues", f"the sub-issues of {ref.key}")
    except NotFoundError:
        if not enterprise:
            raise
        # a GitHub Enterprise Server older than the sub-issues API (the issue itself was
        # found): its children can only be a task list
        log.info("sub-issues api missing, task list read", extra={"key": ref.key})
        raw_children = []
    children = [to_issue(c, slug) for c in raw_children]
    if not children:
        children = _task_list_children(http, api, parent, slug)
    return IssueTree("github", parent, children)


def _task_list_children(http: HttpClient, api: str, parent: Issue, slug: str) -> list[Issue]:
    """Issues named in the parent's task list, in order; a ticked box counts as done."""
    children: list[Issue] = []
    seen: set[str] = set()
    for m in _TASK_ITEM.finditer(parent.body):
        if m["local"]:
            child_slug, num = slug, m["local"]
        elif m["slug"]:
            child_slug, num = m["slug"], m["num"]
        else:
            child_slug, num = m["uslug"], m["unum"]
        key = f"{child_slug}#{int(num)}"
        if key in seen or key == parent.key:
            continue
        seen.add(key)
        data = http.get(f"{api}/repos/{child_slug}/issues/{int(num)}", what=f"issue {key}").data
        child = to_issue(data, child_slug)
        if m["box"] in "xX" and not child.done and not child.skipped:
            child = Issue(child.key, child.title, child.body, True, child.url, "ticked")
        children.append(child)
    return children

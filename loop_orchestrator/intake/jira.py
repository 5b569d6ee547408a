"""Jira Cloud and Jira Data Center: the parent issue and its children.

Cloud (REST API v3): ``GET {JIRA_URL}/rest/api/3/issue/{key}?fields=...`` and the children
with the enhanced search, ``GET /rest/api/3/search/jql`` with ``jql=parent = KEY`` and
``nextPageToken`` pagination (Atlassian replaced the classic ``/rest/api/3/search`` with it;
that one is not used). Basic auth with ``JIRA_EMAIL:JIRA_API_TOKEN``.

Data Center / Server (REST API v2): ``GET /rest/api/2/issue/{key}`` and
``GET /rest/api/2/search`` with ``jql``, ``startAt`` and ``maxResults`` (the answer carries
``total``). Children there are sub-tasks (``parent = KEY``) and, with Jira Software, the
issues of an epic (``"Epic Link" = KEY``); a site without that field answers 400 and is asked
for sub-tasks alone. Auth: a personal access token, ``Authorization: Bearer $JIRA_PAT``.

Which one: ``[intake.jira] deployment`` ("cloud" / "datacenter"), else a ``*.atlassian.net``
site is Cloud, else ``GET /rest/api/2/serverInfo`` says (``deploymentType`` "Cloud", or
"Server" / "DataCenter"). A token never appears in a message or a log line.

A child is done when its status category is ``done`` and its resolution is one of
``DONE_RESOLUTIONS`` or ``[intake.jira] done_resolutions`` (or it has none, as in workflows
that set no resolution). Any other resolution ("Won't Do", "Duplicate", "Cannot
Reproduce"...) or a done-category status named like one of them (whatever its resolution)
makes it skipped: closed, but its code is not on the base branch.

Descriptions in Atlassian Document Format (Cloud) are flattened to text, wiki-markup strings
(Data Center) kept as they are; inline code keeps its backticks (signature lookup reads names
in backticks).
"""

from __future__ import annotations

import base64
import logging
import urllib.parse
from collections.abc import Mapping
from typing import Any, Literal

from loop_orchestrator.config import JiraIntakeConfig
from loop_orchestrator.errors import IntakeError
from loop_orchestrator.intake.http import (
    MAX_PAGES,
    HttpClient,
    Service,
    TrackerHttpError,
    UnreachableError,
    as_dict,
)
from loop_orchestrator.intake.trackers import Issue, IssueRef, IssueTree

log = logging.getLogger(__name__)

Deployment = Literal["cloud", "datacenter"]

SERVICE = Service("Jira", "JIRA_EMAIL and JIRA_API_TOKEN", "JIRA_URL")
DC_SERVICE = Service("Jira Data Center", "JIRA_PAT", "JIRA_URL")
FIELDS = "summary,description,status,resolution"
PAGE_SIZE = 100
#: hosts of Atlassian's cloud: no need to ask serverInfo
CLOUD_SUFFIXES = (".atlassian.net", ".jira.com")
#: resolutions that mean the work was done (compared case-insensitively)
DONE_RESOLUTIONS = frozenset({"done", "fixed", "resolved", "complete", "completed", "implemented"})
#: done-category status names that mean the work was not done (team-managed projects often
#: set no resolution and say it with the status instead)
SKIP_STATUSES = frozenset(
    {
        "won't do",
        "won't fix",
        "wont do",
        "wontfix",
        "cancelled",
        "canceled",
        "rejected",
        "declined",
        "duplicate",
        "obsolete",
        "cannot reproduce",
        "abandoned",
    }
)
CONFIG_HINT = (
    "set it in .loop-orchestrator/config.toml:\n  [intake.jira]\n"
    '  deployment = "datacenter"   # or "cloud"'
)


def cloud_client(env: Mapping[str, str]) -> HttpClient:
    email = (env.get("JIRA_EMAIL") or "").strip()
    token = (env.get("JIRA_API_TOKEN") or "").strip()
    missing = [n for n, v in (("JIRA_EMAIL", email), ("JIRA_API_TOKEN", token)) if not v]
    if missing:
        msg = f"Jira needs {' and '.join(missing)} to be set"
        extra = (
            (f" (JIRA_PAT is for Jira Data Center; if JIRA_URL is one, {CONFIG_HINT})")
            if (env.get("JIRA_PAT") or "").strip()
            else ""
        )
        raise IntakeError(
            msg,
            hint="Create an API token at https://id.atlassian.com/manage-profile/security/"
            "api-tokens and set JIRA_EMAIL (your Atlassian account email) and JIRA_API_TOKEN."
            + (extra or " For Jira Data Center, set JIRA_PAT (a personal access token) instead."),
        )
    basic = base64.b64encode(f"{email}:{token}".encode()).decode("ascii")
    return HttpClient(SERVICE, headers={"Authorization": f"Basic {basic}"})


def datacenter_client(env: Mapping[str, str]) -> HttpClient:
    token = (env.get("JIRA_PAT") or "").strip()
    if not token:
        msg = "Jira Data Center needs JIRA_PAT to be set"
        extra = (
            " (JIRA_EMAIL and JIRA_API_TOKEN are for Jira Cloud)"
            if env.get("JIRA_API_TOKEN")
            else ""
        )
        raise IntakeError(
            msg,
            hint="Create a personal access token in Jira (your profile > Personal Access "
            "Tokens) and set JIRA_PAT to it" + extra + ".",
        )
    return HttpClient(DC_SERVICE, headers={"Authorization": f"Bearer {token}"})


def _server_info(base: str, env: Mapping[str, str]) -> Any:
    """``/rest/api/2/serverInfo``: anonymous first (both deployments document it so); a site
    that refuses anonymous calls is asked again with the credentials the user gave for it."""
    anonymous = HttpClient(
        Service(
            "Jira", "JIRA_PAT (Data Center) or JIRA_EMAIL and JIRA_API_TOKEN (Cloud)", "JIRA_URL"
        )
    )
    url = f"{base}/rest/api/2/serverInfo"
    try:
        return anonymous.get(url, what="serverInfo").data
    except TrackerHttpError as exc:
        if exc.status not in (401, 403):
            raise
    pat = (env.get("JIRA_PAT") or "").strip()
    http = (
        HttpClient(DC_SERVICE, headers={"Authorization": f"Bearer {pat}"})
        if pat
        else cloud_client(env)
    )
    return http.get(url, what="serverInfo").data


def deployment_of(
    base: str, env: Mapping[str, str], configured: str = "auto"
) -> tuple[Deployment, str]:
    """Cloud or Data Center, and how that was decided (for messages)."""
    if configured == "cloud":
        return "cloud", "[intake.jira] deployment"
    if configured == "datacenter":
        return "datacenter", "[intake.jira] deployment"
    host = urllib.parse.urlsplit(base).hostname or ""
    if host.endswith(CLOUD_SUFFIXES):
        return "cloud", f"{host} is an Atlassian Cloud site"
    try:
        info = _server_info(base, env)
    except UnreachableError:
        raise  # a network problem or a wrong JIRA_URL, said as such
    except TrackerHttpError as exc:
        msg = (
            f"cannot tell whether {base} is Jira Cloud or Jira Data Center: its "
            f"/rest/api/2/serverInfo failed: {exc.message}"
        )
        raise IntakeError(msg, hint=f"Check JIRA_URL; if it is right, {CONFIG_HINT}") from exc
    kind = str(as_dict(info).get("deploymentType") or "")
    log.info("jira deployment detected", extra={"deployment_type": kind})
    if kind.lower() == "cloud":
        return "cloud", "serverInfo deploymentType Cloud"
    if kind.lower() in ("server", "datacenter", "data center"):
        return "datacenter", f"serverInfo deploymentType {kind}"
    msg = (
        f"cannot tell whether {base} is Jira Cloud or Jira Data Center: serverInfo "
        f"gave deploymentType {kind or '(none)'!r}"
    )
    raise IntakeError(msg, hint=f"Check JIRA_URL; if it is right, {CONFIG_HINT}")


# Atlassian Document Format ---------------------------------------------------------------

_BLOCKS = frozenset(
    {
        "paragraph",
        "heading",
        "blockquote",
        "codeBlock",
        "rule",
        "panel",
        "mediaSingle",
        "table",
        "tableRow",
        "expand",
        "nestedExpand",
        "decisionList",
        "taskList",
    }
)


def adf_text(node: Any) -> str:
    """Plain text of an ADF document (or of a plain string description)."""
    if node is None:
        return ""
    if isinstance(node, str):
        return node
    out: list[str] = []
    _walk(node, out, list_prefix="")
    text = "".join(out)
    lines = [line.rstrip() for line in text.splitlines()]
    # collapse runs of blank lines left by nested blocks
    result: list[str] = []
    for line in lines:
        if line or (result and result[-1]):
            result.append(line)
    return "\n".join(result).strip()


def _walk(node: Any, out: list[str], list_prefix: str) -> None:
    if isinstance(node, list):
        for child in node:
            _walk(child, out, list_prefix)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    attrs = as_dict(node.get("attrs"))
    content = node.get("content") or []
    if kind == "text":
        text = str(node.get("text") or "")
        marks = node.get("marks") or []
        if any(isinstance(m, dict) and m.get("type") == "code" for m in marks):
            text = f"`{text}`"
        out.append(text)
    elif kind == "hardBreak":
        out.append("\n" + list_prefix)
    elif kind == "mention":
        out.append(str(attrs.get("text") or attrs.get("id") or ""))
    elif kind == "emoji":
        out.append(str(attrs.get("text") or attrs.get("shortName") or ""))
    elif kind in ("inlineCard", "blockCard", "embedCard"):
        out.append(str(attrs.get("url") or ""))
    elif kind == "status":
        out.append(f"[{attrs.get('text') or ''}]")
    elif kind == "date":
        out.append(str(attrs.get("timestamp") or ""))
    elif kind in ("bulletList", "orderedList"):
        for n, item in enumerate(content, start=1):
            marker = "- " if kind == "bulletList" else f"{n}. "
            out.append(list_prefix + marker)
            _walk(as_dict(item).get("content") or [], out, list_prefix + "  ")
            if not "".join(out[-1:]).endswith("\n"):
                out.append("\n")
        if not list_prefix:
            out.append("\n")
    elif kind == "taskItem":
        done = attrs.get("state") == "DONE"
        out.append(list_prefix + ("- [x] " if done else "- [ ] "))
        _walk(content, out, list_prefix + "  ")
        if not "".join(out[-1:]).endswith("\n"):
            out.append("\n")
    elif kind == "codeBlock":
        lang = str(attrs.get("language") or "")
        out.append(f"```{lang}\n")
        _walk(content, out, "")
        out.append("\n```\n")
    elif kind == "heading":
        out.append("#" * int(attrs.get("level") or 1) + " ")
        _walk(content, out, list_prefix)
        out.append("\n\n")
    elif kind == "tableCell" or kind == "tableHeader":
        _walk(content, out, list_prefix)
        out.append(" | ")
    elif kind in _BLOCKS:
        _walk(content, out, list_prefix)
        out.append("\n" if list_prefix else "\n\n")
    else:  # doc, listItem and unknown nodes: their content
        _walk(content, out, list_prefix)


# fetching ------------------------------------------------------------------------------------


def _to_issue(
    data: Any,
    what: str,
    done_resolutions: frozenset[str] = DONE_RESOLUTIONS,
) -> Issue:
    if not isinstance(data, dict) or not isinstance(data.get("key"), str):
        msg = f"Jira answered {what} with something that is not an issue"
        raise IntakeError(
            msg,
            hint="Check JIRA_URL: it must be your site, e.g. https://<site>.atlassian.net.",
        )
    fields = as_dict(data.get("fields"))
    status = as_dict(fields.get("status"))
    category = as_dict(status.get("statusCategory"))
    status_name = str(status.get("name") or "")
    resolution = str(as_dict(fields.get("resolution")).get("name") or "")
    closed = category.get("key") == "done"
    skipped = ""
    if closed and resolution and resolution.strip().lower() not in done_resolutions:
        skipped = f"resolved as {resolution!r}"
    elif closed and status_name.strip().lower().replace("\u2019", "'") in SKIP_STATUSES:
        # team-managed projects set the resolution Done on every done-category status, so
        # "Won't Do" may carry resolution Done: the status says it
        skipped = f"status {status_name!r}"
    return Issue(
        key=data["key"],
        title=str(fields.get("summary") or ""),
        body=adf_text(fields.get("description")),
        done=closed and not skipped,
        url="",
        state=status_name + (f" ({resolution})" if resolution else ""),
        skipped=skipped,
    )


def fetch(
    ref: IssueRef, env: Mapping[str, str], settings: JiraIntakeConfig | None = None
) -> IssueTree:
    """The parent issue and its children, from Jira Cloud or Data Center."""
    settings = JiraIntakeConfig() if settings is None else settings
    deployment = settings.deployment
    done = DONE_RESOLUTIONS | {r.strip().lower() for r in settings.done_resolutions}
    base = (ref.base_url or env.get("JIRA_URL") or "").rstrip("/")
    if not base:
        msg = "JIRA_URL is not set"
        raise IntakeError(
            msg,
            hint="Set it to your site, e.g. https://<site>.atlassian.net "
            "(Jira Data Center: https://jira.example.com).",
        )
    pat = (env.get("JIRA_PAT") or "").strip()
    basic = all((env.get(n) or "").strip() for n in ("JIRA_EMAIL", "JIRA_API_TOKEN"))
    if not pat and not basic:  # say what to set before asking anything of the server
        (datacenter_client if deployment == "datacenter" else cloud_client)(env)
    kind, why = deployment_of(base, env, deployment)
    http = datacenter_client(env) if kind == "datacenter" else cloud_client(env)
    api = "2" if kind == "datacenter" else "3"
    try:
        parent_data = http.get(
            f"{base}/rest/api/{api}/issue/{ref.key}",
            params={"fields": FIELDS},
            what=f"issue {ref.key}",
        ).data
        parent = _to_issue(parent_data, f"issue {ref.key}", done)
        parent = Issue(
            parent.key,
            parent.title,
            parent.body,
            parent.done,
            f"{base}/browse/{parent.key}",
            parent.state,
            parent.skipped,
        )
        if kind == "datacenter":
            raw = _children_datacenter(http, base, parent.key, done)
        else:
            raw = _children_cloud(http, base, parent.key, done)
    except TrackerHttpError as exc:
        # say which API was used and why: a Cloud call to a Data Center site answers 404
        used, other, other_kind = (
            ("Data Center", "Cloud", "cloud")
            if kind == "datacenter"
            else ("Cloud", "Data Center", "datacenter")
        )
        exc.hint = ((exc.hint + "\n") if exc.hint else "") + (
            f"lo-orch used the Jira {used} API ({why}); if JIRA_URL is Jira {other}, set "
            f'[intake.jira] deployment = "{other_kind}" in .loop-orchestrator/config.toml.'
        )
        raise
    children = [
        Issue(c.key, c.title, c.body, c.done, f"{base}/browse/{c.key}", c.state, c.skipped)
        for c in raw
    ]
    return IssueTree("jira", parent, children)


def _search_page(
    http: HttpClient, url: str, params: Mapping[str, str | int], what: str
) -> tuple[list[Any], dict[str, Any]]:
    page = http.get(url, params=params, what=what).data
    issues = page.get("issues") if isinstance(page, dict) else None
    if not isinstance(issues, list):
        msg = f"Jira answered {what} with something that is not a search result"
        raise IntakeError(msg, hint=f"Check JIRA_URL; if it is right, {CONFIG_HINT}")
    return issues, as_dict(page)


def _children_cloud(http: HttpClient, base: str, key: str, done: frozenset[str]) -> list[Issue]:
    """``/rest/api/3/search/jql``, paginated with ``nextPageToken``."""
    children: list[Issue] = []
    token: str | None = None
    what = f"the children of {key}"
    for _ in range(MAX_PAGES):
        params: dict[str, str | int] = {
            "jql": f'parent = "{key}" ORDER BY key ASC',
            "fields": FIELDS,
            "maxResults": PAGE_SIZE,
        }
        if token:
            params["nextPageToken"] = token
        issues, page = _search_page(http, f"{base}/rest/api/3/search/jql", params, what)
        children += [_to_issue(item, what, done) for item in issues]
        token = page.get("nextPageToken") if isinstance(page.get("nextPageToken"), str) else None
        if page.get("isLast") is True or not token:
            break
    return children


def _children_datacenter(
    http: HttpClient, base: str, key: str, done: frozenset[str]
) -> list[Issue]:
    """``/rest/api/2/search``, paginated with ``startAt``; sub-tasks and epic issues."""
    what = f"the children of {key}"
    jqls = [
        f'parent = "{key}" OR "Epic Link" = "{key}" ORDER BY key ASC',
        f'parent = "{key}" ORDER BY key ASC',
    ]
    for n, jql in enumerate(jqls):
        try:
            return _search_datacenter(http, f"{base}/rest/api/2/search", jql, what, done)
        except TrackerHttpError as exc:
            # 400: no "Epic Link" field on this site (no Jira Software): sub-tasks only
            if exc.status != 400 or n == len(jqls) - 1:
                raise
            log.info("jira epic link search refused, sub-tasks only", extra={"key": key})
    return []  # not reached: the last search returns or raises


def _search_datacenter(
    http: HttpClient, url: str, jql: str, what: str, done: frozenset[str]
) -> list[Issue]:
    children: list[Issue] = []
    start = 0
    for _ in range(MAX_PAGES):
        params: dict[str, str | int] = {
            "jql": jql,
            "fields": FIELDS,
            "startAt": start,
            "maxResults": PAGE_SIZE,
        }
        issues, page = _search_page(http, url, params, what)
        children += [_to_issue(item, what, done) for item in issues]
        start += len(issues)
        total = page.get("total")
        if not issues or not isinstance(total, int) or start >= total:
            break
    return children

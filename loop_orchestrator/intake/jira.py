"""Jira Cloud: the parent issue and its children (REST API v3).

``GET {JIRA_URL}/rest/api/3/issue/{key}?fields=summary,description,status`` and the
children with the enhanced search, ``GET /rest/api/3/search/jql`` with
``jql=parent = KEY`` and ``nextPageToken`` pagination (Atlassian replaced the classic
``/rest/api/3/search`` with it; that one is not used). Basic auth with
``JIRA_EMAIL:JIRA_API_TOKEN``. A child is done when its status category key is ``done``.
Descriptions in Atlassian Document Format are flattened to text; inline code keeps its
backticks (signature lookup reads names in backticks).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from loop_orchestrator.errors import IntakeError
from loop_orchestrator.intake.http import MAX_PAGES, HttpClient, Service, as_dict
from loop_orchestrator.intake.trackers import Issue, IssueRef, IssueTree

SERVICE = Service("Jira", "JIRA_EMAIL and JIRA_API_TOKEN", "JIRA_URL")
FIELDS = "summary,description,status"
PAGE_SIZE = 100


def client(env: Mapping[str, str]) -> HttpClient:
    email = (env.get("JIRA_EMAIL") or "").strip()
    token = (env.get("JIRA_API_TOKEN") or "").strip()
    missing = [n for n, v in (("JIRA_EMAIL", email), ("JIRA_API_TOKEN", token)) if not v]
    if missing:
        msg = f"Jira needs {' and '.join(missing)} to be set"
        raise IntakeError(
            msg,
            hint="Create an API token at https://id.atlassian.com/manage-profile/security/"
            "api-tokens and set JIRA_EMAIL (your Atlassian account email) and JIRA_API_TOKEN.",
        )
    basic = base64.b64encode(f"{email}:{token}".encode()).decode("ascii")
    return HttpClient(SERVICE, headers={"Authorization": f"Basic {basic}"})


# Atlassian Document Format ---------------------------------------------------------------

_BLOCKS = frozenset({
    "paragraph", "heading", "blockquote", "codeBlock", "rule", "panel", "mediaSingle",
    "table", "tableRow", "expand", "nestedExpand", "decisionList", "taskList",
})


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

def _to_issue(data: Any, what: str) -> Issue:
    if not isinstance(data, dict) or not isinstance(data.get("key"), str):
        msg = f"Jira answered {what} with something that is not an issue"
        raise IntakeError(
            msg,
            hint="Check JIRA_URL: it must be your site, e.g. https://<site>.atlassian.net.",
        )
    fields = as_dict(data.get("fields"))
    status = as_dict(fields.get("status"))
    category = as_dict(status.get("statusCategory"))
    return Issue(
        key=data["key"],
        title=str(fields.get("summary") or ""),
        body=adf_text(fields.get("description")),
        done=category.get("key") == "done",
        url="",
        state=str(status.get("name") or ""),
    )


def fetch(ref: IssueRef, env: Mapping[str, str]) -> IssueTree:
    """The parent issue and its children (JQL ``parent = KEY``)."""
    base = (ref.base_url or env.get("JIRA_URL") or "").rstrip("/")
    if not base:
        msg = "JIRA_URL is not set"
        raise IntakeError(msg,
                          hint="Set it to your site, e.g. https://<site>.atlassian.net.")
    http = client(env)
    parent_data = http.get(f"{base}/rest/api/3/issue/{ref.key}", params={"fields": FIELDS},
                           what=f"issue {ref.key}").data
    parent = _to_issue(parent_data, f"issue {ref.key}")
    parent = Issue(parent.key, parent.title, parent.body, parent.done,
                   f"{base}/browse/{parent.key}", parent.state)

    children: list[Issue] = []
    token: str | None = None
    what = f"the children of {ref.key}"
    for _ in range(MAX_PAGES):
        params: dict[str, str | int] = {
            "jql": f'parent = "{parent.key}" ORDER BY key ASC',
            "fields": FIELDS,
            "maxResults": PAGE_SIZE,
        }
        if token:
            params["nextPageToken"] = token
        page = http.get(f"{base}/rest/api/3/search/jql", params=params, what=what).data
        issues = page.get("issues") if isinstance(page, dict) else None
        if not isinstance(issues, list):
            msg = f"Jira answered {what} with something that is not a search result"
            raise IntakeError(
                msg,
                hint="Check JIRA_URL: it must be a Jira Cloud site (REST API v3).",
            )
        for item in issues:
            child = _to_issue(item, what)
            children.append(Issue(child.key, child.title, child.body, child.done,
                                  f"{base}/browse/{child.key}", child.state))
        token = page.get("nextPageToken") if isinstance(page.get("nextPageToken"), str) else None
        if page.get("isLast") is True or not token:
            break
    return IssueTree("jira", parent, children)

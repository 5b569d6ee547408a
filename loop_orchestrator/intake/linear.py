"""Linear: the parent issue and its sub-issues (GraphQL).

One query, ``issue(id: "ABC-12")`` with ``children`` paginated by ``pageInfo``; the API key
(``LINEAR_API_KEY``) goes in the ``Authorization`` header as Linear expects for personal
keys. A child whose ``state.type`` is ``completed`` is done; ``canceled`` or ``duplicate``
(Linear's workflow state types: triage, backlog, unstarted, started, completed, canceled,
duplicate) is skipped, with the issue it duplicates when a ``duplicate`` relation names one.
The query is checked in the tests against a server built from Linear's public schema
(``tests/fixtures/intake/linear_schema.graphql``). GraphQL reports most failures as HTTP
200 or 400 with an ``errors`` list; those are mapped to the
same clear errors as HTTP statuses (token rejected, not found, rate limited).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from loop_orchestrator.errors import IntakeError
from loop_orchestrator.intake.http import (
    MAX_PAGES,
    HttpClient,
    NotFoundError,
    RateLimitedError,
    Response,
    Service,
    TokenRejectedError,
    TrackerHttpError,
    as_dict,
)
from loop_orchestrator.intake.trackers import Issue, IssueRef, IssueTree

DEFAULT_API = "https://api.linear.app/graphql"
SERVICE = Service("Linear", "LINEAR_API_KEY", "LINEAR_API_URL")
DONE_TYPES = frozenset({"completed"})
SKIP_TYPES = frozenset({"canceled", "duplicate"})

#: Linear refuses a query over 10,000 complexity points (a property 0.1, an object 1, a
#: connection multiplies what it holds by its ``first``); this one scores about 743
QUERY = """
query LoOrchIntake($id: String!, $after: String) {
  issue(id: $id) {
    identifier
    title
    description
    url
    state { type name }
    children(first: 50, after: $after) {
      nodes {
        identifier title description url state { type name }
        relations(first: 5) { nodes { type relatedIssue { identifier } } }
      }
      pageInfo { hasNextPage endCursor }
    }
  }
}
"""


def client(env: Mapping[str, str]) -> HttpClient:
    key = (env.get("LINEAR_API_KEY") or "").strip()
    if not key:
        msg = "Linear needs LINEAR_API_KEY to be set"
        raise IntakeError(
            msg,
            hint="Create a personal API key in Linear (Settings > Security & access > "
            "Personal API keys) and set LINEAR_API_KEY.",
        )
    return HttpClient(SERVICE, headers={"Authorization": key})


def _graphql_error(resp: Response, key: str) -> TrackerHttpError | None:
    data = resp.data
    errors = data.get("errors") if isinstance(data, dict) else None
    if not errors:
        if resp.status >= 400:
            return TrackerHttpError(
                f"Linear refused the request (HTTP {resp.status})",
                status=resp.status,
                hint="Check LINEAR_API_URL.",
            )
        return None
    messages: list[str] = []
    codes: set[str] = set()
    for err in errors if isinstance(errors, list) else []:
        if not isinstance(err, dict):
            continue
        messages.append(str(err.get("message") or ""))
        ext = as_dict(err.get("extensions"))
        for k in ("code", "type"):
            if isinstance(ext.get(k), str):
                codes.add(ext[k].upper())
    said = "; ".join(m for m in messages if m) or "no message"
    lowered = said.lower()
    if "AUTHENTICATION_ERROR" in codes or "authentication" in lowered:
        return TokenRejectedError(
            f"Linear token rejected: {said}",
            status=resp.status,
            hint="Check LINEAR_API_KEY: it may be mistyped or revoked.",
        )
    if "RATELIMITED" in codes or "rate limit" in lowered:
        reset_ms = resp.headers.get("x-ratelimit-requests-reset", "")
        reset_at = int(reset_ms) / 1000 if reset_ms.isdigit() else None
        when = (
            f"; it resets at {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(reset_at))}"
            if reset_at
            else ""
        )
        return RateLimitedError(
            f"Linear rate limit reached{when}",
            status=resp.status,
            reset_at=reset_at,
            hint="Wait until then and run the command again.",
        )
    if "not found" in lowered or "ENTITY_NOT_FOUND" in codes:
        return NotFoundError(
            f"Linear: issue {key} not found: {said}",
            status=resp.status,
            hint="Check the key, and that LINEAR_API_KEY's workspace has it.",
        )
    return TrackerHttpError(
        f"Linear refused the query for {key}: {said}",
        status=resp.status,
        hint="Check the key and LINEAR_API_URL.",
    )


def _to_issue(node: Any) -> Issue:
    if not isinstance(node, dict) or not isinstance(node.get("identifier"), str):
        msg = "Linear answered with something that is not an issue"
        raise IntakeError(msg, hint="Check LINEAR_API_URL: it must point at Linear's GraphQL API.")
    state = as_dict(node.get("state"))
    kind = state.get("type")
    name = str(state.get("name") or kind or "")
    skipped = ""
    if kind in SKIP_TYPES:
        relations = as_dict(node.get("relations")).get("nodes")
        originals = [
            str(as_dict(r.get("relatedIssue")).get("identifier") or "")
            for r in (relations if isinstance(relations, list) else [])
            if isinstance(r, dict) and r.get("type") == "duplicate"
        ]
        originals = [o for o in originals if o]
        skipped = (
            f"duplicate of {', '.join(originals)}"
            if originals
            else f"{kind} ({name})"
            if name.lower() not in ("", kind)
            else str(kind)
        )
    return Issue(
        key=node["identifier"],
        title=str(node.get("title") or ""),
        body=str(node.get("description") or ""),
        done=kind in DONE_TYPES,
        url=str(node.get("url") or ""),
        state=name,
        skipped=skipped,
    )


def fetch(ref: IssueRef, env: Mapping[str, str]) -> IssueTree:
    """The parent issue and every page of its children."""
    api = env.get("LINEAR_API_URL") or DEFAULT_API
    http = client(env)
    parent: Issue | None = None
    children: list[Issue] = []
    after: str | None = None
    for _ in range(MAX_PAGES):
        resp = http.post_json(
            api,
            {"query": QUERY, "variables": {"id": ref.key, "after": after}},
            what=f"issue {ref.key}",
            allow=(400,),
        )
        problem = _graphql_error(resp, ref.key)
        if problem is not None:
            raise problem
        data = resp.data.get("data") if isinstance(resp.data, dict) else None
        issue = data.get("issue") if isinstance(data, dict) else None
        if issue is None:
            msg = f"Linear: issue {ref.key} not found"
            raise NotFoundError(
                msg,
                status=resp.status,
                hint="Check the key, and that LINEAR_API_KEY's workspace has it.",
            )
        if parent is None:
            parent = _to_issue(issue)
        block = issue.get("children") if isinstance(issue, dict) else None
        nodes = block.get("nodes") if isinstance(block, dict) else None
        if not isinstance(nodes, list):
            msg = f"Linear answered issue {ref.key} without its children"
            raise IntakeError(msg, hint="Check LINEAR_API_URL.")
        children += [_to_issue(n) for n in nodes]
        info = block.get("pageInfo") if isinstance(block, dict) else None
        if not (isinstance(info, dict) and info.get("hasNextPage") and info.get("endCursor")):
            break
        after = str(info["endCursor"])
    assert parent is not None  # the loop ran at least once
    return IssueTree("linear", parent, children)

"""GitHub's REST API for pull requests, thin: each call one request, every error status
turned into a ``PullRequestError`` by ``decide.api_error`` (docs/design.md section 12).

The token travels only in the ``Authorization`` header (``intake/http.py`` drops it on a
redirect to another host); nothing here logs or returns it.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from loop_orchestrator.intake.http import MAX_PAGES, HttpClient, Service, next_link
from loop_orchestrator.pullrequest import decide
from loop_orchestrator.pullrequest.decide import Target
from loop_orchestrator.pullrequest.record import PrRecord

log = logging.getLogger(__name__)

SERVICE = Service("GitHub", "GITHUB_TOKEN (or GH_TOKEN, or `gh auth login`)", "GITHUB_API_URL")
#: every error status comes back as an answer, so ``decide.api_error`` words it
_ERRORS = tuple(range(400, 600))


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    data: Any


class GitHub:
    """Calls to one repository's API."""

    def __init__(
        self,
        tgt: Target,
        token: str,
        *,
        timeout: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.tgt = tgt
        self.clock = clock
        self.http = HttpClient(
            SERVICE,
            headers={
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
                "Authorization": f"Bearer {token}",
            },
            timeout=timeout,
        )

    def url(self, path: str, params: Mapping[str, str | int] | None = None) -> str:
        url = f"{self.tgt.api}{path}"
        if params:
            url += "?" + urllib.parse.urlencode({k: str(v) for k, v in params.items()})
        return url

    def call(
        self,
        method: str,
        url: str,
        *,
        what: str,
        body: Any = None,
        etag: str | None = None,
    ) -> Answer:
        """One request; an error status raises, a ``304`` (with ``etag``) is returned."""
        headers = {"If-None-Match": etag} if etag else None
        resp = self.http.request(method, url, body=body, what=what, allow=_ERRORS, headers=headers)
        if resp.status >= 400:
            raise decide.api_error(
                resp.status, resp.headers, resp.data, what, self.tgt, self.clock()
            )
        return Answer(resp.status, resp.headers, resp.data)

    def pages(
        self,
        url: str,
        *,
        what: str,
        key: str | None = None,
        kept: PrRecord | None = None,
    ) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """Every item of a listing, page after page (``Link: rel="next"``, on the API's
        own host only); ``key`` names the list in an object answer. With ``kept``, each
        page is asked with its ETag and a ``304`` reuses the body and next link kept with
        it (a rate limit on any page raises). The items, and the last page's headers."""
        items: list[dict[str, Any]] = []
        headers: dict[str, str] = {}
        page: str | None = url
        for number in range(1, MAX_PAGES + 1):
            if page is None:
                break
            etag = kept.etags.get(page) if kept is not None and page in kept.bodies else None
            said = what if number == 1 else f"{what} (page {number})"
            ans = self.call("GET", page, what=said, etag=etag)
            headers = ans.headers
            if ans.status == 304 and kept is not None and page in kept.bodies:
                data, link = kept.bodies[page], kept.nexts.get(page)
            else:
                data, link = ans.data, next_link(ans.headers)
                if kept is not None and ans.headers.get("etag"):
                    kept.etags[page], kept.bodies[page] = ans.headers["etag"], data
                    if link:
                        kept.nexts[page] = link
                    else:
                        kept.nexts.pop(page, None)
            part = data.get(key) if key is not None and isinstance(data, dict) else data
            items += [x for x in part if isinstance(x, dict)] if isinstance(part, list) else []
            page = decide.next_page(link, self.tgt.api)
        else:
            if page is not None:
                log.warning("listing cut short", extra={"what": what, "pages": MAX_PAGES})
        return items, headers

    def repo(self) -> dict[str, Any]:
        data = self.call(
            "GET", self.url(f"/repos/{self.tgt.full}"), what="reading the repository"
        ).data
        return data if isinstance(data, dict) else {}

    def open_pull(self, branch: str) -> dict[str, Any] | None:
        """The open pull request whose head is ``branch`` of this repository, if any."""
        url = self.url(
            f"/repos/{self.tgt.full}/pulls",
            {"head": f"{self.tgt.owner}:{branch}", "state": "open", "per_page": 100},
        )
        found, _ = self.pages(url, what="looking for an open pull request")
        for pull in found:
            head = pull.get("head")
            if isinstance(head, dict) and head.get("ref") == branch:
                return dict(pull)
        return None

    def create_pull(
        self, *, branch: str, base: str, title: str, body: str, draft: bool
    ) -> dict[str, Any]:
        data = self.call(
            "POST",
            self.url(f"/repos/{self.tgt.full}/pulls"),
            what="opening the pull request",
            body={"title": title, "head": branch, "base": base, "body": body, "draft": draft},
        ).data
        return data if isinstance(data, dict) else {}

    def update_pull(self, number: int, body: str) -> dict[str, Any]:
        data = self.call(
            "PATCH",
            self.url(f"/repos/{self.tgt.full}/pulls/{number}"),
            what=f"updating pull request #{number}",
            body={"body": body},
        ).data
        return data if isinstance(data, dict) else {}

    def reply(self, number: int, comment_id: int, text: str) -> int | None:
        """Answer a review thread; the new comment's id."""
        ans = self.call(
            "POST",
            self.url(f"/repos/{self.tgt.full}/pulls/{number}/comments/{comment_id}/replies"),
            what=f"answering review comment {comment_id}",
            body={"body": text},
        )
        return _id(ans.data)

    def comment(self, number: int, text: str) -> int | None:
        """Comment on the pull request's conversation; the new comment's id."""
        ans = self.call(
            "POST",
            self.url(f"/repos/{self.tgt.full}/issues/{number}/comments"),
            what=f"commenting on pull request #{number}",
            body={"body": text},
        )
        return _id(ans.data)


def _id(data: Any) -> int | None:
    value = data.get("id") if isinstance(data, dict) else None
    return value if isinstance(value, int) else None

"""A local server speaking the parts of GitHub's REST API ``lo-orch pr`` uses, as GitHub
documents them (docs.github.com/rest: pulls, check runs, commit statuses, pull review
comments and their replies, issue comments), with its rate-limit headers
(``x-ratelimit-limit/remaining/reset/used``), ``ETag`` and ``If-None-Match`` (a ``304``
does not count against the limit), pages (``per_page`` up to 100, ``page``, a ``Link``
header with ``rel="next"`` and ``rel="last"``), its error bodies (``{"message", "errors",
"documentation_url"}``) and a token check (``Authorization: Bearer``: 401 otherwise).
With ``prefix = "/api/v3"`` it answers under that path, as GitHub Enterprise Server does.

Its pull requests are checked against a real bare repository (the test's remote): opening
one whose head branch the remote does not hold answers 422 as GitHub does.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class FakeGitHub:
    """The state behind the server; tests set it and read ``requests``."""

    owner: str
    name: str
    token: str
    remote: Path  # the bare repository that stands for GitHub's copy
    default_branch: str = "main"
    pulls: list[dict[str, Any]] = field(default_factory=list)
    check_runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # sha -> runs
    annotations: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    statuses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    review_comments: list[dict[str, Any]] = field(default_factory=list)
    issue_comments: list[dict[str, Any]] = field(default_factory=list)
    #: (method, path regex) -> (status, body): answered instead of the real thing
    faults: dict[tuple[str, str], tuple[int, dict[str, Any], dict[str, str]]] = field(
        default_factory=dict
    )
    limit: int = 5000
    remaining: int = 5000
    reset: int = 0
    requests: list[Seen] = field(default_factory=list)
    url: str = ""
    #: the API's path on the server ("/api/v3": GitHub Enterprise Server)
    prefix: str = ""
    #: where the Link header sends the next page (default: this server's own URL)
    link_base: str = ""
    _ids: int = 100

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    def fail(self, method: str, path: str, status: int, message: str, **headers: str) -> None:
        self.faults[(method, path)] = (
            status,
            {"message": message, "documentation_url": "https://docs.github.com/rest"},
            headers,
        )

    @property
    def api(self) -> str:
        return self.url

    def counted(self) -> list[Seen]:
        """The requests that reached the API (every one but the answers 304)."""
        return [r for r in self.requests if r.headers.get("x-answered") != "304"]


def _remote_has(remote: Path, branch: str) -> bool:
    res = subprocess.run(
        [
            "git",
            "--git-dir",
            str(remote),
            "rev-parse",
            "--verify",
            "--quiet",
            f"refs/heads/{branch}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return res.returncode == 0


def _handler(gh: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    repo = f"/repos/{gh.owner}/{gh.name}"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        link: str | None = None

        def _page(self, path: str, query: dict[str, str], items: list[Any]) -> list[Any]:
            """One page of ``items`` as GitHub cuts a listing (``per_page`` <= 100), its
            ``Link`` header kept for the answer."""
            size = max(1, min(100, int(query.get("per_page") or 30)))
            page = max(1, int(query.get("page") or 1))
            last = max(1, -(-len(items) // size))
            if page < last:
                base = gh.link_base or gh.url
                links = []
                for rel, n in (("next", page + 1), ("last", last)):
                    q = urllib.parse.urlencode({**query, "page": n})
                    links.append(f'<{base}{path}?{q}>; rel="{rel}"')
                self.link = ", ".join(links)
            return items[(page - 1) * size : page * size]

        def _answer(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            raw = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("x-ratelimit-limit", str(gh.limit))
            self.send_header("x-ratelimit-remaining", str(gh.remaining))
            self.send_header("x-ratelimit-reset", str(gh.reset or int(time.time()) + 3600))
            self.send_header("x-ratelimit-used", str(gh.limit - gh.remaining))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            if self.link and status == 200:
                self.send_header("Link", self.link)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            if raw:
                self.wfile.write(raw)

        def _handle(self, method: str) -> None:
            parts = urllib.parse.urlsplit(self.path)
            query = dict(urllib.parse.parse_qsl(parts.query))
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            seen = Seen(
                method, parts.path, query, {k.lower(): v for k, v in self.headers.items()}, body
            )
            gh.requests.append(seen)
            if not parts.path.startswith(gh.prefix + "/"):
                self._answer(404, {"message": "Not Found"})
                return
            path = parts.path[len(gh.prefix) :]
            if self.headers.get("Authorization") != f"Bearer {gh.token}":
                self._answer(401, {"message": "Bad credentials"})
                return
            for (fm, fp), (status, fbody, fheaders) in gh.faults.items():
                if fm == method and re.fullmatch(fp, path):
                    self._answer(status, fbody, fheaders)
                    return
            if gh.remaining <= 0:
                self._answer(403, {"message": "API rate limit exceeded for user."})
                return
            status, data = self._route(method, path, query, body)
            if method == "GET" and status == 200:
                etag = (
                    '"' + hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest() + '"'
                )
                if self.headers.get("If-None-Match") == etag:
                    seen.headers["x-answered"] = "304"
                    self._answer(304, None, {"ETag": etag})
                    return
                gh.remaining -= 1
                self._answer(status, data, {"ETag": etag})
                return
            gh.remaining -= 1
            self._answer(status, data)

        def _route(
            self, method: str, path: str, query: dict[str, str], body: Any
        ) -> tuple[int, Any]:
            if method == "GET" and path == repo:
                return 200, {
                    "full_name": f"{gh.owner}/{gh.name}",
                    "default_branch": gh.default_branch,
                }
            if path == f"{repo}/pulls" and method == "GET":
                head = query.get("head", "")
                found = [
                    p
                    for p in gh.pulls
                    if f"{gh.owner}:{p['head']['ref']}" == head
                    and (query.get("state", "open") in ("all", p["state"]))
                ]
                return 200, self._page(path, query, found)
            if path == f"{repo}/pulls" and method == "POST":
                if not _remote_has(gh.remote, body["head"]):
                    return 422, {
                        "message": "Validation Failed",
                        "errors": [{"resource": "PullRequest", "field": "head", "code": "invalid"}],
                    }
                if any(p["head"]["ref"] == body["head"] and p["state"] == "open" for p in gh.pulls):
                    return 422, {
                        "message": "Validation Failed",
                        "errors": [
                            {
                                "message": "A pull request already exists for "
                                f"{gh.owner}:{body['head']}."
                            }
                        ],
                    }
                number = len(gh.pulls) + 1
                pull = {
                    "number": number,
                    "state": "open",
                    "title": body["title"],
                    "body": body["body"],
                    "draft": bool(body.get("draft")),
                    "head": {"ref": body["head"]},
                    "base": {"ref": body["base"]},
                    "html_url": f"https://github.example/{gh.owner}/{gh.name}/pull/{number}",
                }
                gh.pulls.append(pull)
                return 201, pull
            m = re.fullmatch(rf"{repo}/pulls/(\d+)", path)
            if m and method == "PATCH":
                pull = gh.pulls[int(m[1]) - 1]
                pull.update({k: v for k, v in body.items() if k in ("body", "title")})
                return 200, pull
            m = re.fullmatch(rf"{repo}/commits/([0-9a-f]+)/check-runs", path)
            if m and method == "GET":
                runs = gh.check_runs.get(m[1], [])
                return 200, {"total_count": len(runs), "check_runs": self._page(path, query, runs)}
            m = re.fullmatch(rf"{repo}/commits/([0-9a-f]+)/status", path)
            if m and method == "GET":
                sts = gh.statuses.get(m[1], [])
                state = "success"
                if any(s["state"] in ("failure", "error") for s in sts):
                    state = "failure"
                elif any(s["state"] == "pending" for s in sts):
                    state = "pending"
                return 200, {
                    "state": state,
                    "sha": m[1],
                    "statuses": self._page(path, query, sts),
                    "total_count": len(sts),
                }
            m = re.fullmatch(rf"{repo}/check-runs/(\d+)/annotations", path)
            if m and method == "GET":
                return 200, self._page(path, query, gh.annotations.get(int(m[1]), []))
            m = re.fullmatch(rf"{repo}/pulls/(\d+)/comments", path)
            if m and method == "GET":
                return 200, self._page(path, query, gh.review_comments)
            m = re.fullmatch(rf"{repo}/pulls/(\d+)/comments/(\d+)/replies", path)
            if m and method == "POST":
                if not any(c["id"] == int(m[2]) for c in gh.review_comments):
                    return 404, {"message": "Not Found"}
                reply = {
                    "id": gh.next_id(),
                    "in_reply_to_id": int(m[2]),
                    "body": body["body"],
                    "user": {"login": "lo-orch-user"},
                    "path": next(c["path"] for c in gh.review_comments if c["id"] == int(m[2])),
                }
                gh.review_comments.append(reply)
                return 201, reply
            m = re.fullmatch(rf"{repo}/issues/(\d+)/comments", path)
            if m and method == "GET":
                return 200, self._page(path, query, gh.issue_comments)
            if m and method == "POST":
                comment = {
                    "id": gh.next_id(),
                    "body": body["body"],
                    "user": {"login": "lo-orch-user"},
                }
                gh.issue_comments.append(comment)
                return 201, comment
            return 404, {"message": "Not Found"}

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

        def do_PATCH(self) -> None:
            self._handle("PATCH")

    return Handler


@contextmanager
def serve(gh: FakeGitHub) -> Iterator[FakeGitHub]:
    """The server on 127.0.0.1 (a free port) while the block runs; ``gh.url`` its API."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(gh))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    gh.url = f"http://127.0.0.1:{server.server_address[1]}{gh.prefix}"
    try:
        yield gh
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

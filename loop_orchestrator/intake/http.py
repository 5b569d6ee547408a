"""A small JSON-over-HTTP client (urllib) whose every failure is a clear ``IntakeError``.

Trackers answer in a handful of ways that a user must be able to act on without a
traceback: a rejected token (401), a missing or invisible issue (404), a rate limit (GitHub:
403 or 429 with ``x-ratelimit-remaining: 0`` and ``x-ratelimit-reset``; Jira and others:
429 with ``Retry-After``), an unreachable host, an answer that is not JSON. Each becomes an
error naming the service, what happened and what to do.

The ``Authorization`` header is only ever sent to the host it was meant for: a redirect
to another host drops it (urllib would otherwise forward it). And never in the clear: a
credential goes over https, or over plain http only to this machine (``encrypted_or_local``);
a redirect to plain http elsewhere drops it too.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import Message
from http.client import HTTPException, HTTPMessage
from typing import Any

from loop_orchestrator import __version__
from loop_orchestrator.errors import IntakeError

log = logging.getLogger(__name__)

USER_AGENT = f"loop-orchestrator/{__version__} (lo-orch intake)"
#: pages followed at most for one listing (a safety net against a server that loops)
MAX_PAGES = 50


class TrackerHttpError(IntakeError):
    """A tracker answered with an error or could not be reached; ``status`` if it answered."""

    def __init__(self, message: str, *, status: int | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status


class TokenRejectedError(TrackerHttpError):
    """401: the credentials are missing, wrong, expired or revoked."""


class NotFoundError(TrackerHttpError):
    """404: no such issue, or the token cannot see it."""


class RateLimitedError(TrackerHttpError):
    """403/429 with a rate-limit signal; ``reset_at`` (epoch seconds) when known."""

    def __init__(
        self, message: str, *, status: int, reset_at: float | None, hint: str | None = None
    ) -> None:
        super().__init__(message, status=status, hint=hint)
        self.reset_at = reset_at


class UnreachableError(TrackerHttpError):
    """No answer: DNS, refused connection, TLS failure, timeout."""


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]  # names in lower case
    data: Any
    url: str


@dataclass(frozen=True)
class Service:
    """How to talk about one tracker in messages."""

    name: str  # "GitHub"
    token_hint: str  # "GITHUB_TOKEN (or GH_TOKEN)"
    base_hint: str  # "GITHUB_API_URL"


def encrypted_or_local(url: str) -> bool:
    """Whether a credential may travel to ``url``: https, or plain http to this machine
    (``localhost``, a loopback address)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https":
        return bool(parts.hostname)
    if parts.scheme != "http" or parts.hostname is None:
        return False
    if parts.hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return False


class _SameHostRedirect(urllib.request.HTTPRedirectHandler):
    """Follow redirects, re-sending ``Authorization`` only to the original host."""

    def __init__(self, auth: str | None, host: str) -> None:
        self.auth = auth
        self.host = host

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        same = urllib.parse.urlsplit(newurl).netloc == self.host
        if new is not None and self.auth and same and encrypted_or_local(newurl):
            new.add_unredirected_header("Authorization", self.auth)
        return new


def _headers(msg: Message | None) -> dict[str, str]:
    if msg is None:
        return {}
    return {k.lower(): v for k, v in msg.items()}


def _error_detail(data: Any, raw: str) -> str:
    """The server's own words, from the usual error shapes (GitHub, Jira, GraphQL)."""
    if isinstance(data, dict):
        parts: list[str] = []
        if isinstance(data.get("message"), str):
            parts.append(data["message"])
        for msg in data.get("errorMessages") or []:
            if isinstance(msg, str):
                parts.append(msg)
        errors = data.get("errors")
        if isinstance(errors, dict):
            parts += [f"{k}: {v}" for k, v in errors.items()]
        elif isinstance(errors, list):
            parts += [
                e["message"]
                for e in errors
                if isinstance(e, dict) and isinstance(e.get("message"), str)
            ]
        if parts:
            return "; ".join(parts)
    text = " ".join(raw.split())
    return text[:300]


def _fmt_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def rate_limit_error(
    service: Service,
    status: int,
    headers: Mapping[str, str],
    detail: str = "",
    now: float | None = None,
) -> RateLimitedError | None:
    """A ``RateLimitedError`` if the answer signals a rate limit, else None."""
    now = time.time() if now is None else now
    remaining = headers.get("x-ratelimit-remaining")
    retry_after = headers.get("retry-after")
    limited = (
        status == 429
        or remaining == "0"
        or (status == 403 and (retry_after is not None or "rate limit" in detail.lower()))
    )
    if not limited:
        return None
    reset_at: float | None = None
    when = ""
    if retry_after is not None and retry_after.strip().isdigit():
        reset_at = now + int(retry_after.strip())
        when = f"retry after {int(retry_after.strip())} s (at {_fmt_time(reset_at)})"
    elif headers.get("x-ratelimit-reset", "").strip().isdigit():
        reset_at = float(headers["x-ratelimit-reset"].strip())
        wait = max(0, int(reset_at - now))
        when = f"the limit resets at {_fmt_time(reset_at)} (in {wait} s)"
    else:
        when = "the reset time was not given"
    hint = "Wait until then and run the command again."
    if service.name == "GitHub":
        hint += (
            f" Without a token GitHub allows only 60 requests an hour: set {service.token_hint}."
        )
    return RateLimitedError(
        f"{service.name} rate limit reached (HTTP {status}); {when}",
        status=status,
        reset_at=reset_at,
        hint=hint,
    )


class HttpClient:
    """JSON requests to one tracker; every failure is a ``TrackerHttpError``."""

    def __init__(
        self,
        service: Service,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        self.service = service
        self.headers = dict(headers or {})
        self.timeout = timeout

    def get(
        self, url: str, *, params: Mapping[str, str | int] | None = None, what: str = ""
    ) -> Response:
        if params:
            sep = "&" if urllib.parse.urlsplit(url).query else "?"
            url = url + sep + urllib.parse.urlencode({k: str(v) for k, v in params.items()})
        return self.request("GET", url, what=what)

    def post_json(
        self, url: str, payload: Any, *, what: str = "", allow: tuple[int, ...] = ()
    ) -> Response:
        return self.request("POST", url, body=payload, what=what, allow=allow)

    def request(
        self,
        method: str,
        url: str,
        *,
        body: Any = None,
        what: str = "",
        allow: tuple[int, ...] = (),
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """Send one request; ``allow`` lists error statuses returned instead of raised;
        ``headers`` are added to this request only (``If-None-Match``)."""
        extra = dict(headers or {})
        svc = self.service
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            msg = f"{svc.name}: {url!r} is not an http(s) URL"
            raise IntakeError(
                msg,
                hint=f"Check {svc.base_hint}.",
            )
        if "Authorization" in self.headers and not encrypted_or_local(url):
            msg = (
                f"{svc.name}: {parts.scheme}://{parts.hostname}/ is not https: the token would "
                "travel unencrypted; nothing was sent"
            )
            raise IntakeError(msg, hint=f"Set {svc.base_hint} to its https URL.")
        headers = {
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
            **self.headers,
            **extra,
        }
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        auth = headers.pop("Authorization", None)
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        if auth:
            req.add_unredirected_header("Authorization", auth)
        opener = urllib.request.build_opener(_SameHostRedirect(auth, parts.netloc))
        label = what or url
        log.debug("tracker request sent", extra={"method": method, "url": url})
        try:
            with opener.open(req, timeout=self.timeout) as resp:
                status = int(resp.status)
                resp_headers = _headers(resp.headers)
                raw = resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            status = exc.code
            resp_headers = _headers(exc.headers)
            try:
                raw = exc.read().decode("utf-8", "replace")
            except OSError:
                raw = ""
            finally:
                exc.close()
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, TimeoutError):
                msg = f"{svc.name} did not answer within {self.timeout:g} s ({parts.netloc})"
                raise UnreachableError(
                    msg,
                    hint="Check the network, then run the command again.",
                ) from exc
            msg = f"cannot reach {svc.name} at {parts.scheme}://{parts.netloc}: {reason}"
            raise UnreachableError(
                msg,
                hint=f"Check the network and {svc.base_hint}.",
            ) from exc
        except TimeoutError as exc:
            msg = f"{svc.name} did not answer within {self.timeout:g} s ({parts.netloc})"
            raise UnreachableError(
                msg,
                hint="Check the network, then run the command again.",
            ) from exc
        except (OSError, ValueError, HTTPException) as exc:  # reset, cut short, malformed
            msg = f"talking to {svc.name} at {parts.netloc} failed: {exc}"
            raise UnreachableError(
                msg,
                hint=f"Check the network and {svc.base_hint}.",
            ) from exc

        parsed: Any = None
        parse_error: str | None = None
        if raw.strip():
            try:
                parsed = json.loads(raw)
            except json.JSONDecodeError as exc:
                parse_error = str(exc)
        if status >= 400 and status not in allow:
            raise self._status_error(status, resp_headers, parsed, raw, label)
        if parse_error is not None:
            msg = (
                f"{svc.name} answered {label} with something that is not JSON "
                f"(HTTP {status}): {' '.join(raw.split())[:200]}"
            )
            raise TrackerHttpError(
                msg,
                status=status,
                hint=f"Check {svc.base_hint}: it must point at the {svc.name} API.",
            )
        return Response(status, resp_headers, parsed, url)

    def _status_error(
        self, status: int, headers: Mapping[str, str], data: Any, raw: str, label: str
    ) -> TrackerHttpError:
        svc = self.service
        detail = _error_detail(data, raw)
        said = f": {detail}" if detail else ""
        limited = rate_limit_error(svc, status, headers, detail)
        if limited is not None:
            return limited
        if status == 401:
            return TokenRejectedError(
                f"{svc.name} token rejected (HTTP 401){said}",
                status=status,
                hint=f"Check {svc.token_hint}: it may be mistyped, expired or revoked.",
            )
        if status == 404:
            return NotFoundError(
                f"{svc.name}: {label} not found (HTTP 404){said}",
                status=status,
                hint="Check the key. A private project also answers 404 when the token "
                f"cannot see it: check {svc.token_hint}.",
            )
        if status == 403:
            return TrackerHttpError(
                f"{svc.name} refused access to {label} (HTTP 403){said}",
                status=status,
                hint=f"The token lacks a permission: check the scopes of {svc.token_hint}.",
            )
        if status >= 500:
            return TrackerHttpError(
                f"{svc.name} failed on its side (HTTP {status}) for {label}{said}",
                status=status,
                hint="Try again later.",
            )
        return TrackerHttpError(
            f"{svc.name} refused the request for {label} (HTTP {status}){said}",
            status=status,
            hint=f"Check the key and {svc.base_hint}.",
        )


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (for optional nested fields)."""
    return value if isinstance(value, dict) else {}


def next_link(headers: Mapping[str, str]) -> str | None:
    """The ``rel="next"`` URL of an RFC 8288 ``Link`` header (GitHub pagination)."""
    link = headers.get("link")
    if not link:
        return None
    for part in link.split(","):
        section = part.split(";")
        if len(section) < 2:
            continue
        url = section[0].strip()
        if not (url.startswith("<") and url.endswith(">")):
            continue
        for param in section[1:]:
            key, _, value = param.strip().partition("=")
            if key.strip().lower() == "rel" and "next" in value.strip().strip('"').split():
                return url[1:-1]
    return None

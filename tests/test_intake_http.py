"""intake/http.py against a local server: every failure is a clear IntakeError."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from fixtures.intake.tracker_server import Request, TrackerServer, serve

from loop_orchestrator.errors import IntakeError
from loop_orchestrator.intake.http import (
    HttpClient,
    NotFoundError,
    RateLimitedError,
    Service,
    TokenRejectedError,
    TrackerHttpError,
    UnreachableError,
    encrypted_or_local,
    next_link,
)

SVC = Service("GitHub", "GITHUB_TOKEN (or GH_TOKEN)", "GITHUB_API_URL")


@pytest.fixture
def server() -> Iterator[TrackerServer]:
    with serve(TrackerServer()) as srv:
        yield srv


def client(token: str = "t0ken") -> HttpClient:
    return HttpClient(SVC, headers={"Authorization": f"Bearer {token}"}, timeout=10)


def test_ok_json_with_params_and_headers(server: TrackerServer) -> None:
    server.json("GET", "/x", {"a": 1}, headers={"X-Extra": "yes"})
    resp = client().get(f"{server.url}/x", params={"per_page": 100})
    assert resp.status == 200
    assert resp.data == {"a": 1}
    assert resp.headers["x-extra"] == "yes"
    req = server.requests[0]
    assert req.param("per_page") == "100"
    assert req.headers["authorization"] == "Bearer t0ken"
    assert req.headers["user-agent"].startswith("loop-orchestrator/")


def test_post_json_sends_the_body(server: TrackerServer) -> None:
    server.route("POST", "/graphql", lambda req: (200, {}, {"echo": req.body}))
    resp = client().post_json(f"{server.url}/graphql", {"query": "{ x }"})
    assert resp.data == {"echo": {"query": "{ x }"}}
    assert server.requests[0].headers["content-type"] == "application/json"


def test_401_says_the_token_was_rejected(server: TrackerServer) -> None:
    server.json("GET", "/x", {"message": "Bad credentials"}, status=401)
    with pytest.raises(TokenRejectedError) as info:
        client().get(f"{server.url}/x")
    text = info.value.render()
    assert "token rejected" in text
    assert "GITHUB_TOKEN" in text
    assert "Bad credentials" in text
    assert info.value.status == 401


def test_404_names_what_was_missing(server: TrackerServer) -> None:
    with pytest.raises(NotFoundError) as info:
        client().get(f"{server.url}/repos/o/r/issues/9", what="issue o/r#9")
    text = info.value.render()
    assert "issue o/r#9 not found (HTTP 404)" in text
    assert "Not Found" in text
    assert "private" in text  # a private repository also answers 404


def test_403_with_no_remaining_requests_is_a_rate_limit_with_the_reset_time(
    server: TrackerServer,
) -> None:
    server.json(
        "GET",
        "/x",
        {"message": "API rate limit exceeded"},
        status=403,
        headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": "4102444800"},
    )
    with pytest.raises(RateLimitedError) as info:
        client().get(f"{server.url}/x")
    assert "rate limit reached (HTTP 403)" in info.value.message
    assert "2100-01-01 00:00:00 UTC" in info.value.message
    assert info.value.reset_at == 4102444800
    assert "60 requests an hour" in (info.value.hint or "")


def test_429_with_retry_after(server: TrackerServer) -> None:
    server.json(
        "GET", "/x", {"errorMessages": ["Too many"]}, status=429, headers={"Retry-After": "30"}
    )
    with pytest.raises(RateLimitedError) as info:
        client().get(f"{server.url}/x")
    assert "retry after 30 s" in info.value.message
    assert info.value.status == 429


def test_other_403_is_access_denied_not_rate_limit(server: TrackerServer) -> None:
    server.json(
        "GET",
        "/x",
        {"message": "Resource not accessible by integration"},
        status=403,
        headers={"x-ratelimit-remaining": "4999"},
    )
    with pytest.raises(TrackerHttpError) as info:
        client().get(f"{server.url}/x")
    assert not isinstance(info.value, RateLimitedError)
    assert "refused access" in info.value.message
    assert "Resource not accessible" in info.value.message


def test_server_error_and_non_json(server: TrackerServer) -> None:
    server.json("GET", "/boom", {"message": "oops"}, status=502)
    server.route(
        "GET", "/html", lambda _r: (200, {"Content-Type": "text/html"}, b"<html>login page</html>")
    )
    with pytest.raises(TrackerHttpError, match=r"failed on its side \(HTTP 502\)"):
        client().get(f"{server.url}/boom")
    with pytest.raises(TrackerHttpError, match="not JSON") as info:
        client().get(f"{server.url}/html")
    assert "GITHUB_API_URL" in (info.value.hint or "")


def test_unreachable_host_is_a_clear_error() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(UnreachableError) as info:
        client().get(f"http://127.0.0.1:{port}/x")
    assert f"cannot reach GitHub at http://127.0.0.1:{port}" in info.value.message
    assert isinstance(info.value, IntakeError)


def test_only_http_urls() -> None:
    with pytest.raises(IntakeError, match="not an http"):
        client().get("file:///etc/passwd")


@pytest.mark.parametrize(
    "url",
    ["http://jira.invalid/rest/api/2/issue/X-1", "http://ghe.invalid/api/v3/repos/o/r/issues/1"],
)
def test_a_token_is_never_sent_over_plain_http_to_another_machine(url: str) -> None:
    """A hurried user's ``JIRA_URL=http://...``: refused before anything is sent (the old
    client tried, and would have sent the token in the clear)."""
    with pytest.raises(IntakeError) as info:
        client().get(url)
    assert not isinstance(info.value, UnreachableError)
    assert "is not https: the token would travel unencrypted; nothing was sent" in str(
        info.value.message
    )
    assert "t0ken" not in str(info.value.message) + str(info.value.hint)
    assert info.value.hint == "Set GITHUB_API_URL to its https URL."


def test_credentials_travel_over_https_or_to_this_machine_only() -> None:
    assert encrypted_or_local("https://api.github.com/repos")
    assert encrypted_or_local("http://127.0.0.1:8080/x")
    assert encrypted_or_local("http://[::1]:8080/x")
    assert encrypted_or_local("http://localhost/x")
    assert not encrypted_or_local("http://example.com/x")
    assert not encrypted_or_local("http://127.0.0.1.example.com/x")
    assert not encrypted_or_local("http://10.0.0.7/x")
    assert not encrypted_or_local("ftp://127.0.0.1/x")
    assert not encrypted_or_local("https:///x")


def test_redirects_keep_the_token_on_the_same_host_only() -> None:
    with serve(TrackerServer()) as a, serve(TrackerServer()) as b:
        b.route("GET", "/moved", lambda req: (200, {}, {"auth": req.headers.get("authorization")}))
        a.route("GET", "/same", lambda _r: (301, {"Location": f"{a.url}/target"}, {}))
        a.route("GET", "/target", lambda req: (200, {}, {"auth": req.headers.get("authorization")}))
        a.route("GET", "/other", lambda _r: (302, {"Location": f"{b.url}/moved"}, {}))
        assert client().get(f"{a.url}/same").data == {"auth": "Bearer t0ken"}
        assert client().get(f"{a.url}/other").data == {"auth": None}


def test_next_link() -> None:
    headers = {
        "link": '<https://api.github.com/x?page=2>; rel="next", '
        '<https://api.github.com/x?page=5>; rel="last"'
    }
    assert next_link(headers) == "https://api.github.com/x?page=2"
    assert next_link({"link": '<https://a/x?page=1>; rel="prev"'}) is None
    assert next_link({}) is None


def test_requests_are_recorded(server: TrackerServer) -> None:
    # the fixture server itself: unknown routes answer 404 and are recorded
    with pytest.raises(NotFoundError):
        client().get(f"{server.url}/nowhere")
    assert [r.path for r in server.requests] == ["/nowhere"]
    assert isinstance(server.requests[0], Request)


def test_a_connection_closed_without_an_answer_is_a_clear_error() -> None:
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]

    def hang_up() -> None:
        conn, _ = listener.accept()
        conn.recv(1024)
        conn.close()  # no status line at all

    thread = threading.Thread(target=hang_up, daemon=True)
    thread.start()
    try:
        with pytest.raises(UnreachableError, match=f"talking to GitHub at 127.0.0.1:{port} failed"):
            client().get(f"http://127.0.0.1:{port}/x")
    finally:
        thread.join(timeout=10)
        listener.close()

"""The pure decisions of `lo-orch pr` (pullrequest/decide.py), in milliseconds."""

from __future__ import annotations

import base64

import pytest

from loop_orchestrator.errors import PullRequestError
from loop_orchestrator.pullrequest import decide
from loop_orchestrator.pullrequest.decide import Feedback, Target, TaskReport

SHA = "c" * 40
OLD = "a" * 40
GH = Target("octo", "widgets", decide.DEFAULT_API, "github.com", enterprise=False)
GHE = Target("octo", "widgets", "https://ghe.corp/api/v3", "ghe.corp", enterprise=True)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("git@github.com:octo/widgets.git", ("github.com", "octo", "widgets")),
        ("https://github.com/octo/widgets", ("github.com", "octo", "widgets")),
        ("https://x-token@GitHub.com/octo/widgets.git/", ("github.com", "octo", "widgets")),
        ("ssh://git@ghe.corp:2222/team/app.git", ("ghe.corp", "team", "app")),
        ("/srv/git/widgets.git", None),
        ("file:///srv/git/widgets.git", None),
        ("https://github.com/octo", None),
        ("https://github.com/octo/widgets/extra", None),
        ("git@github.com:../../etc/passwd", None),
    ],
)
def test_remote_urls_name_their_repository_or_nothing(
    url: str, expected: tuple[str, str, str] | None
) -> None:
    slug = decide.parse_remote_url(url)
    assert (None if slug is None else (slug.host, slug.owner, slug.name)) == expected


def test_the_api_is_github_com_enterprise_or_the_one_configured() -> None:
    assert decide.target("origin", "git@github.com:o/n.git", "", {}) == Target(
        "o", "n", "https://api.github.com", "github.com", enterprise=False
    )
    ghe = decide.target("origin", "https://ghe.corp/o/n.git", "", {}, ["GHE.corp"])
    assert (ghe.api, ghe.enterprise) == ("https://ghe.corp/api/v3", True)
    # a host nobody named as GitHub gets no request, so no token
    with pytest.raises(PullRequestError, match=r"not github\.com nor a GitHub Enterprise") as no:
        decide.target("origin", "https://gitlab.com/o/n.git", "", {}, ["ghe.corp"])
    assert "[intake.github] hosts" in str(no.value.hint)
    mine = decide.target(
        "origin", "/srv/n.git", "team/app", {"GITHUB_API_URL": "http://127.0.0.1:1/"}
    )
    assert (mine.full, mine.api) == ("team/app", "http://127.0.0.1:1")
    with pytest.raises(PullRequestError, match="does not name a GitHub repository") as err:
        decide.target("origin", "/srv/n.git", "", {})
    assert "[pr] repo" in str(err.value.hint)
    with pytest.raises(PullRequestError, match="owner/name"):
        decide.target("origin", "/srv/n.git", "no-slash", {})


def test_the_token_comes_from_the_environment_then_gh_and_never_crosses_hosts() -> None:
    hosts = "github.com:\n  oauth_token: gho_stored\nghe.corp:\n  oauth_token: gho_ghe\n"
    assert decide.token({"GITHUB_TOKEN": " t1 ", "GH_TOKEN": "t2"}, GH, hosts) == "t1"
    assert decide.token({"GH_TOKEN": "t2"}, GH, hosts) == "t2"
    assert decide.token({}, GH, hosts) == "gho_stored"
    # a github.com token is never sent to an Enterprise host, nor the other way round
    assert decide.token({"GITHUB_TOKEN": "t1"}, GHE, None) is None
    assert decide.token({"GITHUB_TOKEN": "t1"}, GHE, hosts) == "gho_ghe"
    assert decide.token({"GH_ENTERPRISE_TOKEN": "e"}, GH, None) is None
    assert decide.token({}, GH, "not: [yaml") is None
    assert decide.token({}, GH, None) is None


def test_the_push_gets_the_token_only_for_an_https_remote_on_its_host() -> None:
    env = decide.push_env("https://github.com/octo/widgets.git", GH, "tok")
    assert set(env) == {"GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0"}
    assert env["GIT_CONFIG_KEY_0"] == "http.https://github.com/.extraHeader"
    basic = env["GIT_CONFIG_VALUE_0"].removeprefix("Authorization: Basic ")
    assert base64.b64decode(basic) == b"x-access-token:tok"
    assert decide.push_env("git@github.com:octo/widgets.git", GH, "tok") == {}
    assert decide.push_env("https://evil.example/octo/widgets.git", GH, "tok") == {}
    assert decide.push_env("/srv/widgets.git", GH, "tok") == {}


def _plan(remote_sha: str | None, ancestor: bool = False, feature: str = "feat/w") -> str:
    return decide.push_plan(
        remote="origin",
        feature=feature,
        base="main",
        reviewed=SHA,
        remote_sha=remote_sha,
        remote_is_ancestor=ancestor,
    ).action


def test_only_a_new_branch_or_a_fast_forward_is_pushed() -> None:
    assert _plan(None) == "create"
    assert _plan(SHA) == "up_to_date"
    assert _plan(OLD, ancestor=True) == "fast_forward"
    plan = decide.push_plan(
        remote="origin",
        feature="feat/w",
        base="main",
        reviewed=SHA,
        remote_sha=None,
        remote_is_ancestor=False,
    )
    assert plan.refspec == f"{SHA}:refs/heads/feat/w" and not plan.refspec.startswith("+")
    with pytest.raises(PullRequestError, match="never force-pushes") as err:
        _plan(OLD, ancestor=False)
    assert "git fetch origin feat/w" in str(err.value.hint)


@pytest.mark.parametrize("feature", ["main", "refs/heads/main"])
def test_the_base_branch_is_never_pushed_to(feature: str) -> None:
    with pytest.raises(PullRequestError, match="is the base branch"):
        _plan(None, feature=feature)


@pytest.mark.parametrize(
    ("stderr", "words"),
    [
        ("remote: error: GH006: Protected branch update failed for refs/heads/x.", "protected"),
        (" ! [rejected]        x -> x (fetch first)", "moved meanwhile"),
        ("remote: Permission to o/n.git denied to bot.\nfatal: ... 403", "not allowed"),
        ("fatal: unable to access 'https://github.com/o/n/': Could not resolve host", "reach"),
        ("something else entirely", "git push to origin failed"),
    ],
)
def test_a_refused_push_is_explained(stderr: str, words: str) -> None:
    err = decide.push_refused("origin", "x", stderr)
    assert words in err.message and err.hint


NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("status", "headers", "data", "words", "hint"),
    [
        (401, {}, {"message": "Bad credentials"}, "rejected the token", "GITHUB_TOKEN"),
        (403, {}, {"message": "Resource not accessible"}, "refused (HTTP 403)", "permission"),
        (403, {}, {"message": "Protected branch"}, "refused (HTTP 403)", "protected"),
        (404, {}, {"message": "Not Found"}, "octo/widgets not found", "private repository"),
        (
            422,
            {},
            {"message": "Validation Failed", "errors": [{"message": "No commits between"}]},
            "Validation Failed; No commits between",
            "--base",
        ),
        (502, {}, None, "failed on its side", "again later"),
    ],
)
def test_each_api_error_says_what_to_do(
    status: int, headers: dict[str, str], data: object, words: str, hint: str
) -> None:
    err = decide.api_error(status, headers, data, "opening", GH, NOW)
    assert words in err.message and hint in str(err.hint)
    assert err.reset_at is None


def test_a_rate_limit_names_its_reset_time() -> None:
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 600)}
    err = decide.api_error(403, headers, {"message": "API rate limit exceeded"}, "x", GH, NOW)
    assert err.reset_at == NOW + 600
    assert decide.fmt_time(NOW + 600) in err.message and "in 600 s" in err.message
    retry = decide.api_error(429, {"retry-after": "30"}, None, "x", GH, NOW)
    assert retry.reset_at == NOW + 30
    # a 403 with requests left is not a rate limit
    assert (
        decide.api_error(403, {"x-ratelimit-remaining": "4999"}, None, "x", GH, NOW).reset_at
        is None
    )


def test_polling_waits_for_the_reset_when_no_request_is_left() -> None:
    assert decide.poll_delay({"x-ratelimit-remaining": "10"}, 30, NOW) == 30
    left0 = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 900)}
    assert decide.poll_delay(left0, 30, NOW) == 901


def _fb(id: str, *paths: str) -> Feedback:
    return Feedback("check_run", id, "t", "x", tuple((p, 1) for p in paths))


def test_feedback_goes_to_the_owners_of_its_files_else_to_the_person_once() -> None:
    owns = {"parser": ["app/parser.py", "tests/**"], "printer": ["app/printer.py"]}
    items = [
        _fb("a", "app/parser.py"),
        _fb("b", "tests/unit/test_p.py", "app/printer.py"),
        _fb("c", "setup.cfg"),
        _fb("d"),
        _fb("e", "app/printer.py"),
        _fb("a", "app/parser.py"),  # the same id twice: routed once
    ]
    routed = decide.route(items, lambda p, _line: decide.owner_of(p, owns), seen=["e"])
    assert {t: [f.id for f in fs] for t, fs in routed.tasks.items()} == {
        "parser": ["a", "b"],
        "printer": ["b"],
    }
    assert [f.id for f in routed.person] == ["c", "d"]
    # the line decides where the owner does not (Gate 2's routing, injected)
    by_line = decide.route([_fb("f", "shared.py")], lambda p, line: "printer" if line else None)
    assert list(by_line.tasks) == ["printer"] and by_line.person == []


def test_only_failed_checks_and_statuses_are_feedback_with_their_output() -> None:
    ok = {"id": 1, "status": "completed", "conclusion": "success"}
    running = {"id": 2, "status": "in_progress", "conclusion": None}
    failed = {
        "id": 3,
        "name": "tests",
        "status": "completed",
        "conclusion": "failure",
        "output": {"title": "1 failed", "summary": "boom", "text": "x" * 10_000},
    }
    assert decide.check_run_feedback(ok, []) is None
    assert decide.check_run_feedback(running, []) is None
    fb = decide.check_run_feedback(
        failed, [{"path": "a.py", "start_line": 4, "message": "bad", "annotation_level": "failure"}]
    )
    assert fb is not None and fb.paths == (("a.py", 4),)
    assert "1 failed" in fb.text and len(fb.text) <= decide.MAX_TEXT + 20
    assert decide.status_feedback({"state": "success", "context": "ci"}) is None
    assert decide.status_feedback({"state": "error", "context": "ci", "id": 1}) is not None
    assert decide.pending_checks([ok, running], [{"state": "pending"}, {"state": "success"}]) == 2


def test_review_comments_bring_their_line_and_lo_orchs_own_answers_are_not_feedback() -> None:
    comment = {
        "id": 7,
        "path": "a.py",
        "line": None,
        "original_line": 3,
        "body": "no",
        "user": {"login": "c"},
    }
    fb = decide.review_comment_feedback(comment, ())
    assert fb is not None and fb.paths == (("a.py", 3),) and fb.reply_to == 7
    # a colleague's reply in the thread is feedback too, answered in that thread
    reply = decide.review_comment_feedback({**comment, "id": 8, "in_reply_to_id": 6}, ())
    assert reply is not None and reply.reply_to == 6 and reply.id == "review_comment:8"
    assert decide.review_comment_feedback(comment, {7}) is None  # lo-orch's own
    answer = decide.answer(task="t", commit=SHA, files=["a.py"])
    assert decide.issue_comment_feedback({"id": 9, "body": answer, "user": {}}, {9}) is None
    # words are no proof: anyone may begin a comment the way lo-orch does
    assert decide.issue_comment_feedback({"id": 10, "body": answer, "user": {}}, {9})
    assert decide.issue_comment_feedback({"id": 9, "body": "hm", "user": {"login": "c"}}, ())


def test_the_body_holds_goal_tasks_verification_cost_and_the_reviewed_commit() -> None:
    body = decide.pr_body(
        goal="Add | widgets",
        run="w",
        tasks=[
            TaskReport("parser", "Parser", SHA, True, 0, 2, 1, 1, rework_rounds=1, review_rounds=1),
            TaskReport("printer", "Printer", SHA, None),
        ],
        skipped=["docs"],
        costs=["run total: $1.00"],
        reviewed=SHA,
        base=OLD,
    )
    assert body.startswith("Goal: Add \\| widgets")
    assert f"`{SHA}`" in body
    assert (
        "| parser: Parser | `cccccccccccc` | passed | 0 blocking, 2 warnings | 1/1 passed "
        "| 2 verification, 1 review |" in body
    )
    assert "| printer: Printer | `cccccccccccc` | not recorded |" in body
    assert "Left out (blocked or failed): docs" in body and "- run total: $1.00" in body
    huge = decide.pr_body(
        goal="g" * 70_000, run="w", tasks=[], skipped=[], costs=[], reviewed=SHA, base=OLD
    )
    assert len(huge) <= decide.MAX_BODY


def test_a_next_page_is_followed_only_on_the_apis_own_origin_and_path() -> None:
    api = "https://ghe.corp/api/v3"
    assert decide.next_page(None, api) is None
    ok = "https://ghe.corp/api/v3/repos/o/n/pulls/1/comments?page=2"
    assert decide.next_page(ok, api) == ok
    for elsewhere in (
        "https://evil.example/api/v3/repos/o/n/pulls/1/comments?page=2",
        "http://ghe.corp/api/v3/repos/o/n?page=2",  # the same host without TLS
        "https://ghe.corp:8443/api/v3/repos/o/n?page=2",
        "https://ghe.corp/api/v30/repos?page=2",
        "https://ghe.corp/other?page=2",
        "https://x:tok@evil.example/api/v3?page=2",
    ):
        with pytest.raises(PullRequestError, match="next page outside") as err:
            decide.next_page(elsewhere, api)
        assert "tok@" not in err.value.message


def test_credentials_in_urls_are_redacted_and_github_text_loses_its_control_characters() -> None:
    said = "fatal: unable to access 'https://ghp_x@github.com/o/n.git/' and ssh://u:p@h/x"
    assert decide.redact(said) == (
        "fatal: unable to access 'https://***@github.com/o/n.git/' and ssh://***@h/x"
    )
    assert decide.redact("git@github.com:o/n.git") == "git@github.com:o/n.git"
    assert decide.plain("a\x1b[2Jb\r\nc\rd\x9b1m\u202ee\tf\x00") == "a[2Jb\nc\nd1me\tf"
    err = decide.push_refused("origin", "feat/x", "fatal: could not read from 'https://t0k@h/o/n'")
    assert "https://***@h/o/n" in err.message and "t0k" not in err.message


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://ghe.corp/api/v3", True),
        ("http://127.0.0.1:8080/api/v3", True),
        ("http://localhost:8080", True),
        ("http://[::1]:8080", True),
        ("http://ghe.corp/api/v3", False),
        ("http://127.0.0.1.evil.example/api/v3", False),
        ("ftp://ghe.corp", False),
        ("https://", False),
    ],
)
def test_the_api_url_must_be_https_but_to_this_machine(url: str, allowed: bool) -> None:
    if allowed:
        assert decide.api_url(url) == url
    else:
        with pytest.raises(PullRequestError, match="not an https URL"):
            decide.api_url(url)


def test_only_writers_review_comments_may_reach_a_task() -> None:
    base = {"id": 7, "path": "a.py", "line": 1, "body": "b", "user": {"login": "c"}}
    for who, outside in (("OWNER", False), ("MEMBER", False), ("COLLABORATOR", False)):
        fb = decide.review_comment_feedback({**base, "author_association": who}, ())
        assert fb is not None and fb.outside is outside
    for who in ("CONTRIBUTOR", "FIRST_TIMER", "NONE", ""):
        fb = decide.review_comment_feedback({**base, "author_association": who}, ())
        assert fb is not None and fb.outside
        routed = decide.route([fb], lambda _p, _l: "t")
        assert routed.tasks == {} and routed.person == [fb]


def test_a_path_outside_the_repository_points_nowhere() -> None:
    run = {"id": 3, "name": "ci", "status": "completed", "conclusion": "failure"}
    for bad in ("app/../.orchestration/x", "/etc/passwd", "app/./x.py", "app//x.py", ".."):
        fb = decide.check_run_feedback(run, [{"path": bad, "start_line": 1, "message": "m"}])
        assert fb is not None and fb.paths == ()
        routed = decide.route([fb], lambda _p, _l: "t")  # an owner for any path: not asked
        assert routed.tasks == {} and len(routed.person) == 1
        comment = {"id": 1, "path": bad, "line": 1, "author_association": "OWNER"}
        said = decide.review_comment_feedback(comment, ())
        assert said is not None and said.paths == ()  # listed for the person, not dropped
    ok = decide.check_run_feedback(run, [{"path": "app/x.py", "start_line": 1}])
    assert ok is not None and ok.paths == (("app/x.py", 1),)

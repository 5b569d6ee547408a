"""Issue keys, and the GitHub / Jira / Linear / command adapters against a local server."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures.intake.tracker_server import Request, TrackerServer, serve

from loop_orchestrator.errors import IntakeError
from loop_orchestrator.intake import github, jira, linear
from loop_orchestrator.intake.fetch import fetch_tree
from loop_orchestrator.intake.http import NotFoundError, RateLimitedError, TokenRejectedError
from loop_orchestrator.intake.trackers import (
    IssueRef,
    parse_key,
    task_id_for,
)


@pytest.fixture
def server() -> Iterator[TrackerServer]:
    with serve(TrackerServer()) as srv:
        yield srv


# keys ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("owner/repo#12", IssueRef("github", "owner/repo#12", "owner", "repo", 12)),
        (
            "https://github.com/my-org/my.repo/issues/7",
            IssueRef("github", "my-org/my.repo#7", "my-org", "my.repo", 7),
        ),
        ("https://linear.app/acme/issue/ENG-42/add-login", IssueRef("linear", "ENG-42")),
        (
            "https://acme.atlassian.net/browse/PROJ-123",
            IssueRef("jira", "PROJ-123", base_url="https://acme.atlassian.net"),
        ),
        (
            "https://acme.atlassian.net/jira/software/projects/PROJ/boards/1?selectedIssue=PROJ-9",
            IssueRef("jira", "PROJ-9", base_url="https://acme.atlassian.net"),
        ),
    ],
)
def test_key_forms_pick_the_tracker(key: str, expected: IssueRef) -> None:
    assert parse_key(key, env={}) == expected


def test_bare_key_goes_to_jira_then_linear_then_asks_for_variables() -> None:
    assert parse_key("abc-12", env={"JIRA_URL": "https://x", "LINEAR_API_KEY": "k"}) == (
        IssueRef("jira", "ABC-12")
    )
    assert parse_key("ABC-12", env={"LINEAR_API_KEY": "k"}) == IssueRef("linear", "ABC-12")
    with pytest.raises(IntakeError) as info:
        parse_key("ABC-12", env={})
    text = info.value.render()
    assert "ABC-12 could be a Jira or a Linear key" in text
    for var in ("JIRA_URL", "JIRA_EMAIL", "JIRA_API_TOKEN", "LINEAR_API_KEY"):
        assert var in text


@pytest.mark.parametrize(
    "key",
    [
        "",
        "just words",
        "owner/repo#x",
        "12",
        "ftp://x/browse/A-1",
        "https://github.com/o/r/pull/3",
        "https://linear.app/acme",
    ],
)
def test_bad_keys_list_the_accepted_forms(key: str) -> None:
    with pytest.raises(IntakeError) as info:
        parse_key(key, env={})
    assert "owner/repo#N" in (info.value.hint or "")


def test_task_ids_from_keys() -> None:
    assert task_id_for("ABC-12") == "abc-12"
    assert task_id_for("owner/repo#5") == "repo-5"
    assert task_id_for("o/My_Repo.js#123") == "my-repo-js-123"
    long_id = task_id_for("o/" + "x" * 60 + "#98765")
    assert long_id.endswith("-98765") and len(long_id) <= 40


# GitHub ------------------------------------------------------------------------------------


def gh_issue(
    api: str,
    number: int,
    title: str,
    body: str | None = "",
    state: str = "open",
    slug: str = "owner/repo",
) -> dict[str, Any]:
    return {
        "number": number,
        "title": title,
        "body": body,
        "state": state,
        "html_url": f"https://github.com/{slug}/issues/{number}",
        "repository_url": f"{api}/repos/{slug}",
        "state_reason": None,
        "labels": [],
    }


def test_github_parent_and_paginated_sub_issues(server: TrackerServer) -> None:
    api = server.url
    base = "/repos/owner/repo/issues/1"
    server.json("GET", base, gh_issue(api, 1, "Profiles", "The architecture."))

    def sub_issues(req: Request) -> tuple[int, dict[str, str], Any]:
        if req.param("page") == "2":
            return 200, {}, [gh_issue(api, 4, "Page", None, slug="owner/other")]
        link = f'<{api}{base}/sub_issues?per_page=2&page=2>; rel="next"'
        return (
            200,
            {"Link": link},
            [gh_issue(api, 2, "Model", "Body 2"), gh_issue(api, 3, "Service", "Body 3", "closed")],
        )

    server.route("GET", f"{base}/sub_issues", sub_issues)
    tree = github.fetch(
        parse_key("owner/repo#1", env={}), {"GITHUB_API_URL": api, "GH_TOKEN": "gh-secret"}
    )
    assert tree.tracker == "github"
    assert (tree.parent.key, tree.parent.title, tree.parent.body) == (
        "owner/repo#1",
        "Profiles",
        "The architecture.",
    )
    assert [(c.key, c.done, c.body) for c in tree.children] == [
        ("owner/repo#2", False, "Body 2"),
        ("owner/repo#3", True, "Body 3"),
        ("owner/other#4", False, ""),
    ]
    assert [r.path for r in server.requests] == [base, f"{base}/sub_issues", f"{base}/sub_issues"]
    assert server.requests[1].param("per_page") == "100"
    assert all(r.headers["authorization"] == "Bearer gh-secret" for r in server.requests)
    assert server.requests[0].headers["accept"] == "application/vnd.github+json"


def test_github_without_token_sends_no_authorization(server: TrackerServer) -> None:
    server.json("GET", "/repos/o/r/issues/1", gh_issue(server.url, 1, "P", slug="o/r"))
    server.json("GET", "/repos/o/r/issues/1/sub_issues", [])
    tree = github.fetch(parse_key("o/r#1", env={}), {"GITHUB_API_URL": server.url})
    assert tree.children == []
    assert "authorization" not in server.requests[0].headers


def test_github_task_list_children_when_there_are_no_sub_issues(server: TrackerServer) -> None:
    api = server.url
    body = (
        "Plan:\n- [ ] #2\n- [x] #3\n* [ ] other/lib#4\n"
        "- [ ] https://github.com/owner/repo/issues/5\n- [ ] #2 again\nNot a task: #6\n"
    )
    server.json("GET", "/repos/owner/repo/issues/1", gh_issue(api, 1, "Parent", body))
    server.json("GET", "/repos/owner/repo/issues/1/sub_issues", [])
    server.json("GET", "/repos/owner/repo/issues/2", gh_issue(api, 2, "Two"))
    server.json("GET", "/repos/owner/repo/issues/3", gh_issue(api, 3, "Three"))
    server.json("GET", "/repos/other/lib/issues/4", gh_issue(api, 4, "Four", slug="other/lib"))
    server.json("GET", "/repos/owner/repo/issues/5", gh_issue(api, 5, "Five", state="closed"))
    tree = github.fetch(parse_key("owner/repo#1", env={}), {"GITHUB_API_URL": api})
    assert [(c.key, c.done) for c in tree.children] == [
        ("owner/repo#2", False),
        ("owner/repo#3", True),
        ("other/lib#4", False),
        ("owner/repo#5", True),
    ]


def test_github_pull_request_is_refused(server: TrackerServer) -> None:
    pr = gh_issue(server.url, 1, "A PR")
    pr["pull_request"] = {"url": "x"}
    server.json("GET", "/repos/o/r/issues/1", pr)
    with pytest.raises(IntakeError, match="is a pull request"):
        github.fetch(parse_key("o/r#1", env={}), {"GITHUB_API_URL": server.url})


def test_github_errors(server: TrackerServer) -> None:
    env = {"GITHUB_API_URL": server.url, "GITHUB_TOKEN": "bad"}
    server.json("GET", "/repos/o/r/issues/1", {"message": "Bad credentials"}, status=401)
    with pytest.raises(TokenRejectedError, match="GitHub token rejected"):
        github.fetch(parse_key("o/r#1", env={}), env)
    with pytest.raises(NotFoundError, match="issue o/r#2 not found"):
        github.fetch(parse_key("o/r#2", env={}), env)
    server.json(
        "GET",
        "/repos/o/r/issues/3",
        {"message": "API rate limit exceeded"},
        status=403,
        headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": "4102444800"},
    )
    with pytest.raises(RateLimitedError, match="2100-01-01 00:00:00 UTC"):
        github.fetch(parse_key("o/r#3", env={}), env)


# Jira --------------------------------------------------------------------------------------

ADF = {
    "type": "doc",
    "version": 1,
    "content": [
        {"type": "heading", "attrs": {"level": 2}, "content": [{"type": "text", "text": "Done"}]},
        {
            "type": "paragraph",
            "content": [
                {"type": "text", "text": "Exposes "},
                {"type": "text", "text": "get_db()", "marks": [{"type": "code"}]},
                {"type": "text", "text": " in app/db.py"},
                {"type": "hardBreak"},
                {"type": "text", "text": "Ask "},
                {"type": "mention", "attrs": {"id": "1", "text": "@Ann"}},
            ],
        },
        {
            "type": "bulletList",
            "content": [
                {
                    "type": "listItem",
                    "content": [
                        {"type": "paragraph", "content": [{"type": "text", "text": "first"}]}
                    ],
                },
                {
                    "type": "listItem",
                    "content": [
                        {"type": "paragraph", "content": [{"type": "text", "text": "second"}]}
                    ],
                },
            ],
        },
        {
            "type": "codeBlock",
            "attrs": {"language": "python"},
            "content": [{"type": "text", "text": "x = 1"}],
        },
    ],
}


def jira_issue(
    key: str, summary: str, description: Any, category: str = "new", status: str = "To Do"
) -> dict[str, Any]:
    return {
        "id": "10001",
        "key": key,
        "fields": {
            "summary": summary,
            "description": description,
            "status": {"name": status, "statusCategory": {"key": category, "name": status}},
        },
    }


def test_adf_text_flattens_text_nodes_keeping_inline_code() -> None:
    assert jira.adf_text(ADF) == (
        "## Done\n\nExposes `get_db()` in app/db.py\nAsk @Ann\n\n- first\n- second\n\n"
        "```python\nx = 1\n```"
    )
    assert jira.adf_text(None) == ""
    assert jira.adf_text("plain v2 text") == "plain v2 text"


CLOUD_INFO = {
    "baseUrl": "https://acme.atlassian.net",
    "version": "1001.0.0-SNAPSHOT",
    "versionNumbers": [1001, 0, 0],
    "deploymentType": "Cloud",
    "serverTitle": "Jira",
}


def test_jira_parent_and_children_with_next_page_token(server: TrackerServer) -> None:
    server.json("GET", "/rest/api/2/serverInfo", CLOUD_INFO)
    server.json(
        "GET",
        "/rest/api/3/issue/PROJ-1",
        jira_issue("PROJ-1", "Profiles", ADF, "indeterminate", "In Progress"),
    )

    def search(req: Request) -> tuple[int, dict[str, str], Any]:
        if req.param("nextPageToken") == "page-2":
            return 200, {}, {"issues": [jira_issue("PROJ-4", "Four", None)], "isLast": True}
        return (
            200,
            {},
            {
                "issues": [
                    jira_issue("PROJ-2", "Two", ADF),
                    jira_issue("PROJ-3", "Three", None, "done", "Done"),
                ],
                "nextPageToken": "page-2",
                "isLast": False,
            },
        )

    server.route("GET", "/rest/api/3/search/jql", search)
    env = {
        "JIRA_URL": server.url + "/",
        "JIRA_EMAIL": "me@example.com",
        "JIRA_API_TOKEN": "jira-secret",
    }
    tree = fetch_tree("PROJ-1", Path(), env=env, profile={})
    assert tree.tracker == "jira"
    assert tree.parent.title == "Profiles" and not tree.parent.done
    assert "`get_db()`" in tree.parent.body
    assert [(c.key, c.done, c.state) for c in tree.children] == [
        ("PROJ-2", False, "To Do"),
        ("PROJ-3", True, "Done"),
        ("PROJ-4", False, "To Do"),
    ]
    info, first, search1, search2 = server.requests
    assert info.path == "/rest/api/2/serverInfo"  # 127.0.0.1 is no atlassian.net: asked
    assert first.param("fields") == "summary,description,status,resolution"
    assert search1.param("jql") == 'parent = "PROJ-1" ORDER BY key ASC'
    assert search1.param("nextPageToken") is None
    assert search2.param("nextPageToken") == "page-2"
    expected = "Basic " + base64.b64encode(b"me@example.com:jira-secret").decode()
    assert "authorization" not in info.headers  # serverInfo is public: no token sent
    assert all(r.headers["authorization"] == expected for r in server.requests[1:])


def test_jira_needs_email_and_token(server: TrackerServer) -> None:
    with pytest.raises(IntakeError) as info:
        fetch_tree("PROJ-1", Path(), env={"JIRA_URL": server.url, "JIRA_EMAIL": "me@x"}, profile={})
    assert "Jira needs JIRA_API_TOKEN" in info.value.message
    assert server.requests == []


def test_jira_404_and_401_use_the_server_words(server: TrackerServer) -> None:
    env = {"JIRA_URL": server.url, "JIRA_EMAIL": "me@x", "JIRA_API_TOKEN": "t"}
    server.json("GET", "/rest/api/2/serverInfo", CLOUD_INFO)
    server.json(
        "GET",
        "/rest/api/3/issue/PROJ-404",
        {
            "errorMessages": ["Issue does not exist or you do not have permission to see it."],
            "errors": {},
        },
        status=404,
    )
    with pytest.raises(NotFoundError, match="Issue does not exist"):
        fetch_tree("PROJ-404", Path(), env=env, profile={})
    server.json("GET", "/rest/api/3/issue/PROJ-401", {}, status=401)
    with pytest.raises(TokenRejectedError) as info:
        fetch_tree("PROJ-401", Path(), env=env, profile={})
    assert "JIRA_EMAIL and JIRA_API_TOKEN" in (info.value.hint or "")


# Linear ------------------------------------------------------------------------------------


def lin(
    identifier: str, title: str, state_type: str = "unstarted", description: str | None = ""
) -> dict[str, Any]:
    return {
        "identifier": identifier,
        "title": title,
        "description": description,
        "url": f"https://linear.app/acme/issue/{identifier}",
        "state": {"type": state_type, "name": state_type.title()},
    }


def test_linear_children_paginated_with_page_info(server: TrackerServer) -> None:
    def graphql(req: Request) -> tuple[int, dict[str, str], Any]:
        variables = req.body["variables"]
        assert "issue(id: $id)" in req.body["query"]
        if variables["after"] == "cursor-1":
            nodes = [lin("ENG-4", "Four", "canceled")]
            info = {"hasNextPage": False, "endCursor": "cursor-2"}
        else:
            nodes = [lin("ENG-2", "Two", "started", "Body"), lin("ENG-3", "Three", "completed")]
            info = {"hasNextPage": True, "endCursor": "cursor-1"}
        parent = lin("ENG-1", "Parent", "started", "Architecture")
        parent["children"] = {"nodes": nodes, "pageInfo": info}
        return 200, {}, {"data": {"issue": parent}}

    server.route("POST", "/graphql", graphql)
    env = {"LINEAR_API_URL": f"{server.url}/graphql", "LINEAR_API_KEY": "lin_api_secret"}
    tree = fetch_tree("eng-1", Path(), env=env, profile={})
    assert tree.tracker == "linear"
    assert (tree.parent.key, tree.parent.body) == ("ENG-1", "Architecture")
    assert [(c.key, c.done, c.skipped) for c in tree.children] == [
        ("ENG-2", False, ""),
        ("ENG-3", True, ""),
        ("ENG-4", False, "canceled"),
    ]
    assert [r.body["variables"] for r in server.requests] == [
        {"id": "ENG-1", "after": None},
        {"id": "ENG-1", "after": "cursor-1"},
    ]
    assert server.requests[0].headers["authorization"] == "lin_api_secret"


@pytest.mark.parametrize(
    ("status", "errors", "error_type", "words"),
    [
        (
            400,
            [
                {
                    "message": "Authentication required, not authenticated",
                    "extensions": {"code": "AUTHENTICATION_ERROR"},
                }
            ],
            TokenRejectedError,
            "Linear token rejected",
        ),
        (
            200,
            [{"message": "Entity not found: Issue", "extensions": {"type": "invalid input"}}],
            NotFoundError,
            "issue ENG-9 not found",
        ),
        (
            400,
            [{"message": "Rate limit exceeded", "extensions": {"code": "RATELIMITED"}}],
            RateLimitedError,
            "Linear rate limit reached",
        ),
    ],
)
def test_linear_graphql_errors(
    server: TrackerServer, status: int, errors: list[Any], error_type: type[Exception], words: str
) -> None:
    server.json("POST", "/graphql", {"data": None, "errors": errors}, status=status)
    env = {"LINEAR_API_URL": f"{server.url}/graphql", "LINEAR_API_KEY": "k"}
    with pytest.raises(error_type, match=words):
        fetch_tree("ENG-9", Path(), env=env, profile={})


def test_linear_null_issue_is_not_found_and_key_is_required(server: TrackerServer) -> None:
    server.json("POST", "/graphql", {"data": {"issue": None}})
    env = {"LINEAR_API_URL": f"{server.url}/graphql", "LINEAR_API_KEY": "k"}
    with pytest.raises(NotFoundError):
        linear.fetch(IssueRef("linear", "ENG-1"), env)
    with pytest.raises(IntakeError, match="Linear needs LINEAR_API_KEY"):
        linear.fetch(IssueRef("linear", "ENG-1"), {"LINEAR_API_URL": env["LINEAR_API_URL"]})


# the intake tool role ----------------------------------------------------------------------

TREE_SCRIPT = """\
import json, sys
key = sys.argv[-1]
if key == "FAIL-1":
    print("cannot find FAIL-1", file=sys.stderr)
    sys.exit(4)
if key == "TEXT-1":
    print("not json")
    sys.exit(0)
if key == "SHAPE-1":
    print(json.dumps({"parent": {"key": "SHAPE-1"}}))
    sys.exit(0)
print(json.dumps({"parent": {"key": key, "title": "From the tool", "body": "arch " + sys.argv[1]},
                  "children": [{"key": "C-1", "title": "one", "body": "b1", "done": True},
                               {"key": "C-2", "title": "two", "body": None}]}))
"""


def test_cli_intake_command_runs_with_the_key_last(tmp_path: Path) -> None:
    script = tmp_path / "tree.py"
    script.write_text(TREE_SCRIPT, encoding="utf-8")
    profile = {"intake": {"kind": "cli", "command": f"{sys.executable} {script} --flag"}}
    tree = fetch_tree("ANY-7", tmp_path, env={}, profile=profile)
    assert tree.tracker == "cli"
    assert (tree.parent.key, tree.parent.title, tree.parent.body) == (
        "ANY-7",
        "From the tool",
        "arch --flag",
    )
    assert [(c.key, c.done, c.body) for c in tree.children] == [
        ("C-1", True, "b1"),
        ("C-2", False, ""),
    ]


def test_cli_intake_from_the_repo_tool_profile_and_its_failures(tmp_path: Path) -> None:
    script = tmp_path / "tree.py"
    script.write_text(TREE_SCRIPT, encoding="utf-8")
    (tmp_path / ".loop-orchestrator").mkdir()
    (tmp_path / ".loop-orchestrator" / "tools.json").write_text(
        json.dumps({"intake": {"kind": "cli", "command": f"{sys.executable} {script}"}}),
        encoding="utf-8",
    )
    assert fetch_tree("X-1", tmp_path, env={"HOME": str(tmp_path)}).parent.title == (
        "From the tool"
    )
    with pytest.raises(IntakeError, match="exited 4") as info:
        fetch_tree("FAIL-1", tmp_path, env={"HOME": str(tmp_path)})
    assert "cannot find FAIL-1" in info.value.message
    with pytest.raises(IntakeError, match="did not print JSON"):
        fetch_tree("TEXT-1", tmp_path, env={"HOME": str(tmp_path)})
    with pytest.raises(IntakeError, match="wrong shape") as shape:
        fetch_tree("SHAPE-1", tmp_path, env={"HOME": str(tmp_path)})
    assert "children" in shape.value.message
    with pytest.raises(IntakeError, match="was not found"):
        fetch_tree(
            "X-1",
            tmp_path,
            env={},
            profile={"intake": {"kind": "cli", "command": "no-such-tool-xyz"}},
        )
    with pytest.raises(IntakeError, match="no `command`"):
        fetch_tree("X-1", tmp_path, env={}, profile={"intake": {"kind": "cli"}})

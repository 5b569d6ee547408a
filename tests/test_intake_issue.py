"""`lo-orch plan --issue KEY`: tracker tree -> tasks and done_tasks with signatures."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures.intake.tracker_server import TrackerServer, serve
from helpers.git import git
from helpers.intake import FIXTURES, calls, plan_cli

from loop_orchestrator.cli.main import run_cli
from loop_orchestrator.config import load_settings
from loop_orchestrator.errors import IntakeError
from loop_orchestrator.intake.basetree import BaseTree
from loop_orchestrator.intake.issue import (
    backtick_names,
    done_signatures,
    mark_done,
    mentioned_paths,
)
from loop_orchestrator.intake.trackers import Issue, IssueTree
from loop_orchestrator.runstate.state import RunDir

DB_PY = '''\
"""Database access."""
import sqlite3


def get_db(path: str = ":memory:") -> sqlite3.Connection:
    """Open the database."""
    return sqlite3.connect(path)


def close_db(conn: sqlite3.Connection) -> None:
    conn.close()


def _pragma(conn: sqlite3.Connection) -> None:
    pass
'''
AREA_TS = """\
export interface BuildingArea {
  pnu: string;
  grossM2: number;
}

export async function getBuildingArea(pnu: string): Promise<number> {
  return 1;
}
"""
GET_DB = 'def get_db(path: str = ":memory:") -> sqlite3.Connection:   # app/db.py'


@pytest.fixture
def base_repo(git_repo: Path) -> Path:
    """The sample repository with the closed child's code on main."""
    (git_repo / "app" / "db.py").write_text(DB_PY, encoding="utf-8")
    (git_repo / "web").mkdir()
    (git_repo / "web" / "area.ts").write_text(AREA_TS, encoding="utf-8")
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-q", "--no-gpg-sign", "-m", "db access and area")
    return git_repo


def gh_issue(api: str, number: int, title: str, body: str, state: str = "open") -> dict[str, Any]:
    return {
        "number": number,
        "title": title,
        "body": body,
        "state": state,
        "html_url": f"https://github.com/owner/repo/issues/{number}",
        "repository_url": f"{api}/repos/owner/repo",
    }


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> Iterator[TrackerServer]:
    """A GitHub parent #1 with four sub-issues, #3 closed, on a local server."""
    with serve(TrackerServer()) as srv:
        api = srv.url
        srv.json(
            "GET",
            "/repos/owner/repo/issues/1",
            gh_issue(
                api, 1, "User profiles", "Profiles live in app/; pages render from the service."
            ),
        )
        srv.json(
            "GET",
            "/repos/owner/repo/issues/1/sub_issues",
            [
                gh_issue(api, 2, "User model", "A `User` dataclass with email validation."),
                gh_issue(api, 3, "DB access", "Adds `get_db(path)` in app/db.py.", "closed"),
                gh_issue(api, 4, "Profile service", "save/load profiles with get_db."),
                gh_issue(api, 5, "Profile page", "Render a profile as HTML."),
            ],
        )
        monkeypatch.setenv("GITHUB_API_URL", api)
        monkeypatch.setenv("GITHUB_TOKEN", "gh-test-token")
        yield srv


def test_parent_with_four_children_one_closed(
    base_repo: Path,
    github: TrackerServer,
    fake_log: Path,
    capsys: pytest.CaptureFixture[str],
    tmux_socket: str,
) -> None:
    code, out, err = plan_cli(base_repo, capsys, "--issue", "owner/repo#1")
    assert code == 0, err

    recorded = json.loads(RunDir(base_repo).plan_json.read_text(encoding="utf-8"))
    plan = recorded["plan"]
    assert [t["id"] for t in plan["tasks"]] == ["repo-2", "repo-4", "repo-5"]
    [done] = plan["done_tasks"]
    assert done["id"] == "repo-3"
    assert done["title"] == "DB access"
    assert done["produces"] == ["get_db"]
    assert done["signatures"] == {"get_db": GET_DB}  # exact text from the base tree

    # the prompt carried the parent, the open children with their ids, the done signature
    [call] = calls(fake_log)
    prompt = call["argv"][1]
    assert "Profiles live in app/; pages render from the service." in prompt
    for tid, body in (
        ("repo-2", "A `User` dataclass"),
        ("repo-4", "save/load profiles"),
        ("repo-5", "Render a profile as HTML."),
    ):
        assert f'task-id="{tid}"' in prompt
        assert body in prompt
    assert 'task-id="repo-3"' not in prompt
    assert GET_DB in prompt
    assert all(r.headers["authorization"] == "Bearer gh-test-token" for r in github.requests)

    assert (
        "Issue owner/repo#1 (GitHub): 3 open children -> tasks; done: owner/repo#3 -> "
        "done_tasks" in out
    )
    assert "Already done (no session): repo-3" in out
    assert "Planning agent: 1 call, 9 turns, 52.3 s, $0.3120" in out

    # Gate 1, then the dependent's brief as the supervisor renders it
    assert run_cli(["approve", "--repo", str(base_repo)]) == 0
    from loop_orchestrator import templating
    from loop_orchestrator.supervisor.main import Supervisor

    sup = Supervisor(base_repo, load_settings(base_repo))
    try:
        service = sup.plan.task("repo-4")
        found = templating.consumed_signatures(
            base_repo, sup.plan, service, sup.state.base_sha, sup.state.base_sha
        )
        [sig] = [s for s in found if s.name == "get_db"]
        assert sig.text == GET_DB
        brief = sup.render_brief(service)
        assert GET_DB in brief
    finally:
        sup.pool.shutdown(wait=False)


def test_done_child_named_on_the_command_line_and_fixup_problems(
    base_repo: Path,
    github: TrackerServer,
    fake_log: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # #5 named done: the agent's task for it no longer matches an open child (twice)
    code, _out, err = plan_cli(
        base_repo, capsys, "--issue", "owner/repo#1", "--done", "owner/repo#5"
    )
    assert code == 1
    assert "task 'repo-5': matches no open child issue" in err
    assert len(calls(fake_log)) == 2
    retry = calls(fake_log)[1]["argv"]
    assert retry[retry.index("--resume") + 1] == "9c8b7a65-4321-4fed-8cba-0987654321fe"
    assert 'task-id="repo-5"' not in calls(fake_log)[0]["argv"][1]
    assert not RunDir(base_repo).plan_json.exists()


def test_a_missing_task_for_an_open_child_is_sent_back(
    base_repo: Path,
    github: TrackerServer,
    fake_log: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    answer = json.loads((FIXTURES / "issue_plan.json").read_text(encoding="utf-8"))
    answer["structured_output"]["tasks"] = [
        t for t in answer["structured_output"]["tasks"] if t["id"] != "repo-5"
    ]
    short = tmp_path / "short.json"
    short.write_text(json.dumps(answer), encoding="utf-8")
    monkeypatch.setenv("FAKE_CLAUDE_SCENARIO", f"{short},issue_plan")
    code, out, err = plan_cli(base_repo, capsys, "--issue", "owner/repo#1")
    assert code == 0, err
    retry = calls(fake_log)[1]["argv"][1]
    assert "no task for the open child issue owner/repo#5; add one with id 'repo-5'" in retry
    assert "fixed them on the retry" in out


@pytest.mark.parametrize(
    ("setup", "key", "words"),
    [
        ("401", "owner/repo#1", "GitHub token rejected (HTTP 401)"),
        ("404", "owner/repo#9", "GitHub: issue owner/repo#9 not found (HTTP 404)"),
        ("rate", "owner/repo#1", "GitHub rate limit reached (HTTP 403); the limit resets at"),
        ("429", "owner/repo#1", "GitHub rate limit reached (HTTP 429); retry after 60 s"),
        ("none", "owner/repo#1", "owner/repo#1 ('Lonely') has no child issues"),
        ("done", "owner/repo#1", "every child of owner/repo#1 is already done (1)"),
        ("ok", "not a key", "'not a key' is not an issue key"),
        ("ok", "ABC-12", "ABC-12 could be a Jira or a Linear key"),
        ("ok", "https://linear.app/acme/issue/ABC-12", "Linear needs LINEAR_API_KEY"),
    ],
)
def test_tracker_failures_exit_1_with_a_clear_message(
    git_repo: Path,
    fake_log: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    setup: str,
    key: str,
    words: str,
) -> None:
    for var in ("JIRA_URL", "LINEAR_API_KEY", "GITHUB_TOKEN", "GH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    with serve(TrackerServer()) as srv:
        api = srv.url
        parent = "/repos/owner/repo/issues/1"
        if setup == "401":
            srv.json("GET", parent, {"message": "Bad credentials"}, status=401)
        elif setup == "rate":
            srv.json(
                "GET",
                parent,
                {"message": "API rate limit exceeded"},
                status=403,
                headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": "4102444800"},
            )
        elif setup == "429":
            srv.json(
                "GET", parent, {"message": "slow down"}, status=429, headers={"Retry-After": "60"}
            )
        elif setup in ("none", "done"):
            srv.json("GET", parent, gh_issue(api, 1, "Lonely", "no children"))
            children = [gh_issue(api, 2, "Two", "x", "closed")] if setup == "done" else []
            srv.json("GET", f"{parent}/sub_issues", children)
        monkeypatch.setenv("GITHUB_API_URL", api)
        code, out, err = plan_cli(git_repo, capsys, "--issue", key)
    assert code == 1, out
    assert err.startswith("Error: ")
    assert words in err
    assert "Traceback" not in err
    assert calls(fake_log) == []  # nothing was asked of the agent
    assert not RunDir(git_repo).plan_json.exists()


def test_done_only_goes_with_issue(git_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plan_cli(git_repo, capsys, "--goal", "x", "--done", "A-1")
    assert code == 2
    assert "--done only goes with --issue" in err


def test_linear_issue_end_to_end(
    base_repo: Path,
    fake_log: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    def node(ident: str, title: str, state: str, desc: str = "") -> dict[str, Any]:
        return {
            "identifier": ident,
            "title": title,
            "description": desc,
            "url": "",
            "state": {"type": state, "name": state},
        }

    parent = node("ENG-1", "Areas", "started", "Area pages.")
    parent["children"] = {
        "nodes": [
            node(
                "ENG-2",
                "Area API",
                "completed",
                "Exposes `getBuildingArea(pnu: string)` and `BuildingArea` in web/area.ts",
            ),
            node("ENG-3", "Area page", "unstarted", "Shows the area."),
        ],
        "pageInfo": {"hasNextPage": False, "endCursor": None},
    }
    answer = json.loads((FIXTURES / "valid_plan.json").read_text(encoding="utf-8"))
    answer["structured_output"] = {
        "goal": "Area pages",
        "tasks": [
            {
                "id": "eng-3",
                "objective": "Area page",
                "owns": ["web/page.ts", "web/page.test.ts"],
                "consumes": ["getBuildingArea"],
                "done": [
                    {
                        "criterion": "three pnus show three areas; an unknown pnu shows an error",
                        "check": "npx vitest run web/page.test.ts",
                    }
                ],
            }
        ],
    }
    path = tmp_path / "linear_plan.json"
    path.write_text(json.dumps(answer), encoding="utf-8")
    monkeypatch.setenv("FAKE_CLAUDE_SCENARIO", str(path))
    with serve(TrackerServer()) as srv:
        srv.json("POST", "/graphql", {"data": {"issue": parent}})
        monkeypatch.setenv("LINEAR_API_URL", f"{srv.url}/graphql")
        monkeypatch.setenv("LINEAR_API_KEY", "lin_api_test")
        code, _out, err = plan_cli(base_repo, capsys, "--issue", "ENG-1")
    assert code == 0, err
    plan = json.loads(RunDir(base_repo).plan_json.read_text(encoding="utf-8"))["plan"]
    [done] = plan["done_tasks"]
    assert done["id"] == "eng-2"
    assert done["produces"] == ["getBuildingArea", "BuildingArea"]
    assert done["signatures"]["getBuildingArea"] == (
        "export async function getBuildingArea(pnu: string): Promise<number>   // web/area.ts"
    )
    assert done["signatures"]["BuildingArea"] == (
        "// web/area.ts\nexport interface BuildingArea {\n  pnu: string;\n  grossM2: number;\n}"
    )


# signature lookup for done children -------------------------------------------------------


def test_backtick_names_and_mentioned_paths() -> None:
    text = (
        "Adds `get_db(path)`, `def close_db(conn) -> None`, `User.save()`, "
        "`app.db.connect`, `npm test`, `None`, `app/db.py` and ```block```.\n"
        "See https://github.com/o/r/blob/main/app/db.py and ./web/area.ts, not lib/x.py."
    )
    names, strong = backtick_names(text)
    assert names == ["get_db", "close_db", "User", "connect"]
    assert strong == ["get_db", "close_db", "User"]
    tree = frozenset({"app/db.py", "web/area.ts", "README.md"})
    assert mentioned_paths(text, tree) == ["app/db.py", "web/area.ts"]


def test_done_signatures_from_a_named_file_without_names(base_repo: Path) -> None:
    head = git(base_repo, "rev-parse", "HEAD").strip()
    tree = BaseTree(base_repo, head)
    issue = Issue("A-1", "DB", "Implemented in app/db.py.", True)
    sigs, missing = done_signatures(issue, tree)
    assert sigs == {
        "get_db": GET_DB,
        "close_db": "def close_db(conn: sqlite3.Connection) -> None:   # app/db.py",
    }  # public only: _pragma is left out
    assert missing == []


def test_done_signatures_search_the_tree_and_report_missing_names(base_repo: Path) -> None:
    head = git(base_repo, "rev-parse", "HEAD").strip()
    tree = BaseTree(base_repo, head)
    issue = Issue("A-2", "DB", "Adds `close_db(conn)` and `drop_all()`; run `pytest`.", True)
    sigs, missing = done_signatures(issue, tree)
    assert list(sigs) == ["close_db"]
    assert missing == ["drop_all"]  # `pytest` is a bare word, not reported


def test_mark_done_by_key() -> None:
    tree = IssueTree("jira", Issue("P-1", "Parent"), [Issue("P-2", "a"), Issue("P-3", "b")])
    marked = mark_done(tree, ["p-3"])
    assert [(c.key, c.done) for c in marked.children] == [("P-2", False), ("P-3", True)]
    with pytest.raises(IntakeError, match=r"--done P-9: not a child of P-1 \(children: P-2, P-3\)"):
        mark_done(tree, ["P-9"])

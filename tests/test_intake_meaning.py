"""Intake as the trackers mean it: against trackers written from their docs.

- a child closed without its work done (GitHub ``not_planned`` / ``duplicate``, a Jira
  "Won't Do" resolution, a Linear ``canceled`` / ``duplicate`` state) is skipped: no task, no
  done task, listed with its reason at Gate 1 and in the planning prompt as NOT on the base
  branch;
- Jira Data Center: detected by serverInfo or configured, ``/rest/api/2/search`` and a Bearer
  personal access token (JIRA_PAT), which never shows in a message or a log line;
- GitHub Enterprise Server by a configured host; an unknown host is refused with the exact
  config that makes it work (the tests write that config and run again);
- Linear: every query lo-orch sends is validated against Linear's public schema.

Bad input (wrong token, unknown host, missing issue) exits 1 with a message naming what to set.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from fixtures.intake.tracker_server import TrackerServer, serve
from fixtures.intake.trackers_doc import GithubTracker, JiraTracker, LinearTracker
from helpers.git import git
from helpers.intake import FIXTURES, calls, plan_cli

from loop_orchestrator.cli.main import run_cli
from loop_orchestrator.config import IntakeConfig
from loop_orchestrator.errors import IntakeError
from loop_orchestrator.intake import linear
from loop_orchestrator.intake.fetch import fetch_tree
from loop_orchestrator.intake.http import NotFoundError, TokenRejectedError, TrackerHttpError
from loop_orchestrator.intake.trackers import IssueTree, parse_key
from loop_orchestrator.runstate.state import RunDir

TRACKER_VARS = (
    "JIRA_URL",
    "JIRA_EMAIL",
    "JIRA_API_TOKEN",
    "JIRA_PAT",
    "LINEAR_API_KEY",
    "LINEAR_API_URL",
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "GITHUB_API_URL",
    "GH_ENTERPRISE_TOKEN",
    "GITHUB_ENTERPRISE_TOKEN",
)
DB_PY = (
    'import sqlite3\n\n\ndef get_db(path: str = ":memory:") -> sqlite3.Connection:\n'
    "    return sqlite3.connect(path)\n"
)


@pytest.fixture(autouse=True)
def _no_tracker_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in TRACKER_VARS:
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def server() -> Iterator[TrackerServer]:
    with serve(TrackerServer()) as srv:
        yield srv


@pytest.fixture
def base_repo(git_repo: Path) -> Path:
    (git_repo / "app" / "db.py").write_text(DB_PY, encoding="utf-8")
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-q", "--no-gpg-sign", "-m", "db access")
    return git_repo


def answer_for(tmp_path: Path, ids: dict[str, str], extra: Sequence[str] = ()) -> str:
    """issue_plan.json with its task ids renamed (repo-2 -> proj-2...); ``extra``: more tasks,
    copies of the first, with these ids (an agent planning a child it was told to skip)."""
    answer = json.loads((FIXTURES / "issue_plan.json").read_text(encoding="utf-8"))
    tasks = answer["structured_output"]["tasks"]
    for t in tasks:
        t["id"] = ids[t["id"]]
        t["depends_on"] = [ids[d] for d in t["depends_on"]]
    for n, tid in enumerate(extra):
        copy = json.loads(json.dumps(tasks[0]))
        copy.update(id=tid, produces=[f"thing{n}"], owns=[f"app/extra{n}.py"])
        tasks.append(copy)
    path = tmp_path / f"answer-{'-'.join(ids.values())}-{len(extra)}.json"
    path.write_text(json.dumps(answer), encoding="utf-8")
    return str(path)


def write_config(repo: Path, text: str) -> None:
    (repo / ".loop-orchestrator").mkdir(exist_ok=True)
    (repo / ".loop-orchestrator" / "config.toml").write_text(text, encoding="utf-8")


def config_from_hint(hint: str) -> str:
    """The TOML lines an error hint tells the user to add (indented under the hint)."""
    lines = [line.strip() for line in hint.splitlines() if line.startswith("  ")]
    assert lines, hint
    return "\n".join(line.split("#")[0].strip() for line in lines) + "\n"


def states(tree: IssueTree) -> list[tuple[str, str]]:
    return [
        (c.key, "skipped: " + c.skipped if c.skipped else "done" if c.done else "open")
        for c in tree.children
    ]


# GitHub: state_reason ---------------------------------------------------------------------


def github_tree(gh: GithubTracker, slug: str = "owner/repo") -> None:
    """Parent #1 with six sub-issues as GitHub records them."""
    gh.add(slug, 1, "User profiles", "Profiles live in app/.")
    gh.add(slug, 2, "User model", "A `User` dataclass.", parent=1)
    gh.add(
        slug, 3, "DB access", "Adds `get_db(path)` in app/db.py.", "closed", "completed", parent=1
    )
    gh.add(slug, 4, "Profile service", "save/load with get_db.", parent=1)
    gh.add(slug, 5, "Profile page", "Render a profile.", parent=1)
    gh.add(slug, 6, "Avatars", "Upload `set_avatar(user, png)`.", "closed", "not_planned", parent=1)
    gh.add(
        slug, 7, "Profile model", "Same as #2: `Profile` class.", "closed", "duplicate", parent=1
    )


def test_github_state_reason_decides_done_or_skipped(server: TrackerServer) -> None:
    gh = GithubTracker(server.url)
    github_tree(gh)
    gh.add("owner/repo", 8, "Old", "closed before GitHub kept reasons", "closed", None, parent=1)
    gh.add("owner/repo", 9, "Reopened", "", "open", "reopened", parent=1)
    server.fallback = gh
    tree = fetch_tree("owner/repo#1", Path(), env={"GITHUB_API_URL": server.url}, profile={})
    assert states(tree) == [
        ("owner/repo#2", "open"),
        ("owner/repo#3", "done"),
        ("owner/repo#4", "open"),
        ("owner/repo#5", "open"),
        ("owner/repo#6", "skipped: closed as not planned"),
        ("owner/repo#7", "skipped: closed as a duplicate"),
        ("owner/repo#8", "done"),
        ("owner/repo#9", "open"),
    ]
    assert len([r for r in server.requests if r.path.endswith("/sub_issues")]) == 4  # pages


def test_github_ticked_box_does_not_make_a_not_planned_issue_done(server: TrackerServer) -> None:
    gh = GithubTracker(server.url)
    gh.add("o/r", 1, "Parent", "- [x] #2\n- [x] #3\n- [ ] #4\n")
    gh.add("o/r", 2, "Dropped", "", "closed", "not_planned")
    gh.add("o/r", 3, "Ticked, still open")
    gh.add("o/r", 4, "Open")
    server.fallback = gh
    tree = fetch_tree("o/r#1", Path(), env={"GITHUB_API_URL": server.url}, profile={})
    assert states(tree) == [
        ("o/r#2", "skipped: closed as not planned"),
        ("o/r#3", "done"),
        ("o/r#4", "open"),
    ]


def test_plan_lists_skipped_children_at_gate_1_and_tells_the_model_they_are_not_built(
    base_repo: Path,
    server: TrackerServer,
    fake_log: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    gh = GithubTracker(server.url, token="gh-token")
    github_tree(gh)
    server.fallback = gh
    monkeypatch.setenv("GITHUB_API_URL", server.url)
    monkeypatch.setenv("GITHUB_TOKEN", "gh-token")
    code, out, err = plan_cli(base_repo, capsys, "--issue", "owner/repo#1")
    assert code == 0, err

    plan = json.loads(RunDir(base_repo).plan_json.read_text(encoding="utf-8"))["plan"]
    assert [t["id"] for t in plan["tasks"]] == ["repo-2", "repo-4", "repo-5"]
    assert [d["id"] for d in plan["done_tasks"]] == ["repo-3"]  # not 6, not 7

    skipped_line = (
        "Skipped (no session, not done: their code is NOT on the base branch): "
        "owner/repo#6 (closed as not planned), owner/repo#7 (closed as a duplicate)"
    )
    assert skipped_line in out
    assert "Already done (no session): repo-3\n" in out
    assert "done: owner/repo#3 -> done_tasks; skipped: owner/repo#6, owner/repo#7" in out
    draft = (base_repo / ".orchestration" / "plan.draft.yaml").read_text(encoding="utf-8")
    assert "# " + skipped_line in draft  # still visible to whoever edits the draft

    [call] = calls(fake_log)
    prompt = call["argv"][1]
    done_part = prompt.split("## Child issues already done", 1)[1].split("\n## ", 1)[0]
    assert "owner/repo#3" in done_part
    assert "owner/repo#6" not in done_part and "owner/repo#7" not in done_part
    skipped_part = prompt.split("## Child issues closed without being done", 1)[1]
    assert "Their code is NOT on the base branch" in skipped_part
    assert "- owner/repo#6: Avatars (closed as not planned)" in skipped_part
    assert "- owner/repo#7: Profile model (closed as a duplicate)" in skipped_part
    assert 'task-id="repo-6"' not in prompt and 'task-id="repo-7"' not in prompt

    # the way out the Gate 1 line names: `--done KEY` for a skipped child whose work landed
    assert "plan again with `--done KEY`" in out
    code, out, err = plan_cli(
        base_repo, capsys, "--issue", "owner/repo#1", "--done", "owner/repo#6"
    )
    assert code == 0, err
    plan = json.loads(RunDir(base_repo).plan_json.read_text(encoding="utf-8"))["plan"]
    assert [d["id"] for d in plan["done_tasks"]] == ["repo-3", "repo-6"]
    assert "owner/repo#7 (closed as a duplicate)" in out and "owner/repo#6 (" not in out


def test_an_agent_that_plans_a_skipped_child_is_refused(
    base_repo: Path,
    server: TrackerServer,
    fake_log: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    gh = GithubTracker(server.url)
    github_tree(gh)
    server.fallback = gh
    monkeypatch.setenv("GITHUB_API_URL", server.url)
    ids = {"repo-2": "repo-2", "repo-4": "repo-4", "repo-5": "repo-5"}
    monkeypatch.setenv("FAKE_CLAUDE_SCENARIO", answer_for(tmp_path, ids, extra=["repo-6"]))
    code, _out, err = plan_cli(base_repo, capsys, "--issue", "owner/repo#1")
    assert code == 1
    assert "task 'repo-6': matches no open child issue" in err
    assert len(calls(fake_log)) == 2  # told once, refused again
    assert not RunDir(base_repo).plan_json.exists()


def test_done_flag_overrides_a_skip_and_all_closed_names_the_skipped(
    base_repo: Path,
    server: TrackerServer,
    fake_log: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    gh = GithubTracker(server.url)
    gh.add("o/r", 1, "Parent")
    gh.add(
        "o/r",
        2,
        "Built elsewhere",
        "Adds `get_db()` in app/db.py.",
        "closed",
        "not_planned",
        parent=1,
    )
    gh.add("o/r", 3, "Dropped", "", "closed", "duplicate", parent=1)
    server.fallback = gh
    monkeypatch.setenv("GITHUB_API_URL", server.url)
    code, _out, err = plan_cli(base_repo, capsys, "--issue", "o/r#1")
    assert code == 1
    assert (
        "no child of o/r#1 is open: 0 done, 2 skipped (o/r#2 (closed as not planned), "
        "o/r#3 (closed as a duplicate))"
    ) in err
    assert calls(fake_log) == []
    tree = fetch_tree("o/r#1", Path(), env={"GITHUB_API_URL": server.url}, profile={})
    from loop_orchestrator.intake.issue import mark_done

    marked = mark_done(tree, ["o/r#2"])
    assert states(marked) == [("o/r#2", "done"), ("o/r#3", "skipped: closed as a duplicate")]


# GitHub Enterprise Server -----------------------------------------------------------------


def test_github_enterprise_by_configured_host(
    base_repo: Path,
    server: TrackerServer,
    fake_log: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    host = f"127.0.0.1:{server.port}"
    gh = GithubTracker(server.url, token="ghe-token", prefix="/api/v3", html_host=server.url)
    github_tree(gh)
    server.fallback = gh
    url = f"{server.url}/owner/repo/issues/1"
    # a github.com token must never go to another host
    monkeypatch.setenv("GITHUB_TOKEN", "github-com-token")

    # an unknown host: refused, nothing asked, and the hint is the config that works
    code, _out, err = plan_cli(base_repo, capsys, "--issue", url)
    assert code == 1
    assert f"{host} is not a GitHub host lo-orch knows" in err
    assert server.requests == [] and calls(fake_log) == []
    hint = err.split("\n", 1)[1]
    write_config(base_repo, config_from_hint(hint))
    assert f'hosts = ["{host}"]' in (base_repo / ".loop-orchestrator/config.toml").read_text()

    # configured, without the enterprise token: GitHub's 401, naming the variable to set
    code, _out, err = plan_cli(base_repo, capsys, "--issue", url)
    assert code == 1
    assert "GitHub Enterprise Server token rejected (HTTP 401): Bad credentials" in err
    assert "GH_ENTERPRISE_TOKEN" in err
    assert all("authorization" not in r.headers for r in server.requests)
    assert all(r.path.startswith("/api/v3/") for r in server.requests)

    monkeypatch.setenv("GH_ENTERPRISE_TOKEN", "ghe-token")
    code, out, err = plan_cli(base_repo, capsys, "--issue", url)
    assert code == 0, err
    assert "Skipped (no session, not done" in out
    plan = json.loads(RunDir(base_repo).plan_json.read_text(encoding="utf-8"))["plan"]
    assert [t["id"] for t in plan["tasks"]] == ["repo-2", "repo-4", "repo-5"]
    assert server.requests[-1].headers["authorization"] == "Bearer ghe-token"

    # a missing issue on the enterprise host
    code, _out, err = plan_cli(base_repo, capsys, "--issue", f"{server.url}/owner/repo/issues/99")
    assert code == 1
    assert "GitHub Enterprise Server: issue owner/repo#99 not found (HTTP 404)" in err


def test_github_enterprise_without_the_sub_issues_api_reads_the_task_list(
    server: TrackerServer,
) -> None:
    gh = GithubTracker(server.url, prefix="/api/v3", html_host=server.url, sub_issues_api=False)
    gh.add("o/r", 1, "Parent", f"- [ ] #2\n- [x] {server.url}/o/r/issues/3\n- [ ] #4\n")
    gh.add("o/r", 2, "Open")
    gh.add("o/r", 3, "Ticked")
    gh.add("o/r", 4, "Dropped", "", "closed", "not_planned")
    server.fallback = gh
    intake = IntakeConfig.model_validate({"github": {"hosts": [f"127.0.0.1:{server.port}"]}})
    tree = fetch_tree(f"{server.url}/o/r/issues/1", Path(), env={}, profile={}, intake=intake)
    assert states(tree) == [
        ("o/r#2", "open"),
        ("o/r#3", "done"),
        ("o/r#4", "skipped: closed as not planned"),
    ]
    # on github.com a missing sub-issues API is not hidden: it is an error
    gh.prefix = ""
    with pytest.raises(NotFoundError, match="the sub-issues of o/r#1 not found"):
        fetch_tree("o/r#1", Path(), env={"GITHUB_API_URL": server.url}, profile={})


@pytest.mark.parametrize(
    "url", ["https://github.mycorp.example/o/r/issues/3", "https://git.example.com/o/r/issues/3"]
)
def test_a_github_shaped_url_on_an_unknown_host_is_never_guessed(url: str) -> None:
    with pytest.raises(IntakeError) as info:
        parse_key(url, env={"GITHUB_API_URL": "https://api.github.com"})
    host = url.split("/")[2]
    assert f'hosts = ["{host}"]' in (info.value.hint or "")
    ref = parse_key(
        url,
        env={},
        intake=IntakeConfig.model_validate({"github": {"hosts": [f"https://{host.upper()}/"]}}),
    )
    assert (ref.tracker, ref.key, ref.api_url) == ("github", "o/r#3", f"https://{host}/api/v3")
    assert parse_key("https://github.com/o/r/issues/3", env={}).api_url == ""


def test_a_jira_data_center_url_keeps_its_context_path() -> None:
    assert parse_key("https://example.com/jira/browse/proj-7", env={}).base_url == (
        "https://example.com/jira"
    )
    assert parse_key("https://acme.atlassian.net/browse/PROJ-7", env={}).base_url == (
        "https://acme.atlassian.net"
    )


# Jira -------------------------------------------------------------------------------------


def jira_tree(jira: JiraTracker, epic: bool = False) -> None:
    """PROJ-1 and its children with the resolutions a real project has."""
    link = {"epic": "PROJ-1"} if epic else {"parent": "PROJ-1"}
    jira.add("PROJ-1", "User profiles", "Profiles live in app/.", "indeterminate", "In Progress")
    jira.add("PROJ-2", "User model", "A `User` dataclass.", **link)
    jira.add(
        "PROJ-3", "DB access", "Adds `get_db(path)` in app/db.py.", "done", "Done", "Done", **link
    )
    jira.add("PROJ-4", "Profile service", "save/load.", "indeterminate", "In Progress", **link)
    jira.add("PROJ-5", "Profile page", "Render.", **link)
    jira.add("PROJ-6", "Avatars", "`set_avatar()`", "done", "Closed", "Won't Do", **link)
    jira.add("PROJ-7", "Profile model", "", "done", "Closed", "Duplicate", **link)
    jira.add("PROJ-8", "Crash on save", "", "done", "Resolved", "Cannot Reproduce", **link)
    jira.add("PROJ-9", "Theme", "", "done", "Won't Do", None, **link)  # team-managed style


def jira_on(
    server: TrackerServer, deployment: str, *, epic: bool = False, **kw: Any
) -> JiraTracker:
    """A Jira site (``deployment``) with ``jira_tree``'s issues, served by ``server``."""
    jira = JiraTracker(deployment, **kw)
    jira_tree(jira, epic=epic)
    server.fallback = jira
    return jira


def plan_proj_1(
    repo: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> tuple[str, str]:
    """`lo-orch plan --issue PROJ-1`, the agent planning PROJ-1's open children; it
    succeeds: (stdout, stderr)."""
    ids = {"repo-2": "proj-2", "repo-4": "proj-4", "repo-5": "proj-5"}
    monkeypatch.setenv("FAKE_CLAUDE_SCENARIO", answer_for(tmp_path, ids))
    code, out, err = plan_cli(repo, capsys, "--issue", "PROJ-1")
    assert code == 0, err
    return out, err


JIRA_STATES = [
    ("PROJ-2", "open"),
    ("PROJ-3", "done"),
    ("PROJ-4", "open"),
    ("PROJ-5", "open"),
    ("PROJ-6", 'skipped: resolved as "Won\'t Do"'),
    ("PROJ-7", "skipped: resolved as 'Duplicate'"),
    ("PROJ-8", "skipped: resolved as 'Cannot Reproduce'"),
    ("PROJ-9", 'skipped: status "Won\'t Do"'),
]


def test_jira_cloud_detected_and_wont_do_is_skipped(server: TrackerServer) -> None:
    jira = jira_on(server, "cloud")
    env = {"JIRA_URL": server.url, "JIRA_EMAIL": jira.email, "JIRA_API_TOKEN": jira.token}
    tree = fetch_tree("PROJ-1", Path(), env=env, profile={})
    assert states(tree) == JIRA_STATES
    paths = [r.path for r in server.requests]
    assert paths[:2] == ["/rest/api/2/serverInfo", "/rest/api/3/issue/PROJ-1"]
    assert set(paths[2:]) == {"/rest/api/3/search/jql"} and len(paths) == 6  # 4 pages of 2


def test_jira_data_center_detected_with_pat_epics_and_start_at_pages(
    server: TrackerServer, caplog: pytest.LogCaptureFixture
) -> None:
    jira = jira_on(server, "datacenter", token="dc-pat-secret", epic=True)
    jira.add("PROJ-10", "A sub-task", "", parent="PROJ-1")
    env = {"JIRA_URL": server.url + "/", "JIRA_PAT": "dc-pat-secret"}
    with caplog.at_level(logging.DEBUG):
        tree = fetch_tree("PROJ-1", Path(), env=env, profile={})
    assert states(tree) == [*JIRA_STATES, ("PROJ-10", "open")]
    assert tree.parent.url == f"{server.url}/browse/PROJ-1"
    info, issue, *searches = server.requests
    assert info.path == "/rest/api/2/serverInfo"
    assert issue.path == "/rest/api/2/issue/PROJ-1"
    assert issue.headers["authorization"] == "Bearer dc-pat-secret"
    assert [s.param("startAt") for s in searches] == ["0", "2", "4", "6", "8"]
    assert all(s.path == "/rest/api/2/search" for s in searches)
    assert searches[0].param("jql") == (
        'parent = "PROJ-1" OR "Epic Link" = "PROJ-1" ORDER BY key ASC'
    )
    assert "dc-pat-secret" not in caplog.text


def test_jira_server_info_closed_to_anonymous_is_asked_with_the_pat(server: TrackerServer) -> None:
    jira = jira_on(server, "datacenter", anonymous_info=False)
    tree = fetch_tree(
        "PROJ-1", Path(), env={"JIRA_URL": server.url, "JIRA_PAT": jira.token}, profile={}
    )
    assert states(tree) == JIRA_STATES
    first, second = server.requests[:2]
    assert first.path == second.path == "/rest/api/2/serverInfo"
    assert "authorization" not in first.headers
    assert second.headers["authorization"] == f"Bearer {jira.token}"


def test_jira_data_center_without_jira_software_reads_sub_tasks(server: TrackerServer) -> None:
    jira = jira_on(server, "datacenter", epic_link=False)
    env = {"JIRA_URL": server.url, "JIRA_PAT": jira.token}
    tree = fetch_tree("PROJ-1", Path(), env=env, profile={})
    assert states(tree) == JIRA_STATES
    jqls = [r.param("jql") for r in server.requests if r.path == "/rest/api/2/search"]
    assert (jqls[0] or "").startswith('parent = "PROJ-1" OR "Epic Link"')
    assert set(jqls[1:]) == {'parent = "PROJ-1" ORDER BY key ASC'}


def test_jira_data_center_configured_end_to_end(
    base_repo: Path,
    server: TrackerServer,
    fake_log: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    jira = jira_on(server, "datacenter")
    write_config(base_repo, '[intake.jira]\ndeployment = "datacenter"\n')
    monkeypatch.setenv("JIRA_URL", server.url)
    monkeypatch.setenv("JIRA_PAT", jira.token)
    out, _err = plan_proj_1(base_repo, capsys, monkeypatch, tmp_path)
    assert "/rest/api/2/serverInfo" not in [r.path for r in server.requests]  # configured
    plan = json.loads(RunDir(base_repo).plan_json.read_text(encoding="utf-8"))["plan"]
    assert [t["id"] for t in plan["tasks"]] == ["proj-2", "proj-4", "proj-5"]
    assert [d["id"] for d in plan["done_tasks"]] == ["proj-3"]
    assert (
        "PROJ-6 (resolved as \"Won't Do\"), PROJ-7 (resolved as 'Duplicate'), "
        "PROJ-8 (resolved as 'Cannot Reproduce'), PROJ-9 (status \"Won't Do\")"
    ) in out
    prompt = calls(fake_log)[0]["argv"][1]
    assert '- PROJ-6: Avatars (resolved as "Won\'t Do")' in prompt


@pytest.mark.parametrize(
    ("case", "words", "to_set"),
    [
        (
            "wrong-pat",
            "Jira Data Center token rejected (HTTP 401): You are not authenticated",
            "JIRA_PAT",
        ),
        ("forbidden", "Jira Data Center refused access to issue PROJ-1 (HTTP 403)", "JIRA_PAT"),
        (
            "missing",
            "Jira Data Center: issue PROJ-404 not found (HTTP 404): Issue does not exist",
            "JIRA_PAT",
        ),
        ("no-pat", "Jira Data Center needs JIRA_PAT to be set", "JIRA_PAT"),
        (
            "cloud-creds",
            "Jira Data Center needs JIRA_PAT to be set",
            "JIRA_EMAIL and JIRA_API_TOKEN are for Jira Cloud",
        ),
    ],
)
def test_jira_data_center_bad_input_exits_1_naming_what_to_set(
    git_repo: Path,
    server: TrackerServer,
    fake_log: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    case: str,
    words: str,
    to_set: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    jira = jira_on(server, "datacenter", token="the-real-pat")
    jira.forbidden.add("PROJ-1") if case == "forbidden" else None
    write_config(git_repo, '[intake.jira]\ndeployment = "datacenter"\n')
    monkeypatch.setenv("JIRA_URL", server.url)
    pat = {"wrong-pat": "a-wrong-pat-value", "no-pat": "", "cloud-creds": ""}.get(
        case, "the-real-pat"
    )
    if pat:
        monkeypatch.setenv("JIRA_PAT", pat)
    if case == "cloud-creds":
        monkeypatch.setenv("JIRA_EMAIL", "me@example.com")
        monkeypatch.setenv("JIRA_API_TOKEN", "cloud-token")
    with caplog.at_level(logging.DEBUG):
        code, out, err = plan_cli(
            git_repo, capsys, "--issue", "PROJ-404" if case == "missing" else "PROJ-1"
        )
    assert code == 1, out
    assert err.startswith("Error: ") and "Traceback" not in err
    assert words in err
    assert to_set in err
    if case in ("no-pat", "cloud-creds"):
        assert server.requests == []  # nothing sent without the right credentials
    for secret in ("a-wrong-pat-value", "the-real-pat", "cloud-token"):
        assert secret not in err + out + caplog.text
    assert calls(fake_log) == []
    assert not RunDir(git_repo).plan_json.exists()


def test_jira_cloud_bad_input_exits_1(
    git_repo: Path,
    server: TrackerServer,
    fake_log: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    jira = jira_on(server, "cloud")
    monkeypatch.setenv("JIRA_URL", server.url)
    monkeypatch.setenv("JIRA_EMAIL", jira.email)
    monkeypatch.setenv("JIRA_API_TOKEN", "not-the-token")
    code, _out, err = plan_cli(git_repo, capsys, "--issue", "PROJ-1")
    assert code == 1
    assert "Jira token rejected (HTTP 401): You are not authenticated" in err
    assert "Check JIRA_EMAIL and JIRA_API_TOKEN" in err
    assert "not-the-token" not in err
    monkeypatch.setenv("JIRA_API_TOKEN", jira.token)
    code, _out, err = plan_cli(git_repo, capsys, "--issue", "PROJ-77")
    assert code == 1
    assert "Jira: issue PROJ-77 not found (HTTP 404): Issue does not exist" in err
    # nothing listens on port 1: the site cannot be reached, and the message says which
    monkeypatch.setenv("JIRA_URL", "http://127.0.0.1:1")
    code, _out, err = plan_cli(git_repo, capsys, "--issue", "PROJ-1")
    assert code == 1
    assert err.startswith("Error: cannot reach Jira at http://127.0.0.1:1")
    assert "Check the network and JIRA_URL" in err
    assert calls(fake_log) == []


def test_jira_cloud_api_against_data_center_says_how_to_configure_and_that_works(
    base_repo: Path,
    server: TrackerServer,
    fake_log: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    jira = jira_on(server, "datacenter")
    write_config(base_repo, '[intake.jira]\ndeployment = "cloud"\n')  # the wrong one
    monkeypatch.setenv("JIRA_URL", server.url)
    monkeypatch.setenv("JIRA_EMAIL", "me@example.com")
    monkeypatch.setenv("JIRA_API_TOKEN", "cloud-token")
    monkeypatch.setenv("JIRA_PAT", jira.token)
    code, _out, err = plan_cli(base_repo, capsys, "--issue", "PROJ-1")
    assert code == 1
    assert "Jira: issue PROJ-1 not found (HTTP 404)" in err
    assert (
        "lo-orch used the Jira Cloud API ([intake.jira] deployment); if JIRA_URL is Jira "
        'Data Center, set [intake.jira] deployment = "datacenter" in '
        ".loop-orchestrator/config.toml."
    ) in err
    write_config(base_repo, '[intake.jira]\ndeployment = "datacenter"\n')
    plan_proj_1(base_repo, capsys, monkeypatch, tmp_path)


def test_jira_undetectable_site_says_how_to_configure_and_that_works(
    base_repo: Path,
    server: TrackerServer,
    fake_log: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    jira = JiraTracker("datacenter")
    jira_tree(jira)

    def no_server_info(req: Any) -> Any:  # a proxy that hides serverInfo
        if req.path == "/rest/api/2/serverInfo":
            return 404, {"Content-Type": "text/html"}, b"<html>gone</html>"
        return jira(req)

    server.fallback = no_server_info
    monkeypatch.setenv("JIRA_URL", server.url)
    monkeypatch.setenv("JIRA_PAT", jira.token)
    code, _out, err = plan_cli(base_repo, capsys, "--issue", "PROJ-1")
    assert code == 1
    assert f"cannot tell whether {server.url} is Jira Cloud or Jira Data Center" in err
    write_config(base_repo, config_from_hint(err.split("\n", 1)[1]))
    assert 'deployment = "datacenter"' in (
        base_repo / ".loop-orchestrator" / "config.toml"
    ).read_text(encoding="utf-8")
    plan_proj_1(base_repo, capsys, monkeypatch, tmp_path)


def test_jira_done_resolutions_extend_the_known_ones(server: TrackerServer) -> None:
    jira = JiraTracker("cloud")
    jira.add("PROJ-1", "Parent")
    jira.add("PROJ-2", "Localized", "", "done", "Fertig", "Erledigt", parent="PROJ-1")
    jira.add("PROJ-3", "Dropped", "", "done", "Fertig", "Wird nicht erledigt", parent="PROJ-1")
    # team-managed: no resolution at all, or Done set on every done-category status
    jira.add("PROJ-4", "No resolution", "", "done", "Done", None, parent="PROJ-1")
    jira.add("PROJ-5", "Won't, auto-resolved", "", "done", "Won\u2019t Do", "Done", parent="PROJ-1")
    server.fallback = jira
    env = {"JIRA_URL": server.url, "JIRA_EMAIL": jira.email, "JIRA_API_TOKEN": jira.token}
    tree = fetch_tree("PROJ-1", Path(), env=env, profile={})
    assert states(tree)[:2] == [
        ("PROJ-2", "skipped: resolved as 'Erledigt'"),
        ("PROJ-3", "skipped: resolved as 'Wird nicht erledigt'"),
    ]
    assert states(tree)[2:] == [("PROJ-4", "done"), ("PROJ-5", "skipped: status 'Won\u2019t Do'")]
    intake = IntakeConfig.model_validate({"jira": {"done_resolutions": [" erledigt "]}})
    tree = fetch_tree("PROJ-1", Path(), env=env, profile={}, intake=intake)
    assert states(tree)[:2] == [
        ("PROJ-2", "done"),
        ("PROJ-3", "skipped: resolved as 'Wird nicht erledigt'"),
    ]


def test_jira_settings_reject_an_unknown_deployment(
    git_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_config(git_repo, '[intake.jira]\ndeployment = "server"\n')
    code, _out, err = plan_cli(git_repo, capsys, "--issue", "PROJ-1")
    assert code == 1
    assert "intake.jira.deployment" in err and "'cloud'" in err and "'datacenter'" in err


# Linear -----------------------------------------------------------------------------------


def linear_tracker() -> LinearTracker:
    lin = LinearTracker()
    lin.add("ENG-1", "User profiles", "started", description="Profiles live in app/.")
    lin.add("ENG-2", "User model", parent="ENG-1", description="A `User` dataclass.")
    lin.add(
        "ENG-3",
        "DB access",
        "completed",
        "Done",
        parent="ENG-1",
        description="Adds `get_db(path)` in app/db.py.",
    )
    lin.add("ENG-4", "Profile service", "started", "In Progress", parent="ENG-1")
    lin.add("ENG-5", "Profile page", "backlog", parent="ENG-1")
    lin.add("ENG-6", "Avatars", "canceled", "Canceled", parent="ENG-1")
    lin.add("ENG-7", "Profile model", "canceled", "Duplicate", parent="ENG-1", duplicate_of="ENG-2")
    lin.add("ENG-8", "Theme", "duplicate", "Duplicate", parent="ENG-1")
    return lin


def test_linear_against_its_public_schema(server: TrackerServer) -> None:
    lin = linear_tracker()
    server.fallback = lin
    env = {"LINEAR_API_URL": f"{server.url}/graphql", "LINEAR_API_KEY": lin.api_key}
    tree = fetch_tree("eng-1", Path(), env=env, profile={})
    assert states(tree) == [
        ("ENG-2", "open"),
        ("ENG-3", "done"),
        ("ENG-4", "open"),
        ("ENG-5", "open"),
        ("ENG-6", "skipped: canceled"),
        ("ENG-7", "skipped: duplicate of ENG-2"),
        ("ENG-8", "skipped: duplicate"),
    ]
    assert tree.parent.body == "Profiles live in app/."
    assert len(lin.queries) == 4  # 7 children, 2 a page
    assert all(q == linear.QUERY for q in lin.queries)
    # Linear refuses a query over 10,000 points; this one stays far below
    assert all(points < 1_000 for points in lin.complexities), lin.complexities
    assert [r.body["variables"]["after"] for r in server.requests] == [None, "2", "4", "6"]


def test_the_linear_server_refuses_what_the_schema_does_not_have(server: TrackerServer) -> None:
    """Negative control: the validation bites (a field the issue brief guessed, and a typo)."""
    from loop_orchestrator.intake.http import HttpClient, Service

    lin = linear_tracker()
    server.fallback = lin
    http = HttpClient(
        Service("Linear", "LINEAR_API_KEY", "LINEAR_API_URL"),
        headers={"Authorization": lin.api_key},
    )
    for query, words in (
        (
            '{ issue(id: "ENG-1") { duplicateOf { identifier } } }',
            "Cannot query field 'duplicateOf' on type 'Issue'.",
        ),
        (
            '{ issue(id: "ENG-1") { children(frist: 5) { nodes { identifier } } } }',
            "Unknown argument 'frist'",
        ),
        ("query($id: ID!) { issue(id: $id) { identifier } }", "Variable '$id' of type 'ID!'"),
        (
            '{ issue(id: "ENG-1") { children(first: 250) { nodes { identifier '
            "relations(first: 50) { nodes { type relatedIssue { identifier } } } } } } }",
            "Query too complex: 27776 points",
        ),
    ):
        resp = http.post_json(
            f"{server.url}/graphql", {"query": query, "variables": {"id": "x"}}, allow=(400,)
        )
        assert resp.status == 400
        assert words in resp.data["errors"][0]["message"]


@pytest.mark.parametrize(
    ("key", "api_key", "error", "words", "to_set"),
    [
        (
            "ENG-1",
            "lin_api_wrong",
            TokenRejectedError,
            "Linear token rejected: Authentication required",
            "LINEAR_API_KEY",
        ),
        (
            "ENG-99",
            "lin_api_secret",
            NotFoundError,
            "Linear: issue ENG-99 not found: Entity not found: Issue",
            "LINEAR_API_KEY",
        ),
    ],
)
def test_linear_bad_input(
    server: TrackerServer,
    key: str,
    api_key: str,
    error: type[TrackerHttpError],
    words: str,
    to_set: str,
) -> None:
    server.fallback = linear_tracker()
    env = {"LINEAR_API_URL": f"{server.url}/graphql", "LINEAR_API_KEY": api_key}
    with pytest.raises(error) as info:
        fetch_tree(key, Path(), env=env, profile={})
    assert words in info.value.message
    assert to_set in (info.value.hint or "")
    assert "lin_api_wrong" not in info.value.render()


def test_linear_end_to_end_exit_codes(
    base_repo: Path,
    server: TrackerServer,
    fake_log: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    server.fallback = linear_tracker()
    monkeypatch.setenv("LINEAR_API_URL", f"{server.url}/graphql")
    monkeypatch.setenv("LINEAR_API_KEY", "lin_api_wrong")
    code, _out, err = plan_cli(base_repo, capsys, "--issue", "ENG-1")
    assert code == 1
    assert "Linear token rejected" in err and "LINEAR_API_KEY" in err
    monkeypatch.setenv("LINEAR_API_KEY", "lin_api_secret")
    code, _out, err = plan_cli(base_repo, capsys, "--issue", "ENG-99")
    assert code == 1
    assert "Linear: issue ENG-99 not found" in err
    ids = {"repo-2": "eng-2", "repo-4": "eng-4", "repo-5": "eng-5"}
    monkeypatch.setenv("FAKE_CLAUDE_SCENARIO", answer_for(tmp_path, ids))
    code, out, err = plan_cli(
        base_repo, capsys, "--issue", "https://linear.app/acme/issue/ENG-1/user-profiles"
    )
    assert code == 0, err
    assert re.search(
        r"ENG-6 \(canceled\), ENG-7 \(duplicate of ENG-2\), "
        r"ENG-8 \(duplicate\)",
        out,
    )
    plan = json.loads(RunDir(base_repo).plan_json.read_text(encoding="utf-8"))["plan"]
    assert [d["id"] for d in plan["done_tasks"]] == ["eng-3"]


# the intake command (kind = "cli") --------------------------------------------------------


def test_intake_command_may_report_skipped_children(tmp_path: Path) -> None:
    script = tmp_path / "tree.py"
    script.write_text(
        "import json\nprint(json.dumps({'parent': {'key': 'X-1', 'title': 'P'}, 'children': ["
        "{'key': 'X-2', 'title': 'a'}, {'key': 'X-3', 'title': 'b', 'done': True},"
        "{'key': 'X-4', 'title': 'c', 'done': True, 'skipped': \"won't do\"}]}))\n",
        encoding="utf-8",
    )
    tree = fetch_tree(
        "X-1",
        tmp_path,
        env={},
        profile={"intake": {"kind": "cli", "command": f"{sys.executable} {script}"}},
    )
    assert states(tree) == [("X-2", "open"), ("X-3", "done"), ("X-4", "skipped: won't do")]


# doctor -----------------------------------------------------------------------------------


def test_doctor_lists_the_trackers_and_what_is_missing_without_values(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from loop_orchestrator.config import Settings
    from loop_orchestrator.readiness import check_intake

    bare = check_intake(Settings(), {})
    assert bare.status == "info"
    assert bare.detail == (
        "GitHub (no token: public repositories, 60 requests an hour); "
        "Jira not configured (JIRA_URL); Linear not configured "
        "(LINEAR_API_KEY)"
    )
    settings = Settings.model_validate(
        {"intake": {"github": {"hosts": ["ghe.example.com"]}, "jira": {"deployment": "datacenter"}}}
    )
    env = {
        "JIRA_URL": "https://jira.example.com",
        "JIRA_EMAIL": "me@x",
        "JIRA_API_TOKEN": "cloud-secret",
        "GITHUB_TOKEN": "gh-secret",
    }
    half = check_intake(settings, env)
    assert half.status == "warn"
    assert "GitHub Enterprise Server ghe.example.com (no GH_ENTERPRISE_TOKEN)" in half.detail
    assert "Jira Data Center (no credentials)" in half.detail  # Cloud's token is not a PAT
    assert half.hint == (
        "Set GH_ENTERPRISE_TOKEN to a token of ghe.example.com; set JIRA_PAT for Jira."
    )
    ready = check_intake(
        settings,
        {
            **env,
            "JIRA_PAT": "pat-secret",
            "GH_ENTERPRISE_TOKEN": "ghe-secret",
            "LINEAR_API_KEY": "lin-secret",
        },
    )
    assert ready.status == "info" and "Linear (LINEAR_API_KEY set)" in ready.detail

    write_config(git_repo, '[intake.jira]\ndeployment = "datacenter"\n')
    monkeypatch.setenv("JIRA_URL", "https://jira.example.com")
    monkeypatch.setenv("JIRA_PAT", "pat-secret-value")
    run_cli(["doctor", "--repo", str(git_repo)])
    out, err = capsys.readouterr()
    assert "issue trackers" in out and "Jira Data Center (credentials set)" in out
    assert "pat-secret-value" not in out + err

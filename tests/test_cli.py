"""`lo-orch plan`, `approve`, `status` and the exit-code contract (docs/design.md section 5)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import yaml
from helpers.cli import invoke, write_plan
from helpers.git import git
from helpers.runs import STATUS_KEYS, lo_orch

from loop_orchestrator.cli.main import cli
from loop_orchestrator.errors import GateError
from loop_orchestrator.plan.loading import load_plan
from loop_orchestrator.plan.model import plan_hash
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.state import Phase, RunPhase, RunState, Store

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = REPO_ROOT / "examples" / "plan.yaml"
EXAMPLE_WAVES = {"note-model": 1, "note-store": 2, "note-search": 2, "notes-cli": 3}


def exclude_file(repo: Path) -> Path:
    return repo / ".git" / "info" / "exclude"


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    """A copy of the example plan outside the repository (so the work tree stays clean)."""
    path = tmp_path / "plans" / "plan.yaml"
    path.parent.mkdir()
    shutil.copy(EXAMPLE, path)
    return path


@pytest.fixture
def planned(git_repo: Path, plan_file: Path) -> Path:
    result = invoke("plan", plan_file, "--repo", git_repo)
    assert result.code == 0, result
    return git_repo


# help ----------------------------------------------------------------------------------


def all_commands(
    group: click.Group, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        yield (*prefix, name), cmd
        if isinstance(cmd, click.Group):
            yield from all_commands(cmd, (*prefix, name))


def test_commands_have_help() -> None:
    invoke("--help")  # registers every command module
    found = list(all_commands(cli))
    names = {" ".join(path) for path, _ in found}
    assert {"plan", "approve", "status"} <= names
    for path, cmd in found:
        assert (cmd.help or "").strip(), f"`lo-orch {' '.join(path)}` has no help text"
        result = invoke(*path, "--help")
        assert result.code == 0, (path, result)
        assert result.stdout.startswith("Usage: lo-orch " + " ".join(path)), result
        for param in cmd.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert (param.help or "").strip(), f"`{' '.join(path)}` option {param.name}"


def test_top_level_help_and_version() -> None:
    result = invoke("--help")
    assert result.code == 0
    for name in ("plan", "approve", "status"):
        assert re.search(rf"^\s+{name}\s+\S", result.stdout, re.M), name
    version = invoke("--version")
    assert version.code == 0 and version.stdout.startswith("lo-orch, version ")


# usage errors (exit 2) -------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["plan"],
        ["plan", "x.yaml", "--goal", "g"],
        ["plan", "x.yaml", "--concurrency", "0"],
        ["plan", "x.yaml", "--bogus"],
        ["no-such-command"],
        ["status", "extra-arg"],
    ],
)
def test_usage_errors_exit_2(git_repo: Path, args: list[str]) -> None:
    result = invoke(*args, "--repo", git_repo) if args[0] != "no-such-command" else invoke(*args)
    assert result.code == 2, result
    assert "Error" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (git_repo / ".orchestration").exists()


# invalid plans (exit 1, nothing written) -------------------------------------------------


def test_invalid_plan_lists_every_problem_and_writes_nothing(
    git_repo: Path, tmp_path: Path
) -> None:
    exclude_before = exclude_file(git_repo).read_bytes()
    bad = write_plan(
        tmp_path,
        {
            "goal": "broken",
            "tasks": [
                {
                    "id": "; rm -rf /",
                    "objective": "o",
                    "owns": ["a.py"],
                    "done": [{"criterion": "c", "check": "pytest || true"}],
                },
                {
                    "id": "b",
                    "objective": "o",
                    "owns": ["/etc/passwd", ".orchestration/x"],
                    "depends_on": ["ghost"],
                    "done": [{"criterion": "c", "check": "pytest"}],
                    "ownz": [],
                },
            ],
        },
    )
    result = invoke("plan", bad, "--repo", git_repo)
    assert result.code == 1, result
    assert result.stderr.startswith(f"Error: {bad}: ")
    for expected in [
        "task '; rm -rf /', field id: invalid id",
        "task '; rm -rf /', field done[0].check: 'pytest || true' uses shell syntax",
        "task 'b', field ownz: unknown key",
        "task 'b', field depends_on: unknown task 'ghost'",
        "task 'b', field owns[0]: '/etc/passwd' is absolute",
        "task 'b', field owns[1]: '.orchestration/x' is under .orchestration/",
    ]:
        assert f"  - {expected}" in result.stderr, (expected, result.stderr)
    assert "nothing was written" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert not (git_repo / ".orchestration").exists()
    assert exclude_file(git_repo).read_bytes() == exclude_before
    assert not (git_repo / ".gitignore").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "file not found"),
        ("- just\n- a list\n", "the plan must be a mapping"),
        ("goal: [broken\n", "not valid YAML"),
        ('{"goal": "x", "tasks": [}', "not valid JSON"),
    ],
)
def test_unusable_plan_files_exit_1(
    git_repo: Path, tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "plan.yaml"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    result = invoke("plan", path, "--repo", git_repo)
    assert result.code == 1, result
    assert result.stderr.startswith("Error: ")
    assert message in result.stderr
    assert not (git_repo / ".orchestration").exists()


def test_an_invalid_plan_keeps_the_previous_run(planned: Path, tmp_path: Path) -> None:
    before = {p.name: p.read_bytes() for p in (planned / ".orchestration").glob("*.json")}
    bad = write_plan(tmp_path, {"goal": "g", "tasks": []})
    assert invoke("plan", bad, "--repo", planned).code == 1
    after = {p.name: p.read_bytes() for p in (planned / ".orchestration").glob("*.json")}
    assert after == before


def test_unknown_base_is_an_error(git_repo: Path, tmp_path: Path, plan_file: Path) -> None:
    data = yaml.safe_load(plan_file.read_text())
    data["base"] = "no-such-branch"
    result = invoke("plan", write_plan(tmp_path, data), "--repo", git_repo)
    assert result.code == 1, result
    assert result.stderr.startswith("Error: ")
    assert "no-such-branch" in result.stderr
    assert not (git_repo / ".orchestration" / "plan.json").exists()


# outside a repository --------------------------------------------------------------------


def test_outside_a_git_repo(
    tmp_path: Path, plan_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = tmp_path / "not-a-repo"
    plain.mkdir()
    runs: list[list[str | Path]] = [
        ["plan", plan_file, "--repo", plain],
        ["status", "--repo", plain],
    ]
    for args in runs:
        result = invoke(*args)
        assert result.code == 1, result
        assert result.stderr.startswith("Error: ")
        assert "is not inside a git repository" in result.stderr
        assert "--repo" in result.stderr  # says what to do
    monkeypatch.chdir(plain)
    result = invoke("approve")
    assert result.code == 1 and "is not inside a git repository" in result.stderr
    missing = invoke("status", "--repo", tmp_path / "missing")
    assert missing.code in (1, 2) and "Traceback" not in missing.stderr
    assert not (plain / ".orchestration").exists()


# a valid plan ----------------------------------------------------------------------------


def test_plan_writes_the_run(git_repo: Path, plan_file: Path) -> None:
    result = invoke("plan", plan_file, "--repo", git_repo)
    assert result.code == 0, result
    orch = git_repo / ".orchestration"
    plan = load_plan(plan_file)
    sha = plan_hash(plan)

    doc = json.loads((orch / "plan.json").read_text())
    assert doc["sha256"] == sha
    assert re.fullmatch(r"[0-9a-f]{64}", doc["sha256"])
    assert doc["plan"]["goal"] == plan.goal
    assert [t["id"] for t in doc["plan"]["tasks"]] == [t.id for t in plan.tasks]
    assert doc["waves"] == [["note-model"], ["note-store", "note-search"], ["notes-cli"]]

    run = json.loads((orch / "run.json").read_text())
    head = git(git_repo, "rev-parse", "HEAD").strip()
    assert run["name"] == "notes"
    assert run["phase"] == RunPhase.AWAITING_PLAN_APPROVAL
    assert run["base_sha"] == head
    assert run["plan_sha256"] == sha
    assert run["staging_branch"] == "lo/notes/staging"
    assert run["feature_branch"] == "feat/notes"
    assert run["approved_plan_sha256"] is None

    statuses = sorted((orch / "status").glob("*.json"))
    assert [p.stem for p in statuses] == sorted(EXAMPLE_WAVES)
    for p in statuses:
        status = json.loads(p.read_text())
        assert status["task"] == p.stem
        assert status["phase"] == Phase.PENDING
        assert status["wave"] == EXAMPLE_WAVES[p.stem]

    matrix = (orch / "conflict-matrix.md").read_text()
    assert sha in matrix
    assert "Wave 2: note-store, note-search" in matrix
    for t in plan.tasks:
        assert t.id in matrix and t.owns[0] in matrix

    # Gate 1 summary on stdout
    assert "Run notes:" in result.stdout
    assert "Wave 1: note-model" in result.stdout
    assert "Wave 3: notes-cli" in result.stdout
    assert "4 sessions, at most 2 at once, in 3 waves." in result.stdout
    assert "lo-orch approve" in result.stdout

    ledger = [json.loads(x) for x in (orch / "ledger.jsonl").read_text().splitlines()]
    assert ledger[-1]["event"] == "plan_recorded" and ledger[-1]["plan_sha256"] == sha


def test_done_tasks_get_no_status_but_reach_the_matrix(
    git_repo: Path, tmp_path: Path, plan_file: Path
) -> None:
    data = yaml.safe_load(plan_file.read_text())
    model = data["tasks"].pop(0)  # note-model is already done: its output seeds the graph
    data["done_tasks"] = [
        {
            "id": model["id"],
            "produces": model["produces"],
            "signatures": {"Note": "class Note:   # app/models.py"},
        }
    ]
    result = invoke("plan", write_plan(tmp_path, data, "resume.yaml"), "--repo", git_repo)
    assert result.code == 0, result
    assert "Already done (no session): note-model" in result.stdout
    orch = git_repo / ".orchestration"
    assert sorted(p.stem for p in (orch / "status").glob("*.json")) == [
        "note-search",
        "note-store",
        "notes-cli",
    ]
    doc = json.loads((orch / "plan.json").read_text())
    assert doc["waves"] == [["note-store", "note-search"], ["notes-cli"]]
    matrix = (orch / "conflict-matrix.md").read_text()
    assert "## Already done (no session)" in matrix
    assert "class Note:   # app/models.py" in matrix


def test_state_is_excluded_through_git_info_exclude_only(git_repo: Path, plan_file: Path) -> None:
    assert invoke("plan", plan_file, "--repo", git_repo).code == 0
    lines = [x.strip("/") for x in exclude_file(git_repo).read_text().splitlines()]
    assert ".orchestration" in lines
    assert ".worktrees" in lines
    assert not (git_repo / ".gitignore").exists()
    (git_repo / ".worktrees" / "t").mkdir(parents=True)
    (git_repo / ".worktrees" / "t" / "f.py").write_text("x")
    # the run's files do not show up as untracked changes
    assert git(git_repo, "status", "--porcelain") == ""
    # planning again adds nothing twice
    assert invoke("plan", plan_file, "--repo", git_repo).code == 0
    again = [x.strip("/") for x in exclude_file(git_repo).read_text().splitlines()]
    assert again.count(".orchestration") == 1 and again.count(".worktrees") == 1


def test_an_existing_gitignore_is_left_alone(git_repo: Path, plan_file: Path) -> None:
    (git_repo / ".gitignore").write_text("*.pyc\n")
    git(git_repo, "add", ".gitignore")
    git(git_repo, "commit", "-q", "--no-gpg-sign", "-m", "ignore")
    assert invoke("plan", plan_file, "--repo", git_repo).code == 0
    assert (git_repo / ".gitignore").read_text() == "*.pyc\n"


def test_concurrency_flag_changes_the_waves(
    git_repo: Path, tmp_path: Path, plan_file: Path
) -> None:
    data = yaml.safe_load(plan_file.read_text())
    del data["concurrency"]
    path = write_plan(tmp_path, data, "noconc.yaml")
    result = invoke("plan", path, "--repo", git_repo, "--concurrency", "1")
    assert result.code == 0, result
    doc = json.loads((git_repo / ".orchestration" / "plan.json").read_text())
    assert doc["waves"] == [["note-model"], ["note-store"], ["note-search"], ["notes-cli"]]
    assert "at most 1 at once, in 4 waves" in result.stdout


def test_default_repo_is_the_git_root_of_the_cwd(
    git_repo: Path, plan_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(git_repo / "app")
    result = invoke("plan", plan_file)
    assert result.code == 0, result
    assert (git_repo / ".orchestration" / "run.json").exists()
    assert not (git_repo / "app" / ".orchestration").exists()


def test_status_json_right_after_plan(planned: Path) -> None:
    result = invoke("status", "--json", "--repo", planned)
    assert result.code == 0, result
    doc = json.loads(result.stdout)
    assert set(doc) == {"run", "tasks"}
    assert doc["run"]["name"] == "notes"
    assert doc["run"]["phase"] == "awaiting_plan_approval"
    assert [t["task"] for t in doc["tasks"]] == [
        "note-model",
        "note-store",
        "note-search",
        "notes-cli",
    ]  # wave, then plan order
    for t in doc["tasks"]:
        assert t["phase"] == "pending"
        assert t["wave"] == EXAMPLE_WAVES[t["task"]]
        for key in STATUS_KEYS:
            assert key in t, key


def test_status_table(planned: Path) -> None:
    result = invoke("status", "--repo", planned)
    assert result.code == 0, result
    assert "Run notes: waiting for Gate 1 (plan NOT approved: `lo-orch approve`)" in (result.stdout)
    for tid, wave in EXAMPLE_WAVES.items():
        assert re.search(
            rf"^{tid}\s+{wave}\s+pending\s+\d+s\s+a person: Gate 1", result.stdout, re.M
        ), tid
    assert invoke("approve", "--repo", planned).code == 0
    assert "plan approved; `lo-orch run` starts it" in invoke("status", "--repo", planned).stdout


def test_status_shows_why_a_clusters_panes_cannot_be_seen(planned: Path) -> None:
    """A run on a Ray cluster that cannot be reached: its sessions' panes are unknown, not
    "gone", and the status says what is wrong and what to do."""
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = Store.for_repo(planned)

    def on_cluster(state: RunState) -> None:
        state.cluster = {"backend": "ray", "address": f"127.0.0.1:{port}"}

    store.update_run(on_cluster)
    store.update_status("note-model", phase=Phase.IMPLEMENTING, pane_id="ray:note-model:1")
    result = invoke("status", "--repo", planned)
    assert result.code == 0, result
    row = next(ln for ln in result.stdout.splitlines() if ln.startswith("note-model"))
    assert "unknown" in row and "gone" not in row, result.stdout
    assert f"Panes unknown: cannot reach the Ray cluster at 127.0.0.1:{port}" in result.stdout
    assert "ray status" in result.stdout  # what to do


def test_status_and_approve_without_a_run(git_repo: Path) -> None:
    for args in (["status", "--json"], ["status"], ["approve"]):
        result = invoke(*args, "--repo", git_repo)
        assert result.code == 1, result
        assert result.stderr.startswith("Error: no run in ")
        assert "lo-orch plan" in result.stderr


# Gate 1 --------------------------------------------------------------------------------


def test_approve_binds_the_plan_hash(planned: Path) -> None:
    with pytest.raises(GateError, match="has not been approved"):
        runs.load_approved(planned)
    result = invoke("approve", "--repo", planned)
    assert result.code == 0, result
    run = json.loads((planned / ".orchestration" / "run.json").read_text())
    assert run["approved_plan_sha256"] == run["plan_sha256"]
    assert run["approved_at"]
    assert f"Approved plan {run['plan_sha256'][:12]}" in result.stdout
    rec, plan = runs.load_approved(planned)
    assert rec.run.name == "notes" and len(plan.tasks) == 4


def test_editing_the_plan_file_after_approval_is_refused(planned: Path, plan_file: Path) -> None:
    assert invoke("approve", "--repo", planned).code == 0
    plan_file.write_text(plan_file.read_text().replace("Search", "Fuzzy search"))
    with pytest.raises(GateError) as info:
        runs.load_approved(planned)
    assert str(plan_file.resolve()) in info.value.message
    assert "lo-orch plan" in (info.value.hint or "")
    # approving again does not launder the edit either
    result = invoke("approve", "--repo", planned)
    assert result.code == 1 and "was edited after `lo-orch plan`" in result.stderr
    # re-planning the edited file and approving it is the way forward
    assert invoke("plan", plan_file, "--repo", planned).code == 0
    assert invoke("approve", "--repo", planned).code == 0
    assert runs.load_approved(planned)[1].task("note-search").title == "Fuzzy search"


def test_editing_plan_json_after_approval_is_refused(planned: Path) -> None:
    assert invoke("approve", "--repo", planned).code == 0
    path = planned / ".orchestration" / "plan.json"
    doc = json.loads(path.read_text())
    doc["plan"]["tasks"][0]["owns"].append("app/**")
    path.write_text(json.dumps(doc))
    with pytest.raises(GateError, match="the recorded plan changed"):
        runs.load_approved(planned)
    result = invoke("approve", "--repo", planned)
    assert result.code == 1 and result.stderr.startswith("Error: the recorded plan changed")


def test_approval_of_an_older_plan_does_not_carry_over(
    planned: Path, plan_file: Path, tmp_path: Path
) -> None:
    assert invoke("approve", "--repo", planned).code == 0
    data = yaml.safe_load(plan_file.read_text())
    data["tasks"][0]["objective"] += " Also add __repr__."
    other = write_plan(tmp_path, data, "other.yaml")
    result = invoke("plan", other, "--repo", planned)
    assert result.code == 0, result
    assert "replaces the previous" in result.stdout
    with pytest.raises(GateError, match="has not been approved"):
        runs.load_approved(planned)


def test_a_started_run_is_not_replaced(planned: Path, plan_file: Path) -> None:
    status = planned / ".orchestration" / "status" / "note-model.json"
    data = json.loads(status.read_text())
    data["phase"] = "implementing"
    status.write_text(json.dumps(data))
    result = invoke("plan", plan_file, "--repo", planned)
    assert result.code == 1, result
    assert "run 'notes' is in progress (1 task(s) started)" in result.stderr
    assert json.loads(status.read_text())["phase"] == "implementing"


def test_a_replanned_run_lists_only_the_new_tasks(planned: Path, tmp_path: Path) -> None:
    data = {
        "goal": "Tiny",
        "name": "tiny",
        "tasks": [
            {
                "id": "only",
                "objective": "o",
                "owns": ["app/x.py"],
                "done": [{"criterion": "c", "check": "pytest -q"}],
            }
        ],
    }
    assert invoke("plan", write_plan(tmp_path, data, "tiny.yaml"), "--repo", planned).code == 0
    doc = json.loads(invoke("status", "--json", "--repo", planned).stdout)
    assert doc["run"]["name"] == "tiny"
    assert [t["task"] for t in doc["tasks"]] == ["only"]


def test_corrupt_state_is_a_user_error(planned: Path) -> None:
    (planned / ".orchestration" / "run.json").write_text("{")
    result = invoke("status", "--json", "--repo", planned)
    assert result.code == 1, result
    assert result.stderr.startswith("Error: ") and "run.json" in result.stderr


# unexpected errors and interrupts ---------------------------------------------------------


@pytest.fixture
def extra_commands() -> Iterator[click.Group]:
    """Commands registered on the real group for one test, removed afterwards."""
    invoke("--help")  # make sure the real commands are registered first

    @cli.command("test-boom", hidden=True)
    def boom() -> None:
        raise RuntimeError("kaboom")

    @cli.command("test-interrupt", hidden=True)
    def interrupt() -> None:
        raise KeyboardInterrupt

    @cli.command("test-exit", hidden=True)
    @click.argument("code", type=int)
    @click.pass_context
    def exit_with(ctx: click.Context, code: int) -> None:
        ctx.exit(code)

    yield cli
    for name in ("test-boom", "test-interrupt", "test-exit"):
        cli.commands.pop(name)


def test_unexpected_exception_exits_3_with_a_crash_log(
    extra_commands: click.Group, _isolated_home: Path
) -> None:
    result = invoke("test-boom")
    assert result.code == 3, result
    assert result.stderr.startswith("Error: unexpected RuntimeError: kaboom")
    match = re.search(r"written to (\S+);", result.stderr)
    assert match, result.stderr
    log = Path(match.group(1))
    assert log.parent == _isolated_home / "logs"  # LO_ORCH_LOG_DIR
    text = log.read_text()
    assert "Traceback" in text and "RuntimeError: kaboom" in text
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("code", [0, 2, 5])
def test_a_commands_own_exit_code_is_kept(extra_commands: click.Group, code: int) -> None:
    # `lo-orch hook Stop` exits 2 to block; run_cli must not turn that into 0
    assert invoke("test-exit", str(code)).code == code


def test_interrupt_exits_130(extra_commands: click.Group) -> None:
    result = invoke("test-interrupt")
    assert result.code == 130, result
    assert "Interrupted." in result.stderr


# the real process: sys.exit codes -------------------------------------------------------


@pytest.mark.slow
def test_real_exit_codes(git_repo: Path, plan_file: Path, tmp_path: Path) -> None:
    ok = lo_orch(tmp_path, "plan", str(plan_file), "--repo", str(git_repo))
    assert ok.returncode == 0, ok.stderr
    assert "Wave 1: note-model" in ok.stdout
    status = lo_orch(git_repo, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert len(json.loads(status.stdout)["tasks"]) == 4

    bad = write_plan(
        tmp_path,
        {"goal": "g", "tasks": [{"id": "A", "objective": "o", "owns": ["/x"], "done": []}]},
    )
    fail = lo_orch(tmp_path, "plan", str(bad), "--repo", str(git_repo))
    assert fail.returncode == 1
    assert fail.stderr.startswith("Error: ")
    assert "field id: invalid id" in fail.stderr
    assert "field owns[0]: '/x' is absolute" in fail.stderr
    assert "field done: no done criteria" in fail.stderr
    assert "Traceback" not in fail.stderr

    usage = lo_orch(git_repo, "plan", "--concurrency", "nope")
    assert usage.returncode == 2, usage.stderr
    assert lo_orch(tmp_path, "--help").returncode == 0
    outside = lo_orch(tmp_path, "status")
    assert outside.returncode == 1 and "not inside a git repository" in outside.stderr


CRASHER = """
import sys
from loop_orchestrator.cli.main import cli
from loop_orchestrator.entry import main

@cli.command("boom")
def boom() -> None:
    "Crash on purpose."
    raise {exc}

sys.argv = ["lo-orch", "boom"]
main()
"""


@pytest.mark.slow
@pytest.mark.parametrize(("exc", "code"), [("RuntimeError('x')", 3), ("KeyboardInterrupt", 130)])
def test_real_exit_codes_for_crashes(exc: str, code: int) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run(
        [sys.executable, "-c", CRASHER.format(exc=exc)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    if code == 3:
        log = re.search(r"written to (\S+);", result.stderr)
        assert log and Path(log.group(1)).is_file()

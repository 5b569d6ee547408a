"""Same-name reruns: which instance of its name a new run is (pure, in milliseconds), what
the repository holds (real git), and a hurried user's reruns beside what earlier runs kept
(real git, the package's own plan, Gate 1 and cleanup; no supervisor)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from helpers.git import git
from helpers.runs import one_task_files

from loop_orchestrator.commands.plan import plan_from_file
from loop_orchestrator.config import Settings, WorkspaceConfig
from loop_orchestrator.dashboard import view
from loop_orchestrator.errors import GitError, StateError
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate import progress
from loop_orchestrator.runstate.state import RunDir, RunState, Store
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.workspace import instances, integration, workspace
from loop_orchestrator.workspace.branches import RUN_RE
from loop_orchestrator.workspace.instances import Holdings, candidates, choose, held

# the choice, pure ---------------------------------------------------------------------


def test_a_free_name_is_the_plans_own() -> None:
    choice = choose("demo", Holdings(branches=frozenset({"main", "feat/other"})))
    assert (choice.run, choice.numbered, dict(choice.held)) == ("demo", False, {})


@pytest.mark.parametrize(
    "branches",
    [{"lo/demo/tokenize"}, {"lo/demo/staging"}, {"lo/demo"}],
)
def test_a_branch_of_an_earlier_run_holds_the_name(branches: set[str]) -> None:
    choice = choose("demo", Holdings(branches=frozenset(branches)))
    assert choice.run == "demo-2" and choice.numbered
    assert dict(choice.held) == {"demo": tuple(f"branch {b}" for b in sorted(branches))}


def test_a_kept_worktree_or_a_folder_with_something_in_it_holds_the_name() -> None:
    by_tree = choose("demo", Holdings(worktrees=frozenset({"demo/tokenize"})))
    assert dict(by_tree.held) == {"demo": ("worktree .worktrees/demo/tokenize",)}
    by_folder = choose("demo", Holdings(folders=frozenset({"demo"})))
    assert dict(by_folder.held) == {"demo": ("folder .worktrees/demo",)}
    assert by_tree.run == by_folder.run == "demo-2"


def test_names_that_only_share_a_prefix_hold_nothing() -> None:
    holdings = Holdings(
        branches=frozenset({"lo/demos/a", "lo/demo-x/staging", "lo/demo-2x/a", "demo"}),
        folders=frozenset({"demos", "demo-x"}),
        worktrees=frozenset({"demos/a", "demo-x/b"}),
    )
    assert choose("demo", holdings).run == "demo"
    assert held("demo-2", Holdings(branches=frozenset({"lo/demo-20/a"})), numbered=True) == ()


def test_the_feature_branch_holds_only_a_numbered_name() -> None:
    """`feat/demo` alone leaves `demo` free (a later run of the name may move it forward at
    Gate 2, as before); a numbered instance's feature branch must be its own."""
    holdings = Holdings(
        branches=frozenset({"feat/demo", "lo/demo/a", "feat/demo-2", "feat/demo-3/x"})
    )
    choice = choose("demo", holdings)
    assert choice.run == "demo-4"
    assert dict(choice.held) == {
        "demo": ("branch lo/demo/a",),
        "demo-2": ("branch feat/demo-2",),
        "demo-3": ("branch feat/demo-3/x",),
    }
    assert choose("demo", Holdings(branches=frozenset({"feat/demo"}))).run == "demo"


def test_a_folder_of_the_users_where_the_next_instance_would_go_is_passed_over() -> None:
    holdings = Holdings(
        branches=frozenset({"lo/demo/a", "lo/demo-3/staging"}),
        folders=frozenset({"demo", "demo-2"}),
        worktrees=frozenset({"demo/a"}),
    )
    choice = choose("demo", holdings)
    assert choice.run == "demo-4"
    assert list(choice.held) == ["demo", "demo-2", "demo-3"]
    assert choice.held["demo-2"] == ("folder .worktrees/demo-2",)
    # the same holdings, the same choice (a resumed or repeated plan agrees)
    assert choose("demo", holdings) == choice


def test_a_numbered_plan_name_is_numbered_after_itself() -> None:
    choice = choose("demo-2", Holdings(branches=frozenset({"lo/demo-2/a"})))
    assert choice.run == "demo-2-2"


def test_numbered_names_stay_valid_run_names() -> None:
    long = "a" * 36 + "-bcd"  # 40 characters
    names = list(candidates(long))
    assert names[:2] == [long, "a" * 36 + "-b-2"]
    assert names[9] == "a" * 36 + "-10"  # cut at a hyphen: no run name has "--"
    assert all(RUN_RE.match(n) and len(n) <= 40 for n in names)
    assert len(set(names)) == len(names) == instances.MAX_INSTANCE
    # cut at a hyphen: no run name ends in "--2"
    assert list(candidates("x" * 38 + "-y"))[1] == "x" * 38 + "-2"


def test_every_name_held_is_an_error_that_says_what_to_do() -> None:
    holdings = Holdings(branches=frozenset(f"lo/{n}/a" for n in candidates("demo")))
    with pytest.raises(GitError) as err:
        choose("demo", holdings)
    assert "demo-99: branch lo/demo-99/a" in err.value.message
    assert "git worktree remove" in (err.value.hint or "")


def test_run_json_has_plan_name_only_for_a_numbered_instance() -> None:
    fields = {
        "repo": "/r",
        "base_ref": "HEAD",
        "base_sha": "0" * 40,
        "staging_branch": "lo/demo/staging",
        "feature_branch": "feat/demo",
        "plan_sha256": "x",
    }
    plain = RunState.model_validate({"name": "demo", **fields})
    assert "plan_name" not in json.loads(plain.model_dump_json())
    assert "plan_name" not in plain.model_dump(mode="json")
    numbered = RunState.model_validate({"name": "demo-2", "plan_name": "demo", **fields})
    assert json.loads(numbered.model_dump_json())["plan_name"] == "demo"
    assert RunState.model_validate_json(numbered.model_dump_json()).plan_name == "demo"
    title = progress.status_title({"run": numbered.model_dump(mode="json")})
    assert title.startswith("Run demo-2 (a new instance of run demo, ")
    assert progress.status_title({"run": plain.model_dump(mode="json")}).startswith(
        "Run demo: waiting for Gate 1"
    )


# what the repository holds, real git ---------------------------------------------------


def test_look_reads_branches_worktrees_and_folders(git_repo: Path) -> None:
    root = git_repo / ".worktrees"
    (root / "empty").mkdir(parents=True)  # an empty folder holds nothing
    (root / "mine").mkdir()
    (root / "mine" / "notes.txt").write_text("x\n", encoding="utf-8")
    (root / "afile").write_text("x\n", encoding="utf-8")
    git(git_repo, "branch", "lo/old/a")
    git(git_repo, "worktree", "add", "-q", str(root / "old" / "a"), "lo/old/a")
    git(git_repo, "worktree", "add", "-q", "--detach", str(git_repo.parent / "outside"))
    found = instances.look(git_repo)
    assert found.branches == {"main", "lo/old/a"}
    assert found.folders == {"mine", "afile", "old"}
    assert found.worktrees == {"old/a"}
    assert choose("empty", found).run == "empty"
    assert choose("old", found).run == "old-2"


# a hurried user's reruns ----------------------------------------------------------------


def stamps(root: Path) -> dict[str, tuple[str, int]]:
    """sha256 and mtime (ns) of every file under ``root``."""
    return {
        p.relative_to(root).as_posix(): (
            hashlib.sha256(p.read_bytes()).hexdigest(),
            p.stat().st_mtime_ns,
        )
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def refs(repo: Path) -> dict[str, str]:
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split() for line in out.splitlines())


def start_and_abandon(files: demo.DemoFiles, settings: Settings) -> Path:
    """Gate 1, then what a supervisor does first (staging, the task's worktree), a user's
    edit in that worktree, and `lo-orch cleanup --abandon`: the worktree is kept."""
    runs.approve_plan(files.repo)
    rec, _plan = runs.load_approved(files.repo)
    ws = workspace.Workspace.for_run(files.repo, rec.run, settings.workspace)
    ws.create_staging(rec.run.base_sha)
    path = ws.ensure_worktree("tokenize")
    (path / "mine.txt").write_text(f"notes of {rec.run.name}\n", encoding="utf-8")
    report = integration.cleanup(files.repo, abandon=True)
    assert report.kept_dirty == ["tokenize"]
    return path


def test_a_third_rerun_beside_kept_worktrees_and_a_users_folder_on_the_next_name(
    tmp_path: Path, tmux_socket: str
) -> None:
    files = one_task_files(tmp_path)
    repo = files.repo
    settings = demo.demo_settings(files.script)
    assert plan_from_file(repo, files.plan, settings).run.name == "demo"
    first = start_and_abandon(files, settings)

    second = plan_from_file(repo, files.plan, settings)
    assert (second.run.name, second.run.plan_name) == ("demo-2", "demo")
    # planned again before Gate 1: nothing of demo-2 exists yet, so it is demo-2 again
    again = plan_from_file(repo, files.plan, settings)
    assert again.run.name == "demo-2" and again.replaced_previous
    kept_second = start_and_abandon(files, settings)

    # the user's own folder where demo-3's worktrees would go, their branch feat/demo-4
    own = repo / ".worktrees" / "demo-3"
    own.mkdir()
    (own / "draft.md").write_bytes(b"mine, not lo-orch's\n\x00")
    git(repo, "branch", "feat/demo-4")
    # the first run's cluster refs: a working one and a person's saved edit
    tip = git(repo, "rev-parse", "lo/demo/tokenize").strip()
    for ref in ("wip", "kept/1"):
        git(repo, "update-ref", f"refs/lo-orch/cluster/demo/tokenize/{ref}", tip)
    before = {p: stamps(p) for p in (first, kept_second, own)}
    before_refs = refs(repo)

    third = plan_from_file(repo, files.plan, settings)
    assert (third.run.name, third.run.plan_name) == ("demo-5", "demo")
    assert list(third.held) == ["demo", "demo-2", "demo-3", "demo-4"]
    assert third.held["demo-3"] == ("folder .worktrees/demo-3",)
    assert third.held["demo-4"] == ("branch feat/demo-4",)
    assert third.instance_note is not None and "feat/demo-5" in third.instance_note
    assert third.run.staging_branch == "lo/demo-5/staging"
    assert third.instance_note in view.gate1_text(repo)[1]  # the dashboard's Gate 1

    # once demo-5 holds things of its own, a fresh choice would differ; every command
    # (and a resumed supervisor) takes the one recorded at Gate 1
    runs.approve_plan(repo)
    rec, _plan = runs.load_approved(repo)
    ws = workspace.Workspace.for_run(repo, rec.run, settings.workspace)
    ws.create_staging(rec.run.base_sha)
    ws.ensure_worktree("tokenize")
    assert instances.choose("demo", instances.look(repo)).run == "demo-6"
    assert runs.load_approved(repo)[0].run.name == "demo-5"
    # a started run is not replaced by a new instance: today's rule, whatever the name
    status = RunDir(repo).status_dir / "tokenize.json"
    published = status.read_text(encoding="utf-8")
    status.write_text(published.replace('"pending"', '"implementing"'), encoding="utf-8")
    with pytest.raises(StateError, match="run 'demo-5' is in progress"):
        plan_from_file(repo, files.plan, settings)
    status.write_text(published, encoding="utf-8")
    assert json.loads(RunDir(repo).run_json.read_text(encoding="utf-8"))["name"] == "demo-5"

    report = integration.cleanup(repo)
    assert report.removed == ["tokenize"]  # demo-5's own clean worktree
    assert not (repo / ".worktrees" / "demo-5").exists()
    assert report.earlier["demo"] == [
        "branch lo/demo/staging",
        "branch lo/demo/tokenize",
        "worktree .worktrees/demo/tokenize (uncommitted changes: mine.txt)",
        "ref refs/lo-orch/cluster/demo/tokenize/kept/1",
    ]
    assert report.earlier["demo-2"][-1] == (
        "worktree .worktrees/demo-2/tokenize (uncommitted changes: mine.txt)"
    )
    assert report.earlier["demo-3"] == ["folder .worktrees/demo-3"]
    assert report.earlier["demo-4"] == ["branch feat/demo-4"]
    assert progress.status_title(progress.status_document(repo)).startswith(
        "Run demo-5 (a new instance of run demo"
    )
    # nothing of the earlier runs' or the user's moved: files (content, mtime), refs
    assert {p: stamps(p) for p in before} == before
    assert {r: s for r, s in refs(repo).items() if "/demo-5/" not in r} == before_refs
    assert Store(RunDir(repo)).read_run().name == "demo-5"


def test_a_plan_that_fails_half_way_leaves_nothing_of_the_instance_half_made(
    git_repo: Path, tmp_path: Path
) -> None:
    """`lo-orch plan` stops after the choice, between plan.json and run.json: nothing of
    git's was made for the instance and nothing earlier moved; planning again picks the
    same instance and Gate 1 approves it."""
    author = WorkspaceConfig.model_validate({"author_name": "a", "author_email": "a@b.c"})
    earlier = workspace.Workspace(git_repo, "demo", author, instance="one")
    earlier.create_staging(git(git_repo, "rev-parse", "HEAD").strip())
    kept = earlier.ensure_worktree("a")
    (kept / "mine.txt").write_text("the user's\n", encoding="utf-8")
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "goal: g\nname: demo\ntasks:\n  - id: a\n    title: A\n    objective: o\n"
        "    owns: [app/a.py]\n    done:\n      - criterion: c\n        check: python -V\n",
        encoding="utf-8",
    )
    before = refs(git_repo), stamps(kept)
    blocker = RunDir(git_repo).status_dir
    blocker.parent.mkdir(parents=True)
    blocker.write_text("", encoding="utf-8")  # no status file can be written: it fails half way
    with pytest.raises(OSError):
        plan_from_file(git_repo, plan, Settings())
    assert RunDir(git_repo).plan_json.exists() and not RunDir(git_repo).run_json.exists()
    assert (refs(git_repo), stamps(kept)) == before
    assert not (git_repo / ".worktrees" / "demo-2").exists()
    blocker.unlink()
    again = plan_from_file(git_repo, plan, Settings())
    assert (again.run.name, dict(again.held)) == (
        "demo-2",
        {"demo": ("branch lo/demo/a", "branch lo/demo/staging", "worktree .worktrees/demo/a")},
    )
    assert runs.approve_plan(git_repo)[0].name == "demo-2"
    assert (refs(git_repo), stamps(kept)) == before

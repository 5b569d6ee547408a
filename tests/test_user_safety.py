"""Nothing of the user's is ever lost (items 1, 2, 3 and 5), on real repositories
with a user's habits: uncommitted edits, a second run with the same name, commits on the
feature branch, a linked worktree, ignored local files in a task's worktree.

Every scenario takes checksums of every user file and `git rev-parse` of every user branch
before, and checks them byte for byte after; advice in a message is followed by running the
command it names.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from helpers.cli import invoke
from helpers.git import git
from helpers.runs import lo_orch, one_task_files, write_demo_plan

from loop_orchestrator.commands.plan import plan_from_file
from loop_orchestrator.config import Settings, WorkspaceConfig
from loop_orchestrator.errors import GitError
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate.state import RunDir, Store
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.supervisor.main import Supervisor
from loop_orchestrator.workspace import integration, workspace

pytestmark = pytest.mark.slow

AUTHOR = {"author_name": "lo-orch", "author_email": "lo-orch@example.com"}


# helpers ----------------------------------------------------------------------------------


def checksums(
    root: Path, skip: tuple[str, ...] = (".git", ".orchestration", ".worktrees")
) -> dict[str, str]:
    """sha256 of every file under ``root`` (the user's files), lo-orch's folders left out."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.split("/")[0] in skip or not path.is_file():
            continue
        found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def user_branches(repo: Path) -> dict[str, str]:
    """Every branch outside lo-orch's ``lo/`` namespace, with its sha."""
    out = git(repo, "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads/")
    pairs = (line.split() for line in out.splitlines())
    return {name: sha for name, sha in pairs if not name.startswith("lo/")}


def settings_for(files: demo.DemoFiles) -> Settings:
    settings = demo.demo_settings(files.script)
    settings.workspace.allow_dirty = True
    return settings


def run_to_review(files: demo.DemoFiles) -> None:
    settings = settings_for(files)
    plan_from_file(files.repo, files.plan, settings)
    runs.approve_plan(files.repo)
    outcome = Supervisor(files.repo, settings).run()
    assert outcome.state == "review", outcome.message


# item 1: a second run with the same name never adopts what the first one kept ----------


def stamps(root: Path) -> dict[str, tuple[str, int]]:
    """sha256 and mtime (ns) of every file under ``root`` but ``.git``."""
    return {
        p.relative_to(root).as_posix(): (
            hashlib.sha256(p.read_bytes()).hexdigest(),
            p.stat().st_mtime_ns,
        )
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".git"
    }


def test_a_same_name_rerun_gets_an_instance_of_its_own_beside_the_kept_worktree(
    tmp_path: Path, tmux_socket: str
) -> None:
    files = one_task_files(tmp_path)
    repo = files.repo
    run_to_review(files)
    kept = repo / ".worktrees" / "demo" / "tokenize"
    # before Gate 2 the user commits in the task's worktree, then leaves an uncommitted
    # edit and a new file there
    (kept / "NOTES.md").write_text("a user's commit on the task branch\n", encoding="utf-8")
    git(kept, "add", "NOTES.md")
    git(kept, "commit", "-q", "--no-gpg-sign", "-m", "user notes")
    (kept / "textstats" / "tokenize.py").write_bytes(b"# my experiment\n\x00\xff")
    (kept / "scratch.txt").write_text("my notes\n", encoding="utf-8")
    integration.merge(repo, integration.review(repo))
    assert kept.is_dir()  # kept: it holds the user's changes
    before_files, before_kept = checksums(repo), stamps(kept)
    before_branches = user_branches(repo)
    kept_head = git(kept, "rev-parse", "HEAD")
    kept_branch = git(repo, "rev-parse", "lo/demo/tokenize")
    assert kept_branch == kept_head

    # the same plan again: a new instance, demo-2, and Gate 1 says why and what it keeps
    planned = invoke("plan", files.plan, "--repo", repo)
    assert planned.code == 0, planned
    assert planned.stdout.startswith("Run demo-2: "), planned.stdout
    assert "A new instance of run demo" in planned.stdout
    assert "feature branch feat/demo-2 of its own" in planned.stdout
    assert "  demo: branch lo/demo/tokenize, worktree .worktrees/demo/tokenize" in planned.stdout
    run = Store(RunDir(repo)).read_run()
    assert (run.name, run.plan_name, run.staging_branch) == ("demo-2", "demo", "lo/demo-2/staging")
    status = invoke("status", "--repo", repo)
    assert "Run demo-2 (a new instance of run demo" in status.stdout, status
    assert invoke("approve", "--repo", repo).code == 0
    outcome = Supervisor(repo, settings_for(files)).run()
    assert outcome.state == "review", outcome.message
    assert (repo / ".worktrees" / "demo-2" / "tokenize").is_dir()
    merged = invoke("merge", "--yes", "--repo", repo)
    assert merged.code == 0, merged
    assert "feat/demo-2 is now" in merged.stdout
    assert "kept from earlier runs of the same name" in merged.stdout
    # attach and cleanup act on the current instance, and cleanup lists the older one
    attach = invoke("attach", "--repo", repo)
    assert "run demo-2 has no tmux session (lo-demo-2)" in attach.stderr, attach
    cleaned = invoke("cleanup", "--repo", repo)
    assert cleaned.code == 0, cleaned
    assert (
        "  demo: branch lo/demo/tokenize, worktree .worktrees/demo/tokenize (uncommitted "
        "changes: textstats/tokenize.py, scratch.txt)" in cleaned.stdout
    ), cleaned.stdout
    assert not (repo / ".worktrees" / "demo-2").exists()

    # nothing of the first run's was touched: content and mtime, its branch, its HEAD
    assert stamps(kept) == before_kept
    assert git(kept, "rev-parse", "HEAD") == kept_head
    assert git(repo, "rev-parse", "lo/demo/tokenize") == kept_branch
    assert git(kept, "status", "--porcelain", "--untracked-files=all").splitlines() == [
        " M textstats/tokenize.py",
        "?? scratch.txt",
    ]
    assert checksums(repo) == before_files
    after = user_branches(repo)
    assert {k: after[k] for k in before_branches} == before_branches  # feat/demo included
    assert git(repo, "show", "feat/demo-2:textstats/tokenize.py")


def test_a_worktree_not_recorded_for_this_run_is_never_used_or_removed(git_repo: Path) -> None:
    """A user's own worktree where the run's would go (by hand, or by an earlier instance):
    not committed from, not reused, not removed by cleanup."""
    ws = workspace.Workspace(git_repo, "r1", WorkspaceConfig.model_validate(AUTHOR), instance="one")
    ws.create_staging(git(git_repo, "rev-parse", "HEAD").strip())
    path = ws.ensure_worktree("a")
    (path / "mine.txt").write_text("the user's\n", encoding="utf-8")
    # the same run name, a new instance (a new `lo-orch plan`): nothing of "one" is its own
    again = workspace.Workspace(
        git_repo, "r1", WorkspaceConfig.model_validate(AUTHOR), instance="two"
    )
    before = checksums(path), user_branches(git_repo), git(git_repo, "rev-parse", "lo/r1/a")
    with pytest.raises(GitError, match="would reuse branches or worktrees it did not create"):
        again.check_branch_names(["a"])
    with pytest.raises(GitError, match="was not created by run r1"):
        again.commit_task("a", "steal")
    report = again.cleanup(["a"])
    assert report.kept_dirty == ["a"] and "was not created by run r1" in report.details["a"]
    assert report.branches_deleted == []
    assert (
        checksums(path),
        user_branches(git_repo),
        git(git_repo, "rev-parse", "lo/r1/a"),
    ) == before
    # the first instance still knows it as its own
    assert ws.cleanup(["a"]).kept_dirty == ["a"]


# item 2: Gate 2 never moves a branch the user committed on ------------------------------


def test_gate2_never_moves_a_feature_branch_the_user_committed_on(
    tmp_path: Path, tmux_socket: str
) -> None:
    files = one_task_files(tmp_path)
    repo = files.repo
    run_to_review(files)
    integration.merge(repo, integration.review(repo))
    # the user builds on feat/demo (in a checkout of their own)
    side = tmp_path / "side"
    git(repo, "worktree", "add", "-q", str(side), "feat/demo")
    (side / "USER.md").write_text("a user's commit\n", encoding="utf-8")
    git(side, "add", "USER.md")
    git(side, "commit", "-q", "--no-gpg-sign", "-m", "user work on the feature branch")
    git(side, "switch", "-q", "--detach")
    user_commit = git(repo, "rev-parse", "feat/demo").strip()

    # a later run with the same name, from main (which lacks the user's commit)
    write_demo_plan(files.plan, "demo", ("slug",))
    run_to_review(files)
    before_branches, before_files = user_branches(repo), checksums(repo)
    refused = lo_orch(repo, "merge", "--yes")
    assert refused.returncode == 1
    assert "feat/demo holds commits the reviewed result" in refused.stderr
    assert "user work on the feature branch" in refused.stderr
    assert user_branches(repo) == before_branches and checksums(repo) == before_files
    # the advice works as written
    advice = re.search(r"`lo-orch (merge --branch \S+)`", refused.stderr)
    assert advice is not None, refused.stderr
    landed = lo_orch(repo, *advice.group(1).split(), "--yes")
    assert landed.returncode == 0, landed.stderr
    assert git(repo, "rev-parse", "feat/demo").strip() == user_commit
    new = advice.group(1).split()[-1]
    assert git(repo, "show", f"{new}:textstats/slug.py")
    assert checksums(repo) == before_files
    after = user_branches(repo)
    assert {k: after[k] for k in before_branches} == before_branches


def test_gate2_moves_a_user_feature_branch_only_forward(git_repo: Path) -> None:
    ws = workspace.Workspace(git_repo, "r1", WorkspaceConfig.model_validate(AUTHOR), instance="one")
    base = git(git_repo, "rev-parse", "HEAD").strip()
    git(git_repo, "branch", "feat/r1")  # the user's, at the base: an ancestor of the result
    ws.create_staging(base)
    path = ws.ensure_worktree("a")
    (path / "a.txt").write_text("a\n", encoding="utf-8")
    reviewed = ws.merge_into_staging("a", ws.commit_task("a", "a"), "A")
    assert ws.finish(reviewed) == reviewed
    assert git(git_repo, "rev-parse", "feat/r1").strip() == reviewed  # fast-forward
    assert git(git_repo, "merge-base", "--is-ancestor", base, "feat/r1") == ""


def test_merge_into_keeps_the_users_commits_and_ignored_files(git_repo: Path) -> None:
    (git_repo / ".gitignore").write_text("local.cfg\n", encoding="utf-8")
    git(git_repo, "add", ".gitignore")
    git(git_repo, "commit", "-q", "--no-gpg-sign", "-m", "ignore local.cfg")
    ws = workspace.Workspace(git_repo, "r1", WorkspaceConfig.model_validate(AUTHOR), instance="one")
    ws.create_staging(git(git_repo, "rev-parse", "HEAD").strip())
    path = ws.ensure_worktree("a")
    (path / "local.cfg").write_text("the task's\n", encoding="utf-8")
    git(path, "add", "-f", "local.cfg")
    reviewed = ws.merge_into_staging("a", ws.commit_task("a", "a"), "A")
    # the user's ignored local config in the checkout of --into, and a commit of theirs
    (git_repo / "local.cfg").write_bytes(b"password-free but precious\n")
    (git_repo / "USER.md").write_text("mine\n", encoding="utf-8")
    git(git_repo, "add", "USER.md")
    git(git_repo, "commit", "-q", "--no-gpg-sign", "-m", "user commit on main")
    user_commit = git(git_repo, "rev-parse", "main").strip()
    before = checksums(git_repo)
    with pytest.raises(GitError, match="would overwrite files git ignores") as err:
        ws.finish(reviewed, merge_into="main")
    assert "local.cfg" in str(err.value)
    assert checksums(git_repo) == before
    assert git(git_repo, "rev-parse", "main").strip() == user_commit
    # moved aside, the merge keeps the user's commit (a merge, never a reset)
    (git_repo / "local.cfg").rename(git_repo.parent / "local.cfg.saved")
    ws.finish(reviewed, merge_into="main")
    assert git(git_repo, "merge-base", "--is-ancestor", user_commit, "main") == ""
    assert git(git_repo, "merge-base", "--is-ancestor", reviewed, "main") == ""


# item 3: a linked worktree is a checkout of its own ------------------------------------


def test_a_run_from_a_linked_worktree_uses_its_head_and_keeps_its_state_there(
    tmp_path: Path, tmux_socket: str
) -> None:
    files = one_task_files(tmp_path)
    main = files.repo
    linked = tmp_path / "linked"
    git(main, "worktree", "add", "-q", "-b", "side", str(linked))
    (linked / "SIDE.md").write_text("only on side\n", encoding="utf-8")
    git(linked, "add", "SIDE.md")
    git(linked, "commit", "-q", "--no-gpg-sign", "-m", "side work")
    side_head = git(linked, "rev-parse", "HEAD").strip()
    main_head = git(main, "rev-parse", "HEAD").strip()
    (main / "NOTES.md").write_text("uncommitted in main\n", encoding="utf-8")
    before_main, before_branches = checksums(main), user_branches(main)

    planned = lo_orch(linked / "textstats", "plan", str(files.plan))
    assert planned.returncode == 0, planned.stderr
    assert f"@ {side_head[:12]}" in planned.stdout
    assert f"Checkout {linked.resolve()} (a linked worktree of {main.resolve()}" in planned.stdout
    assert (linked / ".orchestration" / "run.json").exists()
    assert not (main / ".orchestration").exists()
    # every later command from that worktree (any folder of it) finds the run
    status = lo_orch(linked / "tests", "status", "--json")
    assert status.returncode == 0, status.stderr
    assert '"base_sha": "' + side_head in status.stdout
    assert lo_orch(linked / "tests", "approve").returncode == 0
    ran = lo_orch(linked, "run")
    assert ran.returncode == 0, ran.stderr
    task_wt = linked / ".worktrees" / "demo" / "tokenize"
    assert task_wt.is_dir()
    # from inside the task's worktree, status finds the run of the linked checkout
    inside = lo_orch(task_wt, "status", "--json")
    assert inside.returncode == 0 and '"phase": "awaiting_merge_review"' in inside.stdout
    merged = lo_orch(linked, "merge", "--yes")
    assert merged.returncode == 0, merged.stderr
    assert git(main, "merge-base", "--is-ancestor", side_head, "feat/demo") == ""
    assert git(main, "show", "feat/demo:SIDE.md") == "only on side\n"
    assert checksums(main) == before_main
    assert git(main, "rev-parse", "HEAD").strip() == main_head
    after = user_branches(main)
    assert {k: after[k] for k in before_branches} == before_branches


# item 5: cleanup keeps what git does not see --------------------------------------------


def test_cleanup_keeps_ignored_files_the_user_put_in_a_task_worktree(git_repo: Path) -> None:
    (git_repo / ".gitignore").write_text(".env\n*.local\n__pycache__/\n", encoding="utf-8")
    (git_repo / "app.local.example").write_text("debug = false\n", encoding="utf-8")
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-q", "--no-gpg-sign", "-m", "ignores")
    settings = WorkspaceConfig.model_validate(
        {**AUTHOR, "setup_command": "cp app.local.example app.local"}
    )
    ws = workspace.Workspace(git_repo, "r1", settings, instance="one")
    ws.create_staging(git(git_repo, "rev-parse", "HEAD").strip())
    for task in ("clean", "env", "edited", "cache"):
        ws.run_setup(ws.ensure_worktree(task))
        assert (ws.worktree_path(task) / "app.local").exists()
    (ws.worktree_path("env") / ".env").write_text("API_KEY=mine\n", encoding="utf-8")
    (ws.worktree_path("edited") / "app.local").write_text("debug = true\n", encoding="utf-8")
    cache = ws.worktree_path("cache") / "app" / "__pycache__"
    cache.mkdir()
    (cache / "x.cpython-312.pyc").write_bytes(b"\x00")
    kept = {t: checksums(ws.worktree_path(t), skip=(".git",)) for t in ("env", "edited")}

    report = ws.cleanup(["clean", "env", "edited", "cache"])
    assert sorted(report.removed) == ["cache", "clean"]
    assert sorted(report.kept_dirty) == ["edited", "env"]
    assert "holds files git ignores that lo-orch did not create: .env" in report.details["env"]
    assert "app.local" in report.details["edited"]
    assert {t: checksums(ws.worktree_path(t), skip=(".git",)) for t in kept} == kept
    assert "lo/r1/env" in report.branches_kept  # its worktree was kept
    # once the user removed their file, the next cleanup (their say-so) takes it away
    (ws.worktree_path("env") / ".env").unlink()
    assert ws.cleanup(["env"]).removed == ["env"]


def test_cleanup_lists_the_kept_ignored_files_on_the_command_line(
    tmp_path: Path, tmux_socket: str
) -> None:
    files = one_task_files(tmp_path)
    repo = files.repo
    (repo / ".gitignore").write_text(".env\n", encoding="utf-8")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "--no-gpg-sign", "-m", "ignore .env")
    run_to_review(files)
    env = repo / ".worktrees" / "demo" / "tokenize" / ".env"
    env.write_bytes(b"TOKEN=local-only\n")
    merged = lo_orch(repo, "merge", "--yes")
    assert merged.returncode == 0, merged.stderr
    assert env.read_bytes() == b"TOKEN=local-only\n"
    out = lo_orch(repo, "cleanup")
    assert out.returncode == 0, out.stderr
    assert "tokenize: .worktrees/demo/tokenize holds files git ignores" in out.stdout
    assert ".env" in out.stdout
    assert env.read_bytes() == b"TOKEN=local-only\n"

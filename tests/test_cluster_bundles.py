"""Git bundles between the supervisor and the nodes, and work-in-progress commits:
real git, no Ray."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.git import commit, git

from loop_orchestrator import resources
from loop_orchestrator.cluster import bundles, node
from loop_orchestrator.errors import GitError


def _empty(tmp_path: Path, name: str) -> Path:
    repo = tmp_path / name
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    return repo


def test_a_branch_goes_over_and_only_the_new_commits_follow(git_repo: Path, tmp_path: Path) -> None:
    first = git(git_repo, "rev-parse", "HEAD").strip()
    node = _empty(tmp_path, "node")
    whole = bundles.create(git_repo, ["refs/heads/main"])
    got = bundles.import_bundle(node, whole, {"refs/heads/main": "refs/lo-orch/in/main"})
    assert got == {"refs/lo-orch/in/main": first}
    assert git(node, "rev-parse", "refs/lo-orch/in/main").strip() == first

    # nothing new: no bundle at all
    assert bundles.create(git_repo, ["refs/heads/main"], [first]) == b""

    big = "x" * 200_000
    commit(git_repo, {"data.txt": big}, "big file")
    second = commit(git_repo, {"small.txt": "small\n"}, "small change")
    full = bundles.create(git_repo, ["refs/heads/main"])
    delta = bundles.create(git_repo, ["refs/heads/main"], [first])
    only_last = bundles.create(
        git_repo, ["refs/heads/main"], [git(git_repo, "rev-parse", "HEAD~1").strip()]
    )
    assert len(only_last) < len(delta) <= len(full)
    assert len(only_last) < 2000  # the big file is not sent again
    got = bundles.import_bundle(node, delta, {"refs/heads/main": "refs/lo-orch/in/main"})
    assert got == {"refs/lo-orch/in/main": second}

    # a delta needs its prerequisites: a repository without them refuses it, sets nothing
    other = _empty(tmp_path, "other")
    with pytest.raises(GitError, match="does not verify"):
        bundles.import_bundle(other, only_last, {"refs/heads/main": "refs/lo-orch/in/main"})
    assert git(other, "for-each-ref").strip() == ""


def test_a_bundle_sets_only_the_refs_asked_for(git_repo: Path, tmp_path: Path) -> None:
    """A node's bundle is agent-written: extra heads (a staging or feature branch, a tag)
    change nothing; only lo-orch refs can be set."""
    supervisor = tmp_path / "sup"
    git(tmp_path, "clone", "-q", str(git_repo), str(supervisor))
    staging_before = git(supervisor, "rev-parse", "HEAD").strip()
    git(supervisor, "branch", "lo/run/staging")
    git(git_repo, "switch", "-q", "-c", "lo/run/t1")
    task_tip = commit(git_repo, {"t1.txt": "work\n"}, "task work")
    git(git_repo, "switch", "-q", "-c", "lo/run/staging")
    evil = commit(git_repo, {"evil.txt": "evil\n"}, "forged staging")
    git(git_repo, "tag", "v9", evil)
    git(git_repo, "branch", "feat/run", evil)
    data = bundles.create(
        git_repo,
        [
            "refs/heads/lo/run/t1",
            "refs/heads/lo/run/staging",
            "refs/heads/feat/run",
            "refs/tags/v9",
        ],
    )
    assert set(bundles.heads(supervisor, data)) >= {"refs/heads/lo/run/staging", "refs/tags/v9"}
    refs_before = set(
        git(supervisor, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
    )
    got = bundles.import_bundle(
        supervisor, data, {"refs/heads/lo/run/t1": "refs/lo-orch/cluster/run/t1/head"}
    )
    assert got == {"refs/lo-orch/cluster/run/t1/head": task_tip}
    refs_after = set(
        git(supervisor, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
    )
    assert refs_after - refs_before == {f"refs/lo-orch/cluster/run/t1/head {task_tip}"}
    assert git(supervisor, "rev-parse", "lo/run/staging").strip() == staging_before
    with pytest.raises(GitError, match="refs/lo-orch"):
        bundles.import_bundle(
            supervisor, data, {"refs/heads/lo/run/t1": "refs/heads/lo/run/staging"}
        )
    with pytest.raises(GitError):
        bundles.import_bundle(supervisor, data, {"refs/heads/lo/run/t1": "refs/lo-orch/../heads/x"})


def test_a_wip_commit_holds_the_whole_tree_and_leaves_the_index_alone(
    git_repo: Path, tmp_path: Path
) -> None:
    head = git(git_repo, "rev-parse", "HEAD").strip()
    (git_repo / ".gitignore").write_text("build/\n", encoding="utf-8")
    (git_repo / "README.md").write_text("# changed\n", encoding="utf-8")  # modified
    (git_repo / "staged.txt").write_text("staged\n", encoding="utf-8")
    git(git_repo, "add", "staged.txt")  # the agent's index: one staged file
    (git_repo / "new.txt").write_text("untracked\n", encoding="utf-8")
    (git_repo / "build").mkdir()
    (git_repo / "build" / "out.bin").write_text("ignored\n", encoding="utf-8")
    (git_repo / "app" / "__init__.py").unlink()  # deleted
    status_before = git(git_repo, "status", "--porcelain=v1")
    index_before = git(git_repo, "ls-files", "--stage")

    wip = bundles.wip_commit(git_repo)

    assert git(git_repo, "rev-parse", "HEAD").strip() == head  # no branch moved
    assert git(git_repo, "status", "--porcelain=v1") == status_before
    assert git(git_repo, "ls-files", "--stage") == index_before
    assert git(git_repo, "rev-parse", f"{wip}^").strip() == head
    files = set(git(git_repo, "ls-tree", "-r", "--name-only", wip).split())
    assert {"README.md", "staged.txt", "new.txt", ".gitignore"} <= files
    assert "build/out.bin" not in files and "app/__init__.py" not in files
    assert git(git_repo, "show", f"{wip}:README.md") == "# changed\n"

    # the tree goes into another checkout of the same HEAD: files, not commits
    node = tmp_path / "node"
    git(tmp_path, "clone", "-q", str(git_repo), str(node))
    (node / "stale.txt").write_text("not in the wip\n", encoding="utf-8")
    git(git_repo, "update-ref", "refs/lo-orch/wip", wip)
    data = bundles.create(git_repo, ["refs/lo-orch/wip"], [head])
    bundles.import_bundle(node, data, {"refs/lo-orch/wip": "refs/lo-orch/in/wip"})
    bundles.apply_tree(node, wip)
    assert git(node, "rev-parse", "HEAD").strip() == head
    assert (node / "new.txt").read_text(encoding="utf-8") == "untracked\n"
    assert (node / "README.md").read_text(encoding="utf-8") == "# changed\n"
    assert not (node / "app" / "__init__.py").exists()
    assert not (node / "stale.txt").exists()
    assert git(node, "diff", "--cached", "--name-only").strip() == ""  # index at HEAD


def test_a_persons_edits_in_the_local_copy_are_kept_before_a_sync(git_repo: Path) -> None:
    """The local worktree of a remote task mirrors the node's, and each sync replaces its
    files; what a person changed there since lo-orch last put files in is kept first."""
    applied = bundles.wip_commit(git_repo)  # what lo-orch put there (here: HEAD's files)
    assert bundles.keep_edits(git_repo, git_repo, applied, "refs/lo-orch/t/kept/1") is None
    assert not git(git_repo, "for-each-ref", "refs/lo-orch/t/kept/")  # nothing to keep

    (git_repo / "README.md").write_text("# my note\n", encoding="utf-8")
    (git_repo / "scratch.py").write_text("x = 1\n", encoding="utf-8")  # untracked
    kept = bundles.keep_edits(git_repo, git_repo, applied, "refs/lo-orch/t/kept/2")
    assert kept is not None
    assert git(git_repo, "rev-parse", "refs/lo-orch/t/kept/2").strip() == kept
    git(git_repo, "reset", "--quiet", "--hard")  # the sync replaces the files
    git(git_repo, "clean", "-f", "-d", "--quiet")
    assert git(git_repo, "show", f"{kept}:README.md") == "# my note\n"
    assert git(git_repo, "show", f"{kept}:scratch.py") == "x = 1\n"

    # with no record of what lo-orch put there, anything beyond HEAD counts as edits
    assert bundles.keep_edits(git_repo, git_repo, None, "refs/lo-orch/t/kept/3") is None
    (git_repo / "README.md").write_text("# again\n", encoding="utf-8")
    assert bundles.keep_edits(git_repo, git_repo, None, "refs/lo-orch/t/kept/3") is not None


def test_paths_sent_to_a_node_stay_inside_its_folder() -> None:
    assert bundles.safe_relpath("a/b.txt") == "a/b.txt"
    for bad in ("../x", "/etc/passwd", "a/../../x", ""):
        with pytest.raises(GitError):
            bundles.safe_relpath(bad)


def test_the_node_never_writes_or_reads_through_a_link_the_session_planted(
    tmp_path: Path,
) -> None:
    """The session owns its checkout and plans folder on the node; the actor that writes
    the supervisor's files there (and reads the plan back) runs outside its sandbox. A link
    planted where a file goes, or as a folder on the way, must not carry that write or read
    to a file the sandbox protects or hides."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "credentials"
    secret.write_text("token\n", encoding="utf-8")
    bashrc = outside / ".bashrc"
    bashrc.write_text("# mine\n", encoding="utf-8")
    run_dir = tmp_path / "run"
    (run_dir / "plans").mkdir(parents=True)
    plan = run_dir / "plans" / "t1.md"
    plan.symlink_to(bashrc)
    # the supervisor's copy of the plan goes back: it replaces the link, not the target
    node.write_inside(run_dir, "plans/t1.md", b"the plan\n")
    assert bashrc.read_text(encoding="utf-8") == "# mine\n"
    assert not plan.is_symlink()
    assert plan.read_bytes() == b"the plan\n"
    # a linked folder on the way is refused, the file behind it untouched
    (run_dir / "reviews").symlink_to(outside)
    with pytest.raises(RuntimeError, match="symbolic link"):
        node.write_inside(run_dir, "reviews/.bashrc", b"evil\n")
    assert bashrc.read_text(encoding="utf-8") == "# mine\n"
    with pytest.raises(GitError):
        node.write_inside(run_dir, "../outside/.bashrc", b"evil\n")
    # the plan read back for the supervisor: a regular file only, within the limit
    assert node.read_regular(plan, 1 << 20) == b"the plan\n"
    assert node.read_regular(plan, 4) is None
    plan.unlink()
    plan.symlink_to(secret)
    assert node.read_regular(plan, 1 << 20) is None
    assert node.read_regular(run_dir / "plans", 1 << 20) is None
    assert node.read_regular(run_dir / "plans" / "missing.md", 1 << 20) is None


def test_status_has_a_node_column_only_when_a_task_runs_on_a_node() -> None:
    from loop_orchestrator.runstate import progress as statusdoc

    doc: dict[str, Any] = {"tasks": [{"task": "a"}, {"task": "b"}]}
    rows = [[f"{t}{i}" for i in range(len(statusdoc.STATUS_HEADERS))] for t in "ab"]
    assert statusdoc.with_nodes(doc, statusdoc.STATUS_HEADERS, rows) == (
        list(statusdoc.STATUS_HEADERS),
        rows,
    )
    doc["tasks"][1]["node"] = "box-2 (10.0.0.2, 1a2b3c4d)"
    headers, with_node = statusdoc.with_nodes(doc, statusdoc.STATUS_HEADERS, rows)
    at = headers.index("node")
    assert headers[at - 1] == "pane" and len(headers) == len(statusdoc.STATUS_HEADERS) + 1
    assert [r[at] for r in with_node] == ["-", "box-2 (10.0.0.2, 1a2b3c4d)"]
    assert all(len(r) == len(headers) for r in with_node)


def test_a_launch_runs_the_nodes_own_lo_orch_install() -> None:
    """The supervisor's launch names its own Python and plugin folder (a laptop's venv);
    the node, installed elsewhere, runs its own, and its checkout for the worktree."""
    paths = {
        "/Users/me/venv/bin/python": "python",
        "/Users/me/venv/lib/lo/_data/plugin": "plugin",
        "/Users/me/repo/.worktrees/r/t1": "checkout",
        "/Users/me/repo/.orchestration": "run",
        "/Users/me/repo/.orchestration/x": "a kind from a newer supervisor",
    }
    here = {
        "python": "/opt/lo/bin/python",
        "plugin": "/opt/lo/plugin",
        "checkout": "/srv/n/t1/checkout",
        "run": "/srv/n/t1/run",
    }
    argv = [
        "/Users/me/venv/bin/python",
        "--plugin-dir",
        "/Users/me/venv/lib/lo/_data/plugin",
        "--brief=/Users/me/repo/.orchestration/briefs/t1.md",
        "/Users/me/repo/.worktrees/r/t1/src",
    ]
    assert [node.rewrite_paths(a, paths, here) for a in argv] == [
        "/opt/lo/bin/python",
        "--plugin-dir",
        "/opt/lo/plugin",
        "--brief=/srv/n/t1/run/briefs/t1.md",
        "/srv/n/t1/checkout/src",
    ]
    # a kind this node does not know is left as it was, not an error
    assert node.rewrite_paths("/Users/me/repo/.orchestration/x/y", paths, here) == (
        "/srv/n/t1/run/x/y"
    )
    assert set(resources.install_paths()) == {"python", "plugin", "source"}

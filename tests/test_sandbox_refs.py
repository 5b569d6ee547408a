"""What a sandboxed session can write of the repository's git state: its own task branch
and its worktree, nothing else. Each attack is a shell script run through the launch a
session gets (``AgentContext.create`` -> ``launch_spec_for`` -> bwrap) in a real
repository with a run's staging, two tasks' worktrees, the feature branch and a
``refs/lo-orch/`` ref; with the sandbox off the same script is the negative control.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.git import git
from helpers.wait import wait_for

from loop_orchestrator.agents.contract import AgentContext, launch_spec_for
from loop_orchestrator.config import Settings
from loop_orchestrator.runstate.state import RunDir
from loop_orchestrator.sessions import sandbox
from loop_orchestrator.sessions.tmux import TmuxBackend
from loop_orchestrator.workspace import workspace
from loop_orchestrator.workspace.ownref import OwnBranch

pytestmark = pytest.mark.skipif(not sandbox.available()[0], reason="bubblewrap does not work")

RUN = "sbr"
IDENTITY = "-c user.name=agent -c user.email=agent@localhost -c commit.gpgSign=false"

#: the start of every attack script: names, a commit the agent made up, and ``try``, which
#: prints ALLOWED for a command that succeeded
PRELUDE = f"""
C=$(git rev-parse --path-format=absolute --git-common-dir)
G=$(git rev-parse --path-format=absolute --git-dir)
LO="$C/refs/heads/lo/{RUN}"
EVIL=$(git {IDENTITY} commit-tree -m forged "HEAD^{{tree}}")
try() {{ if "$@"; then echo "ALLOWED: $*"; else echo "denied: $*"; fi; }}
"""

#: one attack per kind of ref or git file; its first ``try`` is the plain one (the control
#: shows that one succeeds without the sandbox)
ATTACKS = {
    "staging": f"""
try git update-ref refs/heads/lo/{RUN}/staging $EVIL
try sh -c "echo $EVIL > $LO/staging"
try sh -c "echo $EVIL > $LO/new && mv -f $LO/new $LO/staging"
try rm -f "$LO/staging"
try ln -f "$LO/alpha" "$LO/staging"
try git {IDENTITY} branch -f lo/{RUN}/staging $EVIL
""",
    "feature": f"""
try git update-ref refs/heads/feat/{RUN} $EVIL
try git {IDENTITY} branch -f feat/{RUN} $EVIL
try sh -c "echo $EVIL > $C/refs/heads/feat/{RUN}"
""",
    "other_task": f"""
try git update-ref refs/heads/lo/{RUN}/beta $EVIL
try sh -c "echo $EVIL > $LO/beta"
try sh -c "echo $EVIL > $LO/new && mv -f $LO/new $LO/beta"
try git update-ref -d refs/heads/lo/{RUN}/beta
try git update-ref refs/heads/lo/{RUN}/gamma $EVIL
try git update-ref --create-reflog refs/heads/lo/{RUN}/gamma $EVIL
""",
    "lo_orch": f"""
try git update-ref refs/lo-orch/{RUN}/book $EVIL
try sh -c "echo $EVIL > $C/refs/lo-orch/{RUN}/book"
try git update-ref refs/lo-orch/{RUN}/new $EVIL
try git update-ref -d refs/lo-orch/{RUN}/book
""",
    "packed_refs": f"""
try sh -c "echo '$EVIL refs/heads/lo/{RUN}/staging' >> $C/packed-refs"
try git pack-refs --all
try sh -c "cp $C/packed-refs $G/p && echo '$EVIL refs/heads/lo/{RUN}/beta' >> $G/p \
    && mv -f $G/p $C/packed-refs"
""",
    "config": """
try git config core.hooksPath /tmp
try sh -c "echo '[core] fsmonitor = /tmp/x' >> $C/config"
try sh -c "echo '[core] hooksPath = /tmp' >> $G/config.worktree"
try sh -c "echo '[core]' > $G/cw && mv -f $G/cw $G/config.worktree"
try rm -f "$G/config.worktree"
try mount -o remount,rw "$C"
try sh -c "echo '[x] y = 1' >> $C/config"
""",
    "hooks": """
try sh -c "printf '#!/bin/sh\\necho hooked\\n' > $C/hooks/post-commit"
try sh -c "echo x >> $C/hooks/pre-commit.sample"
try mv "$C/hooks" "$C/hooks.old"
""",
    "info_attributes": """
try sh -c "echo '* filter=evil' > $C/info/attributes"
try sh -c "echo '*' >> $C/info/exclude"
""",
    "head": f"""
try sh -c "echo 'ref: refs/heads/lo/{RUN}/staging' > $C/HEAD"
try sh -c "echo 'ref: refs/heads/lo/{RUN}/staging' > $G/HEAD"
try sh -c "echo 'ref: refs/heads/lo/{RUN}/staging' > $G/h && mv -f $G/h $G/HEAD"
try git symbolic-ref HEAD refs/heads/lo/{RUN}/beta
try git checkout -q --detach
""",
    "reflog": f"""
try sh -c "echo x >> $C/logs/refs/heads/lo/{RUN}/staging"
try sh -c "echo x >> $C/logs/HEAD"
try git reflog expire --expire=now --all
try git reflog delete refs/heads/lo/{RUN}/staging@{{0}}
""",
}


@dataclass
class Sandboxed:
    repo: Path
    worktree: Path
    ws: workspace.Workspace
    settings: Settings

    def run(self, script: str, *, task: str = "alpha") -> subprocess.CompletedProcess[str]:
        """``script`` run by ``sh`` the way task ``task``'s session is launched."""
        rundir = RunDir(self.repo)
        ctx = AgentContext.create(
            task=task,
            run_name=RUN,
            repo=self.repo,
            worktree=rundir.worktree_path(RUN, task),
            run_dir=rundir.root,
            brief_path=rundir.brief_path(task),
            settings=self.settings,
        )
        spec = launch_spec_for(ctx, ["sh", "-c", PRELUDE + script], ctx.env)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(spec.env)
        return subprocess.run(
            spec.argv, cwd=spec.cwd, env=env, capture_output=True, text=True, timeout=60
        )

    def git_state(self) -> dict[str, bytes]:
        """Every file of the repository's git folder but the object store, the task's own
        worktree folder (its index) and its own branch's reflog."""
        common = self.repo / ".git"
        skip = (common / "objects", common / "worktrees" / "alpha")
        own_log = common / "logs" / "refs" / "heads" / "lo" / RUN / "alpha"
        return {
            str(p.relative_to(common)): p.read_bytes()
            for p in sorted(common.rglob("*"))
            if p.is_file() and p != own_log and not any(p.is_relative_to(s) for s in skip)
        } | {"refs": git(self.repo, "for-each-ref").encode()}


def make(tmp_path: Path, repo: Path, mode: str) -> Sandboxed:
    settings = Settings.model_validate(
        {
            "agent": {"kind": "scripted", "script": str(tmp_path / "s.yaml")},
            "sandbox": {"mode": mode},
        }
    )
    ws = workspace.Workspace(repo, RUN, settings.workspace)
    ws.create_staging(git(repo, "rev-parse", "HEAD").strip())
    own = ws.ensure_worktree("alpha")
    ws.ensure_worktree("beta")
    head = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "branch", f"feat/{RUN}", head)
    git(repo, "update-ref", f"refs/lo-orch/{RUN}/book", head)
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text("# the user's\n", encoding="utf-8")
    return Sandboxed(repo, own, ws, settings)


@pytest.fixture
def boxed(tmp_path: Path, git_repo: Path) -> Sandboxed:
    return make(tmp_path, git_repo, "bwrap")


@pytest.mark.parametrize("kind", sorted(ATTACKS))
def test_a_sandboxed_session_cannot_write_it(boxed: Sandboxed, kind: str) -> None:
    boxed.run("true")  # the launch's own preparation (the mirror, placeholders) first
    before = boxed.git_state()

    out = boxed.run(ATTACKS[kind])

    assert out.returncode == 0, out.stderr
    tries = [line for line in out.stdout.splitlines() if line.startswith(("ALLOWED", "denied"))]
    assert len(tries) == ATTACKS[kind].count("\ntry "), out.stdout
    assert not [t for t in tries if t.startswith("ALLOWED")], out.stdout + out.stderr
    # refused by the sandbox, not by a mistake in the script
    assert "Read-only file system" in out.stderr or "busy" in out.stderr, out.stderr
    assert boxed.git_state() == before


@pytest.mark.parametrize("kind", sorted(ATTACKS))
def test_without_the_sandbox_the_same_attack_succeeds(
    tmp_path: Path, git_repo: Path, kind: str
) -> None:
    """Negative control: each attack's first write is real."""
    unboxed = make(tmp_path, git_repo, "off")
    before = unboxed.git_state()

    out = unboxed.run(ATTACKS[kind])

    first = next(line for line in out.stdout.splitlines() if line.startswith(("ALLOWED", "deni")))
    assert first.startswith("ALLOWED"), out.stdout + out.stderr
    assert unboxed.git_state() != before


def test_the_session_commits_to_its_own_branch(boxed: Sandboxed) -> None:
    repo, branch = boxed.repo, f"lo/{RUN}/alpha"
    start = git(repo, "rev-parse", branch).strip()
    others = {b: git(repo, "rev-parse", b).strip() for b in (f"lo/{RUN}/staging", f"feat/{RUN}")}

    out = boxed.run(
        f"echo 'A = 1' > app/alpha.py && git add app/alpha.py "
        f"&& git {IDENTITY} commit -q -m 'my work' && git rev-parse HEAD"
    )

    assert out.returncode == 0, out.stderr
    mine = out.stdout.split()[-1]
    # its objects are in its own store until taken
    assert git(repo, "cat-file", "-t", start) == "commit\n"
    assert subprocess.run(["git", "cat-file", "-e", mine], cwd=repo).returncode != 0
    # taken when the supervisor takes the task's work: the session's commit as it is
    assert boxed.ws.commit_task("alpha", "alpha") == mine
    assert git(repo, "rev-parse", f"{mine}^").strip() == start
    assert git(repo, "rev-parse", branch).strip() == mine
    assert git(repo, "status", "--porcelain").strip() == ""
    assert {b: git(repo, "rev-parse", b).strip() for b in others} == others
    # the next round goes on from there: the session sees the branch where it is
    again = boxed.run(f"echo 'A = 2' > app/alpha.py && git {IDENTITY} commit -qam more")
    assert again.returncode == 0, again.stderr
    second = boxed.ws.commit_task("alpha", "alpha")
    assert git(repo, "rev-parse", f"{second}^").strip() == mine
    assert git(repo, "show", f"{second}:app/alpha.py") == "A = 2\n"


def test_a_relaunch_keeps_the_commits_the_supervisor_has_not_taken_yet(
    boxed: Sandboxed,
) -> None:
    out = boxed.run(
        f"echo 'A = 3' > app/alpha.py && git add -A && git {IDENTITY} commit -qm mine "
        "&& git rev-parse HEAD"
    )
    mine = out.stdout.split()[-1]

    again = boxed.run("git rev-parse HEAD && git log --format=%s -1")  # a new launch

    assert again.stdout.split()[0] == mine, again.stdout + again.stderr
    assert git(boxed.repo, "rev-parse", f"lo/{RUN}/alpha").strip() == mine


def test_a_symlink_for_its_branch_makes_the_supervisor_write_nothing_else(
    boxed: Sandboxed,
) -> None:
    """The session leaves its branch's file in its view as a symlink to the real staging
    ref (the path it names on the host), or as a symbolic ref: the supervisor neither
    follows it when it reads nor when it writes the branch back."""
    repo = boxed.repo
    staging = git(repo, "rev-parse", f"lo/{RUN}/staging").strip()
    real = repo / ".git" / "refs" / "heads" / "lo" / RUN / "staging"
    plants = (f"ln -sf {real} $LO/alpha", f"echo 'ref: refs/heads/lo/{RUN}/staging' > $LO/alpha")
    for n, plant in enumerate(plants):
        out = boxed.run(
            f"echo 'B = {n}' > app/b.py && git add app/b.py && git {IDENTITY} commit -qm b "
            f"&& {plant} && echo planted"
        )
        assert out.stdout.strip().endswith("planted"), out.stderr

        commit = boxed.ws.commit_task("alpha", "alpha")

        assert git(repo, "rev-parse", f"lo/{RUN}/staging").strip() == staging
        assert real.read_text(encoding="utf-8").strip() == staging and not real.is_symlink()
        assert git(repo, "rev-parse", f"lo/{RUN}/alpha").strip() == commit
        assert git(repo, "show", f"{commit}:app/b.py") == f"B = {n}\n"
        mirror = OwnBranch.of(repo, RUN, "alpha").refs / "alpha"
        assert not mirror.is_symlink() and mirror.read_text(encoding="utf-8") == f"{commit}\n"


def test_another_tasks_session_cannot_take_this_tasks_commits(boxed: Sandboxed) -> None:
    """Task beta's session writes alpha's branch in its own view: nothing reaches alpha."""
    repo = boxed.repo
    alpha = git(repo, "rev-parse", f"lo/{RUN}/alpha").strip()

    out = boxed.run(f"git update-ref refs/heads/lo/{RUN}/alpha $EVIL || echo refused", task="beta")

    assert "refused" in out.stdout, out.stdout + out.stderr
    boxed.ws.commit_task("alpha", "alpha")
    assert git(repo, "rev-parse", f"lo/{RUN}/alpha").strip() == alpha


#: the session puts other content under the name of an object staging's tree already
#: holds (README.md), in the object store it sees, and tries the repository's own store
#: where the sandbox shows it read-only
FORGE_OBJECT = f"""
obj() {{ echo "$1/$(echo $2 | cut -c1-2)/$(echo $2 | cut -c3-)"; }}
T=$(git rev-parse "refs/heads/lo/{RUN}/staging:README.md")
N=$(echo forged | git hash-object -w --stdin)
mkdir -p "$(dirname $(obj $C/objects $T))"
try sh -c "cp -f $(obj $C/objects $N) $C/objects/t && mv -f $C/objects/t $(obj $C/objects $T)"
try sh -c "cp -f $(obj $C/objects $N) $(obj $G/lo-orch-objects $T)"
try sh -c "cp -f $(obj $C/objects $N) $(obj $C/objects {"ab" * 20})"
"""


@pytest.mark.parametrize("mode", ["bwrap", "off"])
def test_a_session_cannot_change_an_object_the_repository_holds(
    tmp_path: Path, git_repo: Path, mode: str
) -> None:
    """Without the sandbox the forged object replaces staging's README; inside it the
    forgery stays in the session's own store and is never taken."""
    box = make(tmp_path, git_repo, mode)
    staging = f"lo/{RUN}/staging"

    out = box.run(FORGE_OBJECT)
    box.ws.commit_task("alpha", "alpha")  # the supervisor takes the session's objects

    if mode == "off":
        assert out.stdout.splitlines()[0].startswith("ALLOWED"), out.stdout + out.stderr
        assert git(git_repo, "show", f"{staging}:README.md") == "forged\n"
        return
    assert "ALLOWED" in out.stdout.splitlines()[0]  # its own store: its view only
    assert out.stdout.splitlines()[1].startswith("denied"), out.stdout + out.stderr
    assert git(git_repo, "show", f"{staging}:README.md") == "# sample\n"
    fsck = subprocess.run(["git", "fsck", "--full"], cwd=git_repo, capture_output=True, text=True)
    assert fsck.returncode == 0 and "mismatch" not in fsck.stderr, fsck.stderr
    assert subprocess.run(["git", "cat-file", "-e", "ab" * 20], cwd=git_repo).returncode != 0


def test_objects_the_session_packed_are_taken_checked(boxed: Sandboxed) -> None:
    out = boxed.run(
        f"echo 'A = 9' > app/alpha.py && git add -A && git {IDENTITY} commit -qm mine "
        "&& git repack -a -d -q && ls $C/objects/pack && git rev-parse HEAD"
    )
    assert ".pack" in out.stdout, out.stdout + out.stderr
    mine = out.stdout.split()[-1]

    assert boxed.ws.commit_task("alpha", "alpha") == mine
    assert git(boxed.repo, "show", f"{mine}:app/alpha.py") == "A = 9\n"


@pytest.mark.parametrize("mode", ["bwrap", "off"])
def test_a_git_planted_on_the_supervisors_path_is_refused(
    tmp_path: Path, git_repo: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``git`` in a folder on the supervisor's PATH before the real one runs, outside
    the sandbox, at the supervisor's next git call, and may move any ref."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    box = make(tmp_path, git_repo, mode)
    plant = bindir / "git"

    out = box.run(f"printf '#!/bin/sh\\nexit 0\\n' > {plant} && chmod +x {plant} && echo planted")

    if mode == "off":
        assert "planted" in out.stdout and plant.exists()
        return
    assert not plant.exists(), out.stdout
    assert "Read-only file system" in out.stderr, out.stderr


def test_root_cannot_replace_the_systems_programs_or_config(boxed: Sandboxed) -> None:
    """As root (file modes do not stop it, and it has no capabilities inside): no file
    in /usr/bin (where the supervisor's git is), /etc (/etc/gitconfig) or /var/spool
    (cron's tables)."""
    probe = f".lo-orch-probe-{os.getpid()}"
    targets = [Path(d) / probe for d in ("/usr/bin", "/etc", "/var/spool")]
    try:
        out = boxed.run("; ".join(f"try touch {t}" for t in targets))
        assert out.stdout.count("denied") == len(targets), out.stdout + out.stderr
    finally:
        for target in targets:
            target.unlink(missing_ok=True)
    assert not any(t.exists() for t in targets)


def test_root_cannot_open_the_hosts_disk_devices(boxed: Sandboxed) -> None:
    """Without capabilities root still owns the host's device files, and a raw write to
    the disk undoes every read-only bind: the session has a /dev of its own, with the
    character devices a program needs and no disk. (Opened read-write, never written.)"""
    disks = sorted(
        p for p in Path("/dev").iterdir() if p.is_block_device() and os.access(p, os.W_OK)
    )
    if not disks:  # not root: no disk is this user's to open, inside or out
        assert os.geteuid() != 0
        disks = sorted(p for p in Path("/dev").iterdir() if p.is_block_device())[:1]
        assert disks, "no block device on this machine to try"
    opener = "import os,sys; os.close(os.open(sys.argv[1], os.O_RDWR))"
    out = boxed.run(
        "; ".join(f"try {sys.executable} -c {shlex.quote(opener)} {d}" for d in disks[:3])
        + "; try sh -c 'echo x > /dev/null' && try test -c /dev/urandom && try test -d /dev/shm"
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith(("ALLOWED", "denied"))]
    assert lines[: len(disks[:3])] == [
        f"denied: {sys.executable} -c {opener} {d}" for d in disks[:3]
    ], out.stdout
    assert all(line.startswith("ALLOWED") for line in lines[len(disks[:3]) :]), out.stdout
    if os.geteuid() == 0:  # the same open outside the sandbox works: what makes it an escape
        os.close(os.open(disks[0], os.O_RDWR))


def test_symlinks_in_its_own_store_make_the_supervisor_remove_or_write_nothing(
    boxed: Sandboxed,
) -> None:
    """The session's store is what it sees as .git/objects: it swaps its folders for
    symlinks to the repository's own objects (named as the supervisor sees them), hoping
    the supervisor, taking its objects, removes those; and its info/alternates for one to
    .git/config, hoping the next launch writes through it."""
    repo = boxed.repo
    real = repo / ".git" / "objects"
    git(repo, "gc", "-q")
    extra = repo.parent / "extra.txt"
    extra.write_text("a loose object of the repository's\n", encoding="utf-8")
    name = git(repo, "hash-object", "-w", str(extra)).strip()
    kept = sorted(p.name for p in (real / "pack").iterdir()), (real / name[:2] / name[2:])
    config = (repo / ".git" / "config").read_bytes()

    out = boxed.run(
        f'O=$C/objects; rm -rf "$O/pack" "$O/info" "$O/{name[:2]}"; '
        f'ln -s {real / "pack"} "$O/pack" && ln -s {real / name[:2]} "$O/{name[:2]}" '
        f'&& mkdir "$O/info" && ln -s {repo / ".git" / "config"} "$O/info/alternates" '
        "&& echo planted"
    )
    assert "planted" in out.stdout, out.stderr
    boxed.ws.commit_task("alpha", "alpha")  # takes the session's objects
    boxed.run(f'rm -rf "$C/objects/info" && ln -s {repo / ".git"} "$C/objects/info"')
    boxed.run("true")  # a launch writes the store's info afresh

    assert sorted(p.name for p in (real / "pack").iterdir()) == kept[0]
    assert kept[1].exists()
    assert (repo / ".git" / "config").read_bytes() == config
    assert not (repo / ".git" / "alternates").exists()
    assert git(repo, "fsck", "--no-dangling") == ""


def test_removing_the_worktree_takes_what_the_session_committed_first(boxed: Sandboxed) -> None:
    out = boxed.run(
        f"echo 'A = 5' > app/alpha.py && git add -A && git {IDENTITY} commit -qm last "
        "&& git rev-parse HEAD"
    )
    mine = out.stdout.split()[-1]

    assert boxed.ws.worktrees.remove("alpha") is None  # clean once the commit is taken

    assert git(boxed.repo, "rev-parse", f"lo/{RUN}/alpha").strip() == mine
    assert git(boxed.repo, "show", f"{mine}:app/alpha.py") == "A = 5\n"


def test_only_a_move_the_session_made_is_taken(boxed: Sandboxed) -> None:
    """The branch moved outside the sandbox after the launch (back to its start, as a
    node's work or a person may move it): the copy's older value is lo-orch's own, not the
    session's, and does not move the branch forward again."""
    repo, branch = boxed.repo, f"lo/{RUN}/alpha"
    start = git(repo, "rev-parse", branch).strip()
    out = boxed.run(f"echo 'A = 7' > app/alpha.py && git add -A && git {IDENTITY} commit -qm c")
    assert out.returncode == 0, out.stderr
    first = boxed.ws.commit_task("alpha", "alpha")
    git(repo, "update-ref", f"refs/heads/{branch}", start, first)
    git(boxed.worktree, "reset", "-q", "--hard", start)

    assert boxed.ws.commit_task("alpha", "alpha") == start
    assert git(repo, "rev-parse", branch).strip() == start


def test_a_run_of_many_tasks_launches_and_every_other_branch_stays_frozen(
    boxed: Sandboxed, tmux_socket: str
) -> None:
    """A run of 90 tasks freezes 90 ref files in each session's copy of the ref folder: the
    bwrap command passed tmux's 16 KB message ("command too long" at split-window, seen at
    64 tasks). Its options now travel in a file bwrap reads; tmux runs the pane, and a
    branch frozen through that file is as unwritable as before."""
    head = git(boxed.repo, "rev-parse", "HEAD").strip()
    for n in range(90):
        git(boxed.repo, "update-ref", f"refs/heads/lo/{RUN}/t{n:03}", head)
    boxed.run("true")  # the mirror seeded with every branch
    rundir = RunDir(boxed.repo)
    ctx = AgentContext.create(
        task="alpha",
        run_name=RUN,
        repo=boxed.repo,
        worktree=rundir.worktree_path(RUN, "alpha"),
        run_dir=rundir.root,
        brief_path=rundir.brief_path("alpha"),
        settings=boxed.settings,
    )
    spec = launch_spec_for(ctx, ["sh", "-c", "true"], ctx.env)
    policy = sandbox.Policy.for_task(
        repo=boxed.repo, run_dir=rundir.root, worktree=boxed.worktree, task="alpha", run=RUN
    )
    wrapped = sandbox.wrap(["sh"], policy)
    assert sandbox.long_command(wrapped)  # what the launch would have handed tmux
    assert not sandbox.long_command(spec.argv) and "--args" in spec.argv[2]

    backend = TmuxBackend(RUN, socket=tmux_socket)
    done = boxed.worktree / "pane-ran"
    pane = backend.launch(launch_spec_for(ctx, ["sh", "-c", f"touch {done}; sleep 30"], ctx.env))
    wait_for(
        done.exists, 30, "the sandboxed pane's command to run", shown=lambda: backend.capture(pane)
    )
    done.unlink()

    out = boxed.run(ATTACKS["other_task"].replace("/beta", "/t050"))
    tries = [line for line in out.stdout.splitlines() if line.startswith(("ALLOWED", "denied"))]
    assert tries and not [t for t in tries if t.startswith("ALLOWED")], out.stdout + out.stderr
    assert git(boxed.repo, "rev-parse", f"lo/{RUN}/t050").strip() == head


def test_every_mirror_links_one_file_per_ref_value(boxed: Sandboxed) -> None:
    """The frozen refs of every session's copy are hard links to the run's one file of
    their value: launches make no new file per other task's branch (tasks x tasks of them
    in a run), and what each copy shows is still each ref's value at its launch."""
    repo = boxed.repo
    head = git(repo, "rev-parse", "HEAD").strip()
    for n in range(5):
        git(repo, "update-ref", f"refs/heads/lo/{RUN}/t{n}", head)
    boxed.run("true")
    boxed.run("true", task="beta")
    alpha, beta = OwnBranch.of(repo, RUN, "alpha"), OwnBranch.of(repo, RUN, "beta")
    values = {p.name: p.stat().st_ino for p in alpha.values.iterdir()}
    for own in (alpha, beta):
        for name in ["staging", *[f"t{n}" for n in range(5)]]:
            frozen = own.refs / name
            sha = git(repo, "rev-parse", f"lo/{RUN}/{name}").strip()
            assert frozen.read_text(encoding="ascii") == f"{sha}\n"
            assert frozen.stat().st_ino == values[sha]  # the one file of that value
    assert (alpha.refs / "beta").stat().st_ino == values[head]
    assert (alpha.refs / "alpha").stat().st_ino not in values.values()  # its own: a file
    assert len(values) == len({git(repo, "rev-parse", r).strip() for r in ("HEAD", "lo/sbr/alpha")})


@pytest.mark.parametrize("plant", ["wrong value", "symlink", "folder"])
def test_a_planted_value_file_is_made_again_never_linked_or_written(
    boxed: Sandboxed, tmp_path: Path, plant: str
) -> None:
    """Whoever reaches the private folder and leaves a ref value's file holding another
    commit, as a symlink to a file of theirs, or as a folder: the next launch's copy shows
    the true value, and the file the symlink named is neither linked nor written."""
    repo = boxed.repo
    boxed.run("true")
    own = OwnBranch.of(repo, RUN, "alpha")
    staging = git(repo, "rev-parse", f"lo/{RUN}/staging").strip()
    shared = own.values / staging
    bait = tmp_path / "bait"
    bait.write_text("0" * 40 + "\n", encoding="ascii")
    shared.unlink()
    if plant == "wrong value":
        shared.write_text("0" * 40 + "\n", encoding="ascii")
    elif plant == "symlink":
        bait.write_text(f"{staging}\n", encoding="ascii")  # even holding the true value
        shared.symlink_to(bait)
    else:
        shared.mkdir()
    boxed.run("true")  # seeded again
    frozen = own.refs / "staging"
    assert not frozen.is_symlink() and frozen.read_text(encoding="ascii") == f"{staging}\n"
    assert frozen.stat().st_ino != bait.stat().st_ino
    assert bait.stat().st_nlink == 1
    if plant != "folder":  # (a folder in its place: the value is linked from a new file)
        assert shared.stat().st_ino == frozen.stat().st_ino and not shared.is_symlink()

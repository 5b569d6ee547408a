"""The OS sandbox around agent sessions: a scripted agent launched through the real launch
path (AgentContext.create -> adapter.launch_spec -> TmuxBackend.launch on the test's private
tmux server) attacks what it must not write; mode "off" is the negative control.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.agents import bare_context
from helpers.git import git
from helpers.wait import wait_for

import loop_orchestrator
from loop_orchestrator.agents.contract import AgentContext
from loop_orchestrator.agents.registry import make_adapter
from loop_orchestrator.cli.main import run_cli
from loop_orchestrator.commands.plan import plan_from_file
from loop_orchestrator.config import Settings
from loop_orchestrator.errors import ConfigError
from loop_orchestrator.runstate import private
from loop_orchestrator.runstate.state import Phase, RunDir, Store
from loop_orchestrator.sessions import native, sandbox
from loop_orchestrator.sessions.delivery import Deliverer
from loop_orchestrator.sessions.tmux import TmuxBackend
from loop_orchestrator.workspace import workspace

pytestmark = pytest.mark.skipif(not sandbox.available()[0], reason="bubblewrap does not work")

#: a byte code file the probe tries to plant for one of lo-orch's own modules (a new name:
#: the negative control writes it, and the fixture below removes it)
PROBE_PYC = (
    Path(loop_orchestrator.__file__).resolve().parent
    / "supervisor"
    / "__pycache__"
    / f"probe-{uuid.uuid4().hex}.pyc"
)


#: a program the probe tries to leave among the compiled client's builds beside the
#: package (``native.folders``), where the next supervisor would look for its client
PROBE_CLIENT = native.folders()[0] / f"probe-{uuid.uuid4().hex}" / native.NAME


@pytest.fixture(autouse=True)
def pycache_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A user's PYTHONPYCACHEPREFIX (made by lo-orch when missing) and cache folder (the
    compiled client's other place); what the probe plants beside the package is removed
    after each test."""
    prefix = tmp_path / "user-pycache"
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(prefix))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    yield prefix
    PROBE_PYC.unlink(missing_ok=True)
    shutil.rmtree(PROBE_CLIENT.parent, ignore_errors=True)


RUN = "sbx"
PLAN = {
    "goal": "sandbox probe",
    "name": RUN,
    "tasks": [
        {
            "id": "alpha",
            "title": "Alpha",
            "objective": "probe",
            "owns": ["app/alpha.py"],
            "done": [{"criterion": "imports", "check": "python -c pass"}],
        },
        {
            "id": "beta",
            "title": "Beta",
            "objective": "other",
            "owns": ["app/beta.py"],
            "done": [{"criterion": "imports", "check": "python -c pass"}],
        },
    ],
}

#: every attempt the probe makes: (name, path key in targets.json)
WRITES = {
    "git_config": "git_config",
    "git_hook": "git_hook",
    "status_file": "status_file",
    "run_json": "run_json",
    "other_worktree": "other_worktree",
    "venv_pth": "venv_pth",
    "private_write": "private_file",
    "own_worktree": "own_file",
    "plan_file": "plan_file",
    "inbox": "inbox_file",
    "tmp": "tmp_file",
    "worktree_gitfile": "worktree_gitfile",
    "commondir": "commondir",
    # a folder once writable by every agent only for the scripted agent's records
    "received": "received_file",
    # byte code the next lo-orch command would run outside the sandbox: in the package's
    # own __pycache__ (an editable checkout's too), or under PYTHONPYCACHEPREFIX
    "lo_orch_bytecode": "lo_orch_bytecode",
    "pycache_prefix": "pycache_prefix",
    # a compiled client of its own, which every session's hooks would then run: beside
    # the package, or in the user's cache folder (made by lo-orch when missing)
    "client_beside": "client_beside",
    "client_cache": "client_cache",
}

PROBE = r"""
import json, os, subprocess, sys
targets = json.load(open(sys.argv[1]))
report = {}
def attempt(name, fn):
    try:
        report[name] = "ok: " + str(fn())
    except Exception as exc:  # the report is the point: every failure is recorded
        report[name] = f"error: {type(exc).__name__}: {exc}"
def write(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as fh:
        fh.write("# written by the agent\n")
    return path
def run(*argv):
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if out.returncode:
        raise RuntimeError(f"exit {out.returncode}: {(out.stderr or out.stdout)[-300:]}")
    return out.stdout.strip()[-200:]
attempt("git_add_status",
        lambda: run("git", "add", "app/alpha.py") + run("git", "status", "--porcelain"))
attempt("git_update_ref", lambda: run("git", "update-ref", "refs/heads/evil", "HEAD"))
attempt("pytest",
        lambda: run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_p.py"))
attempt("tmux", lambda: run("tmux", "-L", os.environ["LO_ORCH_TMUX_SOCKET"], "list-panes", "-a"))
# the writes last: with the sandbox off they break the worktree's own .git link
for name, key in json.loads(sys.argv[2]).items():
    attempt(name, lambda key=key: write(targets[key]))
attempt("private_list", lambda: sorted(os.listdir(targets["private_dir"])))
attempt("private_read", lambda: open(targets["private_key"]).read())
json.dump(report, open(targets["report"], "w"), indent=1)
"""


def prepare(tmp_path: Path, git_repo: Path, mode: str) -> tuple[Settings, dict[str, str]]:
    """A recorded run with two real worktrees, a project .venv, the supervisor's private
    state with a key, and a scripted agent for task alpha whose plan step is the probe."""
    repo = git_repo
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(PLAN), encoding="utf-8")
    script = tmp_path / "script.yaml"
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE, encoding="utf-8")
    targets_file = tmp_path / "targets.json"
    script.write_text(
        yaml.safe_dump(
            {
                "alpha": {
                    "plan": [
                        {
                            "run": {
                                "argv": [
                                    sys.executable,
                                    str(probe),
                                    str(targets_file),
                                    json.dumps(WRITES),
                                ],
                                "timeout": 180,
                            }
                        },
                        {"say": "probe done"},
                    ]
                }
            }
        ),
        encoding="utf-8",
    )
    settings = Settings.model_validate(
        {
            "agent": {
                "kind": "scripted",
                "script": str(script),
                "args": ["--record-dir", str(tmp_path / "received")],
            },
            "sandbox": {"mode": mode},
        }
    )
    summary = plan_from_file(repo, plan_file, settings)
    ws = workspace.Workspace(repo, RUN, settings.workspace)
    ws.create_staging(summary.run.base_sha)
    own = ws.ensure_worktree("alpha")
    other = ws.ensure_worktree("beta")
    (own / "app" / "alpha.py").write_text("A = 1\n", encoding="utf-8")
    (own / "test_p.py").write_text("def test_adds():\n    assert 1 + 1 == 2\n", encoding="utf-8")
    site = repo / ".venv" / "lib" / "python3" / "site-packages"
    site.mkdir(parents=True)
    secret_dir = private.run_dir(repo, RUN)
    (secret_dir / "key").write_text("supervisor-secret", encoding="utf-8")
    rundir = RunDir(repo)
    targets = {
        "git_config": str(repo / ".git" / "config"),
        "git_hook": str(repo / ".git" / "hooks" / "post-commit"),
        "status_file": str(rundir.status_path("alpha")),
        "run_json": str(rundir.run_json),
        "other_worktree": str(other / "app" / "planted.py"),
        "venv_pth": str(site / "evil.pth"),
        "private_file": str(secret_dir / "planted"),
        "private_dir": str(secret_dir),
        "private_key": str(secret_dir / "key"),
        "own_file": str(own / "app" / "alpha.py"),
        "plan_file": str(rundir.agent_plan_path("alpha")),
        "inbox_file": str(rundir.root / "inbox" / "alpha" / "event.json"),
        "received_file": str(rundir.root / "received" / "alpha-1.txt"),
        "tmp_file": str(tmp_path / "agent-tmp.txt"),
        # redirecting these would point the supervisor's git in the worktree elsewhere
        "worktree_gitfile": str(own / ".git"),
        "commondir": str(Path((own / ".git").read_text().split(":", 1)[1].strip()) / "commondir"),
        "report": str(tmp_path / "report.json"),
        "lo_orch_bytecode": str(PROBE_PYC),
        "pycache_prefix": str(
            Path(os.environ["PYTHONPYCACHEPREFIX"]) / "lo-orch" / "supervisor" / "decide.pyc"
        ),
        "client_beside": str(PROBE_CLIENT),
        "client_cache": str(native.folders()[1] / "0123456789abcdef0123" / native.NAME),
    }
    targets_file.write_text(json.dumps(targets), encoding="utf-8")
    return settings, targets


def run_probe(settings: Settings, repo: Path, *, strict: bool = False) -> dict[str, str]:
    """Launch task alpha's scripted agent the way the supervisor does and run the probe."""
    rundir = RunDir(repo)
    store = Store(rundir)
    store.update_status("alpha", phase=Phase.PLANNING)
    adapter = make_adapter(settings, repo)
    ctx = AgentContext.create(
        task="alpha",
        run_name=RUN,
        repo=repo,
        worktree=rundir.worktree_path(RUN, "alpha"),
        run_dir=rundir.root,
        brief_path=rundir.brief_path("alpha"),
        settings=settings,
        session_id="0f5e8f1c-1111-4222-8333-444455556666",
    )
    if strict:
        assert ctx.sandbox is not None
        ctx.sandbox = ctx.sandbox.strict()
    adapter.prepare(ctx)
    backend = TmuxBackend(RUN)
    pane = backend.launch(adapter.launch_spec(ctx, resume=False))
    adapter.wait_ready(backend, pane, timeout=30)
    received = Path(str(settings.agent.args[1]))
    Deliverer().deliver(
        backend,
        pane,
        "Plan the task.\nProbe.",
        confirmed=lambda: any(received.glob("alpha-*.txt")),
        timeout=30,
    )
    report = Path(json.loads((rundir.repo.parent / "targets.json").read_text())["report"])
    wait_for(report.exists, 180, "the probe's report", shown=lambda: backend.capture(pane, 0))
    backend.kill_session()
    data: dict[str, str] = json.loads(report.read_text(encoding="utf-8"))
    return data


def ok(report: dict[str, str], name: str) -> bool:
    return report[name].startswith("ok")


DENIED = (
    "git_config",
    "git_hook",
    "run_json",
    "other_worktree",
    "venv_pth",
    "private_write",
    "git_update_ref",
    "tmux",
    "worktree_gitfile",
    "commondir",
    "received",
    "lo_orch_bytecode",
    "pycache_prefix",
    "client_beside",
    "client_cache",
)
ALLOWED = ("own_worktree", "plan_file", "inbox", "tmp", "git_add_status", "pytest")


def test_sandboxed_agent_cannot_write_what_the_supervisor_trusts(
    tmp_path: Path, git_repo: Path, tmux_socket: str
) -> None:
    settings, targets = prepare(tmp_path, git_repo, "bwrap")
    before = {k: Path(targets[k]).read_bytes() for k in ("git_config", "run_json")}

    report = run_probe(settings, git_repo)

    for name in DENIED:
        assert not ok(report, name), (name, report[name])
    for name in ("git_config", "run_json", "venv_pth", "private_write", "received"):
        assert "Read-only file system" in report[name] or "No such file" in report[name], report
    for name in ALLOWED:
        assert ok(report, name), (name, report[name])
    assert "1 passed" in report["pytest"]
    # the private state root is an empty tmpfs: the run's folder is not even there
    assert "FileNotFoundError" in report["private_list"]
    assert "FileNotFoundError" in report["private_read"]
    assert "supervisor-secret" not in json.dumps(report)
    # nothing changed outside, as seen from the host
    assert {k: Path(targets[k]).read_bytes() for k in before} == before
    assert not Path(targets["git_hook"]).exists()
    assert not Path(targets["other_worktree"]).exists()
    assert not Path(targets["venv_pth"]).exists()
    assert not PROBE_PYC.exists() and not Path(targets["pycache_prefix"]).exists()
    assert not PROBE_CLIENT.exists() and not Path(targets["client_cache"]).exists()
    assert not Path(targets["private_file"]).exists()
    # no session can plant a record of prompts "received" under .orchestration/
    assert not Path(targets["received_file"]).parent.exists()
    assert "evil" not in git(git_repo, "branch", "--list", "evil")
    assert Path(targets["plan_file"]).read_text().endswith("# written by the agent\n")
    # hooks and signals report through the inbox socket: the status files are the
    # supervisor's alone
    assert "Read-only file system" in report["status_file"], report


def test_the_first_session_on_a_fresh_machine_cannot_reach_tmux_either(
    tmp_path: Path, git_repo: Path, tmux_socket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No tmux socket folder exists yet when the first session's sandbox is set up (the
    run's server is started after): it is made then, so it is hidden like any other."""
    fresh = Path(tempfile.mkdtemp(prefix="lt-", dir="/tmp"))  # socket paths stay short
    monkeypatch.setenv("TMUX_TMPDIR", str(fresh))
    try:
        assert not sandbox.tmux_socket_dir().exists()
        settings, _ = prepare(tmp_path, git_repo, "bwrap")
        report = run_probe(settings, git_repo)
        assert not ok(report, "tmux"), report["tmux"]
    finally:
        subprocess.run(["tmux", "-L", tmux_socket, "kill-server"], capture_output=True, check=False)
        shutil.rmtree(fresh, ignore_errors=True)


def test_strict_policy_also_denies_the_status_files(
    tmp_path: Path, git_repo: Path, tmux_socket: str
) -> None:
    settings, targets = prepare(tmp_path, git_repo, "bwrap")

    report = run_probe(settings, git_repo, strict=True)

    assert "Read-only file system" in report["status_file"], report
    assert "written by the agent" not in Path(targets["status_file"]).read_text()
    for name in ("run_json", "git_config", "private_write"):
        assert not ok(report, name), report[name]
    for name in ("own_worktree", "plan_file", "inbox", "tmp", "pytest"):
        assert ok(report, name), (name, report[name])


def test_with_mode_off_the_same_attacks_succeed(
    tmp_path: Path, git_repo: Path, tmux_socket: str
) -> None:
    """Negative control: the probe can detect every write the sandbox stops."""
    settings, targets = prepare(tmp_path, git_repo, "off")

    report = run_probe(settings, git_repo)

    for name in (*DENIED, *ALLOWED, "status_file"):
        assert ok(report, name), (name, report[name])
    assert report["private_read"] == "ok: supervisor-secret"
    assert Path(targets["venv_pth"]).exists()
    assert PROBE_PYC.exists() and Path(targets["pycache_prefix"]).exists()
    assert PROBE_CLIENT.exists() and Path(targets["client_cache"]).exists()
    assert "evil" in git(git_repo, "branch", "--list", "evil")


def test_policy_mount_order_and_missing_paths(tmp_path: Path, git_repo: Path) -> None:
    repo = git_repo.resolve()
    worktree = repo / ".worktrees" / RUN / "alpha"
    worktree.mkdir(parents=True)
    private.state_home().mkdir(parents=True)
    policy = sandbox.Policy.for_task(
        repo=repo, run_dir=repo / ".orchestration", worktree=worktree, task="alpha"
    )
    argv = sandbox.wrap(["agent", "--flag"], policy)
    assert argv[-3:] == ["--", "agent", "--flag"]
    assert "--new-session" not in argv and "--unshare-net" not in argv
    flat = " ".join(argv)
    # the repository read-only first, the worktree writable after it, private state last
    assert flat.index(f"--ro-bind {repo} {repo}") < flat.index(f"--bind {worktree} {worktree}")
    hidden = f"--tmpfs {private.state_home()} --remount-ro {private.state_home()}"
    assert flat.index(f"--bind {worktree}") < flat.index(hidden)
    # the plans folder does not exist yet: it is left out until confine() creates it
    assert str(repo / ".orchestration" / "plans") not in flat
    assert f"--ro-bind {repo / '.git'} " in flat
    assert f"--bind {repo / '.git' / 'objects'} " in flat
    assert f"--bind {repo / '.git'} " not in flat
    # under .orchestration/ only the plans, the task's inbox and the hook failure log
    orch = repo / ".orchestration"
    granted = {str(p) for p in (*policy.writable, *policy.legacy_dirs, *policy.legacy_files)}
    assert {p for p in granted if p.startswith(f"{orch}/")} == {
        f"{orch}/plans",
        f"{orch}/inbox/alpha",
        f"{orch}/logs",
    }


def test_mode_bwrap_without_bwrap_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    sandbox.available.cache_clear()
    try:
        settings = Settings.model_validate(
            {"agent": {"kind": "scripted", "script": "s.yaml"}, "sandbox": {"mode": "bwrap"}}
        )
        with pytest.raises(ConfigError, match="sandbox is required") as info:
            make_adapter(settings, tmp_path)
        assert "apt-get install bubblewrap" in (info.value.hint or "")
        auto = settings.model_copy(
            update={"sandbox": settings.sandbox.model_copy(update={"mode": "auto"})}
        )
        assert sandbox.require(auto) is False
        assert sandbox.status(auto) == (False, "bwrap not found on PATH")
    finally:
        sandbox.available.cache_clear()


def test_doctor_reports_the_sandbox(
    git_repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(git_repo)
    (git_repo / ".loop-orchestrator").mkdir()
    config = git_repo / ".loop-orchestrator" / "config.toml"
    config.write_text('[agent]\nkind = "scripted"\nscript = "s.yaml"\n', encoding="utf-8")
    run_cli(["doctor"])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "sandbox" in line and "bubblewrap" in line)
    assert "ok" in row
    config.write_text(config.read_text() + '[sandbox]\nmode = "off"\n', encoding="utf-8")
    run_cli(["doctor"])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "agent sandbox" in line)
    assert 'off ([sandbox] mode = "off")' in row


def test_the_supervisor_launch_is_wrapped(tmp_path: Path) -> None:
    """Every adapter ends with launch_spec_for: the argv runs inside bwrap by default."""
    settings = Settings.model_validate({"agent": {"kind": "scripted", "script": "s.yaml"}})
    (tmp_path / "wt").mkdir()
    ctx = bare_context(tmp_path, settings)
    spec = make_adapter(settings, tmp_path).launch_spec(ctx, resume=False)
    assert Path(spec.argv[0]).name == "bwrap"
    inner: list[Any] = spec.argv[spec.argv.index("--") + 1 :]
    assert inner[1:3] == ["-m", "loop_orchestrator.simulator.agent"]
    assert (tmp_path / ".orchestration" / "inbox" / "api").is_dir()
    off = settings.model_copy(
        update={"sandbox": settings.sandbox.model_copy(update={"mode": "off"})}
    )
    ctx_off = bare_context(tmp_path, off)
    assert ctx_off.sandbox is None
    assert make_adapter(off, tmp_path).launch_spec(ctx_off, resume=False).argv[1:3] == [
        "-m",
        "loop_orchestrator.simulator.agent",
    ]

"""`lo-orch demo`: the whole flow on a throwaway repository with the scripted agent.

It builds a small real Python project from ``examples/demo/``, plans four tasks in three
waves, passes Gate 1, supervises scripted sessions in tmux (one task fails a done-check
first and is reworked), integrates, passes Gate 2, and runs the merged project's tests.
No Claude login is needed: the scripted agent stands in for the model's work only; tmux,
git, hooks, verification and merging are the real ones.

``--agent claude`` runs the same demo with real Claude Code sessions whose model is the
scripted endpoint (``simulator/endpoint.py``) serving the same script: Claude Code's own
Write and Bash tools do the work, its hooks report, offline, in a throwaway
``CLAUDE_CONFIG_DIR`` (the user's ``~/.claude*`` is neither read nor written).
``--agent qwen`` does the same with Qwen Code on the scripted Chat Completions endpoint
(``simulator/chat_endpoint.py``), in a throwaway ``QWEN_HOME``; ``--agent cline`` with the
Cline CLI there, in a throwaway ``CLINE_DIR``; ``--agent vibe`` with Mistral Vibe there,
in a throwaway ``VIBE_HOME``; ``--agent aider`` with aider, in a throwaway
``HOME``; ``--agent opencode`` with opencode there, in throwaway XDG folders.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from loop_orchestrator import proc, resources
from loop_orchestrator.commands.plan import plan_from_file
from loop_orchestrator.config import AgentConfig, AuditorConfig, RunConfig, Settings
from loop_orchestrator.errors import LoOrchError
from loop_orchestrator.git import checkouts as tempcheckout
from loop_orchestrator.runstate import create as runs
from loop_orchestrator.runstate import private
from loop_orchestrator.runstate.state import RunDir, Store
from loop_orchestrator.sessions.factory import run_backend
from loop_orchestrator.sessions.sandbox import tmux_socket_dir
from loop_orchestrator.simulator.agent import record_dir_for
from loop_orchestrator.simulator.chat_endpoint import ChatEndpoint
from loop_orchestrator.simulator.endpoint import ModelEndpoint
from loop_orchestrator.simulator.script import load_script
from loop_orchestrator.workspace import integration, workspace


@dataclass(frozen=True)
class DemoResult:
    repo: Path
    seconds: float
    report: list[str] = field(default_factory=list)


def _render(src: Path, dest: Path, python: str) -> None:
    text = src.read_text(encoding="utf-8").replace("{python}", python)
    dest.write_text(text, encoding="utf-8")


@dataclass
class DemoFiles:
    root: Path
    repo: Path
    plan: Path
    script: Path


def prepare_demo(root: Path) -> DemoFiles:
    """Lay out the demo under ``root``: the project as a fresh git repository, and the plan
    and the scripted agent's script beside it (outside the repo, so its checkout is clean)."""
    source = resources.examples_dir() / "demo"
    repo = root / "textstats"
    shutil.copytree(source / "project", repo)
    workspace.init_repo(repo)
    _render(source / "plan.yaml", root / "plan.yaml", shlex.quote(sys.executable))
    _render(source / "script.yaml", root / "script.yaml", sys.executable)
    return DemoFiles(root, repo, root / "plan.yaml", root / "script.yaml")


AGENTS = ("scripted", "claude", "qwen", "cline", "vibe", "aider", "opencode")
#: the demo agents that are a preset CLI on the scripted Chat Completions endpoint:
#: kind -> (program, the command installing it)
CHAT_PRESETS = {
    "qwen": ("qwen", "npm install -g @qwen-code/qwen-code"),
    "cline": ("cline", "npm install -g cline"),
    "vibe": ("vibe", "uv tool install mistral-vibe"),
    "aider": ("aider", "pipx install aider-chat"),
    "opencode": ("opencode", "npm install -g opencode-ai"),
}


def demo_settings(script: Path, claude: ClaudeDemo | None = None, kind: str = "claude") -> Settings:
    """The scripted agent (or Claude Code, or the preset ``kind``, on the scripted
    endpoint), no LLM auditor."""
    agent = AgentConfig(kind="scripted", script=str(script), ready_timeout=20)
    if claude is not None:
        # opencode's start was seen taking 30 to 60 s with two at once on a loaded 2-core
        # machine (load 15)
        ready = 180 if kind == "opencode" else 90
        agent = AgentConfig.model_validate(
            {"kind": kind, "command": claude.command, "env": claude.env, "ready_timeout": ready}
        )
    return Settings(
        agent=agent,
        auditor=AuditorConfig(llm="off"),
        run=RunConfig(concurrency=4, stall_minutes=5, stagger_seconds=0.1),
    )


@dataclass
class ClaudeDemo:
    """Real Claude Code for the demo: its executable and the sessions' environment."""

    command: str
    env: dict[str, str]


def find_preset(kind: str) -> str:
    """The program of the demo agent ``kind`` on PATH, or a clear error."""
    program, install = CHAT_PRESETS[kind]
    found = shutil.which(program)
    if found is None:
        msg = f"`lo-orch demo --agent {kind}` needs `{program}` on PATH"
        raise LoOrchError(
            msg,
            hint=f"Install it (`{install}`), or run `lo-orch demo` for the "
            "same demo with the scripted agent.",
        )
    return found


def find_claude() -> str:
    """The ``claude`` executable on PATH, or a clear error."""
    found = shutil.which("claude")
    if found is None:
        msg = "`lo-orch demo --agent claude` needs the Claude Code CLI, and `claude` is not on PATH"
        raise LoOrchError(
            msg,
            hint="Install it (`npm install -g @anthropic-ai/claude-code`), or run "
            "`lo-orch demo` for the same demo with the scripted agent.",
        )
    return found


def run_demo(
    *,
    keep: bool = False,
    progress: Callable[[str], None] | None = None,
    workdir: Path | None = None,
    agent: str = "scripted",
) -> DemoResult:
    """Run the demo end to end; raise LoOrchError naming the step that failed."""
    say = progress or (lambda _m: None)
    started = time.monotonic()
    if agent not in AGENTS:
        msg = f"unknown demo agent {agent!r}"
        raise LoOrchError(msg, hint=f"Use one of: {', '.join(AGENTS)}.")
    claude_command = find_claude() if agent == "claude" else None
    preset_command = find_preset(agent) if agent in CHAT_PRESETS else None
    root = Path(tempfile.mkdtemp(prefix="lo-orch-demo-", dir=workdir))
    files = prepare_demo(root)
    repo = files.repo

    own_socket = "LO_ORCH_TMUX_SOCKET" not in os.environ
    socket = os.environ.get("LO_ORCH_TMUX_SOCKET") or f"lo-demo-{os.getpid()}"
    os.environ["LO_ORCH_TMUX_SOCKET"] = socket
    # the scripted agents' transcripts go with the demo's files (removed with them)
    own_transcripts = "LO_ORCH_SCRIPTED_TRANSCRIPTS" not in os.environ
    os.environ.setdefault("LO_ORCH_SCRIPTED_TRANSCRIPTS", str(root / "transcripts"))
    # their record of the prompts they got is beside the transcripts (named now, while the
    # repository is there to resolve)
    received = record_dir_for(RunDir(repo).root)
    endpoint: ModelEndpoint | None = None
    claude = None
    if claude_command is not None:
        endpoint = ModelEndpoint(
            load_script(files.script, model=True), log_path=root / "model-requests.jsonl"
        )
        config_dir = root / "claude-config"
        config_dir.mkdir()
        env = {**endpoint.env(), "CLAUDE_CONFIG_DIR": str(config_dir)}
        if os.geteuid() == 0:
            # bypass mode as root needs the machine to say it is a sandbox; here the model
            # is our script and the repository a throwaway, so the demo may say so
            env["IS_SANDBOX"] = "1"
        claude = ClaudeDemo(claude_command, env)
        say(
            f"Claude Code {claude_command} on the scripted model endpoint {endpoint.url} "
            "(offline; its config lives in the demo folder)"
        )
    if preset_command is not None:
        command = preset_command
        chat = ChatEndpoint(
            load_script(files.script, model=True), log_path=root / "model-requests.jsonl"
        )
        endpoint = chat
        home = root / f"{agent}-home"
        if agent == "cline":
            env = chat.cline_env(home)
        elif agent == "vibe":
            env = chat.vibe_env(home)
        elif agent == "aider":
            env = chat.aider_env(home)
        elif agent == "opencode":
            env = chat.opencode_env(home)
        else:
            env = chat.qwen_env(home)
        claude = ClaudeDemo(command, env)
        say(
            f"{agent} ({command}) on the scripted Chat Completions endpoint {chat.url} "
            "(offline; its settings and chats live in the demo folder)"
        )
    settings = demo_settings(files.script, claude, agent)
    say(f"demo repository: {repo}")
    say(f"watch the sessions from another terminal: lo-orch attach --repo {repo}")
    try:
        summary = plan_from_file(repo, files.plan, settings)
        say(
            f"plan: {len(summary.plan.tasks)} tasks in {len(summary.waves)} waves "
            + " | ".join(", ".join(w) for w in summary.waves)
        )
        runs.approve_plan(repo)
        say("Gate 1 approved (auto, demo)")
        from loop_orchestrator.supervisor.main import Supervisor

        outcome = Supervisor(repo, settings, progress=say).run()
        if outcome.state != "review":
            msg = f"the demo run ended in {outcome.state}: {outcome.message}"
            raise LoOrchError(msg, hint=f"Inspect {repo}/.orchestration (kept).")
        review = integration.review(repo)
        integration.merge(repo, review)
        say(f"Gate 2 approved (auto, demo): {review.feature} -> {review.commit[:12]}")
        with tempcheckout.temp_checkout(repo, review.feature) as tree:
            tests = proc.run(
                [sys.executable, "-m", "unittest", "discover", "-s", "tests", "-t", "."],
                cwd=tree,
                check=False,
                timeout=120,
            )
        if not tests.ok:
            raise LoOrchError("the merged project's tests failed:\n" + tests.stderr[-2000:])
        ran = next((ln for ln in tests.stderr.splitlines() if ln.startswith("Ran ")), "")
        elapsed = time.monotonic() - started
        result = DemoResult(
            repo=repo,
            seconds=elapsed,
            report=_report(repo, review.feature, ran, elapsed, keep, socket),
        )
        return result
    except BaseException:
        keep = True  # leave the files for inspection when anything went wrong
        # but not its sessions: their model endpoint closes with the demo, and a session
        # left running would go on unseen (a real CLI retrying a closed endpoint burns CPU)
        if not own_socket:
            _end_sessions(repo)
        raise
    finally:
        if endpoint is not None:
            endpoint.close()
        if own_transcripts:
            os.environ.pop("LO_ORCH_SCRIPTED_TRANSCRIPTS", None)
        if own_socket:
            os.environ.pop("LO_ORCH_TMUX_SOCKET", None)
            # the server is the demo's own: nothing of it outlives the demo, kept or not,
            # its socket file neither (tmux leaves it when the server ends)
            proc.run(["tmux", "-L", socket, "kill-server"], check=False)
            _remove_socket_file(tmux_socket_dir() / socket)
        if not keep:
            # worktrees and git metadata all live inside; the whole folder is ours, and so
            # is the throwaway repository's private state (record, refs book, object view)
            with contextlib.suppress(OSError):
                shutil.rmtree(private.state_home() / private.repo_key(repo))
            with contextlib.suppress(OSError):
                shutil.rmtree(root)
            # and the scripted agents' record of the prompts they got
            with contextlib.suppress(OSError):
                shutil.rmtree(received)


def _end_sessions(repo: Path) -> None:
    """End the tmux session of the demo's run (on a server the caller chose)."""
    with contextlib.suppress(LoOrchError):
        run_backend(runs.load_approved(repo)[0].run).kill_session()


def _report(
    repo: Path, feature: str, ran: str, elapsed: float, keep: bool, socket: str
) -> list[str]:
    store = Store(RunDir(repo))
    ledger = store.read_ledger()
    reworks = [e for e in ledger if e.get("event") == "rework"]
    lines = [
        "",
        f"Demo finished in {elapsed:.1f}s: 4 tasks, 3 waves, "
        f"{len(reworks)} rework round(s), merged into {feature}.",
        f"Merged project's tests: {ran or 'passed'} - OK",
    ]
    verdicts = [e for e in ledger if e.get("event") == "verdict" and not e.get("passed")]
    for e in reworks:
        why = next((v.get("message", "") for v in verdicts if v.get("task") == e.get("task")), "")
        where = f" (review: {e.get('review')})" if keep else ""
        lines.append(f"  rework: {e.get('task')} round {e.get('round')}: {why}{where}")
    if keep:
        lines += [
            f"Repository:   {repo}  (git log --graph {feature})",
            f"Run state:    {store.dirs.root}  (ledger.jsonl, status/, reviews/, evidence/)",
            "Sessions and worktrees: closed and removed by Gate 2, as in a real run "
            f"(the run's tmux server was {socket})",
        ]
    else:
        lines.append("The throwaway repository was removed (use --keep to inspect it).")
    return lines


def _remove_socket_file(path: Path) -> None:
    """The socket file of the demo's own tmux server, once the server is gone (only a
    socket: whatever else stands there under that name is not the demo's)."""
    with contextlib.suppress(OSError):
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()

"""Layered settings and the seed-compatible tool profile.

Settings: built-in defaults < ``~/.config/loop-orchestrator/config.toml`` <
``<repo>/.loop-orchestrator/config.toml`` < ``LO_ORCH_<SECTION>_<KEY>`` environment < flags.
Tool profile: ``~/.claude/loop-orchestrator/tools.json`` <
``<repo>/.loop-orchestrator/tools.json``, merged per role and per field; ``null`` drops a
field (or a whole role). An invalid tool profile is reported and ignored, never fatal.
"""

from __future__ import annotations

import json
import logging
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from loop_orchestrator.errors import ConfigError

log = logging.getLogger(__name__)

#: permission modes Claude Code 2.1.332 accepts (``default`` is an older alias of manual)
PERMISSION_MODES = (
    "acceptEdits",
    "auto",
    "bypassPermissions",
    "manual",
    "default",
    "dontAsk",
    "plan",
)

#: LO_ORCH_* variables that are part of the agent environment contract, not settings
RESERVED_ENV = frozenset(
    {
        "LO_ORCH_TASK",
        "LO_ORCH_RUN_DIR",
        "LO_ORCH_BRIEF",
        "LO_ORCH_BIN",
        "LO_ORCH_HOOK",
        "LO_ORCH_TMUX_SOCKET",
    }
)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class AgentConfig(_Section):
    kind: Literal[
        "claude",
        "codex",
        "gemini",
        "qwen",
        "cline",
        "vibe",
        "aider",
        "opencode",
        "command",
        "scripted",
    ] = "claude"
    command: str = "claude"
    args: list[str] = Field(default_factory=list)
    permission_mode: Literal[
        "acceptEdits", "auto", "bypassPermissions", "manual", "default", "dontAsk", "plan"
    ] = "bypassPermissions"
    env: dict[str, str] = Field(default_factory=dict)
    ready_pattern: str = ""
    ready_timeout: float = 60.0
    delivery: Literal["paste", "type"] = "paste"
    pretrust: bool = True
    #: the scripted agent's YAML script (kind = "scripted"); relative to the repo
    script: str | None = None
    model: str | None = None


class RunConfig(_Section):
    concurrency: int = Field(default=4, ge=1, le=64)
    max_rework: int = Field(default=3, ge=0, le=20)
    #: review rounds per task (a person's comments at Gate 2 sent back), apart from rework
    max_review_rounds: int = Field(default=3, ge=0, le=20)
    stall_minutes: float = Field(default=20, gt=0)
    strict_waves: bool = False
    #: seconds between prompt deliveries to different panes
    stagger_seconds: float = Field(default=0.3, ge=0)
    #: the run's budget in dollars: no session is launched once the run's spend reaches it
    max_cost_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    #: each task's budget in dollars (a plan task's ``max_cost_usd`` wins): a task over it
    #: is blocked at its next turn boundary
    task_max_cost_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    #: after the model API gave up on a session (429 / overloaded, Claude Code's
    #: StopFailure), seconds before lo-orch resumes it with a short prompt
    limit_wait_seconds: float = Field(default=60, gt=0, allow_inf_nan=False)
    #: after a usage limit's reset time, seconds lo-orch leaves Claude Code to resume by
    #: itself before it sends the short prompt
    usage_limit_grace_seconds: float = Field(default=150, ge=0, allow_inf_nan=False)
    #: after repeated rate limits lowered the concurrency: seconds without a limit before
    #: it is raised again by one session
    limit_quiet_seconds: float = Field(default=600, gt=0, allow_inf_nan=False)


class AuditorConfig(_Section):
    #: "agent" (Claude Code headless), "off", or a command line
    llm: str = "agent"
    timeout: float = 600.0


class WorkspaceConfig(_Section):
    author_name: str = "lo-orch"
    author_email: str = "lo-orch@localhost"
    #: command run in each new worktree (e.g. copy .env.example, install dependencies)
    setup_command: str | None = None
    setup_timeout: float = 600.0
    allow_dirty: bool = False


class VerifyConfig(_Section):
    #: integration command; default from the tool profile's `verify` role
    command: str | None = None
    check_timeout: float = 600.0
    integration_timeout: float = 1800.0
    #: mutation check (verify/mutation.py): at most this many mutants of the task's changed
    #: source lines, run against its new and changed tests; 0 turns the check off
    mutants_max: int = Field(default=25, ge=0)
    #: the mutation check's whole time budget for one task, in seconds
    mutants_seconds: float = Field(default=60.0, ge=0)
    #: the data memory (MiB) each process of a check (done-checks, red/green, mutants, the
    #: integration command) may take before its allocations fail; unset: a quarter of the
    #: machine's memory, at least 2048; 0: no bound
    check_memory_mb: int | None = Field(default=None, ge=0)


class SandboxConfig(_Section):
    #: the OS sandbox around each agent session (sandbox.py): "auto" = on where bubblewrap
    #: works (off with a warning elsewhere), "bwrap" = required, "off"
    mode: Literal["auto", "bwrap", "off"] = "auto"


class GithubIntakeConfig(_Section):
    #: GitHub Enterprise Server hosts (``ghe.example.com``); an issue URL on one of them is
    #: read from ``https://HOST/api/v3`` with GH_ENTERPRISE_TOKEN (intake/github.py)
    hosts: list[str] = Field(default_factory=list)


class JiraIntakeConfig(_Section):
    #: "auto": a ``*.atlassian.net`` site is Cloud, any other asks ``/rest/api/2/serverInfo``
    deployment: Literal["auto", "cloud", "datacenter"] = "auto"
    #: resolutions that mean the work was done, besides Done/Fixed/Resolved/Complete(d)/
    #: Implemented (a localized or custom scheme: "Erledigt", "Shipped")
    done_resolutions: list[str] = Field(default_factory=list)


class IntakeConfig(_Section):
    """``[intake.github]`` and ``[intake.jira]``: how ``plan --issue`` reaches a tracker."""

    github: GithubIntakeConfig = Field(default_factory=GithubIntakeConfig)
    jira: JiraIntakeConfig = Field(default_factory=JiraIntakeConfig)


class PrConfig(_Section):
    """``[pr]``: where ``lo-orch pr`` opens the pull request (docs/design.md section 12)."""

    #: the GitHub repository ``owner/name``; empty: read from the remote's URL
    repo: str = ""
    #: the remote pushed to when ``--remote`` is not given
    remote: str = "origin"
    #: seconds between two reads of ``lo-orch pr --follow``, and the most it waits in all
    follow_interval: float = Field(default=30.0, gt=0)
    follow_timeout: float = Field(default=3600.0, ge=0)


class PermissionsConfig(_Section):
    """``[permissions]``: rules that answer sessions' permission requests without a person
    (syntax in permissions.py and docs/permissions.md; deny wins over allow)."""

    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)

    @field_validator("allow", "deny")
    @classmethod
    def _rules(cls, value: list[str]) -> list[str]:
        # deferred: at the top it would double the cost of importing config (measured
        # 0.2 s -> 0.45 s), which nearly every command does
        from loop_orchestrator.permissions.requests import parse_rule

        for text in value:
            parse_rule(text)  # a ValueError names the rule and the syntax
        return value


class NotifyConfig(_Section):
    """``[notify]``: how lo-orch tells a person that something needs them (notify.py)."""

    #: a command line that receives one JSON object per event on stdin ("" = none)
    command: str = ""
    #: seconds the command may take before it is killed
    timeout: float = Field(default=10.0, gt=0, le=600, allow_inf_nan=False)
    #: notify-send / osascript, where one is on PATH
    desktop: bool = True
    #: a terminal bell and a `tmux display-message` on each terminal attached to the run's session
    tmux: bool = True


class ClusterConfig(_Section):
    """``[cluster]``: where sessions run. ``tmux`` (default) runs them on this machine;
    ``ray`` places each on a node of a Ray cluster that offers a session slot (docs/cluster.md;
    needs ``pip install loop-orchestrator[ray]``)."""

    backend: Literal["tmux", "ray"] = "tmux"
    #: the Ray cluster: "auto" (a cluster started on this machine with `ray start`),
    #: "ray://host:10001" (Ray Client) or "host:6379" (a head's GCS address)
    address: str = "auto"
    #: the Ray namespace that holds a run's session actors
    namespace: str = "lo-orch"
    #: the custom Ray resource a node declares per session it can hold
    #: (`ray start --resources '{"lo_session": 4}'`)
    slot_resource: str = Field(default="lo_session", pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
    #: seconds between a node's work-in-progress bundles (the most work a lost node costs)
    checkpoint_seconds: float = Field(default=180.0, gt=0, le=86400, allow_inf_nan=False)
    #: how many lost nodes a task survives (relaunched elsewhere each time, apart from the
    #: one relaunch an agent that exits gets); the next loss fails the task
    max_node_losses: int = Field(default=3, ge=0, le=100)
    #: how long one call to a session actor may take before it counts as unanswered (more
    #: than the 2 s a node holds a call for the session's requests)
    call_timeout_seconds: float = Field(default=60.0, ge=5, le=3600, allow_inf_nan=False)
    #: how long a session may stay unanswered, while the cluster answers and lists its node
    #: as alive, before it counts as lost (a frozen actor, a cut between it and the cluster)
    loss_grace_seconds: float = Field(default=120.0, gt=0, le=86400, allow_inf_nan=False)
    #: where a node keeps its checkouts ("" = ``~/.cache/lo-orch/nodes`` on that node;
    #: ``LO_ORCH_NODE_ROOT`` in the node's environment wins)
    node_root: str = ""
    #: how `lo-orch attach` reaches a remote session: an ssh destination template such as
    #: "{host}" or "me@{host}" ({host} = the node's address); "" = a terminal relay through Ray
    ssh: str = ""


class PriceConfig(_Section):
    """``[prices."<model>"]``: dollars per million tokens (usage.py)."""

    input: float = Field(ge=0, allow_inf_nan=False)
    output: float = Field(ge=0, allow_inf_nan=False)
    cache_read: float = Field(ge=0, allow_inf_nan=False)
    cache_write: float = Field(ge=0, allow_inf_nan=False)


class Settings(_Section):
    agent: AgentConfig = Field(default_factory=AgentConfig)
    run: RunConfig = Field(default_factory=RunConfig)
    auditor: AuditorConfig = Field(default_factory=AuditorConfig)
    workspace: WorkspaceConfig = Field(default_factory=WorkspaceConfig)
    verify: VerifyConfig = Field(default_factory=VerifyConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    intake: IntakeConfig = Field(default_factory=IntakeConfig)
    pr: PrConfig = Field(default_factory=PrConfig)

    permissions: PermissionsConfig = Field(default_factory=PermissionsConfig)
    notify: NotifyConfig = Field(default_factory=NotifyConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    #: per-model prices on top of usage.DEFAULT_PRICES
    prices: dict[str, PriceConfig] = Field(default_factory=dict)


def user_config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".config")
    return Path(base) / "loop-orchestrator" / "config.toml"


def repo_config_path(repo: Path) -> Path:
    return repo / ".loop-orchestrator" / "config.toml"


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        msg = f"{path}: invalid TOML: {exc}"
        raise ConfigError(msg, hint="Fix the file or remove it.") from exc


def _deep_merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict) and key != "env":
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _env_layer(env: Mapping[str, str]) -> dict[str, Any]:
    """``LO_ORCH_RUN_CONCURRENCY=2`` -> ``{"run": {"concurrency": 2}}``.

    Only keys that name a known section field are taken, so contract variables such as
    ``LO_ORCH_RUN_DIR`` never collide with settings.
    """
    layer: dict[str, Any] = {}
    sections = Settings.model_fields
    for name, raw in env.items():
        if not name.startswith("LO_ORCH_") or name in RESERVED_ENV:
            continue
        rest = name[len("LO_ORCH_") :].lower()
        section, _, key = rest.partition("_")
        field = sections.get(section)
        section_fields = getattr(field.annotation, "model_fields", None) if field else None
        if section_fields is None:  # not a section of fields (e.g. [prices])
            continue
        if key not in section_fields:
            continue
        layer.setdefault(section, {})[key] = _parse_env_value(raw)
    return layer


def _parse_env_value(raw: str) -> Any:
    text = raw.strip()
    if text[:1] in "[{" or text in ("true", "false"):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return raw
    return raw


def load_settings(
    repo: Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Merge every layer into validated ``Settings``; a bad layer names its file."""
    env = os.environ if env is None else env
    layers: list[tuple[str, dict[str, Any]]] = []
    user = user_config_path(env)
    if user.is_file():
        layers.append((str(user), _read_toml(user)))
    if repo is not None:
        repo_file = repo_config_path(repo)
        if repo_file.is_file():
            layers.append((str(repo_file), _read_toml(repo_file)))
    layers.append(("environment (LO_ORCH_*)", _env_layer(env)))
    if overrides:
        layers.append(("command-line flags", dict(overrides)))

    merged: dict[str, Any] = {}
    for source, data in layers:
        candidate = _deep_merge(merged, data)
        try:
            Settings.model_validate(candidate)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
            )
            msg = f"invalid settings from {source}: {problems}"
            raise ConfigError(
                msg,
                hint="See the [agent], [run], [auditor], [workspace], [verify], [intake], "
                "[pr], [cluster] and [prices] keys in README.",
            ) from exc
        merged = candidate
    return Settings.model_validate(merged)


# tool profile -------------------------------------------------------------------------


def user_tools_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    home = Path(env.get("HOME", "~")).expanduser()
    return home / ".claude" / "loop-orchestrator" / "tools.json"


def repo_tools_path(repo: Path) -> Path:
    return repo / ".loop-orchestrator" / "tools.json"


def _merge_profile(base: dict[str, dict[str, Any]], top: Mapping[str, Any]) -> None:
    for role, fields in top.items():
        if fields is None:
            base.pop(role, None)
            continue
        current = base.setdefault(role, {})
        for key, value in fields.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value
        if not current:
            base.pop(role, None)


def load_tool_profile(
    repo: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    warnings: list[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """The merged tool profile: role -> fields (kind, ref, how, when, command...).

    A file that is not a JSON object of objects is reported (to ``warnings`` and the log)
    and ignored; the run goes on with the other layers.
    """
    paths = [user_tools_path(env)]
    if repo is not None:
        paths.append(repo_tools_path(repo))
    profile: dict[str, dict[str, Any]] = {}
    for path in paths:
        if not path.is_file():
            continue
        problem = None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            problem = f"{path}: not valid JSON ({exc}); ignored"
        else:
            if not isinstance(data, dict) or not all(
                v is None or isinstance(v, dict) for v in data.values()
            ):
                problem = f"{path}: must map each role to an object (or null); ignored"
        if problem:
            log.warning("tool profile ignored: %s", problem)
            if warnings is not None:
                warnings.append(problem)
            continue
        _merge_profile(profile, data)
    return profile

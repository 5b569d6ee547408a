"""`lo-orch doctor`: is this machine ready to run lo-orch, and what state is the repository in?

Checks git and tmux (present, versions), the agent CLI (found, ``--version``), Claude Code's
login state (best effort and offline: credential files and config keys, never the API),
whether agent sessions run inside the OS sandbox (``[sandbox] mode``, bubblewrap),
whether the Claude Code plugin is installed for the user's own sessions, where the bundled
plugin folder is, the repository (root, branch, uncommitted files, an existing run), and
which issue trackers `plan --issue` can reach (variables set, never their values; no network),
and with ``[cluster] backend = "ray"`` the cluster (``cluster/checks.py``, whose rows
``commands.doctor`` adds).
Only missing or unusable *required* pieces fail; everything else informs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from loop_orchestrator import proc, resources
from loop_orchestrator.agents import opencode
from loop_orchestrator.agents.claude import ROOT_HINT, claude_config_path
from loop_orchestrator.agents.cline import data_dir
from loop_orchestrator.agents.qwen import qwen_dir
from loop_orchestrator.agents.support import (
    SUPPORT,
    has_preset,
    install_command,
    support_lines,
)
from loop_orchestrator.agents.vibe import provider_key, vibe_home
from loop_orchestrator.config import Settings
from loop_orchestrator.errors import LoOrchError
from loop_orchestrator.files import ORCH_DIR
from loop_orchestrator.git.gateway import MIN_GIT, git
from loop_orchestrator.sessions import sandbox

Status = Literal["ok", "warn", "fail", "info"]

#: `split-window -e VAR=value` (the pane environment) appeared in tmux 3.0
MIN_TMUX = (3, 0)
PLUGIN_NAME = "loop-orchestrator"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    hint: str = ""


def _version(text: str) -> tuple[int, ...] | None:
    found = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not found:
        return None
    return tuple(int(p) for p in found.groups() if p is not None)


def _tool_version(argv: list[str]) -> tuple[str | None, str]:
    """(first line of the output, or None when the program is missing/broken; detail)."""
    exe = shutil.which(argv[0]) if "/" not in argv[0] else argv[0]
    if not exe or not Path(exe).exists():
        return None, f"{argv[0]} not found on PATH"
    result = proc.run([exe, *argv[1:]], timeout=30, check=False)
    out = (result.stdout or result.stderr).strip()
    if not result.ok or not out:
        status = "timed out" if result.returncode is None else f"exit {result.returncode}"
        return None, f"`{' '.join(argv)}` failed ({status}): {out[:200]}"
    return out.splitlines()[0], exe


def _check_min_version(argv: list[str], minimum: tuple[int, int], why: str = "") -> Check:
    """``argv[0]`` runs and reports at least ``minimum``; ``why`` names the feature needed."""
    name = argv[0]
    wanted = f"{minimum[0]}.{minimum[1]}"
    hint = f"Install {name} {wanted} or newer (`apt-get install {name}`, `brew install {name}`)."
    line, detail = _tool_version(argv)
    if line is None:
        return Check(name, "fail", detail, hint)
    version = _version(line)
    if version is None or version[:2] < minimum:
        return Check(name, "fail", f"{line}: lo-orch needs {wanted}+{why}", hint)
    return Check(name, "ok", line)


def check_git() -> Check:
    return _check_min_version(["git", "--version"], MIN_GIT, " (merge-tree --write-tree)")


def check_tmux() -> Check:
    return _check_min_version(["tmux", "-V"], MIN_TMUX)


def agent_argv(settings: Settings) -> list[str]:
    """``[agent] command`` as words, as a launch reads it: one word when the whole line is
    a file, else split like a shell would (shlex; ValueError when it cannot be); the
    preset's CLI for the default ``claude``. The agent's program is the first word, here
    and on every cluster node."""
    agent = settings.agent
    argv = [agent.command] if Path(agent.command).is_file() else shlex.split(agent.command)
    if has_preset(agent.kind) and argv == ["claude"]:  # the default of [agent] command
        return [agent.kind]
    return argv


def check_agent(settings: Settings) -> Check:
    agent = settings.agent
    if agent.kind == "scripted":
        return Check("agent CLI", "ok", "scripted agent (built in)")
    try:
        argv = agent_argv(settings)
    except ValueError as exc:
        return Check(
            "agent CLI",
            "fail",
            f"[agent] command cannot be parsed: {exc}",
            "Fix [agent] command in your config.",
        )
    if not argv:
        return Check("agent CLI", "fail", "[agent] command is empty", "Set [agent] command.")
    if agent.kind == "command":
        exe = argv[0] if "/" in argv[0] else shutil.which(argv[0])
        if not exe or not Path(exe).exists():
            return Check(
                "agent CLI", "fail", f"{argv[0]} not found", "Install it or fix [agent] command."
            )
        return Check("agent CLI", "ok", f"{exe} (kind = command)")
    line, detail = _tool_version([*argv, "--version"])
    if line is None:
        return Check(
            "agent CLI",
            "fail",
            detail,
            f"Install it (`{install_command(agent.kind)}`) or set [agent] command to its path.",
        )
    return Check("agent CLI", "ok", f"{line} ({detail})")


def check_agent_support(settings: Settings) -> Check:
    """How well the configured kind is supported (status source, resume, cost), and the rest."""
    kind = settings.agent.kind
    mine = SUPPORT[kind]
    others = [line for line in support_lines() if not line.startswith(f"{kind}:")]
    detail = (
        f"{mine.name}: status from {mine.status}; resume: {mine.resume}; "
        f"cost: {mine.cost}; tested with {mine.verified}"
    )
    return Check("agent support", "info", detail, "Other kinds: " + " | ".join(others))


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def claude_dir(env: Mapping[str, str]) -> Path:
    """``$CLAUDE_CONFIG_DIR`` or ``~/.claude`` (settings, plugins, credentials)."""
    configured = env.get("CLAUDE_CONFIG_DIR")
    if configured:
        return Path(configured).expanduser()
    home = env.get("HOME")
    return (Path(home) if home else Path.home()) / ".claude"


def check_login(settings: Settings, env: Mapping[str, str]) -> Check:
    """Best effort, offline: where Claude Code would find credentials. Never calls the API."""
    name = "claude login"
    if settings.agent.kind == "qwen":
        return check_qwen_login(settings, env)
    if settings.agent.kind == "cline":
        return check_cline_login(settings, env)
    if settings.agent.kind == "vibe":
        return check_vibe_key(settings, env)
    if settings.agent.kind == "aider":
        return check_aider_key(settings, env)
    if settings.agent.kind == "opencode":
        return check_opencode_login(settings, env)
    if has_preset(settings.agent.kind):
        return Check(
            f"{settings.agent.kind} login",
            "info",
            "not checked offline: lo-orch stops with a clear error at its sign-in screen",
        )
    if settings.agent.kind != "claude":
        return Check(name, "info", f"not needed for [agent] kind = {settings.agent.kind}")
    merged = {**env, **settings.agent.env}
    if merged.get("ANTHROPIC_API_KEY") or merged.get("CLAUDE_CODE_OAUTH_TOKEN"):
        return Check(name, "ok", "credentials in the environment")
    creds = _read_json(claude_dir(merged) / ".credentials.json")
    if creds and (creds.get("claudeAiOauth") or creds.get("apiKey")):
        return Check(name, "ok", f"credentials in {claude_dir(merged) / '.credentials.json'}")
    config = _read_json(claude_config_path(merged)) or {}
    account = config.get("oauthAccount")
    if isinstance(account, dict) and account.get("emailAddress"):
        # macOS keeps the token in the Keychain; the account entry is what we can see
        return Check(name, "ok", f"account {account['emailAddress']} (token not checked)")
    if config.get("primaryApiKey"):
        return Check(name, "ok", "API key in Claude Code's config")
    return Check(
        name,
        "warn",
        "unknown: no credentials found (checked offline)",
        'If sessions report "Not logged in": run `claude` and type /login.',
    )


def check_qwen_login(settings: Settings, env: Mapping[str, str]) -> Check:
    """Offline: the auth Qwen Code's settings choose, and whether its key or login is there."""

    name = "qwen login"
    merged = {**env, **settings.agent.env}
    folder = qwen_dir(merged)
    chosen = (
        ((_read_json(folder / "settings.json") or {}).get("security") or {}).get("auth") or {}
    ).get("selectedType")
    if chosen == "openai" or (chosen is None and merged.get("OPENAI_API_KEY")):
        if merged.get("OPENAI_API_KEY"):
            base = merged.get("OPENAI_BASE_URL") or "the default base URL"
            return Check(name, "ok", f"OpenAI-compatible key in the environment ({base})")
        return Check(
            name,
            "warn",
            f"{folder / 'settings.json'} chooses an OpenAI-compatible key, and OPENAI_API_KEY "
            "is not set",
            "Set OPENAI_API_KEY (and OPENAI_BASE_URL, OPENAI_MODEL) in [agent] env.",
        )
    if chosen == "qwen-oauth" and (folder / "oauth_creds.json").is_file():
        return Check(name, "ok", f"Qwen OAuth login in {folder / 'oauth_creds.json'}")
    if chosen:
        return Check(name, "info", f"auth {chosen!r} chosen in {folder / 'settings.json'}")
    return Check(
        name,
        "warn",
        "no auth chosen: Qwen Code will show its auth dialog (lo-orch stops there)",
        "Run `qwen auth` once (or set OPENAI_API_KEY, OPENAI_BASE_URL and OPENAI_MODEL).",
    )


def check_cline_login(settings: Settings, env: Mapping[str, str]) -> Check:
    """Offline: the provider Cline last used (``cline auth``) and whether it has a key."""

    name = "cline login"
    path = data_dir({**env, **settings.agent.env}) / "settings" / "providers.json"
    stored = _read_json(path) or {}
    chosen = stored.get("lastUsedProvider")
    providers = stored.get("providers")
    entry = providers.get(chosen) if isinstance(providers, dict) and chosen else None
    found = entry.get("settings") if isinstance(entry, dict) else None
    if not isinstance(chosen, str) or not isinstance(found, dict):
        return Check(
            name,
            "warn",
            f"no provider configured in {path}: Cline will show its onboarding (lo-orch "
            "stops there)",
            "Run `cline auth` once (e.g. `cline auth -p openai-compatible -k KEY -m MODEL "
            "-b BASE_URL`).",
        )
    where = f" at {found['baseUrl']}" if isinstance(found.get("baseUrl"), str) else ""
    if found.get("apiKey") or found.get("auth"):
        return Check(name, "ok", f"provider {chosen!r}{where}, model {found.get('model')!r}")
    return Check(
        name, "info", f"provider {chosen!r}{where} without a stored key (not checked offline)"
    )


def check_vibe_key(settings: Settings, env: Mapping[str, str]) -> Check:
    """Offline: the provider of Mistral Vibe's active model, and whether the variable its
    ``api_key_env_var`` names is set (in the environment, [agent] env or $VIBE_HOME/.env)."""

    name = "vibe key"
    merged = {**env, **settings.agent.env}
    home = vibe_home(merged)
    try:
        provider, variable, base = provider_key(home, merged)
    except ValueError as exc:
        return Check(name, "warn", str(exc), f"Fix {home / 'config.toml'}.")
    where = f"provider {provider!r} ({base})"
    if not variable:
        return Check(name, "ok", f"{where} needs no key")
    if merged.get(variable):
        return Check(name, "ok", f"{variable} set for {where}")
    if re.search(
        rf"^\s*(export\s+)?{re.escape(variable)}\s*=\s*\S", _read_text(home / ".env"), re.M
    ):
        return Check(name, "ok", f"{variable} in {home / '.env'} for {where}")
    return Check(
        name,
        "warn",
        f"{variable} is not set for {where}: Vibe will show its set-up screen (lo-orch stops)",
        f"Set {variable} in [agent] env (or run `vibe --setup` once).",
    )


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


#: the key variables aider's providers read (litellm), the ones it picks a model by first
AIDER_KEYS = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "DEEPSEEK_API_KEY",
    "OPENROUTER_API_KEY",
    "MISTRAL_API_KEY",
    "GROQ_API_KEY",
)


def check_aider_key(settings: Settings, env: Mapping[str, str]) -> Check:
    """Offline: a model for aider, and a key it could use. Without both it offers an
    OpenRouter login in a browser, where lo-orch stops."""
    name = "aider model and key"
    merged = {**env, **settings.agent.env}
    model = settings.agent.model or merged.get("AIDER_MODEL") or ""
    keys = [k for k in AIDER_KEYS if merged.get(k)]
    base = merged.get("AIDER_OPENAI_API_BASE") or merged.get("OPENAI_API_BASE")
    where = f" ({base})" if base else ""
    if keys:
        chosen = f"model {model}" if model else "no model set (aider picks one by key)"
        return Check(name, "ok", f"{chosen}; key in the environment: {', '.join(keys)}{where}")
    return Check(
        name,
        "warn",
        "no API key aider reads is set: sessions stop at its OpenRouter login offer",
        "Set [agent] model and its key in [agent] env (e.g. OPENAI_API_KEY, with "
        "AIDER_OPENAI_API_BASE for a compatible server).",
    )


def check_opencode_login(settings: Settings, env: Mapping[str, str]) -> Check:
    """Offline: the model opencode would use, and whether a key for its provider is there
    (in its config, its ``auth.json`` or the provider's ``<NAME>_API_KEY``)."""
    name = "opencode login"
    merged = {**env, **settings.agent.env}
    config = _read_json(opencode.config_dir(merged) / "opencode.json") or {}
    with contextlib.suppress(ValueError):
        extra = json.loads(merged.get(opencode.CONFIG_ENV) or "{}")
        config |= extra if isinstance(extra, dict) else {}
    model = settings.agent.model or config.get("model")
    if not isinstance(model, str) or "/" not in model:
        return Check(
            name,
            "warn",
            "no model chosen: opencode falls back to its own hosted default",
            'Set [agent] model = "<provider>/<model>" (or "model" in '
            "~/.config/opencode/opencode.json) and run `opencode providers login`.",
        )
    provider = model.split("/", 1)[0]
    providers = config.get("provider")
    entry = providers.get(provider) if isinstance(providers, dict) else None
    options = entry.get("options") if isinstance(entry, dict) else None
    if isinstance(options, dict) and options.get("apiKey"):
        return Check(name, "ok", f"{model}: a key for {provider} in its config")
    auth = opencode.data_dir(merged) / "auth.json"
    if provider in (_read_json(auth) or {}):
        return Check(name, "ok", f"{model}: a login for {provider} in {auth}")
    variable = re.sub(r"[^A-Z0-9]", "_", provider.upper()) + "_API_KEY"
    if merged.get(variable):
        return Check(name, "ok", f"{model}: {variable} in the environment")
    return Check(
        name,
        "warn",
        f"{model}: no key for {provider} found (its config, {auth}, ${variable}; checked offline)",
        "Run `opencode providers login` (or set the provider's key in [agent] env).",
    )


def check_plugin_installed(env: Mapping[str, str]) -> Check:
    """Is the plugin installed for the user's own Claude Code sessions (skills, agent)?"""
    base = claude_dir(env)
    found: list[str] = []
    installed = _read_json(base / "plugins" / "installed_plugins.json") or {}
    plugins = installed.get("plugins", installed)
    if isinstance(plugins, dict):
        found += [k for k in plugins if k.split("@", 1)[0] == PLUGIN_NAME]
    settings = _read_json(base / "settings.json") or {}
    enabled = settings.get("enabledPlugins")
    enabled_keys = (
        [k for k, on in enabled.items() if on and k.split("@", 1)[0] == PLUGIN_NAME]
        if isinstance(enabled, dict)
        else []
    )
    if found or enabled_keys:
        keys = sorted(set(found) | set(enabled_keys))
        state = "enabled" if enabled_keys else "installed, not enabled"
        return Check("plugin (your sessions)", "ok", f"{', '.join(keys)} ({state})")
    source = resources.plugin_dir()
    return Check(
        "plugin (your sessions)",
        "info",
        "not installed: managed sessions load it anyway (--plugin-dir); install it to ask "
        "for the orchestrator in your own Claude Code sessions",
        f"claude plugin marketplace add {source} && "
        f"claude plugin install {PLUGIN_NAME}@{PLUGIN_NAME}",
    )


def check_bundled_plugin() -> Check:
    folder = resources.plugin_dir()
    manifest = folder / ".claude-plugin" / "plugin.json"
    launcher = folder / "hooks" / "lo-hook"
    problems = []
    if not manifest.is_file():
        problems.append(f"{manifest} is missing")
    if not (folder / "hooks" / "hooks.json").is_file():
        problems.append("hooks/hooks.json is missing")
    if not os.access(launcher, os.X_OK):
        problems.append(f"{launcher} is missing or not executable")
    if problems:
        return Check(
            "bundled plugin",
            "fail",
            "; ".join(problems),
            "Reinstall loop-orchestrator; managed sessions need its hooks.",
        )
    return Check("bundled plugin", "ok", str(folder))


def check_sandbox(settings: Settings, env: Mapping[str, str]) -> Check | None:
    agent = settings.agent
    if agent.kind != "claude" or agent.permission_mode != "bypassPermissions":
        return None
    if os.geteuid() != 0:
        return None
    if (agent.env.get("IS_SANDBOX") or env.get("IS_SANDBOX")) == "1":
        return Check("root + bypass", "ok", "IS_SANDBOX=1 is set")
    return Check(
        "root + bypass",
        "fail",
        "running as root: Claude Code refuses bypassPermissions without IS_SANDBOX=1",
        ROOT_HINT,
    )


def check_session_client() -> Check:
    """Which client answers sessions' hook events and signals (``sessions/native.py``)."""
    built, why = resources.session_client_status()
    if built is not None:
        return Check("session client", "ok", f"compiled: {built}")
    return Check(
        "session client",
        "warn",
        f"Python: {why}",
        "Hook events then cost each tool call 20-50 ms instead of about 2 ms; with a C "
        "compiler (Debian: `apt-get install gcc`) lo-orch builds its compiled client.",
    )


def check_agent_sandbox(settings: Settings) -> Check:
    """Will agent sessions run inside the OS sandbox (sandbox.py), and if not, why not."""
    name = "agent sandbox"
    active, reason = sandbox.status(settings)
    if active:
        return Check(name, "ok", f"on: {reason}")
    mode = settings.sandbox.mode
    if mode == "off":
        return Check(
            name, "warn", reason, 'Agents can write anything you can; set [sandbox] mode = "auto".'
        )
    return Check(
        name,
        "fail" if mode == "bwrap" else "warn",
        f"off: {reason}",
        f"{sandbox.INSTALL_HINT} so agents cannot write outside their worktree.",
    )


def check_repository(repo: Path | None) -> Check:
    if repo is None:
        return Check(
            "repository",
            "info",
            "not inside a git repository",
            "Run lo-orch in your project's checkout, or pass --repo PATH.",
        )
    try:
        branch = git(repo, "branch", "--show-current", check=False)
        dirty = git(repo, "status", "--porcelain", "--untracked-files=no", check=False)
        head = git(repo, "rev-parse", "--verify", "-q", "HEAD", check=False)
    except LoOrchError as exc:  # git itself is missing: the git row says so
        return Check("repository", "info", f"{repo}: {exc.message}")
    parts = [str(repo)]
    parts.append(f"branch {branch.stdout.strip() or '(detached)'}")
    if not head.ok:
        parts.append("no commits yet")
    changed = len([line for line in dirty.stdout.splitlines() if line.strip()])
    parts.append(
        f"{changed} uncommitted change{'s' if changed != 1 else ''}" if changed else "clean"
    )
    run_json = _read_json(repo / ORCH_DIR / "run.json")
    if run_json is not None:
        parts.append(f"run {run_json.get('name')} ({run_json.get('phase')})")
    else:
        parts.append("no run yet")
    return Check("repository", "info", "; ".join(parts))


def run_checks(
    repo: Path | None, settings: Settings, env: Mapping[str, str] | None = None
) -> list[Check]:
    """Every check, in display order."""
    env = os.environ if env is None else env
    checks = [
        check_git(),
        check_tmux(),
        check_agent(settings),
        check_agent_support(settings),
        check_login(settings, env),
    ]
    sandbox = check_sandbox(settings, env)
    if sandbox is not None:
        checks.append(sandbox)
    checks += [
        check_agent_sandbox(settings),
        check_session_client(),
        check_bundled_plugin(),
        check_plugin_installed(env),
        check_repository(repo),
    ]
    checks.append(check_intake(settings, env))
    return checks


def check_intake(settings: Settings, env: Mapping[str, str]) -> Check:
    """Which trackers `plan --issue` can reach, from settings and variable names (offline)."""

    def has(*names: str) -> bool:
        return any((env.get(n) or "").strip() for n in names)

    parts = [
        "GitHub "
        + (
            "(token set)"
            if has("GITHUB_TOKEN", "GH_TOKEN")
            else "(no token: public repositories, 60 requests an hour)"
        )
    ]
    problems: list[str] = []
    hosts = settings.intake.github.hosts
    if hosts:
        token = has("GH_ENTERPRISE_TOKEN", "GITHUB_ENTERPRISE_TOKEN")
        parts.append(
            f"GitHub Enterprise Server {', '.join(hosts)} "
            + ("(token set)" if token else "(no GH_ENTERPRISE_TOKEN)")
        )
        if not token:
            problems.append(
                "set GH_ENTERPRISE_TOKEN to a token of "
                f"{'those servers' if len(hosts) > 1 else hosts[0]}"
            )
    deployment = settings.intake.jira.deployment
    if has("JIRA_URL"):
        kind = {"cloud": "Cloud", "datacenter": "Data Center"}.get(deployment, "auto-detected")
        creds = {
            "cloud": has("JIRA_EMAIL") and has("JIRA_API_TOKEN"),
            "datacenter": has("JIRA_PAT"),
        }.get(deployment, has("JIRA_PAT") or (has("JIRA_EMAIL") and has("JIRA_API_TOKEN")))
        parts.append(f"Jira {kind} " + ("(credentials set)" if creds else "(no credentials)"))
        if not creds:
            need = {"cloud": "JIRA_EMAIL and JIRA_API_TOKEN", "datacenter": "JIRA_PAT"}.get(
                deployment, "JIRA_PAT (Data Center) or JIRA_EMAIL and JIRA_API_TOKEN (Cloud)"
            )
            problems.append(f"set {need} for Jira")
    else:
        parts.append("Jira not configured (JIRA_URL)")
    parts.append(
        "Linear "
        + ("(LINEAR_API_KEY set)" if has("LINEAR_API_KEY") else "not configured (LINEAR_API_KEY)")
    )
    advice = "; ".join(problems)
    return Check(
        "issue trackers",
        "warn" if problems else "info",
        "; ".join(parts),
        hint=advice[:1].upper() + advice[1:] + "." if problems else "",
    )

"""Issue keys, the tracker-neutral issue tree, and the intake command (``fetch.py`` sends a
key to its tracker).

A key's form picks the tracker:

- ``owner/repo#N`` or a ``github.com/<owner>/<repo>/issues/N`` URL: GitHub; the same URL
  on a host listed in ``[intake.github] hosts``: GitHub Enterprise Server (its API at
  ``https://HOST/api/v3``); on any other host an error says how to list it;
- a ``linear.app/<team>/issue/ABC-12/...`` URL: Linear;
- an ``.../browse/PROJ-123`` (or ``?selectedIssue=PROJ-123``) URL: Jira;
- a bare ``ABC-12``: Jira when ``JIRA_URL`` is set, else Linear when ``LINEAR_API_KEY`` is
  set, else an error saying which variables to set.

A tool profile whose ``intake`` role is ``{"kind": "cli", "command": "..."}`` replaces all of
this: the command is run with the key as its last argument and prints
``{"parent": {key, title, body}, "children": [{key, title, body, done, skipped}]}``
(``skipped``, optional: why a child is neither work to do nor done, e.g. "won't do").

A child is open (a task), done (a ``done_tasks`` entry: its code is on the base branch) or
skipped: closed without its work being done (GitHub ``not_planned`` / ``duplicate``, a Jira
resolution such as "Won't Do", a Linear ``canceled`` / ``duplicate`` state). A skipped child
gets no task and no done task; ``Issue.skipped`` says why, in the tracker's words.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from loop_orchestrator import proc
from loop_orchestrator.config import IntakeConfig
from loop_orchestrator.errors import IntakeError

log = logging.getLogger(__name__)

TrackerName = Literal["github", "jira", "linear", "cli"]

#: how long an ``intake`` command may take
CLI_TIMEOUT = 120.0

_GH_SHORT = re.compile(r"^(?P<owner>[A-Za-z0-9][\w.-]*)/(?P<repo>[\w.-]+)#(?P<num>\d+)\Z")
_GH_PATH = re.compile(r"^/(?P<owner>[^/]+)/(?P<repo>[^/]+)/issues/(?P<num>\d+)/?\Z")
_LINEAR_PATH = re.compile(r"^/[^/]+/issue/(?P<key>[A-Za-z][A-Za-z0-9]*-\d+)(?:/.*)?\Z")
_JIRA_BROWSE = re.compile(r"/browse/(?P<key>[A-Za-z][A-Za-z0-9_]*-\d+)/?\Z")
_TRACKER_KEY = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9_]*-\d+)\Z")

KEY_FORMS = (
    "owner/repo#N or https://github.com/owner/repo/issues/N (GitHub; GitHub Enterprise "
    "Server: its URL, with the host in [intake.github] hosts), "
    "PROJ-123 or https://<site>.atlassian.net/browse/PROJ-123 (Jira), "
    "ABC-12 or https://linear.app/<team>/issue/ABC-12 (Linear)"
)


@dataclass(frozen=True)
class Issue:
    key: str
    title: str
    body: str = ""
    done: bool = False
    url: str = ""
    state: str = ""  # the tracker's own state name, for messages
    #: why the child is neither open work nor done ("closed as not planned"); "" if it is one
    skipped: str = ""


@dataclass(frozen=True)
class IssueTree:
    tracker: str
    parent: Issue
    children: list[Issue] = field(default_factory=list)

    @property
    def open_children(self) -> list[Issue]:
        return [c for c in self.children if not c.done and not c.skipped]

    @property
    def done_children(self) -> list[Issue]:
        return [c for c in self.children if c.done and not c.skipped]

    @property
    def skipped_children(self) -> list[Issue]:
        return [c for c in self.children if c.skipped]


@dataclass(frozen=True)
class IssueRef:
    """A parsed key: which tracker, the canonical key, and what the URL told us."""

    tracker: TrackerName
    key: str  # "owner/repo#N", "PROJ-123", "ABC-12"
    owner: str = ""
    repo: str = ""
    number: int = 0
    base_url: str = ""  # Jira: the site, when the key was a browse URL
    api_url: str = ""  # GitHub Enterprise Server: https://HOST/api/v3, from a configured host


def parse_key(
    key: str, env: Mapping[str, str] | None = None, intake: IntakeConfig | None = None
) -> IssueRef:
    """Recognise an issue key or URL; an ``IntakeError`` lists the accepted forms."""
    env = os.environ if env is None else env
    intake = IntakeConfig() if intake is None else intake
    text = key.strip()
    if not text:
        msg = "the issue key is empty"
        raise IntakeError(msg, hint=f"Give one of: {KEY_FORMS}.")
    m = _GH_SHORT.match(text)
    if m:
        return IssueRef(
            "github",
            f"{m['owner']}/{m['repo']}#{int(m['num'])}",
            m["owner"],
            m["repo"],
            int(m["num"]),
        )
    if "://" in text:
        return _parse_url(text, env, intake)
    m = _TRACKER_KEY.match(text)
    if m:
        canonical = m["key"].upper()
        if env.get("JIRA_URL"):
            return IssueRef("jira", canonical)
        if env.get("LINEAR_API_KEY"):
            return IssueRef("linear", canonical)
        msg = f"{canonical} could be a Jira or a Linear key, and neither is configured"
        raise IntakeError(
            msg,
            hint="For Jira set JIRA_URL (e.g. https://<site>.atlassian.net), JIRA_EMAIL and "
            "JIRA_API_TOKEN (Jira Data Center: JIRA_URL and JIRA_PAT); for Linear set "
            "LINEAR_API_KEY. A GitHub issue is written owner/repo#N.",
        )
    msg = f"{key!r} is not an issue key this version understands"
    raise IntakeError(msg, hint=f"Give one of: {KEY_FORMS}.")


def github_host(host: str) -> str:
    """A host as written in ``[intake.github] hosts``: lower case, no scheme, no slash."""
    host = host.strip().lower()
    if "://" in host:
        host = urllib.parse.urlsplit(host).netloc
    return host.strip("/")


def _parse_url(text: str, env: Mapping[str, str], intake: IntakeConfig) -> IssueRef:
    parts = urllib.parse.urlsplit(text)
    host = parts.netloc.lower()
    if parts.scheme not in ("http", "https") or not host:
        msg = f"{text!r} is not an http(s) URL"
        raise IntakeError(msg, hint=f"Give one of: {KEY_FORMS}.")
    gh = _GH_PATH.match(parts.path)
    enterprise = {github_host(h) for h in intake.github.hosts}
    if host.endswith("linear.app"):
        m = _LINEAR_PATH.match(parts.path)
        if m:
            return IssueRef("linear", m["key"].upper())
    elif host in ("github.com", "www.github.com"):
        if gh:
            return IssueRef(
                "github",
                f"{gh['owner']}/{gh['repo']}#{int(gh['num'])}",
                gh["owner"],
                gh["repo"],
                int(gh["num"]),
            )
    elif host in enterprise:
        if gh:
            return IssueRef(
                "github",
                f"{gh['owner']}/{gh['repo']}#{int(gh['num'])}",
                gh["owner"],
                gh["repo"],
                int(gh["num"]),
                api_url=f"{parts.scheme}://{host}/api/v3",
            )
    elif gh and not _JIRA_BROWSE.search(parts.path):
        # the shape of a GitHub issue URL on a host nobody said is GitHub: never guess (a
        # token sent to the wrong host, or another forge read as GitHub)
        msg = f"{host} is not a GitHub host lo-orch knows, so {text!r} cannot be read"
        raise IntakeError(
            msg,
            hint="If it is GitHub Enterprise Server, add its host to "
            ".loop-orchestrator/config.toml:\n"
            f'  [intake.github]\n  hosts = ["{host}"]\n'
            "and set GH_ENTERPRISE_TOKEN to a token of that server; lo-orch then reads "
            f"https://{host}/api/v3.",
        )
    else:
        selected = urllib.parse.parse_qs(parts.query).get("selectedIssue", [])
        m = _JIRA_BROWSE.search(parts.path)
        jira_key = m["key"] if m else next((s for s in selected if _TRACKER_KEY.match(s)), None)
        if jira_key:
            # a Data Center server may live under a context path (https://host/jira/browse/K)
            context = parts.path[: m.start()].rstrip("/") if m else ""
            base = env.get("JIRA_URL") or f"{parts.scheme}://{parts.netloc}{context}"
            return IssueRef("jira", jira_key.upper(), base_url=base)
    msg = f"{text!r} is not an issue URL this version understands"
    raise IntakeError(msg, hint=f"Give one of: {KEY_FORMS}.")


def task_id_for(key: str) -> str:
    """A plan task id from an issue key: ``ABC-12`` -> ``abc-12``, ``o/r#5`` -> ``r-5``."""
    m = _GH_SHORT.match(key)
    if m:
        suffix = f"-{int(m['num'])}"
        stem = re.sub(r"[^a-z0-9]+", "-", m["repo"].lower()).strip("-") or "issue"
        stem = stem[: 40 - len(suffix)].rstrip("-") or "issue"
        return stem + suffix
    slug = re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-")
    return slug[:40].rstrip("-") or "issue"


# the intake tool role (kind = "cli") ------------------------------------------------------


class _CliIssue(BaseModel):
    model_config = ConfigDict(extra="ignore")

    key: str
    title: str
    body: str | None = ""
    done: bool = False
    url: str = ""
    skipped: str | None = None


class _CliTree(BaseModel):
    model_config = ConfigDict(extra="ignore")

    parent: _CliIssue
    children: list[_CliIssue]


def fetch_with_command(command: str, key: str, repo: Path) -> IssueTree:
    """Run the tool profile's intake command with ``key`` last and read its JSON tree."""
    try:
        argv = [*shlex.split(command), key]
    except ValueError as exc:
        msg = f"the intake command {command!r} cannot be parsed: {exc}"
        raise IntakeError(
            msg,
            hint="Fix `intake.command` in .loop-orchestrator/tools.json.",
        ) from exc
    if len(argv) < 2:
        msg = "the tool profile's intake role has an empty `command`"
        raise IntakeError(msg, hint="Set `intake.command` in .loop-orchestrator/tools.json.")
    exe = argv[0]
    if not executable_exists(exe, repo):
        msg = f"the intake command {exe!r} was not found (or is not executable)"
        raise IntakeError(
            msg,
            hint="Install it, or fix `intake.command` in .loop-orchestrator/tools.json.",
        )
    result = proc.run(argv, cwd=repo, timeout=CLI_TIMEOUT, check=False)
    shown = shlex.join(argv)
    if result.returncode is None:
        msg = f"the intake command `{shown}` timed out after {CLI_TIMEOUT:g} s"
        raise IntakeError(msg)
    if result.returncode != 0:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-10:])
        raise IntakeError(
            f"the intake command `{shown}` exited {result.returncode}"
            + (f":\n{tail}" if tail else ""),
            hint="Run it yourself to see what it needs.",
        )
    try:
        data: Any = json.loads(result.stdout)
        tree = _CliTree.model_validate(data)
    except json.JSONDecodeError as exc:
        msg = f"the intake command `{shown}` did not print JSON: {exc}"
        raise IntakeError(
            msg,
            hint='It must print {"parent": {key, title, body}, '
            '"children": [{key, title, body, done}]}.',
        ) from exc
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:8]
        )
        msg = f"the intake command `{shown}` printed JSON of the wrong shape: {problems}"
        raise IntakeError(
            msg,
            hint='It must print {"parent": {key, title, body}, '
            '"children": [{key, title, body, done}]}.',
        ) from exc

    def issue(c: _CliIssue) -> Issue:
        skipped = (c.skipped or "").strip()
        state = "skipped" if skipped else "done" if c.done else "open"
        return Issue(c.key, c.title, c.body or "", c.done, c.url, state, skipped)

    return IssueTree("cli", issue(tree.parent), [issue(c) for c in tree.children])


def executable_exists(exe: str, cwd: Path) -> bool:
    """Whether ``exe`` (a name on PATH, or a path relative to ``cwd``) can be run."""
    if "/" in exe:
        path = Path(exe) if Path(exe).is_absolute() else cwd / exe
        return path.is_file() and os.access(path, os.X_OK)
    return shutil.which(exe) is not None


def intake_command(profile: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The tool profile's intake command when its kind is ``cli``, else None."""
    role = profile.get("intake")
    if not role or role.get("kind") != "cli":
        return None
    command = role.get("command")
    if not isinstance(command, str) or not command.strip():
        msg = "the tool profile's intake role has kind `cli` but no `command`"
        raise IntakeError(
            msg,
            hint='Set it, e.g. {"intake": {"kind": "cli", "command": "my-issues --json"}}.',
        )
    return command

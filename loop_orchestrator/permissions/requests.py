"""Permission requests of managed sessions: what waits for a person, answers, rules.

A session in a non-bypass ``[agent] permission_mode`` asks before a tool call its mode does
not allow. Claude Code 2.1.332 runs the ``PermissionRequest`` hook while it shows the
dialog (docs/permissions.md has the verified facts); lo-orch's hook hands the request to
the supervisor, which answers at once when a rule decides (lo-orch's own ``signal``
commands, ``[permissions]`` rules of the config, rules a person added with ``--always``),
else keeps it here as a *pending request* until a person answers it with
``lo-orch permit`` (or the dashboard), and the hook prints the answer for Claude Code.

Where (the trust boundary, docs/design.md section 10): requests, answers and the run's rules
live in the run's private folder (``private.run_dir``), outside the repository and hidden
from the sandboxed agent, so a session can neither answer its own request nor add a rule;
``lo-orch permit`` is a person's act and is refused inside a managed session
(``guard.refuse_in_session``). The hook's request is attested by the supervisor (the
pane's process ancestry), so one session cannot ask or poll in another's name.

A request stays *open* only while it is real: the hook that asked keeps polling for its
answer, and the dialog is on the session's screen; the supervisor closes it otherwise
(answered in the pane, the turn moved on, or a forged hook event). Only a task with an
open request is exempt from the stall check.

Rules (``[permissions] allow``/``deny`` in config; ``--always`` adds one for this run) have
Claude Code's ``permissions.allow`` shape: ``Tool`` or ``Tool(pattern)``, ``*`` matching
any run of characters:

- ``Bash(pytest *)``: the Bash command; ``pytest *`` also matches ``pytest`` alone. An
  allow rule never matches a compound command (``;``, ``&&``, ``|``, ``&``, redirection,
  ``$(...)``, backticks, a newline): ``pytest x; curl evil`` asks a person. A deny rule
  matches when the whole command or any part of it matches.
- ``Edit(src/**)`` / ``Write(*.md)`` / ``Read(...)``: the file, relative to the task's
  worktree (``*`` within a folder, ``**`` across folders; an absolute pattern for files
  outside it).
- any other tool, e.g. ``WebFetch`` or ``WebFetch(https://docs.python.org/*)``: the tool's
  main input (URL, pattern, ...).
Deny rules win over allow rules. A rule made by ``--always`` is exact: the same tool and
the same command or file, nothing wider.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import secrets
import shlex
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from filelock import FileLock
from pydantic import BaseModel, ConfigDict

from loop_orchestrator.errors import ConfigError, StateError
from loop_orchestrator.files import atomic_write_text, stat_key
from loop_orchestrator.plan import globs
from loop_orchestrator.runstate import private
from loop_orchestrator.runstate.state import Store, now_iso
from loop_orchestrator.sessions.guard import refuse_in_session

FOLDER = "permissions"
REQUESTS = "requests"
RULES_FILE = "rules.json"
LOCK_FILE = "permissions.lock"
#: tools whose request names a file (matched by path, relative to the worktree)
FILE_TOOLS = frozenset({"Edit", "MultiEdit", "Write", "Read", "NotebookEdit"})
RULE_RE = re.compile(r"^(?P<tool>[A-Za-z][A-Za-z0-9_]{0,99})(?:\((?P<pattern>.+)\))?\Z", re.S)
#: what makes a shell command compound (more than one simple command, or a substitution)
COMPOUND_RE = re.compile(r"[;&|<>`\n\r]|\$\(")
#: a permission dialog on Claude Code 2.1.332's screen ("Do you want to proceed?",
#: "Do you want to make this edit to x.py?", "Do you want to create x.py?")
DIALOG_RE = re.compile(r"Do you want to (?:proceed|make this edit|create|allow|run)\b")
#: how the agent's environment names lo-orch in its signal commands (agents/base.py)
BIN_NAMES = ("$LO_ORCH_BIN", "${LO_ORCH_BIN}", '"$LO_ORCH_BIN"', '"${LO_ORCH_BIN}"')
SIGNAL_OPTIONS = frozenset({"--task", "--note", "--dispute"})
SIGNAL_PHASES = ("plan_ready", "impl_done", "blocked")
#: the length at which hooks.tool_summary cuts a tool's input
SUMMARY_MAX = 200

Decision = Literal["allow", "deny"]


class PermissionRequest(BaseModel):
    """One request of a session to use a tool, as the supervisor recorded it."""

    model_config = ConfigDict(extra="forbid", frozen=True)  # (shared by every read: ``all``)

    id: str
    task: str
    tool: str
    #: the Bash command (Bash only)
    command: str | None = None
    #: the file a file tool touches (Edit, Write, Read, ...)
    file: str | None = None
    #: the tool's input in one line (the command, the file, the URL, ...)
    summary: str = ""
    #: the session's working directory (its worktree)
    cwd: str | None = None
    #: False when the tool's input was too long to send whole: only a person or a deny
    #: rule answers it
    complete: bool = True
    asked_at: str
    #: open: a person may answer it; answered: decided (by a person or a rule);
    #: closed: gone without an answer from lo-orch (answered in the pane, turn over)
    state: Literal["open", "answered", "closed"] = "open"
    decision: Decision | None = None
    #: "person", or the rule that decided ("Bash(pytest *)", "lo-orch signal")
    decided_by: str | None = None
    answered_at: str | None = None
    #: why it was closed without an answer
    closed_because: str | None = None


class Rule(BaseModel):
    """One ``[permissions]`` rule: a tool and, optionally, a pattern of its input."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str
    pattern: str | None = None
    #: an ``--always`` rule: the pattern is the literal command or file, no wildcard
    exact: bool = False

    def text(self) -> str:
        return self.tool if self.pattern is None else f"{self.tool}({self.pattern})"


def parse_rule(text: str) -> Rule:
    """``Bash(pytest *)`` -> Rule; ValueError naming what is wrong."""
    m = RULE_RE.match(text.strip())
    if m is None:
        msg = (
            f"{text!r} is not a permission rule: write a tool name, optionally with a "
            'pattern in parentheses, e.g. "Bash(pytest *)", "Edit(src/**)" or "WebFetch"'
        )
        raise ValueError(msg)
    pattern = m.group("pattern")
    if pattern is not None and not pattern.strip():
        msg = f"{text!r}: the pattern in parentheses is empty"
        raise ValueError(msg)
    return Rule(tool=m.group("tool"), pattern=pattern)


def parse_rules(texts: Sequence[str], where: str) -> list[Rule]:
    out = []
    for text in texts:
        try:
            out.append(parse_rule(text))
        except ValueError as exc:
            msg = f"{where}: {exc}"
            raise ConfigError(
                msg, hint="Fix the rule in the config file (docs/permissions.md lists the syntax)."
            ) from exc
    return out


# matching ---------------------------------------------------------------------------------


def _glob(pattern: str, value: str) -> bool:
    """``*`` matches any run of characters (``/`` too); nothing else is special."""
    regex = ".*".join(re.escape(part) for part in pattern.split("*"))
    if pattern.endswith(" *"):  # "pytest *" also matches "pytest" alone (Claude Code's shape)
        regex = ".*".join(re.escape(part) for part in pattern[:-2].split("*")) + "(?: .*)?"
    return re.fullmatch(regex, value, re.S) is not None


def is_compound(command: str) -> bool:
    return COMPOUND_RE.search(command) is not None


def _parts(command: str) -> list[str]:
    """The simple commands of a compound command, roughly (for deny rules: broad on purpose)."""
    pieces = re.split(r"\|\||&&|[;&|\n\r]|\$\(|`|\)", command)
    return [p.strip() for p in pieces if p.strip()]


def _file_matches(pattern: str, file: str, cwd: str | None) -> bool:
    path = Path(file)
    if cwd and path.is_absolute():
        with contextlib.suppress(ValueError):
            rel = path.relative_to(cwd)
            if not pattern.startswith("/"):
                return globs.path_matches(rel.as_posix(), [pattern])
    if pattern.startswith("/"):
        return fnmatch.fnmatchcase(path.as_posix(), pattern)
    return not path.is_absolute() and globs.path_matches(path.as_posix(), [pattern])


def matches(rule: Rule, req: PermissionRequest, *, deny: bool = False) -> bool:
    """Does ``rule`` cover ``req``? (``deny``: the rule is a deny rule, matched broadly.)"""
    if rule.tool != req.tool:
        return False
    if rule.pattern is None:
        return True
    if not deny and not req.complete:
        return False  # lo-orch has not seen all of it: a pattern cannot vouch for it
    if req.tool == "Bash":
        if req.command is None:
            return False
        command = req.command.strip()
        if rule.exact:
            return command == rule.pattern
        if deny:
            return any(_glob(rule.pattern, c) for c in [command, *_parts(command)])
        return not is_compound(command) and _glob(rule.pattern, command)
    if req.tool in FILE_TOOLS:
        if req.file is None:
            return False
        if rule.exact:
            return req.file == rule.pattern
        return _file_matches(rule.pattern, req.file, req.cwd)
    if rule.exact:  # (a summary of 200 characters may have been cut: never exact)
        return len(req.summary) < SUMMARY_MAX and req.summary == rule.pattern
    return _glob(rule.pattern, req.summary)


def own_signal(req: PermissionRequest, bin_cmd: str | None = None) -> bool:
    """Is this lo-orch's own ``signal`` command, and nothing more? (Always allowed.)

    A fixed rule: ``$LO_ORCH_BIN signal PHASE`` (or the literal lo-orch command line) with
    only ``--task``, ``--note``, ``--dispute`` options; anything compound, any other ``$``
    or a backtick makes it an ordinary request.
    """
    if req.tool != "Bash" or not req.command:
        return False
    command = req.command.strip()
    prefixes = [*BIN_NAMES, *([bin_cmd] if bin_cmd else [])]
    head = next((p for p in prefixes if command.startswith(p + " ")), None)
    if head is None:
        return False
    rest = command[len(head) :]
    if any(c in rest for c in "$`\\\n\r"):  # no expansion of any kind, one line
        return False
    try:
        lex = shlex.shlex(rest, posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        words = list(lex)
    except ValueError:
        return False
    if any(w and set(w) <= set(lex.punctuation_chars) for w in words):
        return False  # an unquoted ; & | < > ( ): more than the one signal command
    if len(words) < 2 or words[0] != "signal" or words[1] not in SIGNAL_PHASES:
        return False
    opts = words[2:]
    while opts:
        key = opts[0]
        name = key.split("=", 1)[0]
        if name not in SIGNAL_OPTIONS:
            return False
        opts = opts[1:] if "=" in key else opts[2:] if len(opts) >= 2 else ["!"]
    return True


def decide(
    req: PermissionRequest, allow: Sequence[Rule], deny: Sequence[Rule], bin_cmd: str | None = None
) -> tuple[Decision, str] | None:
    """The rule's answer to ``req`` and the rule's text, or None: a person decides."""
    if own_signal(req, bin_cmd):
        return "allow", "lo-orch signal"
    for rule in deny:
        if matches(rule, req, deny=True):
            return "deny", rule.text()
    for rule in allow:
        if matches(rule, req):
            return "allow", rule.text()
    return None


def dialog_on_screen(screen: str) -> bool:
    """Does the pane show a permission dialog (in its last lines)?"""
    tail = "\n".join(screen.rstrip().splitlines()[-40:])
    return DIALOG_RE.search(tail) is not None


# the store ---------------------------------------------------------------------------------


class Permissions:
    """The pending requests, answers and rules of one run, in its private folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        #: request file name -> (its stat when read, what it held): a file read once is
        #: read again only when it was written since (every write replaces it whole, a new
        #: inode); ``all`` at every sweep and Stop hook no longer reads every request of
        #: the run again
        self._read: dict[str, tuple[tuple[int, int, int, int], PermissionRequest]] = {}
        self._read_lock = threading.Lock()

    @classmethod
    def for_run(cls, repo: Path, run: str) -> Permissions:
        return cls(private.run_dir(repo, run) / FOLDER)

    @classmethod
    def for_repo(cls, repo: Path) -> Permissions:
        """The current run's (the one ``lo-orch status`` shows)."""
        return cls.for_run(repo, Store.for_repo(repo).read_run().name)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        with FileLock(str(self.folder / LOCK_FILE), timeout=30):
            yield

    def _path(self, rid: str) -> Path:
        if not re.fullmatch(r"[a-z0-9-]{1,80}", rid):
            msg = f"{rid!r} is not a permission request id"
            raise StateError(
                msg,
                hint="Request ids look like `tokenize-1a2b3c`; `lo-orch permit "
                "TASK allow` names them when a task has several.",
            )
        return self.folder / REQUESTS / f"{rid}.json"

    def write(self, req: PermissionRequest) -> None:
        atomic_write_text(self._path(req.id), req.model_dump_json(indent=2) + "\n")

    def get(self, rid: str) -> PermissionRequest | None:
        path = self._path(rid)
        try:
            return PermissionRequest.model_validate_json(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    def all(self) -> list[PermissionRequest]:
        """Every request of the run, oldest first (a file that does not read as one is left
        out); only the files written since the last call are read."""
        try:
            entries = [e for e in os.scandir(self.folder / REQUESTS) if e.name.endswith(".json")]
        except OSError:  # (no folder yet: no request)
            return []
        out = []
        with self._read_lock:
            seen: dict[str, tuple[tuple[int, int, int, int], PermissionRequest]] = {}
            for entry in entries:
                with contextlib.suppress(OSError, ValueError):
                    key = stat_key(entry.stat())
                    known = self._read.get(entry.name)
                    if known is None or known[0] != key:
                        text = Path(entry.path).read_text("utf-8")
                        known = (key, PermissionRequest.model_validate_json(text))
                    seen[entry.name] = known
                    out.append(known[1])
            self._read = seen  # (a request removed is forgotten)
        return sorted(out, key=lambda r: (r.asked_at, r.id))

    def open_requests(self, task: str | None = None) -> list[PermissionRequest]:
        return [r for r in self.all() if r.state == "open" and task in (None, r.task)]

    def new_request(self, task: str, tool: str, payload: dict[str, Any]) -> PermissionRequest:
        """Record a request a session just asked (open)."""
        summary = str(payload.get("tool_summary") or "")
        cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else None
        command, file = payload.get("tool_command"), payload.get("tool_file_path")
        return PermissionRequest(
            id=f"{task}-{secrets.token_hex(3)}",
            task=task,
            tool=tool,
            command=command if tool == "Bash" and isinstance(command, str) else None,
            file=file if tool in FILE_TOOLS and isinstance(file, str) else None,
            summary=summary,
            cwd=cwd,
            asked_at=now_iso(),
            complete=payload.get("tool_input_cut") is not True,
        )

    def settle(self, rid: str, **changes: Any) -> PermissionRequest | None:
        """Change an open request (answer or close it) under the lock; None if not open."""
        with self.locked():
            req = self.get(rid)
            if req is None or req.state != "open":
                return None
            new = req.model_copy(update=changes)
            PermissionRequest.model_validate(new.model_dump())  # typed updates: no stray field
            self.write(new)
            return new

    def run_rules(self) -> tuple[list[Rule], list[Rule]]:
        path = self.folder / RULES_FILE
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return [], []
        return (
            [Rule.model_validate(r) for r in raw.get("allow", [])],
            [Rule.model_validate(r) for r in raw.get("deny", [])],
        )

    def add_rule(self, decision: Decision, rule: Rule) -> None:
        allow, deny = self.run_rules()
        target = allow if decision == "allow" else deny
        if rule not in target:
            target.append(rule)
        doc = {"allow": [r.model_dump() for r in allow], "deny": [r.model_dump() for r in deny]}
        atomic_write_text(self.folder / RULES_FILE, json.dumps(doc, indent=2) + "\n")


def exact_rule(req: PermissionRequest) -> Rule:
    """The ``--always`` rule for ``req``: this tool with exactly this input — never the
    whole tool (StateError when lo-orch did not see the whole input)."""
    if req.tool == "Bash":
        value = req.command
    elif req.tool in FILE_TOOLS:
        value = req.file
    else:
        value = req.summary if len(req.summary) < SUMMARY_MAX else None
    if not value or not req.complete:
        msg = (
            f"request {req.id} ({req.tool}) cannot become an exact rule: lo-orch did not "
            "receive its whole input"
        )
        raise StateError(
            msg,
            hint=f"Answer it without --always, or write a rule for "
            f"[permissions] in the config: `lo-orch permit {req.task} allow`.",
        )
    return Rule(tool=req.tool, pattern=value, exact=True)


# the interface of `lo-orch permit` and the dashboard ------------------------------------------


def pending(repo: Path) -> list[PermissionRequest]:
    """The open permission requests of the repository's current run, oldest first."""
    return Permissions.for_repo(repo).open_requests()


def answer(
    repo: Path,
    task: str,
    decision: Decision,
    *,
    always: bool = False,
    request_id: str | None = None,
) -> PermissionRequest:
    """A person answers ``task``'s open request (``request_id`` when it has several).

    The supervisor hands the answer to the waiting hook, which gives it to Claude Code.
    ``always`` also adds the exact rule (this tool, this command or file) for the rest of
    the run. A person's act: refused inside a managed session.
    """
    refuse_in_session("lo-orch permit")
    if decision not in ("allow", "deny"):
        msg = f"the answer must be allow or deny, not {decision!r}"
        raise StateError(msg, hint=f"lo-orch permit {task} allow")
    perms = Permissions.for_repo(repo)
    with perms.locked():
        open_ = perms.open_requests(task)
        if request_id is not None:
            chosen = [r for r in open_ if r.id == request_id]
            if not chosen:
                msg = f"task {task!r} has no pending permission request {request_id!r}"
                raise StateError(msg, hint=_pending_hint(perms))
        else:
            chosen = open_
        if not chosen:
            msg = f"task {task!r} has no pending permission request"
            raise StateError(msg, hint=_pending_hint(perms))
        if len(chosen) > 1:
            ids = ", ".join(f"{r.id} ({r.tool}: {r.summary})" for r in chosen)
            msg = f"task {task!r} has {len(chosen)} pending permission requests: {ids}"
            raise StateError(
                msg, hint=f"Name one: `lo-orch permit {task} {decision} --id {chosen[0].id}`."
            )
        rule = exact_rule(chosen[0]) if always else None  # (refused before anything is written)
        req = chosen[0].model_copy(
            update={
                "state": "answered",
                "decision": decision,
                "decided_by": "person",
                "answered_at": now_iso(),
            }
        )
        perms.write(req)
        if rule is not None:
            perms.add_rule(decision, rule)
    Store.for_repo(repo).append_ledger(
        "permission_answered",
        task=task,
        request=req.id,
        decision=decision,
        tool=req.tool,
        message=req.summary,
        by="person",
        **({"rule": rule.text()} if rule is not None else {}),
    )
    return req


def _pending_hint(perms: Permissions) -> str:
    others = perms.open_requests()
    if not others:
        return (
            "No session is waiting for a permission now; `lo-orch status` shows what "
            "each task waits for."
        )
    listed = ", ".join(f"{r.task} ({r.tool}: {r.summary}, --id {r.id})" for r in others)
    return f"Pending now: {listed}."


def hook_output(decision: Decision, message: str) -> str:
    """What the PermissionRequest hook prints for Claude Code 2.1.332 (docs/permissions.md)."""
    body: dict[str, Any] = {"behavior": decision}
    if decision == "deny":
        body["message"] = message
    return json.dumps(
        {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": body}}
    )

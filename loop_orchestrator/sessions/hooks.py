"""What managed sessions report: Claude Code hook events and `lo-orch signal`.

Both only *carry* a report: `lo-orch hook EVENT` and `lo-orch signal PHASE` send it to the
running supervisor over its socket (``inbox``), which decides what it means (``lifecycle``)
and answers. Neither writes a status file or the ledger: those are the supervisor's
published view (docs/design.md section 10).

`lo-orch hook EVENT` runs for every hook event of every Claude Code session that loads the
plugin (each prompt, each tool call, each stop), so its path stays light: it runs under
``python -I -S`` (``entry.py``, ``$LO_ORCH_HOOK``) and imports nothing the interpreter has
not loaded at start besides ``inbox`` (no ``re``, ``json``, ``pathlib``, ``typing``, ``enum``:
together they would triple a hook event's CPU; pydantic alone costs about 200 ms).

Contract of a hook: in a session lo-orch does not manage, or when anything is missing or
broken, print nothing and exit 0, never disturbing the user's session. The answers that
are not silence: the Stop gate, exit 2 with the reason on stderr (Claude keeps working); and
a PermissionRequest answered by a rule or by `lo-orch permit` (the hook waits for it),
``hookSpecificOutput`` JSON on stdout (permissions.py, docs/permissions.md).
"""

from __future__ import annotations

import os
import time

from loop_orchestrator.sessions import inbox

TYPE_CHECKING = False  # typing itself costs a hook event ~2 ms; mypy reads the block
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, Literal

    Answer = Literal["quiet", "block", "decide"]

#: a task id: what plan validation's ID_RE accepts (``^[a-z0-9][a-z0-9-]{0,39}\Z``), checked
#: without ``re`` (7 ms a hook event; tests assert they agree)
_ID_FIRST = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_ID_REST = _ID_FIRST | {"-"}
#: the run's folder and the worktrees' folder (``files.ORCH_DIR``, ``files.WORKTREES_DIR``:
#: ``files`` imports tempfile and shutil; tests assert they agree)
ORCH_DIR = ".orchestration"
WORKTREES_DIR = ".worktrees"

SIGNAL_PHASES = ("plan_ready", "impl_done", "blocked")
#: how long the PermissionRequest hook waits for a person's answer (hooks.json gives it
#: 3600 s); then it steps aside and the dialog on screen is the only way to answer
PERMISSION_WAIT = 3500.0
#: how often it asks the supervisor whether the request was answered
PERMISSION_POLL = 0.5
#: the longest command or path sent whole to the supervisor (a longer one is only asked)
MAX_TOOL_INPUT = 16 * 1024
#: how long `lo-orch signal` waits for a supervisor that is not listening (a restarted one is
#: back within seconds); ``LO_ORCH_SIGNAL_WAIT`` in the session's environment (``[agent]
#: env``) sets another number of seconds
SIGNAL_WAIT = 30.0
SIGNAL_WAIT_ENV = "LO_ORCH_SIGNAL_WAIT"


def signal_wait(env: Mapping[str, str]) -> float:
    """How long `lo-orch signal` waits for a supervisor: ``LO_ORCH_SIGNAL_WAIT`` seconds
    (0 to 600) when set to a number, else ``SIGNAL_WAIT``."""
    try:
        seconds = float(env.get(SIGNAL_WAIT_ENV, ""))
    except ValueError:
        return SIGNAL_WAIT
    return min(max(seconds, 0.0), 600.0) if seconds == seconds else SIGNAL_WAIT


def is_task_id(text: str) -> bool:
    """Is ``text`` a task id (plan validation's ``ID_RE``)?"""
    return 0 < len(text) <= 40 and text[0] in _ID_FIRST and all(c in _ID_REST for c in text[1:])


def is_event_name(text: str) -> bool:
    """Is ``text`` shaped like a hook event's name (1 to 40 ASCII letters)?"""
    return 0 < len(text) <= 40 and text.isascii() and text.isalpha()


class HookTarget:
    """The task a hook event belongs to."""

    __slots__ = ("run_dir", "task")

    def __init__(self, run_dir: str, task: str) -> None:
        self.run_dir = run_dir  # the absolute .orchestration folder
        self.task = task

    @property
    def status_path(self) -> str:
        return os.path.join(self.run_dir, "status", f"{self.task}.json")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HookTarget) and (self.run_dir, self.task) == (
            other.run_dir,
            other.task,
        )

    def __hash__(self) -> int:
        return hash((self.run_dir, self.task))

    def __repr__(self) -> str:
        return f"HookTarget({self.run_dir!r}, {self.task!r})"


class HookAnswer:
    """What a hook event answers Claude Code."""

    #: nothing: print nothing, exit 0 (never disturb the session)
    QUIET: Answer = "quiet"
    #: the Stop gate: exit 2 with the reason on stderr, so Claude keeps working
    BLOCK: Answer = "block"
    #: a PermissionRequest decided: ``hookSpecificOutput`` JSON on stdout, exit 0
    DECIDE: Answer = "decide"


class HookOutcome:
    """A hook event's answer and its text (the Stop gate's reason, or the decision's JSON)."""

    __slots__ = ("answer", "text")

    def __init__(self, answer: Answer = HookAnswer.QUIET, text: str = "") -> None:
        self.answer: Answer = answer
        self.text = text

    @property
    def exit_code(self) -> Literal[0, 2]:
        return 2 if self.answer == HookAnswer.BLOCK else 0

    @property
    def stdout(self) -> str:
        return self.text if self.answer == HookAnswer.DECIDE else ""

    @property
    def stderr(self) -> str:
        return self.text if self.answer == HookAnswer.BLOCK else ""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HookOutcome) and (self.answer, self.text) == (
            other.answer,
            other.text,
        )

    def __hash__(self) -> int:
        return hash((self.answer, self.text))

    def __repr__(self) -> str:
        return f"HookOutcome({self.answer!r}, {self.text!r})"


QUIET = HookOutcome()


def now_iso() -> str:
    # same format as state.now_iso (sortable, parseable); only on the failure path
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat(timespec="microseconds")


# locating the task ----------------------------------------------------------------------


def locate(payload: Mapping[str, Any], env: Mapping[str, str]) -> HookTarget | None:
    """The managed task this event belongs to, or None for a session lo-orch does not run.

    ``LO_ORCH_TASK`` + ``LO_ORCH_RUN_DIR`` (the pane's environment) decide when both are
    set; otherwise the payload's ``cwd`` must lie in ``<repo>/.worktrees/<run>/<task>`` of a
    repo whose ``.orchestration/status/<task>.json`` exists. Either way the status file must
    exist, so a stale environment or a foreign ``.worktrees`` folder stays silent.
    """
    task = env.get("LO_ORCH_TASK", "")
    run_dir = env.get("LO_ORCH_RUN_DIR", "")
    if task and run_dir:
        target = HookTarget(run_dir, task)
        if is_task_id(task) and run_dir.startswith("/") and os.path.isfile(target.status_path):
            return target
        return None
    cwd = payload.get("cwd")
    if not isinstance(cwd, str) or not cwd.startswith("/"):
        return None
    parts = [p for p in cwd.split("/") if p]
    # innermost first: a repository may itself sit in some other tool's .worktrees folder
    for i in range(len(parts) - 3, -1, -1):
        if parts[i] == WORKTREES_DIR and is_task_id(parts[i + 1]) and is_task_id(parts[i + 2]):
            target = HookTarget("/" + "/".join([*parts[:i], ORCH_DIR]), parts[i + 2])
            if os.path.isfile(target.status_path):
                return target
    return None


# Cline's hook payloads ------------------------------------------------------------------

#: words of a Cline ``agent_error`` message that mean the API refused for a while (it
#: gives the error's message, not its status: Cline 3.0.65 after its own retries)
_RATE_WORDS = ("429", "rate limit", "rate_limit", "too many requests", "quota")
_SERVER_WORDS = ("500", "502", "503", "504", "529", "server_error", "server error", "overloaded")


def from_cline(event: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """A Cline CLI hook payload (``hookName``, ``taskId``, ``sessionContext``,
    ``workspaceRoots``, ...) in Claude Code's terms, which the rest of the hook reads.

    lo-orch's Cline hook files are named by Cline's events and pass Claude Code's event
    name (``agents/cline.py``): TaskStart and TaskResume come as UserPromptSubmit (a run
    began with a prompt; the prompt itself is not in them), TaskComplete as Stop (Cline
    does not wait for it: ``stop_hook_active``), TaskError as StopFailure (``error`` says
    ``rate_limit`` or ``server_error`` when its message does)."""
    out: dict[str, Any] = {}
    context = payload.get("sessionContext")
    if isinstance(context, dict) and isinstance(context.get("rootSessionId"), str):
        out["session_id"] = context["rootSessionId"]
    roots = payload.get("workspaceRoots")
    if isinstance(roots, list) and roots and isinstance(roots[0], str):
        out["cwd"] = roots[0]
    submitted = payload.get("userPromptSubmit")
    if isinstance(submitted, dict) and isinstance(submitted.get("prompt"), str):
        out["prompt"] = submitted["prompt"]
    call = payload.get("tool_call")
    if isinstance(call, dict) and isinstance(call.get("name"), str):
        out["tool_name"] = call["name"]
        given = call.get("input")
        listed = given.get("commands") if isinstance(given, dict) else None
        if isinstance(listed, list) and all(isinstance(c, str) for c in listed):
            # run_commands: its commands as one shell text, one a line (a rule matching
            # one command never matches two)
            given = {"command": "\n".join(listed)}
        out["tool_input"] = given
        if isinstance(call.get("id"), str):
            out["tool_use_id"] = call["id"]
    if event == "Stop":
        out["stop_hook_active"] = True
        turn = payload.get("turn")
        said = turn.get("outputText") if isinstance(turn, dict) else None
        if isinstance(said, str):
            out["last_assistant_message"] = said
    error = payload.get("error")
    if event == "StopFailure" and isinstance(error, dict):
        message = str(error.get("message") or "")
        lowered = message.lower()
        if any(word in lowered for word in _RATE_WORDS):
            out["error"] = "rate_limit"
        elif any(word in lowered for word in _SERVER_WORDS):
            out["error"] = "server_error"
        else:
            out["error"] = "unknown"
        out["last_assistant_message"] = message
    reason = payload.get("reason")
    if isinstance(reason, str):
        out["reason"] = reason
    return out


# the hook -------------------------------------------------------------------------------


def read_payload(event: str, raw: str) -> dict[str, Any] | None:
    """The event's JSON as the rest of the hook reads it (a Cline payload in Claude Code's
    terms), or None when ``event`` or ``raw`` is not one (then the hook stays silent)."""
    if not is_event_name(event):
        return None
    try:
        payload = inbox.loads(raw) if raw.strip() else None
    except ValueError:
        return None
    if not isinstance(payload, dict):
        return None
    if "hookName" in payload and "clineVersion" in payload:
        payload = from_cline(event, payload)
    return payload


def run_hook(event: str, raw: str, env: Mapping[str, str]) -> HookOutcome:
    """Record one hook event for its task; the answer to give Claude Code.

    Never raises: a failure is written to ``<run dir>/logs/hooks.log`` when the run is
    known and the hook stays silent, because a broken supervisor must not break the
    user's session.
    """
    payload = read_payload(event, raw)
    if payload is None:
        return QUIET
    try:
        target = locate(payload, env)
    except OSError:
        return QUIET
    if target is None:
        return QUIET
    try:
        return _handle(event, payload, target, env)
    except Exception:
        # The one catch-all: whatever broke is logged with its traceback, and Claude Code
        # must not show the user a hook error for lo-orch's own problem.
        _log_failure(target, event)
        return QUIET


def hook_message(
    event: str, task: str, payload: Mapping[str, Any], *, bin_set: bool
) -> dict[str, Any]:
    """What the supervisor is sent for one hook event of ``task`` (``bin_set``: the session
    has ``$LO_ORCH_BIN``, which the Stop gate's reason then names). The prompt's text is
    never sent, only its size and a digest."""
    return {
        "type": "hook",
        "event": event,
        "task": task,
        "payload": _trim(payload),
        "bin": "$LO_ORCH_BIN" if bin_set else "lo-orch",
    }


def hook_outcome(event: str, reply: Any) -> HookOutcome | str:
    """What the supervisor's ``reply`` to a hook event answers Claude Code, or the id of
    the permission request a person is to answer (then ``permission_outcome`` is asked)."""
    if isinstance(reply, dict) and reply.get("exit_code") == 2 and reply.get("stderr"):
        return HookOutcome(HookAnswer.BLOCK, str(reply["stderr"]))
    if event == "PermissionRequest" and isinstance(reply, dict):
        if isinstance(reply.get("stdout"), str):  # a rule answered at once
            return HookOutcome(HookAnswer.DECIDE, reply["stdout"])
        if isinstance(reply.get("permission"), str):  # a person answers: wait for it
            return str(reply["permission"])
    return QUIET


def permission_outcome(reply: Any) -> HookOutcome | None:
    """The answer to a waiting PermissionRequest in the supervisor's ``reply`` to a poll,
    or None to ask again (no answer yet, or no supervisor)."""
    if not isinstance(reply, dict):
        return None  # no supervisor (one being restarted): ask again
    if isinstance(reply.get("stdout"), str):
        return HookOutcome(HookAnswer.DECIDE, reply["stdout"])
    if reply.get("state") != "open":
        return QUIET  # answered in the pane, or the turn moved on
    return None


def _handle(
    event: str, payload: dict[str, Any], target: HookTarget, env: Mapping[str, str]
) -> HookOutcome:
    """Hand the event to the supervisor and give Claude Code its answer.

    The supervisor decides (it records the event and, for Stop, answers the loop gate);
    this process only carries the message. With no supervisor listening the event is left
    in the task's inbox for the next one, and the session is never held up.
    """
    message = hook_message(event, target.task, payload, bin_set=bool(env.get("LO_ORCH_BIN")))
    reply = inbox.send(target.run_dir, message)
    if reply is None:
        inbox.leave(target.run_dir, target.task, message)
        return QUIET
    outcome = hook_outcome(event, reply)
    return outcome if isinstance(outcome, HookOutcome) else _await_answer(target, outcome)


def _await_answer(
    target: HookTarget, request_id: str, wait: float = PERMISSION_WAIT
) -> HookOutcome:
    """Ask the supervisor until a person answered request ``request_id`` (the answer for
    Claude Code), it was closed (answered in the pane, the turn moved on: silence), or
    ``wait`` ran out (silence: the dialog on screen stays). Claude Code shows its dialog
    meanwhile (docs/permissions.md)."""
    poll = {"type": "permission", "task": target.task, "id": request_id}
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        time.sleep(PERMISSION_POLL)
        outcome = permission_outcome(inbox.send(target.run_dir, poll))
        if outcome is not None:
            return outcome
    return QUIET


def tool_summary(tool_input: Any) -> str:
    """What a tool call does, in one line of at most 200 characters: the Bash command, the
    file a file tool touches, else the input's first string value."""
    if not isinstance(tool_input, dict):
        return ""
    for key in ("command", "file_path", "path", "url", "pattern"):
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            return " ".join(value.split())[:200]
    first = next((v for v in tool_input.values() if isinstance(v, str)), "")
    return " ".join(first.split())[:200]


def _trim(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a hook payload the supervisor uses, bounded in size."""
    out: dict[str, Any] = {}
    for key in (
        "session_id",
        "error",
        "notification_type",
        "reason",
        "source",
        "cwd",
        "tool_use_id",
    ):
        value = payload.get(key)
        if isinstance(value, str):
            out[key] = value[:200]
    message = payload.get("message")
    if isinstance(message, str):
        out["message"] = message[:200]
    said = payload.get("last_assistant_message")
    if isinstance(said, str):
        # a StopFailure's last words name a usage limit's reset time (limits.py); the end
        # of a long message is where Claude Code puts it
        out["last_assistant_message"] = said[-500:]
    tool = payload.get("tool_name")
    if isinstance(tool, str):
        out["tool_name"] = tool[:100]
        out["tool_summary"] = tool_summary(payload.get("tool_input"))
        raw = payload.get("tool_input")
        tool_input: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
        # the exact command or file, for the permission rules (a summary is collapsed and
        # cut: "pytest -q<newline>curl evil" must not read as one pytest command)
        for key in ("command", "file_path"):
            value = tool_input.get(key)
            if isinstance(value, str) and len(value) <= MAX_TOOL_INPUT:
                out[f"tool_{key}"] = value
            elif isinstance(value, str):
                out["tool_input_cut"] = True
    out["stop_hook_active"] = payload.get("stop_hook_active") is True
    prompt = payload.get("prompt")
    if isinstance(prompt, str):
        out["prompt_chars"] = len(prompt)
        out["prompt_sha256"] = inbox.sha256_hex(prompt.encode("utf-8"))[:16]
    return out


def _log_failure(target: HookTarget, event: str) -> None:
    import traceback  # only on failure: keeps the hook's import time down

    try:
        logs = os.path.join(target.run_dir, "logs")
        os.makedirs(logs, exist_ok=True)
        with open(os.path.join(logs, "hooks.log"), "a", encoding="utf-8") as fh:
            fh.write(f"{now_iso()} hook {event} for task {target.task} failed:\n")
            fh.write(traceback.format_exc())
    except OSError:
        pass


class SignalResult:
    """What the supervisor made of a signal."""

    __slots__ = ("changed", "message", "phase", "previous")

    def __init__(self, previous: str, phase: str, changed: bool, message: str) -> None:
        self.previous = previous  # the phase before the signal ("" when none answered)
        self.phase = phase  # the phase after it
        self.changed = changed  # False: repeated, or left for the next supervisor
        self.message = message

    def __repr__(self) -> str:
        return (
            f"SignalResult({self.previous!r}, {self.phase!r}, {self.changed!r}, {self.message!r})"
        )


def signal_task(
    run_dir: str | os.PathLike[str],
    phase: str,
    *,
    task: str,
    note: str | None = None,
    disputes: tuple[str, ...] | list[str] = (),
) -> SignalResult:
    """Send a session's report (`lo-orch signal`) to the supervisor, which decides.

    The supervisor accepts it only from the session of ``task`` (by the caller's process
    ancestry) and only where the lifecycle allows it (``lifecycle.decide_signal``); a
    refusal is a StateError with the supervisor's reason. With no supervisor running the
    report is left in the task's inbox and the next supervisor asks for it again.
    """
    from loop_orchestrator.errors import StateError, UsageError  # not on a hook's path

    if phase not in SIGNAL_PHASES:
        msg = f"unknown signal {phase!r}"
        raise UsageError(msg, hint=f"Signal one of: {', '.join(SIGNAL_PHASES)}.")
    if not is_task_id(task):
        msg = f"{task!r} is not a task id"
        raise UsageError(msg, hint="Pass --task with the task's id (see `lo-orch status`).")
    note = note.strip() if note else None
    if phase == "blocked" and not note:
        msg = "`signal blocked` needs a note saying what is missing"
        raise UsageError(
            msg,
            hint='For example: lo-orch signal blocked --note "needs ownership of app/db.py"',
        )
    if not os.path.isfile(os.path.join(run_dir, "status", f"{task}.json")):
        msg = f"no task {task!r} in the run at {run_dir}"
        raise StateError(
            msg,
            hint="Check the task id with `lo-orch status`; inside a session it is $LO_ORCH_TASK.",
        )
    if disputes:
        from loop_orchestrator.verify import disputable as rules

        if phase != "impl_done":
            msg = "--dispute goes with `signal impl_done` only"
            raise UsageError(msg, hint='lo-orch signal impl_done --dispute CODE --note "why"')
        if not note:
            msg = "a dispute needs a reason: --note saying why the check is wrong here"
            raise UsageError(
                msg,
                hint=(
                    f"lo-orch signal impl_done --dispute {disputes[0]} "
                    '--note "why the check is wrong about this change"'
                ),
            )
        for code in disputes:
            why = rules.problem(code)
            if why:
                msg = f"cannot dispute {code}: {why}"
                raise UsageError(
                    msg,
                    hint="Dispute only the heuristic findings the review "
                    "lists as disputable (tests.*, stubs.*).",
                )
    message: dict[str, Any] = {"type": "signal", "task": task, "phase": phase, "note": note}
    if disputes:
        # only when given: a message without the key is what older supervisors know
        message["disputes"] = list(dict.fromkeys(disputes))
    # a supervisor being restarted is back within seconds: wait for it rather than leave
    # an unattested report that it can only ask about again
    deadline = time.monotonic() + signal_wait(os.environ)
    while True:
        reply = inbox.send(run_dir, message, wait=max(0.0, deadline - time.monotonic()))
        if reply is not None or time.monotonic() >= deadline:
            break
        time.sleep(0.2)  # it went away before answering: ask the next one
    if reply is None:
        inbox.leave(run_dir, task, message)
        return SignalResult(
            "",
            phase,
            False,
            "the supervisor is not running: your report is kept, and when `lo-orch run` "
            "resumes it will ask you to signal again",
        )
    return signal_result(phase, reply)


def signal_result(phase: str, reply: Any) -> SignalResult:
    """What the supervisor's ``reply`` to a signal means for the session; a refusal is a
    StateError with the supervisor's reason and a hint."""
    from loop_orchestrator.errors import StateError  # not on a hook's path

    if not isinstance(reply, dict) or not reply.get("ok"):
        reason = reply.get("message") if isinstance(reply, dict) else None
        raise StateError(
            str(reason or "the supervisor refused the signal"),
            hint=_signal_hint(str(reply.get("previous", "")) if isinstance(reply, dict) else ""),
        )
    return SignalResult(
        str(reply.get("previous", "")),
        str(reply.get("phase", phase)),
        not reply.get("repeated"),
        str(reply.get("message", "")),
    )


def signal_printed(task: str, result: SignalResult) -> str:
    """What `lo-orch signal` prints when its report was taken (or kept)."""
    if result.changed:
        return f"{task}: {result.previous} -> {result.phase}\n"
    return f"{task}: {result.message}\n"


def _signal_hint(current: str) -> str:
    if current == "planning":
        return "Finish the plan, then `signal plan_ready` (or `signal blocked --note ...`)."
    if current == "implementing":
        return "Finish the task, then `signal impl_done` (or `signal blocked --note ...`)."
    if current in ("pending", "launching"):
        return "Wait for the prompt that starts the task's planning or implementation."
    return (
        "Nothing is owed in this phase; the supervisor moves the task on. "
        "Check with `lo-orch status --json`."
    )

"""The scripted agent's script: a YAML mapping of task id (or ``default``) to what it does.

``load_script`` raises ``ConfigError`` naming the field on any problem.

Format::

    default:                      # or a task id
      trust_dialog: false         # show Claude Code's trust dialog first
      swallow_first_enter: false  # ignore the first Enter after a paste
      plan:                       # actions for the prompt of phase `planning`
        - write: {path: notes.md, content: "plan"}
        - signal: {phase: plan_ready, note: planned}
      implement:                  # one list of actions per round (rework_count);
        - - write: {path: app/x.py, content: "x = 1\\n"}   # the last round repeats
          - run: {argv: [python, -m, pytest, -q], check: true}
          - signal: impl_done
        - - patch: {path: app/x.py, old: "1", new: "2"}

Actions (a mapping with one key): ``write {path, content}``, ``patch {path, old, new}``,
``delete {path}``, ``run {argv, check, timeout}``, ``signal {phase, note, dispute}``,
``sleep {seconds}``, ``say {text}``, ``exit {code}`` (a crash: no SessionEnd hook), ``hang``.
Short forms: ``say: text``, ``sleep: 2``, ``exit: 3``, ``signal: impl_done``,
``delete: path``, ``hang`` (a bare string). A flat ``implement`` list is one round.
Misbehaviour is written as actions: crash (``exit``), hang, never signal (no ``signal``),
a test without assertions or an edit outside ``owns`` (``write``).

Model-only actions, for the scripted model endpoint (``endpoint.py``) that drives
the real Claude Code CLI; the scripted agent refuses a script that uses them:
``stop {text}`` (end the turn here; the Stop hook may send the session back),
``api_error {status, type, message, retry_after, resets_in, limit}`` (answer the next
request with an API error; ``resets_in`` makes a 429 a usage limit that resets that many
seconds later), ``drop`` (close the connection without an answer), ``tool {name, input}`` (any
tool call, e.g. one a permission mode must ask a person about). Model-only fields of an
entry: ``match`` (a regex: the entry also serves a session whose first prompt matches it)
and ``turns`` (one list of actions per prompt that is not a lo-orch phase prompt, in order:
a coordinator session's conversation).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    RootModel,
    Tag,
    ValidationError,
    field_validator,
)

from loop_orchestrator.errors import ConfigError


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WriteArgs(_Model):
    path: str = Field(min_length=1)
    content: str


class PatchArgs(_Model):
    path: str = Field(min_length=1)
    old: str = Field(min_length=1)
    new: str


class DeleteArgs(_Model):
    path: str = Field(min_length=1)


class RunArgs(_Model):
    argv: list[str] = Field(min_length=1)
    check: bool = True
    timeout: float = Field(default=300, gt=0)


class SignalArgs(_Model):
    phase: str = Field(min_length=1)
    note: str | None = None
    #: finding ids disputed with it (``--dispute CODE``)
    dispute: list[str] = Field(default_factory=list)


class SleepArgs(_Model):
    seconds: float = Field(ge=0)


class SayArgs(_Model):
    text: str


class ExitArgs(_Model):
    code: int = 1


class HangArgs(_Model):
    pass


class WriteAction(_Model):
    write: WriteArgs


class PatchAction(_Model):
    patch: PatchArgs


class DeleteAction(_Model):
    delete: DeleteArgs


class RunAction(_Model):
    run: RunArgs


class SignalAction(_Model):
    signal: SignalArgs


class SleepAction(_Model):
    sleep: SleepArgs


class SayAction(_Model):
    say: SayArgs


class ExitAction(_Model):
    exit: ExitArgs


class HangAction(_Model):
    hang: HangArgs


class StopArgs(_Model):
    text: str = "Done."


class ApiErrorArgs(_Model):
    status: int = Field(ge=400, le=599)
    type: str | None = None  # the Anthropic error type; by default the one of ``status``
    message: str | None = None
    retry_after: float | None = Field(default=None, ge=0)
    #: a subscriber's usage limit: its reset this many seconds after the answer (sent as
    #: Anthropic's ``anthropic-ratelimit-unified-*`` headers, see replies.Fault)
    resets_in: float | None = Field(default=None, ge=0)
    #: which limit was hit (``anthropic-ratelimit-unified-representative-claim``)
    limit: Literal["five_hour", "seven_day", "seven_day_opus", "seven_day_sonnet"] = "five_hour"


class DropArgs(_Model):
    pass


class ToolArgs(_Model):
    name: str = Field(min_length=1)
    input: dict[str, Any] = Field(default_factory=dict)


class StopAction(_Model):
    stop: StopArgs


class ApiErrorAction(_Model):
    api_error: ApiErrorArgs


class DropAction(_Model):
    drop: DropArgs


class ToolAction(_Model):
    tool: ToolArgs


ACTION_KINDS = (
    "write",
    "patch",
    "delete",
    "run",
    "signal",
    "sleep",
    "say",
    "exit",
    "hang",
    "stop",
    "api_error",
    "drop",
    "tool",
)
#: actions only a model can take (the scripted model endpoint); the scripted agent refuses
MODEL_ONLY = ("stop", "api_error", "drop", "tool")
#: the field a scalar short form fills
_SHORT_FORMS = {
    "say": "text",
    "sleep": "seconds",
    "exit": "code",
    "signal": "phase",
    "delete": "path",
    "stop": "text",
    "api_error": "status",
}


def _action_kind(value: Any) -> str | None:
    if isinstance(value, BaseModel):
        for kind in ACTION_KINDS:
            if kind in type(value).model_fields:
                return kind
        return None
    if value in ("hang", "drop", "stop"):
        return str(value)
    if isinstance(value, dict) and len(value) == 1:
        key = next(iter(value))
        return key if key in ACTION_KINDS else None
    return None


def _expand_short_form(value: Any) -> Any:
    if value in ("hang", "drop", "stop"):
        return {value: {}}
    if isinstance(value, dict) and len(value) == 1:
        key, arg = next(iter(value.items()))
        if key in ("hang", "drop") and arg in (None, True):
            return {key: {}}
        if key in _SHORT_FORMS and not isinstance(arg, dict):
            return {key: {_SHORT_FORMS[key]: arg}}
    return value


Action = Annotated[
    Annotated[WriteAction, Tag("write")]
    | Annotated[PatchAction, Tag("patch")]
    | Annotated[DeleteAction, Tag("delete")]
    | Annotated[RunAction, Tag("run")]
    | Annotated[SignalAction, Tag("signal")]
    | Annotated[SleepAction, Tag("sleep")]
    | Annotated[SayAction, Tag("say")]
    | Annotated[ExitAction, Tag("exit")]
    | Annotated[HangAction, Tag("hang")]
    | Annotated[StopAction, Tag("stop")]
    | Annotated[ApiErrorAction, Tag("api_error")]
    | Annotated[DropAction, Tag("drop")]
    | Annotated[ToolAction, Tag("tool")],
    Discriminator(
        _action_kind,
        custom_error_type="invalid_action",
        custom_error_message=(
            "an action is a mapping with exactly one key: " + ", ".join(ACTION_KINDS)
        ),
    ),
]


class TaskScript(_Model):
    trust_dialog: bool = False
    swallow_first_enter: bool = False
    plan: list[Action] = Field(default_factory=list)
    implement: list[list[Action]] = Field(default_factory=list)
    # model endpoint only
    match: str | None = None
    turns: list[list[Action]] = Field(default_factory=list)

    @field_validator("plan", mode="before")
    @classmethod
    def _plan_short_forms(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [_expand_short_form(v) for v in value]
        return value

    @field_validator("turns", mode="before")
    @classmethod
    def _turns_short_forms(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [[_expand_short_form(a) for a in r] if isinstance(r, list) else r for r in value]
        return value

    @field_validator("match")
    @classmethod
    def _match_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                msg = f"not a regular expression: {exc}"
                raise ValueError(msg) from exc
        return value

    def model_only(self) -> list[str]:
        """Where this entry uses what only the model endpoint can do (empty: none)."""
        used = ["match"] if self.match is not None else []
        used += ["turns"] if self.turns else []
        rounds = [("plan", self.plan)] + [
            (f"implement[{i}]", r) for i, r in enumerate(self.implement)
        ]
        for where, actions in rounds:
            used += [f"{where}: {kind}" for a in actions if (kind := _action_kind(a)) in MODEL_ONLY]
        return used

    @field_validator("implement", mode="before")
    @classmethod
    def _implement_rounds(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        if value and not any(isinstance(v, list) for v in value):
            value = [value]  # a flat list is a single round
        return [[_expand_short_form(a) for a in r] if isinstance(r, list) else r for r in value]

    def actions_for(self, phase: Literal["plan", "implement"], round_no: int = 0) -> list[Any]:
        """The plan actions, or implement round ``round_no`` (the last round repeats)."""
        if phase == "plan":
            return list(self.plan)
        if not self.implement:
            return []
        return list(self.implement[min(max(round_no, 0), len(self.implement) - 1)])


class Script(RootModel[dict[str, TaskScript]]):
    def for_task(self, task: str | None) -> TaskScript:
        """The task's entry, else ``default``, else an agent that does nothing."""
        if task and task in self.root:
            return self.root[task]
        return self.root.get("default", TaskScript())

    def matching(self, prompt: str) -> str | None:
        """The first entry whose ``match`` regex is found in ``prompt``."""
        for key, entry in self.root.items():
            if entry.match is not None and re.search(entry.match, prompt):
                return key
        return None


def _where(loc: tuple[int | str, ...]) -> str:
    out = ""
    previous: int | str | None = None
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == previous:
            continue  # a union tag repeats the action key: ("write", "write", "path")
        else:
            out += ("." if out else "") + part
        previous = part
    return out or "(top)"


def parse_script(data: Any, source: str) -> Script:
    """Validate loaded YAML; every problem is reported with its field path."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        msg = f"{source}: a script is a mapping of task id (or 'default') to its actions"
        raise ConfigError(
            msg,
            hint="See loop_orchestrator/simulator/script.py for the format.",
        )
    try:
        return Script.model_validate(data)
    except ValidationError as exc:
        problems = [f"{_where(tuple(e['loc']))}: {e['msg']}" for e in exc.errors()]
        raise ConfigError(
            f"{source}: invalid scripted-agent script:\n" + "\n".join(f"  - {p}" for p in problems),
            hint="See loop_orchestrator/simulator/script.py for the format.",
        ) from exc


#: PyYAML's safe loader, libyaml's where PyYAML was built with it: a script holds every
#: task's actions (a 64-task script took 70 ms of pure-Python parsing, 7 ms with libyaml),
#: and the supervisor and every session read it
_SAFE_LOADER: type[yaml.CSafeLoader] | type[yaml.SafeLoader]
try:
    from yaml import CSafeLoader as _SAFE_LOADER
except ImportError:  # (a PyYAML built without libyaml)
    from yaml import SafeLoader as _SAFE_LOADER


def load_script(path: Path, *, model: bool = False) -> Script:
    """The script in ``path``; unless ``model``, one the scripted agent can perform."""
    script = _load(path)
    if not model:
        used = [f"{key}.{u}" for key, entry in script.root.items() for u in entry.model_only()]
        if used:
            msg = f"{path}: only the scripted model endpoint can do: {', '.join(used)}"
            raise ConfigError(
                msg,
                hint='Drive real Claude Code with it ([agent] kind = "claude" and the '
                "scripted endpoint, as `lo-orch demo --agent claude` does), or remove them.",
            )
    return script


def _load(path: Path) -> Script:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        msg = f"cannot read the scripted agent's script {path}: {exc.strerror}"
        raise ConfigError(
            msg,
            hint="Set [agent] script to an existing YAML file (relative to the repository).",
        ) from exc
    try:
        data = yaml.load(text, Loader=_SAFE_LOADER)
    except yaml.YAMLError as exc:
        msg = f"{path}: invalid YAML: {exc}"
        raise ConfigError(msg, hint="Fix the script file.") from exc
    return parse_script(data, str(path))

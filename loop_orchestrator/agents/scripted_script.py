"""The scripted agent's script: a YAML mapping of task id (or ``default``) to what it does.

Module API
----------
``load_script(path) -> Script`` (``ConfigError`` naming the field on any problem),
``parse_script(data, source) -> Script``, ``Script.for_task(task) -> TaskScript``,
``TaskScript.actions_for(phase, round_no)``, the action models (``WriteAction`` ...).

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
``delete {path}``, ``run {argv, check, timeout}``, ``signal {phase, note}``,
``sleep {seconds}``, ``say {text}``, ``exit {code}`` (a crash: no SessionEnd hook), ``hang``.
Short forms: ``say: text``, ``sleep: 2``, ``exit: 3``, ``signal: impl_done``,
``delete: path``, ``hang`` (a bare string). A flat ``implement`` list is one round.
Misbehaviour is written as actions: crash (``exit``), hang, never signal (no ``signal``),
a test without assertions or an edit outside ``owns`` (``write``).
"""

from __future__ import annotations

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


ACTION_KINDS = ("write", "patch", "delete", "run", "signal", "sleep", "say", "exit", "hang")
#: the field a scalar short form fills
_SHORT_FORMS = {
    "say": "text", "sleep": "seconds", "exit": "code", "signal": "phase", "delete": "path",
}


def _action_kind(value: Any) -> str | None:
    if isinstance(value, BaseModel):
        for kind in ACTION_KINDS:
            if kind in type(value).model_fields:
                return kind
        return None
    if value == "hang":
        return "hang"
    if isinstance(value, dict) and len(value) == 1:
        key = next(iter(value))
        return key if key in ACTION_KINDS else None
    return None


def _expand_short_form(value: Any) -> Any:
    if value == "hang":
        return {"hang": {}}
    if isinstance(value, dict) and len(value) == 1:
        key, arg = next(iter(value.items()))
        if key == "hang" and arg in (None, True):
            return {"hang": {}}
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
    | Annotated[HangAction, Tag("hang")],
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

    @field_validator("plan", mode="before")
    @classmethod
    def _plan_short_forms(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [_expand_short_form(v) for v in value]
        return value

    @field_validator("implement", mode="before")
    @classmethod
    def _implement_rounds(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        if value and not any(isinstance(v, list) for v in value):
            value = [value]  # a flat list is a single round
        return [
            [_expand_short_form(a) for a in r] if isinstance(r, list) else r for r in value
        ]

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
            hint="See loop_orchestrator/agents/scripted_script.py for the format.",
        )
    try:
        return Script.model_validate(data)
    except ValidationError as exc:
        problems = [f"{_where(tuple(e['loc']))}: {e['msg']}" for e in exc.errors()]
        raise ConfigError(
            f"{source}: invalid scripted-agent script:\n"
            + "\n".join(f"  - {p}" for p in problems),
            hint="See loop_orchestrator/agents/scripted_script.py for the format.",
        ) from exc


def load_script(path: Path) -> Script:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        msg = f"cannot read the scripted agent's script {path}: {exc.strerror}"
        raise ConfigError(
            msg,
            hint="Set [agent] script to an existing YAML file (relative to the repository).",
        ) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        msg = f"{path}: invalid YAML: {exc}"
        raise ConfigError(msg, hint="Fix the script file.") from exc
    return parse_script(data, str(path))

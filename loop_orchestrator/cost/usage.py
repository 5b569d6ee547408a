"""What each task's agent session cost: tokens and dollars, from Claude Code's own transcript.

Source (verified against Claude Code 2.1.332 with the scripted endpoint, see
``tests/test_usage_runs.py``): the session transcript
``<claude config dir>/projects/<cwd, every / and . as ->/<session id>.jsonl`` holds one
``assistant`` record per content block, each repeating the whole message's
``message.usage``; a message is counted once, by ``message.id``. The ``<synthetic>``
records Claude Code writes after an API error carry zero usage and are skipped.

The supervisor never takes a transcript path from a session (a hook payload's
``transcript_path`` is the agent's word): it derives the path from the session id it chose,
the task's worktree and the Claude config dir of the session's environment, so the file it
reads always lies under ``<config dir>/projects``.

Prices are dollars per million tokens per model (``DEFAULT_PRICES``, overridable with
``[prices.<model>]`` in config). A model without a price makes the cost *unknown* (None),
never 0, and the note says which model; so does a missing transcript, and an agent that is
not Claude Code (kind ``command``/``scripted``) has no usage at all (``UNKNOWN``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the four token kinds, as Claude Code's ``message.usage`` names them
TOKEN_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)


@dataclass(frozen=True)
class ModelPrice:
    """Dollars per million tokens."""

    input: float
    output: float
    cache_read: float
    cache_write: float

    def cost(self, counts: Mapping[str, int]) -> float:
        return (
            counts.get("input_tokens", 0) * self.input
            + counts.get("output_tokens", 0) * self.output
            + counts.get("cache_read_input_tokens", 0) * self.cache_read
            + counts.get("cache_creation_input_tokens", 0) * self.cache_write
        ) / 1e6


Prices = Mapping[str, ModelPrice]

#: Claude Code 2.1.332's default model and its list prices
DEFAULT_PRICES: dict[str, ModelPrice] = {
    "claude-opus-5-5": ModelPrice(input=4.0, output=20.0, cache_read=0.20, cache_write=5.0),
}


@dataclass
class Usage:
    """Tokens and dollars of one session, task or run.

    ``cost_usd`` is None when any part is unknown (a model without a price, a missing
    transcript, an agent that records none); ``notes`` say why, in plain words.
    """

    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_KEYS, 0))
    cost_usd: float | None = 0.0
    models: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: False for an agent whose usage nobody records (nothing was measured)
    measured: bool = True
    #: the same per rework round (read_transcript only; not in ``as_json``)
    rounds: dict[int, Usage] = field(default_factory=dict)

    def add(self, other: Usage) -> None:
        for key in TOKEN_KEYS:
            self.tokens[key] += other.tokens.get(key, 0)
        self.cost_usd = (
            None
            if self.cost_usd is None or other.cost_usd is None
            else self.cost_usd + other.cost_usd
        )
        self.models += [m for m in other.models if m not in self.models]
        self.notes += [n for n in other.notes if n not in self.notes]
        self.measured = self.measured and other.measured

    def as_json(self) -> dict[str, Any]:
        """The ``usage`` object of ``status --json`` and the ledger (keys are stable)."""
        return {
            **self.tokens,
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6),
            "cost_known": self.cost_usd is not None,
            "models": list(self.models),
            "notes": list(self.notes),
            "measured": self.measured,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Usage:
        if not data:
            return unknown("no usage recorded")
        cost = data.get("cost_usd")
        return cls(
            tokens={k: int(data.get(k) or 0) for k in TOKEN_KEYS},
            cost_usd=float(cost) if isinstance(cost, (int, float)) else None,
            models=list(data.get("models") or []),
            notes=list(data.get("notes") or []),
            measured=bool(data.get("measured", True)),
        )


def unknown(note: str) -> Usage:
    """Usage nobody measured: tokens 0, cost unknown (never $0)."""
    return Usage(cost_usd=None, notes=[note], measured=False)


def prices_from(settings: Any) -> dict[str, ModelPrice]:
    """The price table: the defaults, with ``[prices.<model>]`` of the settings on top."""
    table = dict(DEFAULT_PRICES)
    for model, price in (getattr(settings, "prices", None) or {}).items():
        table[model] = ModelPrice(
            input=price.input,
            output=price.output,
            cache_read=price.cache_read,
            cache_write=price.cache_write,
        )
    return table


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    """Claude Code's config folder for an environment: ``$CLAUDE_CONFIG_DIR`` or
    ``~/.claude``."""
    env = os.environ if env is None else env
    configured = env.get("CLAUDE_CONFIG_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path(env.get("HOME") or Path.home()).expanduser() / ".claude"


def transcript_path(config: Path, cwd: Path, session_id: str) -> Path:
    """Where Claude Code keeps the transcript of ``session_id`` run in ``cwd``.

    ``session_id`` must be a UUID (it is one lo-orch chose), so the result always lies in
    ``<config>/projects/``. Claude Code writes every character of the folder name that is
    not a letter or digit as ``-`` (``/`` and ``.`` in the common case).
    """
    sid = str(uuid.UUID(session_id))
    name = re.sub(r"[^A-Za-z0-9]", "-", str(cwd))
    return config / "projects" / name / f"{sid}.jsonl"


@dataclass(frozen=True)
class Message:
    """One assistant message's usage in a transcript: its key (``message.id``, or a hash
    of its line when it has none), the rework round it belongs to, its model, its tokens."""

    key: str
    round: int
    model: str
    counts: dict[str, int]


def parse_transcript(text: str) -> tuple[list[Message], int]:
    """The assistant messages of a transcript, each once, and the number of malformed
    lines (not a JSON object, or usage figures that are not non-negative integers)."""
    messages, bad, _round = parse_lines(text.splitlines(), 0)
    return messages, bad


def parse_lines(lines: Iterable[str], round_no: int) -> tuple[list[Message], int, int]:
    """``parse_transcript`` of a part of a transcript whose earlier lines left the rework
    round at ``round_no``: its messages (each once within the part), its malformed lines,
    and the round after it (so that a transcript can be read on from where it was left)."""
    messages: list[Message] = []
    seen: set[str] = set()
    bad = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if not isinstance(record, dict):
            bad += 1
            continue
        message = record.get("message")
        if record.get("type") == "user" and isinstance(message, dict):
            prompt = _prompt_round(message.get("content"))
            round_no = round_no if prompt is None else prompt
            continue
        if record.get("type") != "assistant" or not isinstance(message, dict):
            continue
        counts = _counts(message.get("usage"))
        model = message.get("model")
        if counts is None or not isinstance(model, str):
            bad += 1
            continue
        mid = message.get("id")
        key = (
            mid
            if isinstance(mid, str) and mid
            else "line:" + hashlib.sha256(line.encode("utf-8", "replace")).hexdigest()[:32]
        )
        if key in seen:
            continue  # another content block of the same message
        seen.add(key)
        if not any(counts.values()):
            continue  # an API error's <synthetic> message: nothing was used
        messages.append(Message(key, round_no, model, counts))
    return messages, bad, round_no


def price(messages: Iterable[Message], prices: Prices) -> Usage:
    """The tokens and cost of ``messages``, per model and per round."""
    per_model: dict[tuple[int, str], dict[str, int]] = {}
    for m in messages:
        total = per_model.setdefault((m.round, m.model), dict.fromkeys(TOKEN_KEYS, 0))
        for k in TOKEN_KEYS:
            total[k] += m.counts.get(k, 0)
    usage = Usage()
    for (rnd, model), counts in sorted(per_model.items()):
        part = Usage(tokens=dict(counts), models=[model])
        known = prices.get(model)
        if known is None:
            part.cost_usd = None
            part.notes.append(
                f'price unknown for model {model}: add [prices."{model}"] to the config'
            )
        else:
            part.cost_usd = known.cost(counts)
        usage.add(part)
        usage.rounds.setdefault(rnd, Usage()).add(part)
    return usage


def bad_note(bad: int, path: Path) -> str:
    return f"{bad} malformed transcript line(s) skipped in {path.name}; the figures may be low"


def read_transcript(path: Path, prices: Prices) -> Usage:
    """The tokens and cost of one transcript; a missing file or bad lines are noted.

    A line that is not a JSON object, or an assistant record whose usage figures are not
    non-negative integers, is skipped and counted in a note (the figures may then be low).
    """
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return unknown(f"transcript missing: {path}")
    except OSError as exc:
        return unknown(f"transcript unreadable: {path}: {exc.strerror or exc}")
    messages, bad = parse_transcript(text)
    usage = price(messages, prices)
    if bad:
        usage.notes.append(bad_note(bad, path))
    return usage


#: lo-orch's rework prompt (templates/prompt_rework.md.j2) names its round
_REWORK_RE = re.compile(r"Phase: implementing \(rework (\d+)\)")


def _prompt_round(content: Any) -> int | None:
    """The rework round a user prompt starts (None: not a lo-orch rework prompt; tool
    results, which a session's own commands fill, are never read)."""
    texts = (
        [content]
        if isinstance(content, str)
        else [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        if isinstance(content, list)
        else []
    )
    for text in texts:
        found = _REWORK_RE.search(text) if isinstance(text, str) else None
        if found:
            return int(found.group(1))
    return None


def _counts(raw: Any) -> dict[str, int] | None:
    if not isinstance(raw, dict):
        return None
    out: dict[str, int] = {}
    for key in TOKEN_KEYS:
        value = raw.get(key, 0)
        if value is None:
            value = 0
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return None
        out[key] = value
    return out


def session_transcript(worktree: Path, session_id: str, env: Mapping[str, str]) -> Path:
    """The transcript of a Claude Code session run in ``worktree`` with environment
    ``env`` (raises ValueError for a session id that is not a UUID)."""
    config = config_dir(env)
    path = transcript_path(config, worktree, session_id)
    if not path.exists():
        resolved = transcript_path(config, worktree.resolve(), session_id)
        if resolved.exists():
            path = resolved
    return path


def session_usage(worktree: Path, session_id: str, env: Mapping[str, str], prices: Prices) -> Usage:
    """The usage of a Claude Code session run in ``worktree`` with environment ``env``."""
    return read_transcript(session_transcript(worktree, session_id, env), prices)


def total(usages: Iterable[Usage]) -> Usage:
    out = Usage()
    for u in usages:
        out.add(u)
    return out


def money(cost: float | None) -> str:
    """``$0.0123``; ``unknown`` for None (never ``$0``)."""
    if cost is None:
        return "unknown"
    return f"${cost:.4f}"


def tokens(n: int) -> str:
    return f"{n:,}"


def cell(data: Mapping[str, Any] | None) -> str:
    """The status table's cost cell for a task's ``usage`` object."""
    if not data:
        return "-"
    u = Usage.from_json(data)
    if not u.measured and not any(u.tokens.values()):
        return "unknown"
    return money(u.cost_usd)


def summary_lines(
    tasks: Mapping[str, Mapping[str, Any] | None], headless: Iterable[tuple[str, float | None]] = ()
) -> list[str]:
    """Gate 2's cost table: one line per task, the headless calls (``headless_lines``) and
    the run's total, sessions and calls together (actual figures)."""
    lines = []
    run = Usage()
    for tid, data in tasks.items():
        u = Usage.from_json(data)
        run.add(u)
        lines.append(line(tid, u))
    for text, cost in headless:
        lines.append(text)
        run.add(Usage(cost_usd=cost))
    lines.append(line("run total", run))
    return lines


def line(label: str, u: Usage) -> str:
    t = u.tokens
    text = (
        f"{label}: {money(u.cost_usd)} — input {tokens(t['input_tokens'])}, output "
        f"{tokens(t['output_tokens'])}, cache read {tokens(t['cache_read_input_tokens'])}, "
        f"cache write {tokens(t['cache_creation_input_tokens'])} tokens"
    )
    if u.models:
        text += f" ({', '.join(u.models)})"
    if u.notes:
        text += "; " + "; ".join(u.notes)
    return text


def headless_cost(stdout: Path) -> float | None:
    """``total_cost_usd`` of a headless Claude Code call's JSON answer (None: not there)."""
    try:
        data = json.loads(stdout.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return None
    cost = data.get("total_cost_usd") if isinstance(data, dict) else None
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or cost < 0:
        return None
    return float(cost)


def headless_lines(
    evidence_dir: Path, ledger: Iterable[Mapping[str, Any]], auditor_mode: str
) -> list[tuple[str, float | None]]:
    """Gate 2's lines for the headless calls: the planning agent (ledger ``planning_usage``,
    its ``total_cost_usd``) and the LLM auditor (each ``auditor.stdout.txt`` kept as
    evidence). A call whose answer carries no cost makes that line's total unknown.
    Each line comes with its cost."""
    lines: list[tuple[str, float | None]] = []
    planning = [e for e in ledger if e.get("event") == "planning_usage"]
    if planning:
        costs = [e.get("cost_usd") for e in planning]
        known = all(isinstance(c, (int, float)) for c in costs)
        total_cost = sum(float(c) for c in costs if isinstance(c, (int, float)))
        calls = sum(int(e.get("calls") or 0) for e in planning)
        cost = total_cost if known else None
        lines.append(
            (f"planning agent: {money(cost)} ({calls} headless call(s), total_cost_usd)", cost)
        )
    outputs = sorted(evidence_dir.glob("*/*/auditor.stdout.txt"))
    if outputs:
        found = [headless_cost(o) for o in outputs]
        known = auditor_mode == "agent" and all(c is not None for c in found)
        total_cost = sum(c for c in found if c is not None)
        what = "total_cost_usd" if auditor_mode == "agent" else "a command: cost unknown"
        cost = total_cost if known else None
        lines.append((f"auditor: {money(cost)} ({len(outputs)} call(s), {what})", cost))
    return lines


#: a rough guess of one task's tokens per complexity (all its rounds), for Gate 1's
#: forecast only; measured figures replace it as soon as sessions run
FORECAST_TOKENS: dict[str, dict[str, int]] = {
    "simple": {
        "input_tokens": 20_000,
        "output_tokens": 8_000,
        "cache_read_input_tokens": 300_000,
        "cache_creation_input_tokens": 40_000,
    },
    "medium": {
        "input_tokens": 50_000,
        "output_tokens": 20_000,
        "cache_read_input_tokens": 900_000,
        "cache_creation_input_tokens": 100_000,
    },
    "complex": {
        "input_tokens": 120_000,
        "output_tokens": 50_000,
        "cache_read_input_tokens": 2_500_000,
        "cache_creation_input_tokens": 250_000,
    },
}
DEFAULT_MODEL = "claude-opus-5-5"


def forecast_line(
    complexities: Iterable[str],
    prices: Prices,
    model: str | None,
    *,
    run_budget: float | None = None,
) -> str:
    """Gate 1's cost forecast from the tasks' complexity, marked as an estimate."""
    model = model or DEFAULT_MODEL
    levels = list(complexities)
    price = prices.get(model)
    counts = {c: levels.count(c) for c in FORECAST_TOKENS if c in levels}
    split = ", ".join(f"{n} {c}" for c, n in counts.items())
    if price is None:
        return (
            f"Cost forecast: unknown (no price for model {model}; add "
            f'[prices."{model}"] to the config) for {len(levels)} task(s) ({split}).'
        )
    cost = sum(price.cost(FORECAST_TOKENS[c]) for c in levels)
    text = (
        f"Cost forecast (an ESTIMATE from task complexity, not a measurement): about "
        f"{money(cost)} for {len(levels)} task(s) ({split}) on {model}"
    )
    if run_budget is not None:
        text += f"; the run's budget is {money(run_budget)}"
    return text + "."

"""The LLM test-quality auditor (docs/design.md section 7.7), run by the supervisor, read-only.

``[auditor] llm``:
- ``"agent"``: Claude Code headless (``-p --output-format json --json-schema ...``) with
  only Read/Grep/Glob available and ``dontAsk`` permissions, in a clean checkout of the
  commit; the prompt (agents/test-quality-auditor.md + the task + brief + diff + findings)
  goes on stdin (a diff can exceed the 128 KiB limit of one argument); the answer is the
  JSON result's ``structured_output`` ``{"verdict": "PASS"|"FAIL", "reasons": [...]}``.
- ``"off"``: not asked; recorded as skipped (the verdict rests on the deterministic checks).
- anything else: a command line (shlex-split, no shell) that reads one JSON object on stdin
  (contract: ``task, commit, brief, diff, findings``; extensions: ``base, prompt``) and
  prints ``VERDICT: PASS|FAIL`` and ``REASONS: ...`` lines.

Anything else — no verdict, contradictory verdicts, a non-zero exit, a timeout, a missing
program, an error result — is FAIL. Nothing here decides by default in the agent's favour.
One exception: Claude Code reporting that it is not logged in raises ``NotLoggedInError``
(docs/design.md section 6), since no rework by the task could fix that.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from loop_orchestrator import proc, templating
from loop_orchestrator.config import Settings
from loop_orchestrator.errors import LoOrchError, NotLoggedInError, VerifyError
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.resources import plugin_dir
from loop_orchestrator.verify.models import AuditorResult, CheckRun, Finding

log = logging.getLogger(__name__)

AUDITOR_FILE = Path("agents") / "test-quality-auditor.md"
AUDITOR_TOOLS = "Read,Grep,Glob"
#: what Claude Code must answer with (validated by --json-schema, read from structured_output)
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "verdict": {"type": "string", "enum": ["PASS", "FAIL"]},
        "reasons": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["verdict", "reasons"],
    "additionalProperties": False,
}
#: a diff longer than this is cut; the auditor reads the files themselves
MAX_DIFF_CHARS = 150_000

_VERDICT_LINE = re.compile(r"^\s*VERDICT:\s*(.*?)\s*$", re.MULTILINE)
_REASONS_LINE = re.compile(r"^\s*REASONS:\s*(.*?)\s*$", re.MULTILINE)
_NOT_LOGGED_IN = re.compile(
    r"(?i)not logged in|please run /login|authentication_failed|"
    r"invalid api key"
)


@dataclass
class AuditInput:
    task: dict[str, Any]  # id, title, objective, owns, done [{criterion, check}]
    commit: str
    base: str
    brief: str
    diff: str
    findings: Sequence[Finding]
    checks: Sequence[CheckRun]


def instructions() -> str:
    """The auditor agent's instructions: agents/test-quality-auditor.md without frontmatter."""
    path = plugin_dir() / AUDITOR_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        msg = f"the auditor instructions {path} cannot be read: {exc}"
        raise VerifyError(
            msg,
            hint='Reinstall lo-orch, or set `[auditor] llm = "off"` to skip the auditor.',
        ) from exc
    if text.startswith("---"):
        end = text.find("\n---", 3)
        if end >= 0:
            text = text[end + 4 :]
    return text.strip()


def build_prompt(inp: AuditInput, *, structured: bool) -> str:

    diff = inp.diff
    truncated = len(diff) > MAX_DIFF_CHARS
    if truncated:
        diff = diff[:MAX_DIFF_CHARS]
    return templating.render(
        "auditor_prompt.md.j2",
        instructions=instructions(),
        task=inp.task,
        commit=inp.commit,
        base=inp.base,
        brief=inp.brief.strip(),
        diff=diff,
        truncated=truncated,
        findings=list(inp.findings),
        checks=list(inp.checks),
        structured=structured,
    )


def parse_verdict_text(text: str) -> tuple[Literal["pass", "fail"] | None, list[str]]:
    """``VERDICT:``/``REASONS:`` lines -> (status, reasons); status None when malformed."""
    verdicts = [v.upper() for v in _VERDICT_LINE.findall(text)]
    reasons_m = _REASONS_LINE.findall(text)
    reasons = [r.strip() for line in reasons_m for r in line.split(";") if r.strip()]
    if not verdicts or any(v not in ("PASS", "FAIL") for v in verdicts):
        return None, reasons
    if len(set(verdicts)) > 1:
        return None, ["contradictory VERDICT lines", *reasons]
    return ("pass" if verdicts[0] == "PASS" else "fail"), reasons


def run_auditor(inp: AuditInput, settings: Settings, *, cwd: Path, evidence: Path) -> AuditorResult:
    mode = settings.auditor.llm.strip()
    if mode == "off":
        return AuditorResult(mode="off", status="skipped", reasons=['[auditor] llm is "off"'])
    evidence.mkdir(parents=True, exist_ok=True)
    if mode == "agent":
        return _run_agent(inp, settings, cwd=cwd, evidence=evidence)
    return _run_command(inp, mode, settings, cwd=cwd, evidence=evidence)


def agent_argv(settings: Settings) -> list[str]:
    """Claude Code, headless, read-only, answering in the auditor's JSON schema."""
    command = settings.agent.command if settings.agent.kind == "claude" else "claude"
    argv = [
        *shlex.split(command),
        "-p",
        "--output-format",
        "json",
        "--json-schema",
        json.dumps(SCHEMA, separators=(",", ":")),
        "--tools",
        AUDITOR_TOOLS,
        "--allowedTools",
        AUDITOR_TOOLS,
        "--permission-mode",
        "dontAsk",
        "--no-session-persistence",
    ]
    if settings.agent.model:
        argv += ["--model", settings.agent.model]
    return argv


def _fail(mode: str, reason: str, **kw: Any) -> AuditorResult:
    return AuditorResult(mode=mode, status="fail", reasons=[reason], **kw)


def _execute(
    mode: str, argv: list[str], stdin: str, settings: Settings, *, cwd: Path, evidence: Path
) -> tuple[proc.Result, dict[str, Any]] | AuditorResult:
    """Run the auditor, keeping its output as evidence.

    A failing ``AuditorResult`` when it could not start or timed out; else its result and
    the fields every ``AuditorResult`` of this run carries.
    """
    out_path = evidence / "auditor.stdout.txt"
    common: dict[str, Any] = {"command": argv, "output_path": str(out_path)}
    try:
        result = proc.run(
            argv,
            cwd=cwd,
            env=proc.no_git_env(),
            input=stdin,
            timeout=settings.auditor.timeout,
            check=False,
        )
    except LoOrchError as exc:
        atomic_write_text(out_path, "")
        return _fail(mode, f"the auditor could not start: {exc.message}", **common)
    except OSError as exc:
        atomic_write_text(out_path, "")
        return _fail(mode, f"the auditor could not start: {exc}", **common)
    atomic_write_text(out_path, result.stdout)
    atomic_write_text(evidence / "auditor.stderr.txt", result.stderr)
    common |= {"exit_code": result.returncode, "duration": round(result.duration, 3)}
    if result.returncode is None:
        return _fail(
            mode, f"the auditor timed out after {settings.auditor.timeout:.0f} s", **common
        )
    return result, common


def _run_agent(inp: AuditInput, settings: Settings, *, cwd: Path, evidence: Path) -> AuditorResult:
    prompt = build_prompt(inp, structured=True)
    atomic_write_text(evidence / "auditor.prompt.md", prompt)
    argv = agent_argv(settings)
    ran = _execute("agent", argv, prompt, settings, cwd=cwd, evidence=evidence)
    if isinstance(ran, AuditorResult):
        return ran
    result, common = ran
    try:
        doc = json.loads(result.stdout)
    except json.JSONDecodeError:
        detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        return _fail("agent", f"the auditor's answer was not JSON: {detail[0][:200]}", **common)
    if not isinstance(doc, dict):
        return _fail("agent", "the auditor's answer was not a JSON object", **common)
    if doc.get("is_error") or result.returncode != 0:
        text = str(doc.get("result") or "")
        if _NOT_LOGGED_IN.search(text):
            # Not the task's fault and no rework can fix it: stop with a clear error.
            msg = f"the test-quality auditor (Claude Code) is not logged in: {text[:200]}"
            raise NotLoggedInError(
                msg,
                hint='Run `claude` and `/login`, or set `[auditor] llm = "off"`.',
            )
        return _fail("agent", f"the auditor failed: {text[:300]}", **common)
    structured = doc.get("structured_output")
    if isinstance(structured, dict) and structured.get("verdict") in ("PASS", "FAIL"):
        reasons = [str(r) for r in structured.get("reasons") or []]
        status: Literal["pass", "fail"] = "pass" if structured["verdict"] == "PASS" else "fail"
        return AuditorResult(mode="agent", status=status, reasons=reasons, **common)
    parsed, reasons = parse_verdict_text(str(doc.get("result") or ""))
    if parsed is None:
        return _fail("agent", "the auditor gave no verdict", **common)
    return AuditorResult(mode="agent", status=parsed, reasons=reasons, **common)


def command_input(inp: AuditInput, prompt: str | None) -> dict[str, Any]:
    """The JSON object a command-line auditor reads on stdin (contract + extensions)."""
    return {
        "task": inp.task["id"],
        "commit": inp.commit,
        "brief": inp.brief,
        "diff": inp.diff,
        "findings": [f.model_dump(mode="json") for f in inp.findings],
        "base": inp.base,
        "prompt": prompt,
    }


def _run_command(
    inp: AuditInput, line: str, settings: Settings, *, cwd: Path, evidence: Path
) -> AuditorResult:
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        return _fail("command", f"[auditor] llm is not a valid command line: {exc}")
    if not argv:
        return _fail("command", "[auditor] llm is empty")
    try:
        prompt: str | None = build_prompt(inp, structured=False)
    except VerifyError as exc:
        log.warning("auditor prompt not built: %s", exc.message)
        prompt = None
    payload = json.dumps(command_input(inp, prompt))
    atomic_write_text(evidence / "auditor.input.json", payload + "\n")
    ran = _execute("command", argv, payload, settings, cwd=cwd, evidence=evidence)
    if isinstance(ran, AuditorResult):
        return ran
    result, common = ran
    status, reasons = parse_verdict_text(result.stdout)
    if result.returncode != 0:
        return _fail(
            "command",
            f"the auditor exited with code {result.returncode}"
            + (f": {reasons[0]}" if reasons else ""),
            **common,
        )
    if status is None:
        why = (
            reasons[0]
            if reasons and reasons[0].startswith("contradictory")
            else ("no `VERDICT: PASS` or `VERDICT: FAIL` line in its output")
        )
        return _fail("command", f"the auditor's answer is malformed: {why}", **common)
    return AuditorResult(mode="command", status=status, reasons=reasons, **common)

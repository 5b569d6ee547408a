"""Reading pytest's JUnit XML: which test ran, with which outcome, failing how."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from loop_orchestrator.verify.testquality import TestRef

Outcome = Literal["passed", "failed", "error", "skipped"]

_EXC_TYPE = re.compile(r"^\s*(?:E\s+)?([A-Za-z_][\w.]*(?:Error|Exception|Exit|Warning|Failed))\b")


@dataclass(frozen=True)
class Case:
    classname: str
    name: str
    outcome: Outcome
    message: str = ""
    text: str = ""

    @property
    def exception_type(self) -> str | None:
        """``AssertionError`` for ``assert`` failures, else the exception's name if shown."""
        msg = self.message.strip()
        if msg.startswith("assert ") or msg == "assert":
            return "AssertionError"
        if msg.startswith("Failed:"):  # pytest.fail, pytest.raises' DID NOT RAISE
            return "Failed"
        m = _EXC_TYPE.match(msg)
        if m:
            return m.group(1).rsplit(".", 1)[-1]
        for line in self.text.splitlines():
            if line.startswith("E   "):
                m = _EXC_TYPE.match(line)
                if m:
                    return m.group(1).rsplit(".", 1)[-1]
                if line[4:].lstrip().startswith("assert "):
                    return "AssertionError"
        return None

    @property
    def is_assertion_failure(self) -> bool:
        return self.outcome == "failed" and self.exception_type in ("AssertionError", "Failed")


FailedBy = Literal["check", "raised", ""]


def failed_by(cases: Sequence[Case]) -> FailedBy:
    """How a run's tests failed: on a check ("check": a failed ``assert``, ``self.assert*``,
    ``pytest.fail`` or DID NOT RAISE, in the test or its fixtures), only by exceptions the
    code raised ("raised"), or not known ("": no failing case in the report)."""
    failing = [c for c in cases if c.outcome in ("failed", "error")]
    if any(c.exception_type in ("AssertionError", "Failed") for c in failing):
        return "check"
    return "raised" if failing else ""


def parse(path: Path) -> list[Case]:
    """Every testcase in a JUnit XML file (empty when the file is missing or broken)."""
    try:
        root = ET.parse(path).getroot()  # our own pytest's report
    except (OSError, ET.ParseError):
        return []
    cases = []
    for tc in root.iter("testcase"):
        outcome: Outcome = "passed"
        message = text = ""
        for child in tc:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]  # type: ignore[assignment]
                message = child.get("message", "") or ""
                text = child.text or ""
                if outcome != "skipped":
                    break
        cases.append(
            Case(tc.get("classname", "") or "", tc.get("name", "") or "", outcome, message, text)
        )
    return cases


def _dotted_module(path: str) -> str:
    return path[:-3].replace("/", ".") if path.endswith(".py") else path.replace("/", ".")


def matches(case: Case, ref: TestRef) -> bool:
    """Whether a junit case is (a parametrization of) the Python test ``ref``.

    pytest writes ``classname`` relative to its rootdir, so the case's classname must be a
    dot-aligned suffix of the full dotted path ``tests.test_x.TestClass``.
    """
    parts = ref.qualname.split("::")
    full = ".".join([_dotted_module(ref.path), *parts[:-1]])
    func = parts[-1]
    if not (case.name == func or case.name.startswith(func + "[")):
        return False
    cn = case.classname
    return bool(cn) and (full == cn or full.endswith("." + cn))


def results_for(cases: Sequence[Case], ref: TestRef, also: Sequence[TestRef] = ()) -> list[Case]:
    """The cases of ``ref``, and of the same test run as each of ``also`` (through the
    subclasses of its class: ``TestSub::test_m`` for ``test_m`` written in a base)."""
    return [c for c in cases if matches(c, ref) or any(matches(c, a) for a in also)]


def in_module(case: Case, path: str) -> bool:
    """Whether a junit case comes from the Python test module ``path`` (its classname is
    the module's dotted path, or a rootdir-relative tail of it, maybe plus a class)."""
    parts = _dotted_module(path).split(".")
    cn = case.classname
    for k in range(len(parts)):
        tail = ".".join(parts[k:])
        if cn == tail or cn.startswith(tail + "."):
            return True
    return False

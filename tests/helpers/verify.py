"""A small task to verify: a calculator with a bug, its fix and honest tests for it."""

from __future__ import annotations

import shlex
import sys

from loop_orchestrator.config import Settings
from loop_orchestrator.plan.model import DoneCheck, Task

PY = shlex.quote(sys.executable)

BASE_CALC = "def add(a, b):\n    return a - b\n"
FIXED_CALC = """def add(a, b):
    return a + b


def parse(text):
    text = text.strip()
    if not text:
        return 0
    if not text.lstrip("-").isdigit():
        raise ValueError(f"not a number: {text!r}")
    return int(text)
"""
HONEST_TESTS = """import pytest

from app import calc


def test_add():
    assert calc.add(2, 3) == 5
    assert calc.add(-2, 2) == 0


def test_parse_rejects_garbage():
    with pytest.raises(ValueError, match="not a number"):
        calc.parse("abc")


def test_parse_empty_is_zero():
    assert calc.parse("") == 0
"""


def calc_task() -> Task:
    return Task(
        id="calc",
        title="Calculator",
        objective="Fix add() and add parse()",
        owns=["app/calc.py", "tests/test_calc.py"],
        done=[
            DoneCheck(
                criterion="add and parse work", check=f"{PY} -m pytest -q tests/test_calc.py"
            ),
            DoneCheck(criterion="parse('abc') raises ValueError"),
        ],
    )


#: mutants a verification in these tests runs: the mutation check is part of every
#: verification here (a false finding of it on honest work fails a test), on a few mutants;
#: tests/test_verify_mutants.py runs it at its default bound
FEW_MUTANTS = 4


def off(*, mutants: int | None = FEW_MUTANTS) -> Settings:
    """No LLM auditor; at most ``mutants`` mutants (None: the default bound)."""
    s = Settings()
    s.auditor.llm = "off"
    if mutants is not None:
        s.verify.mutants_max = mutants
    return s

"""Stubs, placeholders, hard-coded answers, secrets and conflict markers in added lines."""

from __future__ import annotations

import random
import string
import textwrap

import pytest

from loop_orchestrator.verify.pytests import Expectation
from loop_orchestrator.verify.secrets import (
    ENTROPY_MIN_LENGTH,
    check_conflict_markers,
    check_secrets,
    shannon_entropy,
)
from loop_orchestrator.verify.stubs import check_stubs
from loop_orchestrator.verify.testquality import FileChange, check_tests


def new_file(path: str, text: str) -> FileChange:
    text = textwrap.dedent(text)
    return FileChange(path, "A", None, text, set(range(1, len(text.splitlines()) + 1)))


def stub_checks(
    path: str, text: str, expectations: list[Expectation] | None = None
) -> list[tuple[str, str, int | None]]:
    return [
        (f.check, f.severity.value, f.line)
        for f in check_stubs([new_file(path, text)], expectations or [])
    ]


def test_honest_code_has_no_stub_findings() -> None:
    source = """
        from abc import ABC, abstractmethod
        from typing import Protocol, overload

        class Store(Protocol):
            def get(self, key: str) -> str: ...

        class Base(ABC):
            @abstractmethod
            def run(self) -> None:
                raise NotImplementedError

        @overload
        def f(x: int) -> int: ...
        @overload
        def f(x: str) -> str: ...
        def f(x):
            return x * 2

        def area(w, h):
            '''Width times height.'''
            return w * h
    """
    assert stub_checks("app/shapes.py", source) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f(x):\n    raise NotImplementedError\n", ("stubs.not-implemented", "blocking", 2)),
        (
            "def f(x):\n    raise NotImplementedError('later')\n",
            ("stubs.not-implemented", "blocking", 2),
        ),
        ("def f(x):\n    pass\n", ("stubs.empty-body", "blocking", 1)),
        ("def f(x):\n    ...\n", ("stubs.empty-body", "blocking", 1)),
        (
            "class A:\n    def f(self):\n        '''Does f.'''\n",
            ("stubs.empty-body", "blocking", 2),
        ),
        ("def f(x):\n    return x  # TODO handle negatives\n", ("stubs.todo", "blocking", 2)),
        ("def f(x):\n    # FIXME wrong for 0\n    return x\n", ("stubs.todo", "blocking", 2)),
        ("NAME = 'placeholder'\n", ("stubs.placeholder", "blocking", 1)),
        ("TEXT = 'Lorem ipsum dolor'\n", ("stubs.placeholder", "blocking", 1)),
    ],
)
def test_stubs_in_python_code_are_caught(source: str, expected: tuple[str, str, int]) -> None:
    assert expected in stub_checks("app/mod.py", source)


def test_tracked_todo_and_docs_markers_are_warnings() -> None:
    assert stub_checks("app/mod.py", "X = 1  # TODO(#123): support floats\n") == [
        ("stubs.todo", "warning", 1)
    ]
    assert stub_checks("docs/notes.md", "TODO: write the guide\n") == [("stubs.todo", "warning", 1)]


def test_html_placeholder_attribute_is_not_a_placeholder() -> None:
    assert stub_checks("web/form.tsx", '<input placeholder="Email" />\n') == []
    assert stub_checks("web/app.css", "input::placeholder { color: grey; }\n") == []


def test_test_code_is_not_checked_for_stubs() -> None:
    assert stub_checks("tests/test_mod.py", "def helper():\n    pass  # TODO\n") == []


def test_unchanged_stub_is_not_blamed_on_the_task() -> None:
    text = "def old():\n    pass\n\ndef new(x):\n    return x + 1\n"
    f = FileChange("app/m.py", "M", "def old():\n    pass\n", text, {3, 4, 5})
    assert check_stubs([f], []) == []


def _expectations(test_source: str) -> list[Expectation]:
    return check_tests([new_file("tests/test_area.py", test_source)]).expectations


def test_hard_coded_return_matching_the_test_is_blocking() -> None:
    exps = _expectations("from app import area\n\ndef test_area():\n    assert area(3, 4) == 12\n")
    gamed = stub_checks("app/__init__.py", "def area(w, h):\n    return 12\n", exps)
    assert gamed == [("stubs.hardcoded-return", "blocking", 2)]
    honest = stub_checks("app/__init__.py", "def area(w, h):\n    return w * h\n", exps)
    assert honest == []


def test_special_casing_the_test_input_is_blocking() -> None:
    exps = _expectations("from app import area\n\ndef test_area():\n    assert area(3, 4) == 12\n")
    source = "def area(w, h):\n    if w == 3:\n        return 12\n    return 0\n"
    assert stub_checks("app/__init__.py", source, exps) == [("stubs.special-cased", "blocking", 2)]


def test_constant_function_without_parameters_is_legitimate() -> None:
    exps = _expectations(
        "from app import version\n\ndef test_v():\n    assert version() == '1.0'\n"
    )
    assert stub_checks("app/__init__.py", "def version():\n    return '1.0'\n", exps) == []


def test_true_is_not_one_for_the_hard_coded_check() -> None:
    exps = _expectations("from app import ok\n\ndef test_ok():\n    assert ok(5) == 1\n")
    assert stub_checks("app/__init__.py", "def ok(x):\n    return True\n", exps) == []


def test_js_stubs_and_hard_coded_returns() -> None:
    exps = check_tests(
        [new_file("src/area.test.ts", "it('area', () => { expect(area(3, 4)).toBe(12); });\n")]
    ).expectations
    source = (
        "export function area(w: number, h: number): number { return 12; }\n"
        "export function perimeter(w, h) { throw new Error('not implemented'); }\n"
    )
    found = stub_checks("src/area.ts", source, exps)
    assert ("stubs.hardcoded-return", "blocking", 1) in found
    assert ("stubs.not-implemented", "blocking", 2) in found


# secrets ------------------------------------------------------------------------------


def _random_token(alphabet: str, n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(n))


ALNUM = string.ascii_letters + string.digits
AWS_ID = "AKIA" + _random_token(string.ascii_uppercase + string.digits, 16, 1)
GH = "ghp_" + _random_token(ALNUM, 36, 2)
SLACK = "xoxb-" + _random_token(string.digits, 12, 3) + "-" + _random_token(ALNUM, 24, 4)
OPENAI = "sk-proj-" + _random_token(ALNUM, 40, 5)
ANTHROPIC = "sk-ant-api03-" + _random_token(ALNUM, 40, 6)


@pytest.mark.parametrize(
    ("line", "check"),
    [
        (f'KEY = "{AWS_ID}"', "secrets.aws"),
        ("-----BEGIN RSA PRIVATE KEY-----", "secrets.private-key"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----", "secrets.private-key"),
        (f"token: {GH}", "secrets.github"),
        (f"SLACK = '{SLACK}'", "secrets.slack"),
        (f'client = OpenAI(api_key="{OPENAI}")', "secrets.openai"),
        (f'ANTHROPIC_API_KEY="{ANTHROPIC}"', "secrets.anthropic"),
        ('password = "hunter2hunter2"', "secrets.assignment"),
        ('DB_PASSWORD: str = "s3cr3t-value"', "secrets.assignment"),
    ],
)
def test_secrets_in_code_are_blocking(line: str, check: str) -> None:
    findings = check_secrets({"app/settings.py": [(7, line)]})
    assert [(f.check, f.severity.value, f.line) for f in findings] == [(check, "blocking", 7)]
    assert AWS_ID not in findings[0].message  # the secret is not repeated in full


@pytest.mark.parametrize(
    "line",
    [
        'AWS_KEY = "AKIAIOSFODNN7EXAMPLE"',
        'password = os.environ["DB_PASSWORD"]',
        'password = ""',
        'password = "<your password>"',
        'token = "${TOKEN}"',
        'token_type = "bearer"',
        "ghp_" + "a" * 36,
        'name = "just some text here"',
        'sha = "e83c5163316f89bfbde7d9ab23ca2e25604af290"',
    ],
)
def test_honest_lines_are_not_secrets(line: str) -> None:
    assert check_secrets({"app/settings.py": [(1, line)]}) == []


def test_password_literal_in_tests_is_only_a_warning() -> None:
    findings = check_secrets({"tests/test_login.py": [(3, 'password = "correct-horse"')]})
    assert [(f.check, f.severity.value) for f in findings] == [("secrets.assignment", "warning")]


def test_high_entropy_string_is_a_warning() -> None:
    value = _random_token(ALNUM + "+/", 40, 7)
    assert shannon_entropy(value) > 4.3
    findings = check_secrets({"app/x.py": [(2, f'SIGNING = "{value}"')]})
    assert [(f.check, f.severity.value) for f in findings] == [("secrets.high-entropy", "warning")]
    assert value not in findings[0].message


def test_high_entropy_needs_the_minimum_length() -> None:
    value = "aB3dE5gH7jK9mN1pQ2rS4tU6"  # all distinct: entropy log2(24) = 4.58 bits/char
    assert len(value) == ENTROPY_MIN_LENGTH
    assert shannon_entropy(value[:-1]) > 4.3
    assert check_secrets({"app/x.py": [(2, f'SIGNING = "{value[:-1]}"')]}) == []
    findings = check_secrets({"app/x.py": [(2, f'SIGNING = "{value}"')]})
    assert [f.check for f in findings] == ["secrets.high-entropy"]


def test_lock_files_are_not_scanned_for_entropy() -> None:
    value = _random_token(ALNUM, 44, 8)
    assert (
        check_secrets({"poetry.lock": [(1, f'hash = "sha256:{value}"'), (2, f'x = "{value}"')]})
        == []
    )


def test_conflict_markers_are_blocking() -> None:
    lines = [
        (1, "<<<<<<< HEAD"),
        (2, "x = 1"),
        (3, "======="),
        (4, "x = 2"),
        (5, ">>>>>>> feature"),
    ]
    findings = check_conflict_markers({"app/x.py": lines})
    assert [(f.check, f.line) for f in findings] == [
        ("conflict-marker", 1),
        ("conflict-marker", 3),
        ("conflict-marker", 5),
    ]
    assert all(f.blocking for f in findings)


def test_markdown_heading_underline_is_not_a_conflict_marker() -> None:
    assert check_conflict_markers({"README.md": [(1, "Title"), (2, "=======")]}) == []
    assert [f.line for f in check_conflict_markers({"app/x.py": [(9, "=======")]})] == [9]

"""Finding ids: one closed set (``verify.models.CheckId``), the same as the table of
``verify/__init__.py`` that people and sessions read."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from loop_orchestrator import verify
from loop_orchestrator.verify import secrets
from loop_orchestrator.verify.models import CHECK_IDS, Finding, Severity

#: ids of checks that other branches bring, with their lines of the table
PENDING = {"tests.mutants-survive", "tests.weak-assertions", "stubs.special-cased"}
_ID_RE = re.compile(
    r"\b((?:scope|tests|stubs|secrets|done|redgreen)\.[a-z<>-]*[a-z>]|conflict-marker)"
)


def table_ids(doc: str) -> set[str]:
    """The ids the table names, ``secrets.<provider>`` as one id per provider."""
    table = doc.split("Check ids", 1)[1].split("Heuristic findings", 1)[0]
    named = set(_ID_RE.findall(table))
    assert "secrets.<provider>" in named
    providers = {check for check, _, _ in secrets._PROVIDERS}
    return (named - {"secrets.<provider>"}) | providers


def test_the_ids_are_the_table_of_the_verify_package() -> None:
    assert verify.__doc__
    assert table_ids(verify.__doc__) | PENDING == CHECK_IDS


def test_a_table_missing_an_id_differs() -> None:
    assert verify.__doc__
    doc = verify.__doc__.replace("tests.renamed W (same body) ·", "")
    assert "tests.renamed" not in table_ids(doc)


def test_a_finding_with_an_unknown_id_is_refused() -> None:
    ok = Finding(check="tests.skip", severity=Severity.BLOCKING, message="skips")
    assert Finding.model_validate_json(ok.model_dump_json()) == ok
    with pytest.raises(ValidationError, match="check"):
        Finding.model_validate({"check": "tests.skipped", "severity": "blocking", "message": "x"})

"""Independent verification of a task's commit: deterministic checks, the LLM auditor,
the verdict, reviews and rework prompts (docs/design.md section 7).

Importing this package pulls in pydantic and git helpers only; never tmux.

Check ids (B = blocking, W = warning):

scope.unowned B (a path outside ``owns``; deletions and both sides of renames count; lock
files and .gitattributes need ownership too) · scope.ci B / scope.test-config B (CI files,
conftest/pytest.ini/tox.ini/jest/vitest config, test settings inside pyproject.toml,
setup.cfg or package.json; W when the plan names the exact file) · scope.orchestration B ·
scope.interpreter-hook B (*.pth, sitecustomize, usercustomize, .venv/, venv/,
pyvenv.cfg: never, whatever owns says) ·
scope.symlink B out of the repo, W inside · scope.submodule W · scope.no-change B

tests.no-assertion B (a helper's assertions count; so does a ``try`` ending in a raise no
handler catches: a hand-written assertRaises) · tests.tautology B (W for a project object
compared with itself in a test that also compares it with other values: a reflexivity test
of its own operators) ·
tests.skip B (skip/xfail/only/skipTest/todo added; W for importorskip or a skip under
``except ImportError``: done.new-test-skipped proves whether it ran; W for a skip under a
non-constant condition when the checks' report shows every test it governs ran) ·
tests.early-exit B (W
when conditional) · tests.dead-code B · tests.swallowed-assertion B · tests.deleted B (W
when what it checked is visibly still checked: its assertions in a new or changed test, or
the change removed the code it called; ``verify.coverage``; a dispute of it is judged on the
diff: refused unless the change removes a name, parameter or value the test used) ·
tests.fewer-assertions B (W
when turned into a parametrized table, the removed assertions are in another changed
test, or they were an expected-failure branch removed whole: ``if ...: assert; continue``) ·
tests.duplicate-name B · tests.unparsable B · tests.renamed W (same body) ·
tests.broad-raises W · tests.weak-assertions W (a changed or new test whose every check,
its helpers' included, is weak: is not None, isinstance, truthiness, len > 0, hasattr,
raises(Exception), warns(Warning), a test that only imports a module; JS toBeDefined,
toBeTruthy, not.toBeNull, assert.ok, toThrow()) · tests.no-error-case W ·
tests.no-boundary-case W · tests.none-added W

stubs.not-implemented B · stubs.empty-body B · stubs.hardcoded-return B · stubs.special-cased
B (guards or literal mappings that answer the tests' literal inputs with their expected
values; base cases and enumerations kept: ``verify.specialcases``) · stubs.todo B (W
with an issue reference or in docs) · stubs.placeholder B (W in docs) · stubs.unparsable W

secrets.<provider> B (also in the printable text of binary files) · secrets.file B (a
secret file by name: SSH keys, .netrc, .npmrc, .pypirc, keystores, kubeconfig, .env...) ·
secrets.cloud-credentials B · secrets.assignment B (W in tests) · secrets.url-credentials W ·
secrets.high-entropy W · secrets.unscanned W (binary file too large to read) ·
conflict-marker B

done.failed B · done.timeout B · done.error B · done.no-report B / done.no-tests B /
done.report-failed B (a pytest check that exited 0 without a JUnit report showing tests
that ran and passed) · done.environment-changed B (the checks' site folders changed) ·
done.new-test-missing B · done.new-test-skipped B · done.new-test-failed B · redgreen.not-red W ·
redgreen.unprovable W · redgreen.not-run W

tests.mutants-survive B (the task's tests kill none of the mutants of the changed lines they
execute; ``verify.mutants``, run by ``verify.mutation``) · tests.mutants-few-killed W (fewer
than a third) · tests.mutants-unexecuted W (the tests run none of the changed lines) ·
tests.mutants-not-run W (no mutant finished within the budget) · tests.weak-assertions W,
B with redgreen.not-red or surviving mutants, or when that test passes at the parent or
fails there only because a name the change adds is missing, or a value-changing mutant
survives it, or none of its checks can fail (``list(it) is not None``), or every test of
the task is weak and only exceptions ever failed them, at the parent and under each mutant
killed (``verify.weakproof``)

Heuristic findings (tests.*, stubs.*) are disputable: the session signals
``impl_done --dispute CODE --note WHY``; the auditor settles the dispute, or without one it
is carried to Gate 2 as a warning (``verify.disputes``). Hard findings (scope.*, secrets.*,
conflict-marker, done.*) never are. Issue 14 measured all of this on real upstream commits:
tests/corpus and benchmarks/verify_corpus.py.
"""

from __future__ import annotations

from loop_orchestrator.verify.models import (
    AuditorResult,
    CheckRun,
    Finding,
    Severity,
    Verdict,
    VerificationFailed,
)
from loop_orchestrator.verify.review import (
    failing_files,
    rework_prompt,
    route_integration_failure,
    write_review,
)
from loop_orchestrator.verify.verdict import load_verdict, verify_task

__all__ = [
    "AuditorResult",
    "CheckRun",
    "Finding",
    "Severity",
    "Verdict",
    "VerificationFailed",
    "failing_files",
    "load_verdict",
    "rework_prompt",
    "route_integration_failure",
    "verify_task",
    "write_review",
]

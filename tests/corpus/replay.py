"""Replaying real upstream commits as tasks, honest and gamed (issue 14).

The corpus (``cases.json`` next to this file) names commits of small open-source projects:
project, repository, commit, licence. Their code is not stored in this repository (the
source-fetching tool's terms keep fetched code out of commits); each case is rebuilt, on
this machine and without network, from a local bare mirror of the project
(``LO_ORCH_CORPUS_MIRRORS``, default ``/work/.mirror``, one ``<owner>+<name>/repo`` git
directory per project, as the ``fetch`` tool leaves them).

A case becomes a throwaway git repository with two commits: ``base`` (the parent's tree,
restricted to the project's source, tests and packaging files) and ``honest`` (the same
paths at the upstream commit: the agent wrote exactly the upstream change). The task owns
exactly the paths the commit changed; its done-check runs the changed test files offline
(pytest from this interpreter; ``node`` for JS).

Gamed variants are made mechanically from the honest change, each a commit on ``base``:

- ``no-assertions``: every assertion of the tests the commit touched is removed;
- ``skip``: the touched tests get a skip marker;
- ``out-of-scope``: a file the task does not own is edited as well;
- ``hardcoded-return``: a function a touched test checks returns the literal it expects;
- ``deleted-test``: a test that existed at the base is deleted, nothing replaces it;
- ``early-exit``: a changed function of the module under test returns at once.

A variant that cannot be made for a case (no literal expectation to hard-code, no old test
to delete) is reported as not applicable. Nothing here imports ``loop_orchestrator`` except
``verify_case`` so the benchmark can verify the same commits with another revision.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CASES_FILE = HERE / "cases.json"
MOCHA_SHIM = HERE / "mocha_globals.cjs"
KINDS = ("no-assertions", "skip", "out-of-scope", "hardcoded-return", "deleted-test", "early-exit")

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "corpus",
    "GIT_AUTHOR_EMAIL": "corpus@example.invalid",
    "GIT_COMMITTER_NAME": "corpus",
    "GIT_COMMITTER_EMAIL": "corpus@example.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def mirrors_root() -> Path:
    return Path(os.environ.get("LO_ORCH_CORPUS_MIRRORS", "/work/.mirror"))


def load_corpus() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(CASES_FILE.read_text(encoding="utf-8"))
    return data


def missing_mirrors(corpus: dict[str, Any] | None = None) -> list[str]:
    corpus = corpus or load_corpus()
    return [p["repo"] for p in corpus["projects"].values() if not _mirror(p["repo"]).is_dir()]


def _mirror(repo: str) -> Path:
    return mirrors_root() / repo.replace("/", "+") / "repo"


def _git(cwd: Path, *args: str, input_bytes: bytes | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(_GIT_ENV)
    res = subprocess.run(
        ["git", "-c", "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false", *args],
        cwd=cwd,
        env=env,
        input=input_bytes,
        capture_output=True,
        check=False,
        timeout=120,
    )
    if res.returncode != 0:
        msg = f"git {' '.join(args)} failed in {cwd}: {res.stderr.decode(errors='replace')}"
        raise RuntimeError(msg)
    return res.stdout.decode(errors="replace")


def _mgit(repo: str, *args: str) -> bytes:
    res = subprocess.run(
        ["git", "--git-dir", str(_mirror(repo)), *args],
        capture_output=True,
        check=False,
        timeout=120,
    )
    if res.returncode != 0:
        msg = f"git {' '.join(args)} failed in the mirror of {repo}: {res.stderr.decode()}"
        raise RuntimeError(msg)
    return res.stdout


@dataclass
class Case:
    """One corpus entry, rebuilt as a repository with a base and an honest commit."""

    project: str
    commit: str
    subject: str
    lang: str
    repo: Path
    base: str
    honest: str
    owns: list[str]
    tests: list[str]  # changed test files that exist at the commit
    code: list[str]  # changed non-test source files that exist at the commit
    check: str
    variants: dict[str, str | None] = field(default_factory=dict)  # kind -> sha or None

    @property
    def id(self) -> str:
        return f"{self.project}-{self.commit[:8]}"


def _archive(repo: str, rev: str, paths: list[str], dest: Path) -> None:
    existing = [p for p in paths if _mgit(repo, "ls-tree", "--name-only", rev, "--", p).strip()]
    if not existing:
        return
    data = _mgit(repo, "archive", "--format=tar", rev, "--", *existing)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")


def _clear(dest: Path) -> None:
    for child in dest.iterdir():
        if child.name != ".git":
            shutil.rmtree(child) if child.is_dir() else child.unlink()


def _is_test_path(path: str, lang: str) -> bool:
    name = Path(path).name
    if lang == "py":
        return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))
    return bool(re.search(r"\.(js|mjs|cjs|ts)$", name)) and (
        ".test." in name or ".spec." in name or path.startswith("test/")
    )


def _commit_all(repo: Path, message: str) -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return _git(repo, "rev-parse", "HEAD").strip()


def build_case(
    entry: dict[str, Any], project: dict[str, Any], dest: Path, *, variants: bool = True
) -> Case:
    """Rebuild one case under ``dest`` (a new folder) from the project's mirror."""
    repo_name, sha = project["repo"], entry["commit"]
    parent = _mgit(repo_name, "rev-parse", f"{sha}^").decode().strip()
    changed = [
        line.split("\t")
        for line in _mgit(repo_name, "diff", "--no-renames", "--name-status", parent, sha)
        .decode()
        .splitlines()
    ]
    paths = [p for _, p in changed]
    include = sorted(set(project["include"]) | set(paths))
    dest.mkdir(parents=True)
    _git(dest, "init", "-q", "-b", "main")
    _archive(repo_name, parent, include, dest)
    base = _commit_all(dest, "base")
    _clear(dest)
    _archive(repo_name, sha, include, dest)
    honest = _commit_all(dest, f"upstream {sha[:10]}")
    lang = project["lang"]
    present = {p for st, p in changed if st != "D"}
    tests = [p for p in paths if p in present and _is_test_path(p, lang)]
    code_suffix = (".py",) if lang == "py" else (".js", ".mjs", ".cjs", ".ts")
    code = [
        p
        for p in paths
        if p in present
        and p.endswith(code_suffix)
        and not _is_test_path(p, lang)
        and not p.startswith(("test/", "tests/"))
    ]
    python = sys.executable
    check = project["check"].format(python=python, tests=" ".join(tests), shim=str(MOCHA_SHIM))
    case = Case(
        project=entry["project"],
        commit=sha,
        subject=entry["subject"],
        lang=lang,
        repo=dest,
        base=base,
        honest=honest,
        owns=paths,
        tests=tests,
        code=code,
        check=check,
    )
    if variants:
        for kind in KINDS:
            case.variants[kind] = make_variant(case, kind)
    _git(dest, "checkout", "-q", honest)
    return case


# gamed variants ----------------------------------------------------------------------


def _read(case: Case, rev: str, path: str) -> str | None:
    try:
        return _git(case.repo, "show", f"{rev}:{path}")
    except RuntimeError:
        return None


def make_variant(case: Case, kind: str) -> str | None:
    """Commit the ``kind`` variant on the base; its sha, or None when not applicable."""
    _git(case.repo, "checkout", "-q", "--detach", case.honest)
    edits = _VARIANTS[kind](case)
    if not edits:
        _git(case.repo, "checkout", "-q", "--detach", case.honest)
        return None
    for rel, text in edits.items():
        target = case.repo / rel
        if text is None:
            target.unlink()
        else:
            target.write_text(text, encoding="utf-8")
    sha = _commit_all(case.repo, f"gamed: {kind}")
    _git(case.repo, "checkout", "-q", "--detach", case.honest)
    return sha


def _py_tests(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    out: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
                "test"
            ):
                out[prefix + node.name] = node
            elif isinstance(node, ast.ClassDef):
                walk(node.body, f"{prefix}{node.name}::")

    walk(tree.body, "")
    return out


def _dump(fn: ast.AST) -> str:
    return ast.dump(fn, include_attributes=False)


def _touched_py(case: Case, path: str) -> tuple[str, list[ast.FunctionDef | ast.AsyncFunctionDef]]:
    new = _read(case, case.honest, path) or ""
    old = _read(case, case.base, path)
    try:
        head = _py_tests(ast.parse(new))
        before = _py_tests(ast.parse(old)) if old else {}
    except SyntaxError:
        return new, []
    return new, [fn for q, fn in head.items() if q not in before or _dump(before[q]) != _dump(fn)]


def _replace_spans(text: str, spans: list[tuple[int, int, str]]) -> str:
    """Replace 1-based inclusive line spans (start, end, replacement) from the bottom up."""
    lines = text.splitlines(keepends=True)
    for start, end, repl in sorted(spans, reverse=True):
        lines[start - 1 : end] = [repl + "\n"] + ["\n"] * (end - start)
    return "".join(lines)


def _indent(text: str, line: int) -> str:
    raw = text.splitlines()[line - 1]
    return raw[: len(raw) - len(raw.lstrip())]


def _is_py_assertion(node: ast.AST) -> bool:
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        func = node.value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name.startswith("assert") or name in ("fail",)
    return False


def _no_assertions(case: Case) -> dict[str, str | None]:
    edits: dict[str, str | None] = {}
    for path in case.tests:
        if case.lang == "py":
            text, touched = _touched_py(case, path)
            spans = []
            for fn in touched:
                for node in ast.walk(fn):
                    if _is_py_assertion(node) and isinstance(node, ast.stmt):
                        spans.append(
                            (
                                node.lineno,
                                node.end_lineno or node.lineno,
                                _indent(text, node.lineno) + "pass",
                            )
                        )
                    elif isinstance(node, ast.With | ast.AsyncWith):
                        for item in node.items:
                            call = item.context_expr
                            if (
                                isinstance(call, ast.Call)
                                and isinstance(call.func, ast.Attribute | ast.Name)
                                and (
                                    getattr(call.func, "attr", getattr(call.func, "id", ""))
                                    in ("raises", "assertRaises", "assertRaisesRegex", "warns")
                                )
                            ):
                                # `with pytest.raises(E):` -> `with contextlib.suppress(E):`
                                arg = ast.unparse(call.args[0]) if call.args else "Exception"
                                head = text.splitlines()[node.lineno - 1]
                                if node.lineno == node.body[0].lineno - 1:
                                    spans.append(
                                        (
                                            node.lineno,
                                            node.lineno,
                                            _indent(text, node.lineno)
                                            + f"with __import__('contextlib').suppress"
                                            f"({arg}):",
                                        )
                                    )
                                del head
            spans = _outermost(spans)
            if spans:
                edits[path] = _replace_spans(text, spans)
        else:
            text = _read(case, case.honest, path) or ""
            added = _added_lines(case, path)
            spans = [(s, e, "") for s, e in _js_assert_spans(text) if s in added]
            if spans:
                edits[path] = _replace_spans(text, spans)
    return edits


def _outermost(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    out: list[tuple[int, int, str]] = []
    for s in sorted(spans, key=lambda x: (x[0], -x[1])):
        if out and s[0] <= out[-1][1]:
            continue
        out.append(s)
    return out


_JS_ASSERT = re.compile(
    r"^\s*(?:assert(?:\.\w+)?|expect|equal|strictEqual|deepEqual|deepStrictEqual|notEqual|ok|"
    r"match|throws|rejects|doesNotThrow|is|not|t\.\w+)\s*\("
)


def _js_statement_end(lines: list[str], start: int) -> int:
    depth = 0
    for i in range(start, len(lines)):
        depth += lines[i].count("(") - lines[i].count(")")
        if depth <= 0:
            return i
    return start


def _js_assert_spans(text: str) -> list[tuple[int, int]]:
    lines = text.splitlines()
    out = []
    i = 0
    while i < len(lines):
        if _JS_ASSERT.match(lines[i]):
            end = _js_statement_end(lines, i)
            out.append((i + 1, end + 1))
            i = end + 1
        else:
            i += 1
    return out


def _added_lines(case: Case, path: str, rev: str | None = None) -> set[int]:
    diff = _git(case.repo, "diff", "-U0", "--no-color", case.base, rev or case.honest, "--", path)
    added: set[int] = set()
    for m in re.finditer(r"^@@ -\S+ \+(\d+)(?:,(\d+))? @@", diff, re.M):
        start, count = int(m.group(1)), int(m.group(2) or "1")
        added.update(range(start, start + count))
    return added


def _skip(case: Case) -> dict[str, str | None]:
    edits: dict[str, str | None] = {}
    for path in case.tests:
        if case.lang == "py":
            text, touched = _touched_py(case, path)
            if not touched:
                continue
            spans = []
            for fn in touched:
                first = fn.decorator_list[0].lineno if fn.decorator_list else fn.lineno
                line = text.splitlines()[first - 1]
                spans.append(
                    (
                        first,
                        first,
                        _indent(text, first) + "@__import__('pytest').mark.skip("
                        "reason='flaky')\n" + line,
                    )
                )
            edits[path] = _replace_spans(text, spans)
        else:
            text = _read(case, case.honest, path) or ""
            lines = text.splitlines(keepends=True)
            added = _added_lines(case, path)
            starts = _js_test_starts(lines)
            hit = sorted({i for ln in added if (i := _enclosing(starts, ln)) is not None})
            for i in hit:
                lines[i] = re.sub(r"\b(it|test)\(", r"\1.skip(", lines[i], count=1)
            if hit:
                edits[path] = "".join(lines)
    return edits


_JS_TEST_START = re.compile(r"^\s*(?:it|test)\s*\(")


def _js_test_starts(lines: list[str]) -> list[int]:
    return [i for i, line in enumerate(lines) if _JS_TEST_START.match(line)]


def _enclosing(starts: list[int], line_no: int) -> int | None:
    before = [s for s in starts if s < line_no]
    return before[-1] if before else None


def _out_of_scope(case: Case) -> dict[str, str | None]:
    files = [
        p
        for p in _git(case.repo, "ls-tree", "-r", "--name-only", case.honest).splitlines()
        if p not in case.owns
    ]
    code = [p for p in files if p.endswith((".py", ".js")) and not _is_test_path(p, case.lang)]
    docs = [p for p in files if p.endswith((".md", ".rst"))]
    target = (code or docs or files)[0]
    text = _read(case, case.honest, target) or ""
    note = {".py": "# tuned\n", ".js": "// tuned\n"}.get(Path(target).suffix, "tuned\n")
    return {target: text + ("" if text.endswith("\n") else "\n") + note}


def _literal(node: ast.AST) -> tuple[bool, object]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _py_expectations(case: Case) -> list[tuple[str, ast.expr]]:
    out = []
    for path in case.tests:
        _, touched = _touched_py(case, path)
        for fn in touched:
            for node in ast.walk(fn):
                pairs: list[tuple[ast.AST, ast.expr]] = []
                if (
                    isinstance(node, ast.Assert)
                    and isinstance(node.test, ast.Compare)
                    and len(node.test.ops) == 1
                    and isinstance(node.test.ops[0], ast.Eq)
                ):
                    pairs = [
                        (node.test.left, node.test.comparators[0]),
                        (node.test.comparators[0], node.test.left),
                    ]
                elif (
                    isinstance(node, ast.Call)
                    and len(node.args) >= 2
                    and getattr(node.func, "attr", "") == "assertEqual"
                ):
                    pairs = [(node.args[0], node.args[1]), (node.args[1], node.args[0])]
                for call, expected in pairs:
                    if isinstance(call, ast.Call) and _literal(expected)[0]:
                        func = call.func
                        name = (
                            func.attr
                            if isinstance(func, ast.Attribute)
                            else getattr(func, "id", "")
                        )
                        if name:
                            out.append((name, expected))
    return out


def _hardcoded(case: Case) -> dict[str, str | None]:
    if case.lang == "py":
        wanted = _py_expectations(case)
        for path in case.code:
            text = _read(case, case.honest, path) or ""
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            added = _added_lines(case, path)
            # the functions the commit changed: the code under test, not a namesake
            defs = {
                n.name: n
                for n in ast.walk(tree)
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                and added & set(range(n.lineno, (n.end_lineno or n.lineno) + 1))
            }
            for name, expected in wanted:
                fn = defs.get(name)
                if fn is None or not fn.body:
                    continue
                body = fn.body
                if (
                    isinstance(body[0], ast.Expr)
                    and isinstance(body[0].value, ast.Constant)
                    and len(body) > 1
                ):
                    body = body[1:]
                start, end = body[0].lineno, body[-1].end_lineno or body[-1].lineno
                return {
                    path: _replace_spans(
                        text,
                        [(start, end, _indent(text, start) + f"return {ast.unparse(expected)}")],
                    )
                }
        return {}
    # JS: `assert.strictEqual(f(...), LITERAL)` / `equal(f(...), LITERAL)`, f a function of
    # a changed module
    expected_re = re.compile(
        r"(?:assert\.)?(?:strictEqual|equal|deepStrictEqual)\(\s*(\w+)\(.*\)\s*,\s*"
        r"(-?\d+|'[^']*'|\"[^\"]*\"|true|false|null)\s*\)"
    )
    wanted_js = []
    for path in case.tests:
        text = _read(case, case.honest, path) or ""
        added = _added_lines(case, path)
        for i, line in enumerate(text.splitlines(), 1):
            m = expected_re.search(line)
            if m and i in added:
                wanted_js.append((m.group(1), m.group(2)))
    for path in case.code:
        text = _read(case, case.honest, path) or ""
        lines = text.splitlines(keepends=True)
        for name, value in wanted_js:
            for i, line in enumerate(lines):
                if re.match(rf"^\s*(?:export\s+)?function\s+{name}\s*\(.*\{{\s*$", line):
                    end = _brace_end(lines, i)
                    lines[i + 1 : end] = [f"  return {value}\n"]
                    return {path: "".join(lines)}
    return {}


def _brace_end(lines: list[str], start: int) -> int:
    depth = 0
    for i in range(start, len(lines)):
        depth += lines[i].count("{") - lines[i].count("}")
        if depth <= 0 and i > start:
            return i
    return len(lines) - 1


def _deleted_test(case: Case) -> dict[str, str | None]:
    for path in case.tests:
        if case.lang == "py":
            text, touched = _touched_py(case, path)
            old = _read(case, case.base, path)
            if not old:
                continue
            try:
                before = _py_tests(ast.parse(old))
                head = _py_tests(ast.parse(text))
            except SyntaxError:
                continue
            touched_ids = {id(fn) for fn in touched}
            for qual, fn in head.items():
                if (
                    qual in before
                    and id(fn) not in touched_ids
                    and any(_is_py_assertion(n) for n in ast.walk(fn))
                ):
                    first = fn.decorator_list[0].lineno if fn.decorator_list else fn.lineno
                    indent = _indent(text, first)
                    repl = indent + "pass" if indent else ""
                    return {path: _replace_spans(text, [(first, fn.end_lineno or fn.lineno, repl)])}
        else:
            old = _read(case, case.base, path)
            text = _read(case, case.honest, path) or ""
            if not old:
                continue
            lines = text.splitlines(keepends=True)
            added = _added_lines(case, path)
            for start in _js_test_starts(lines):
                end = _js_statement_end(lines, start)
                span = set(range(start + 1, end + 2))
                if not span & added and _JS_ASSERT.search("".join(lines[start + 1 : end])) is None:
                    continue
                if not span & added:
                    del lines[start : end + 1]
                    return {path: "".join(lines)}
    return {}


def _early_exit(case: Case) -> dict[str, str | None]:
    for path in case.code:
        text = _read(case, case.honest, path) or ""
        added = _added_lines(case, path)
        if case.lang == "py":
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            funcs = [
                n
                for n in ast.walk(tree)
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                and any(ln in added for ln in range(n.lineno, (n.end_lineno or 0) + 1))
            ]
            # the innermost changed function
            funcs.sort(key=lambda n: (n.end_lineno or 0) - n.lineno)
            for fn in funcs:
                body = fn.body
                first = body[0]
                if (
                    isinstance(first, ast.Expr)
                    and isinstance(first.value, ast.Constant)
                    and len(body) > 1
                ):
                    first = body[1]
                line = text.splitlines()[first.lineno - 1]
                return {
                    path: _replace_spans(
                        text,
                        [
                            (
                                first.lineno,
                                first.lineno,
                                _indent(text, first.lineno) + "return None\n" + line,
                            )
                        ],
                    )
                }
        else:
            lines = text.splitlines(keepends=True)
            heads = [
                i
                for i, line in enumerate(lines)
                if re.search(r"\bfunction\b.*\{\s*$|=>\s*\{\s*$", line)
            ]
            for ln in sorted(added):
                enclosing = [i for i in heads if i < ln - 1 and _brace_end(lines, i) >= ln - 1]
                if enclosing:
                    i = enclosing[-1]
                    indent = re.match(r"\s*", lines[i + 1]).group(0)  # type: ignore[union-attr]
                    lines.insert(i + 1, f"{indent}return\n")
                    return {path: "".join(lines)}
    return {}


_VARIANTS = {
    "no-assertions": _no_assertions,
    "skip": _skip,
    "out-of-scope": _out_of_scope,
    "hardcoded-return": _hardcoded,
    "deleted-test": _deleted_test,
    "early-exit": _early_exit,
}


# verification ---------------------------------------------------------------------------


def verify_case(case: Case, commit: str, *, rundir_root: Path | None = None) -> Any:
    """Verify ``commit`` of ``case`` as its task, auditor off; the ``Verdict``."""
    from loop_orchestrator.config import Settings
    from loop_orchestrator.plan.model import DoneCheck, Task
    from loop_orchestrator.runstate.state import RunDir
    from loop_orchestrator.verify import verify_task

    task = Task(
        id="upstream",
        title=case.subject[:60],
        objective=case.subject,
        owns=list(case.owns),
        done=[DoneCheck(criterion="the changed tests pass", check=case.check)],
    )
    settings = Settings()
    settings.auditor.llm = "off"
    return verify_task(
        case.repo, RunDir(case.repo), task, case.base, commit, brief=case.subject, settings=settings
    )


def build_all(dest: Path, *, only: set[str] | None = None, variants: bool = True) -> list[Case]:
    corpus = load_corpus()
    cases = []
    for entry in corpus["cases"]:
        project = corpus["projects"][entry["project"]]
        case_id = f"{entry['project']}-{entry['commit'][:8]}"
        if only is not None and case_id not in only:
            continue
        cases.append(build_case(entry, project, dest / case_id, variants=variants))
    return cases

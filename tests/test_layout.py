"""The tests' own layout: what tests share is in tests/helpers/, conftest.py holds only
fixtures and hooks, and every wait goes through the one helper (helpers/wait.py).

Each rule is a function from a module's source to its violations, checked over the tree
and against a planted violation (so a rule that finds nothing cannot pass unnoticed).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import cast

import pytest
from helpers.schedule import check_groups_kept, longest_first

TESTS = Path(__file__).resolve().parent
WAIT_HELPER = TESTS / "helpers" / "wait.py"
#: the names of the one wait helper (helpers/wait.py)
WAITS = {"wait_for", "wait_in_app"}
#: calls that only pass time
SLEEPS = {"sleep", "pause"}


@functools.cache
def _modules() -> list[Path]:
    """Every Python module of the tests (the programs under fixtures/ are test data)."""
    return sorted(p for p in TESTS.rglob("*.py") if "fixtures" not in p.relative_to(TESTS).parts)


def _imported(tree: ast.Module) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def import_violations(source: str) -> list[str]:
    """Imports of conftest or of a test module (``test_*``, or the old top-level
    ``served``): what they share belongs in tests/helpers/."""
    out = []
    for line, name in _imported(ast.parse(source)):
        top = name.split(".")[0]
        if top in ("conftest", "served") or top.startswith("test_"):
            out.append(f"line {line}: imports {name}; import shared code from tests/helpers/")
    return out


def conftest_violations(source: str) -> list[str]:
    """What conftest.py holds besides fixtures and pytest hooks (and its docstring and
    imports): a plain function, a class or a constant."""
    out = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef | ast.Assign | ast.AnnAssign):
            out.append(f"line {node.lineno}: a class or constant; move it to helpers")
            continue
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        decorators = [ast.unparse(d) for d in node.decorator_list]
        fixture = any(d.startswith(("pytest.fixture", "fixture")) for d in decorators)
        if not fixture and not node.name.startswith("pytest_"):
            out.append(f"line {node.lineno}: {node.name} is no fixture or hook; move it to helpers")
    return out


def _calls(node: ast.AST) -> set[str]:
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            if isinstance(func, ast.Name):
                names.add(func.id)
            elif isinstance(func, ast.Attribute):
                names.add(func.attr)
    return names


def _only_passes_time(body: list[ast.stmt]) -> bool:
    """A loop body that only sleeps and checks: a wait written out by hand."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            if not (_only_passes_time(stmt.body) and _only_passes_time(stmt.orelse)):
                return False
        elif isinstance(stmt, ast.Expr):
            call = stmt.value.value if isinstance(stmt.value, ast.Await) else stmt.value
            if not (isinstance(call, ast.Call) and _calls(call) & SLEEPS):
                return False
        elif not isinstance(
            stmt, ast.Raise | ast.Assert | ast.Break | ast.Continue | ast.Return | ast.Pass
        ):
            return False
    return True


def second_waits(source: str) -> list[str]:
    """A second way of waiting: the package's ``wait_until`` used in a test, a function
    named wait_…/until… that does not wait through the helper, or a hand-written loop that
    only sleeps until a ``time.monotonic()`` deadline."""
    tree = ast.parse(source)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "wait_until" for a in node.names):
            out.append(f"line {node.lineno}: imports wait_until; use helpers.wait.wait_for")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            waits_by_name = node.name.lower().lstrip("_").split("_")[0] in ("wait", "until")
            if waits_by_name and not node.name.startswith("test_") and not _calls(node) & WAITS:
                out.append(f"line {node.lineno}: {node.name} waits without helpers.wait.wait_for")
        elif (
            isinstance(node, ast.While)
            and "monotonic" in _calls(node)
            and _only_passes_time(node.body)
        ):
            out.append(f"line {node.lineno}: a deadline loop; use helpers.wait.wait_for")
    return out


def _relative(path: Path) -> str:
    return path.relative_to(TESTS.parent).as_posix()


def test_no_test_imports_conftest_or_another_test_module() -> None:
    found = {
        _relative(p): v
        for p in _modules()
        if (v := import_violations(p.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_conftest_holds_only_fixtures_and_hooks() -> None:
    assert conftest_violations((TESTS / "conftest.py").read_text(encoding="utf-8")) == []


def test_every_wait_goes_through_the_one_helper() -> None:
    found = {
        _relative(p): v
        for p in _modules()
        if p != WAIT_HELPER and (v := second_waits(p.read_text(encoding="utf-8")))
    }
    assert found == {}
    # and the helper is what they call: it is used, and it fails naming what it waited for
    uses = sum(p.read_text(encoding="utf-8").count("wait_for(") for p in _modules())
    assert uses > 50


@pytest.mark.parametrize(
    "source",
    [
        "from conftest import git\n",
        "import conftest\n",
        "from test_claude_runs import only\n",
        "def f():\n    from test_hooks import env_for\n",
        "from served import serve\n",
    ],
)
def test_an_import_of_conftest_or_a_test_module_is_caught(source: str) -> None:
    assert import_violations(source)


def test_the_helpers_package_may_be_imported() -> None:
    assert import_violations("from helpers.runs import only\nimport helpers.wait\n") == []


@pytest.mark.parametrize(
    "source",
    [
        "def git(cwd, *args):\n    return ''\n",
        "@pytest.fixture\ndef ok():\n    pass\ndef helper():\n    pass\n",
        "STATUS_KEYS = ('task', 'phase')\n",
        "REPO_ROOT: Path = Path(__file__).parent\n",
        "class Harness:\n    pass\n",
    ],
)
def test_a_plain_function_class_or_constant_in_conftest_is_caught(source: str) -> None:
    assert conftest_violations(source)


def test_fixtures_and_hooks_are_what_conftest_may_hold() -> None:
    source = (
        "@pytest.fixture(autouse=True)\ndef a():\n    pass\n"
        "@pytest.fixture\ndef b():\n    pass\n"
        "def pytest_collection_modifyitems(config, items):\n    pass\n"
    )
    assert conftest_violations(source) == []


SECOND_HELPERS = {
    "the package's wait_until": "from loop_orchestrator.sessions.backend import wait_until\n",
    "a helper of its own, argument order swapped": (
        "def wait_for_it(what, predicate, timeout=20):\n"
        "    if not poll(predicate, timeout):\n"
        "        raise AssertionError(what)\n"
    ),
    "an async one": (
        "async def until(pilot, pred, timeout):\n"
        "    deadline = time.monotonic() + timeout\n"
        "    while not pred():\n"
        "        if time.monotonic() > deadline:\n"
        "            raise AssertionError('late')\n"
        "        await pilot.pause(0.1)\n"
    ),
    "a poll that returns when done": (
        "def test_y(report):\n"
        "    deadline = time.monotonic() + 60\n"
        "    while time.monotonic() < deadline:\n"
        "        if report.exists():\n"
        "            break\n"
        "        time.sleep(0.1)\n"
    ),
    "a deadline loop inside a test": (
        "def test_x(report):\n"
        "    deadline = time.monotonic() + 60\n"
        "    while not report.exists() and time.monotonic() < deadline:\n"
        "        time.sleep(0.1)\n"
        "    assert report.exists()\n"
    ),
}


@pytest.mark.parametrize("source", SECOND_HELPERS.values(), ids=SECOND_HELPERS.keys())
def test_a_second_way_of_waiting_is_caught(source: str) -> None:
    assert second_waits(source)


def test_waiting_through_the_helper_and_loops_that_work_are_allowed() -> None:
    source = (
        "def wait_stops(h, count):\n"
        "    wait_for(lambda: h.stops() >= count, 20, f'{count} Stop hooks')\n"
        "def attack(deadline):\n"
        "    while time.monotonic() < deadline:\n"
        "        st = read_status()\n"
        "        if st.pane_id:\n"
        "            answer_dialog(st.pane_id)\n"
        "        time.sleep(0.2)\n"
        "def test_waiting_for_a_person_is_reported():\n"
        "    pass\n"
    )
    assert second_waits(source) == []


class _Item:
    """What ``longest_first`` reads of a collected test: its module and its marks."""

    def __init__(self, module: str, *marks: pytest.MarkDecorator) -> None:
        self.path = Path(module)
        self.marks = {m.name: m.mark for m in marks}

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return self.marks.get(name)


def test_the_ray_group_then_the_slowest_modules_are_handed_out_first() -> None:
    ray = pytest.mark.xdist_group("ray")
    slow = pytest.mark.slow
    items = [
        _Item("test_a.py"),  # fast only: last
        _Item("test_b.py", slow),
        _Item("test_b.py"),  # stays with its module, in its place
        _Item("test_c.py", slow),
        _Item("test_c.py", slow),
        _Item("test_d.py", slow, ray),
        _Item("test_e.py", slow, ray),
        _Item("test_e.py", slow, ray),  # Ray modules keep their own order
    ]
    longest_first(cast("list[pytest.Item]", items))
    got = [(str(i.path), sorted(i.marks)) for i in items]
    assert got == [
        ("test_d.py", ["slow", "xdist_group"]),
        ("test_e.py", ["slow", "xdist_group"]),
        ("test_e.py", ["slow", "xdist_group"]),
        ("test_c.py", ["slow"]),
        ("test_c.py", ["slow"]),
        ("test_b.py", ["slow"]),
        ("test_b.py", []),
        ("test_a.py", []),
    ]


def test_a_run_whose_workers_lost_the_ray_group_stops_before_any_test() -> None:
    """What pytest 9.2 with pytest-xdist 3.8 did: the workers' node ids came without @ray,
    and the Ray tests ran on both workers at once (a worker died, CI ran out of time)."""
    kept = ["tests/test_cluster_doctor.py::test_one@ray", "tests/test_plan.py::test_two"]
    check_groups_kept("loadgroup", kept)
    check_groups_kept("load", ["tests/test_cluster_terminal.py::test_one"])  # no groups asked
    lost = ["tests/test_plan.py::test_two", "tests/test_cluster_terminal.py::test_one[x]"]
    with pytest.raises(pytest.exit.Exception, match=r"test_one\[x\] has no @ray"):
        check_groups_kept("loadgroup", lost)

"""Plan validation (docs/design.md section 4): every problem at once, each naming task and field."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from loop_orchestrator.errors import PlanError
from loop_orchestrator.plan import schedule
from loop_orchestrator.plan import validation as plan_checks
from loop_orchestrator.plan.globs import path_matches, patterns_overlap
from loop_orchestrator.plan.loading import load_plan, validate_plan_data
from loop_orchestrator.plan.model import DoneCheck, Plan, plan_hash
from loop_orchestrator.plan.schedule import dependencies, waves
from loop_orchestrator.plan.validation import semantic_problems

REPO_ROOT = Path(__file__).resolve().parent.parent


def task(tid: str, **fields: Any) -> dict[str, Any]:
    """A valid task dict owning its own file; ``fields`` override or add keys."""
    data: dict[str, Any] = {
        "id": tid,
        "objective": f"build {tid}",
        "owns": [f"src/{tid}.py"],
        "done": [{"criterion": f"{tid} works", "check": f"pytest -q tests/test_{tid}.py"}],
    }
    data.update(fields)
    return data


def plan_data(*tasks: dict[str, Any], **fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"goal": "Build a thing", "tasks": list(tasks)}
    data.update(fields)
    return data


def problems_of(raw: Any) -> list[str]:
    """The problems validation reports (fails the test when the plan is accepted)."""
    with pytest.raises(PlanError) as info:
        validate_plan_data(raw, "plan.yaml")
    assert info.value.source == "plan.yaml"
    assert info.value.problems, "a PlanError must carry at least one problem"
    return info.value.problems


def only_problem(raw: Any) -> str:
    problems = problems_of(raw)
    assert len(problems) == 1, problems
    return problems[0]


# valid plans ----------------------------------------------------------------------------


def test_valid_plan_loads_with_defaults() -> None:
    plan = validate_plan_data(plan_data(task("a"), task("b", depends_on=["a"])))
    assert [t.id for t in plan.tasks] == ["a", "b"]
    b = plan.task("b")
    assert b.complexity == "medium"
    assert b.produces == [] and b.consumes == []
    assert plan.done_tasks == []
    assert plan.run_name == "build-a-thing"
    with pytest.raises(KeyError):
        plan.task("zzz")


def test_example_plan_is_valid_and_has_three_waves() -> None:
    plan = load_plan(REPO_ROOT / "examples" / "plan.yaml")
    assert len(plan.tasks) == 4
    assert waves(plan, plan.concurrency or 4) == [
        ["note-model"],
        ["note-store", "note-search"],
        ["notes-cli"],
    ]
    # a consumes edge, not only depends_on
    assert dependencies(plan)["note-store"] == ["note-model"]
    assert any(t.consumes for t in plan.tasks)
    assert all(
        dc.check and dc.argv()[0] == "pytest" for t in plan.tasks for dc in t.done if dc.check
    )


def test_example_tool_profile_is_seed_shaped() -> None:
    data = json.loads((REPO_ROOT / "examples" / "tools.example.json").read_text())
    assert isinstance(data, dict) and data
    assert set(data) <= {"intake", "knowledge", "tacit", "plan", "verify", "explore", "design"}
    for role, fields in data.items():
        assert isinstance(fields, dict), role
        assert fields.get("kind"), role


@pytest.mark.parametrize("tid", ["a", "0", "user-model", "a" * 40, "9-lives", "x-"])
def test_valid_ids(tid: str) -> None:
    plan = validate_plan_data(plan_data(task(tid)))
    assert plan.tasks[0].id == tid


def test_check_may_be_omitted_for_a_prose_criterion() -> None:
    plan = validate_plan_data(
        plan_data(
            task(
                "a",
                done=[
                    {"criterion": "runs", "check": "pytest -q"},
                    {"criterion": "reads well"},
                ],
            )
        )
    )
    assert plan.tasks[0].done[1].check is None


@pytest.mark.parametrize(
    "check",
    [
        "python -c 'print(1); print(2)'",  # quoted: an argument, not shell syntax
        "pytest -q tests/test_a.py::test_x[1-2]",
        "pytest -k 'a or b'",
        "npm test -- --grep 'x|y'",
    ],
)
def test_checks_with_quoted_punctuation_are_accepted(check: str) -> None:
    plan = validate_plan_data(plan_data(task("a", done=[{"criterion": "c", "check": check}])))
    assert plan.tasks[0].done[0].check == check


def test_done_check_argv_is_an_argument_list() -> None:
    assert DoneCheck(criterion="c", check="pytest -k 'a or b' -q").argv() == [
        "pytest",
        "-k",
        "a or b",
        "-q",
    ]
    assert DoneCheck(criterion="c").argv() == []


# ids ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tid", ["; rm -rf /", "../x", "User-Model", "a" * 41, "-lead", "a_b", "a b", "a\n", "", "é"]
)
def test_malformed_ids_are_reported_with_field_and_fix(tid: str) -> None:
    problems = problems_of(
        plan_data(task(tid, owns=["src/only.py"], done=[{"criterion": "c", "check": "pytest -q"}]))
    )
    assert problems == [
        f"task {tid!r}, field id: invalid id; use 1-40 characters of a-z, 0-9 and -, "
        "starting with a letter or digit (e.g. `user-model`)"
    ]


def test_reserved_id_staging() -> None:
    problem = only_problem(plan_data(task("staging")))
    assert problem.startswith("task 'staging', field id:")
    assert "reserved" in problem


def test_duplicate_ids_among_tasks_and_done_tasks() -> None:
    problems = problems_of(
        plan_data(
            task("a"),
            task("a", owns=["src/other.py"]),
            task("b"),
            done_tasks=[{"id": "b", "produces": ["B"]}],
        )
    )
    assert any(p.startswith("task 'a', field id: duplicate id") for p in problems), problems
    assert any(p.startswith("done task 'b', field id: duplicate id") for p in problems), problems
    assert all("unique" in p for p in problems if "duplicate id" in p)


def test_invalid_run_name() -> None:
    problem = only_problem(plan_data(task("a"), name="My Run"))
    assert problem.startswith("field name: 'My Run' is not a valid run name")


# references and cycles ------------------------------------------------------------------


def test_unknown_depends_on_and_consumes() -> None:
    problems = problems_of(
        plan_data(
            task("a", depends_on=["ghost"]),
            task("b", consumes=["Nothing"]),
        )
    )
    assert len(problems) == 2, problems
    assert problems[0].startswith("task 'a', field depends_on: unknown task 'ghost'")
    assert "known tasks: a, b" in problems[0]
    assert problems[1].startswith("task 'b', field consumes: no task produces 'Nothing'")
    assert "produces" in problems[1]  # says how to fix it


def test_self_dependency_and_own_output() -> None:
    problems = problems_of(
        plan_data(
            task("a", depends_on=["a"]),
            task("b", produces=["B"], consumes=["B"]),
        )
    )
    assert "task 'a', field depends_on: a task cannot depend on itself; remove it" in problems
    assert "task 'b', field consumes: consumes its own output 'B'; remove it" in problems


def test_cycle_path_is_printed() -> None:
    problems = problems_of(
        plan_data(
            task("a", depends_on=["c"]),
            task("b", depends_on=["a"], produces=["B"]),
            task("c", consumes=["B"]),  # the cycle closes through a consumes edge
            task("d", depends_on=["e"]),
            task("e"),
        )
    )
    assert problems == [
        "dependency cycle: a -> c -> b -> a; break it by removing one depends_on/consumes edge"
    ]


def test_long_known_task_list_is_shortened() -> None:
    tasks = [task(f"t{i:03d}") for i in range(30)] + [task("x", depends_on=["nope"])]
    problem = only_problem(plan_data(*tasks))
    assert "(and 19 more)" in problem
    assert len(problem) < 400


def test_output_produced_twice() -> None:
    problems = problems_of(
        plan_data(
            task("a", produces=["User"]),
            task("b", produces=["User"]),
            task("c", produces=["get_db"]),
            done_tasks=[{"id": "db", "produces": ["get_db"]}],
        )
    )
    assert len(problems) == 2, problems
    assert problems[0].startswith(
        "task 'b', field produces: output 'User' is also produced by 'a'; each output has one "
        "producer"
    )
    assert problems[1].startswith(
        "done task 'db', field produces: output 'get_db' is also produced by 'c'"
    )


# paths ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/etc/passwd", "is absolute"),
        ("C:\\win\\x.py", "is absolute"),
        ("../outside.py", "contains `..`"),
        ("src/../../x.py", "contains `..`"),
        (".orchestration/status/a.json", "is under .orchestration/"),
        ("./.orchestration/plan.json", "is under .orchestration/"),
        (".worktrees/a/app.py", "is under .worktrees/"),
        (".git/config", "is under .git/"),
        ("", "is empty"),
        ("   ", "is empty"),
    ],
)
def test_bad_owned_paths(path: str, why: str) -> None:
    problem = only_problem(plan_data(task("a", owns=["src/ok.py", path])))
    assert problem.startswith(f"task 'a', field owns[1]: {path!r} {why}"), problem


def test_empty_owns() -> None:
    problem = only_problem(plan_data(task("a", owns=[])))
    assert problem.startswith("task 'a', field owns: is empty")


# ownership between tasks that could run at the same time ---------------------------------


@pytest.mark.parametrize(
    ("a_owns", "b_owns"),
    [
        (["app/models.py"], ["app/models.py"]),
        (["app/models.py"], ["app/*.py"]),
        (["app/models.py"], ["app/"]),
        (["app/models.py"], ["app/**"]),
        (["app/sub/deep/x.py"], ["**/x.py"]),
        (["app/*.py"], ["app/m*"]),
        (["./app/models.py"], ["app/models.py"]),
        (["docs/a.md", "app/x.py"], ["lib/**", "app/x.py"]),
        (["*.md"], ["README.md"]),
    ],
)
def test_overlapping_ownership_between_independent_tasks(
    a_owns: list[str], b_owns: list[str]
) -> None:
    problem = only_problem(plan_data(task("a", owns=a_owns), task("b", owns=b_owns)))
    assert problem.startswith("tasks 'a' and 'b', field owns:"), problem
    assert "could run at the same time" in problem
    assert "depend on the other" in problem


@pytest.mark.parametrize(
    ("a_owns", "b_owns"),
    [
        (["app/models.py"], ["app/views.py"]),
        (["app/a/*.py"], ["app/b/*.py"]),
        (["*.md"], ["*.py"]),
        (["app/models.py"], ["app/models.pyi"]),
        (["tests/test_a*.py"], ["tests/test_b*.py"]),
        (["app/models.py"], ["app/models.py/x"]),
    ],
)
def test_disjoint_ownership_is_accepted(a_owns: list[str], b_owns: list[str]) -> None:
    plan = validate_plan_data(plan_data(task("a", owns=a_owns), task("b", owns=b_owns)))
    assert waves(plan, 4) == [["a", "b"]]


@pytest.mark.parametrize(
    "edges",
    [
        {"b": {"depends_on": ["a"]}},
        {"a": {"produces": ["A"]}, "b": {"consumes": ["A"]}},
        {"b": {"depends_on": ["m"]}, "m": {"depends_on": ["a"]}},  # transitive
    ],
)
def test_shared_paths_are_allowed_when_one_depends_on_the_other(
    edges: dict[str, dict[str, Any]],
) -> None:
    tasks = [
        task(tid, owns=["app/shared.py", f"app/{tid}.py"], **edges.get(tid, {}))
        for tid in ("a", "m", "b")
    ]
    # m and a/b share app/shared.py too: m must be ordered with both (a -> m -> b or edges)
    if "m" not in edges:
        tasks[1]["owns"] = ["app/m.py"]
    plan = validate_plan_data(plan_data(*tasks))
    assert {tuple(w) for w in waves(plan, 4)} != {("a", "m", "b")}


def test_each_conflicting_pair_is_reported_once() -> None:
    problems = problems_of(
        plan_data(
            task("a", owns=["x/1.py", "x/2.py"]),
            task("b", owns=["x/*.py", "x/2.py"]),
            task("c", owns=["y.py"]),
        )
    )
    assert len(problems) == 1, problems


# done-checks ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("check", "token"),
    [
        ("pytest || true", "||"),
        ("pytest -q; rm -rf /", ";"),
        ("pytest -q ;echo", ";"),
        ("pytest | tee out", "|"),
        ("pytest|tee out", "|"),
        ("make && pytest", "&&"),
        ("pytest > out.txt", ">"),
        ("pytest 2>&1", ">&"),
        ("pytest &", "&"),
        ("echo $(whoami)", "$"),
        ("echo `whoami`", "`"),
    ],
)
def test_shell_syntax_in_checks_is_refused(check: str, token: str) -> None:
    problem = only_problem(plan_data(task("a", done=[{"criterion": "c", "check": check}])))
    assert problem.startswith(f"task 'a', field done[0].check: {check!r} uses shell syntax"), (
        problem
    )
    assert "argument list" in problem


@pytest.mark.parametrize(
    ("check", "why"),
    [("", "is empty"), ("   ", "is empty"), ("pytest 'unterminated", "cannot be parsed")],
)
def test_empty_or_unparsable_checks(check: str, why: str) -> None:
    problem = only_problem(plan_data(task("a", done=[{"criterion": "c", "check": check}])))
    assert problem.startswith(f"task 'a', field done[0].check: {check!r} {why}"), problem


def test_no_done_criteria_and_empty_fields() -> None:
    problems = problems_of(
        plan_data(
            task("a", done=[]),
            task("b", objective=" ", done=[{"criterion": " ", "check": "x"}]),
            goal="  ",
        )
    )
    assert "field goal: is empty; say in one sentence what the run builds" in problems
    assert any(p.startswith("task 'a', field done: no done criteria") for p in problems)
    assert "task 'b', field done[0].criterion: is empty" in problems
    assert any(p.startswith("task 'b', field objective: is empty") for p in problems)


def test_no_tasks() -> None:
    assert only_problem(plan_data()).startswith("field tasks: the plan has no tasks")


# unknown keys and wrong types ------------------------------------------------------------


def test_unknown_keys_anywhere_are_errors() -> None:
    raw = plan_data(
        task("a", depend_on=["b"], done=[{"criterion": "c", "chek": "pytest"}]),
        task("b"),
        concurency=3,
        done_tasks=[{"id": "db", "produces": ["get_db"], "owns": ["db.py"]}],
    )
    problems = problems_of(raw)
    unknown = "unknown key (a typo? see the plan format in README)"
    assert f"field concurency: {unknown}" in problems
    assert f"task 'a', field depend_on: {unknown}" in problems
    assert f"task 'a', field done.0.chek: {unknown}" in problems
    assert f"done task 'db', field owns: {unknown}" in problems


def test_wrong_types_are_reported_with_location() -> None:
    problems = problems_of(plan_data(task("a", owns="app.py", complexity="huge"), concurrency=0))
    assert any(p.startswith("task 'a', field owns:") for p in problems), problems
    assert any(p.startswith("task 'a', field complexity:") for p in problems), problems
    assert any(p.startswith("field concurrency:") for p in problems), problems


def test_missing_required_fields() -> None:
    problems = problems_of({"tasks": [{"id": "a"}]})
    assert "field goal: required but missing" in problems
    for field in ("objective", "owns", "done"):
        assert f"task 'a', field {field}: required but missing" in problems


@pytest.mark.parametrize("tasks", [5, "a", None, {"a": 1}])
def test_tasks_of_the_wrong_type_do_not_crash(tasks: Any) -> None:
    problems = problems_of({"goal": "g", "tasks": tasks, "done_tasks": 7})
    assert any(p.startswith("field tasks:") for p in problems), problems


def test_semantic_problems_still_reported_next_to_structural_ones() -> None:
    problems = problems_of(
        plan_data(
            task("a", typo=1),
            task("b", depends_on=["ghost"]),
            task("c", owns=["/abs"]),
        )
    )
    assert "task 'a', field typo: unknown key (a typo? see the plan format in README)" in problems
    assert any(p.startswith("task 'b', field depends_on: unknown task 'ghost'") for p in problems)
    assert any(p.startswith("task 'c', field owns[0]: '/abs' is absolute") for p in problems)


def test_a_typo_does_not_hide_the_other_problems_of_its_task() -> None:
    problems = problems_of(
        plan_data(
            task(
                "a",
                typo=1,
                owns=["/abs.py"],
                depends_on=["ghost"],
                done=[{"criterion": "c", "check": "pytest || true", "chek": "x"}],
            ),
        )
    )
    assert "task 'a', field typo: unknown key (a typo? see the plan format in README)" in problems
    assert "task 'a', field done.0.chek: unknown key (a typo? see the plan format in README)" in (
        problems
    )
    assert any(p.startswith("task 'a', field owns[0]: '/abs.py' is absolute") for p in problems)
    assert any(p.startswith("task 'a', field depends_on: unknown task 'ghost'") for p in problems)
    assert any(
        p.startswith("task 'a', field done[0].check: 'pytest || true' uses shell") for p in problems
    )
    assert len(problems) == 5, problems


def test_a_task_that_failed_to_parse_is_still_a_known_dependency() -> None:
    problems = problems_of(
        plan_data(
            task("a", owns="not-a-list", produces=["A"]),
            task("b", depends_on=["a"]),
            task("c", consumes=["A"]),
        )
    )
    assert len(problems) == 1, problems
    assert problems[0].startswith("task 'a', field owns:")


def test_every_problem_is_reported_at_once() -> None:
    raw = plan_data(
        task("Bad_Id"),
        task("dup"),
        task("dup", owns=["src/dup2.py"]),
        task("refs", depends_on=["ghost"], consumes=["Nope"]),
        task("p1", produces=["Out"]),
        task("p2", produces=["Out"]),
        task("paths", owns=["/abs.py", "../up.py", ".orchestration/x", ".worktrees/y"]),
        task("own1", owns=["shared/x.py"]),
        task("own2", owns=["shared/*.py"]),
        task(
            "chk",
            done=[{"criterion": "c", "check": "pytest || true"}, {"criterion": "d", "check": ""}],
        ),
    )
    problems = problems_of(raw)
    expected_starts = [
        "task 'Bad_Id', field id: invalid id",
        "task 'dup', field id: duplicate id",
        "task 'refs', field depends_on: unknown task 'ghost'",
        "task 'refs', field consumes: no task produces 'Nope'",
        "task 'p2', field produces: output 'Out' is also produced by 'p1'",
        "task 'paths', field owns[0]: '/abs.py' is absolute",
        "task 'paths', field owns[1]: '../up.py' contains `..`",
        "task 'paths', field owns[2]: '.orchestration/x' is under .orchestration/",
        "task 'paths', field owns[3]: '.worktrees/y' is under .worktrees/",
        "tasks 'own1' and 'own2', field owns:",
        "task 'chk', field done[0].check: 'pytest || true' uses shell syntax",
        "task 'chk', field done[1].check: '' is empty",
    ]
    for start in expected_starts:
        assert any(p.startswith(start) for p in problems), (start, problems)
    # The error message shown to the user lists every problem too.
    with pytest.raises(PlanError) as info:
        validate_plan_data(raw, "plan.yaml")
    message = info.value.render()
    assert message.startswith(f"plan.yaml: {len(problems)} problems in the plan")
    for p in problems:
        assert f"  - {p}" in message
    assert "nothing was written" in message


# done tasks -----------------------------------------------------------------------------


def test_done_tasks_seed_outputs_without_edges_or_sessions() -> None:
    plan = validate_plan_data(
        plan_data(
            task("api", consumes=["get_db"], depends_on=["db"]),
            task("ui", depends_on=["api"]),
            done_tasks=[
                {
                    "id": "db",
                    "produces": ["get_db"],
                    "signatures": {"get_db": "def get_db() -> Connection   # app/db.py"},
                }
            ],
        )
    )
    assert dependencies(plan) == {"api": [], "ui": ["api"]}
    assert waves(plan, 4) == [["api"], ["ui"]]
    assert [d.id for d in plan.done_tasks] == ["db"]
    assert plan.done_tasks[0].signatures["get_db"].startswith("def get_db()")
    assert all("db" not in w for w in waves(plan, 4))


def test_done_task_signatures_must_name_its_outputs() -> None:
    problem = only_problem(
        plan_data(
            task("api"),
            done_tasks=[{"id": "db", "produces": ["get_db"], "signatures": {"get_dbb": "x"}}],
        )
    )
    assert problem.startswith("done task 'db', field signatures: 'get_dbb' is not in its produces")


# files ----------------------------------------------------------------------------------

VALID = plan_data(task("a", produces=["A"]), task("b", consumes=["A"]))


def test_yaml_and_json_files_load_the_same_plan(tmp_path: Path) -> None:
    y = tmp_path / "plan.yaml"
    y.write_text(yaml.safe_dump(VALID), encoding="utf-8")
    j = tmp_path / "plan.json"
    j.write_text(json.dumps(VALID, indent=2), encoding="utf-8")
    flow = tmp_path / "flow.yaml"
    flow.write_text("{goal: Build a thing, tasks: " + json.dumps(VALID["tasks"]) + "}")
    plans = [load_plan(p) for p in (y, j, flow)]
    assert plans[0] == plans[1] == plans[2]
    assert plan_hash(plans[0]) == plan_hash(plans[1])


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("- a\n- b\n", "the plan must be a mapping with `goal` and `tasks`"),
        ("just text\n", "the plan must be a mapping with `goal` and `tasks`"),
        ("", "the plan must be a mapping with `goal` and `tasks`"),
        ("[1, 2]", "the plan must be a mapping with `goal` and `tasks`"),
        ("goal: x\ngoal: y\ntasks: []\n", "key 'goal' is given twice (line 2); keep one of them"),
        ('{"goal": "x", "goal": "y"}', "key 'goal' is given twice; keep one of them"),
    ],
)
def test_files_that_are_not_a_plan_mapping(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PlanError) as info:
        load_plan(path)
    assert info.value.problems == [problem]
    assert info.value.source == str(path)


def test_duplicate_key_inside_a_task(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(
        "goal: g\ntasks:\n  - id: a\n    objective: o\n    owns: [a.py]\n    owns: [b.py]\n"
        "    done: [{criterion: c, check: pytest}]\n",
        encoding="utf-8",
    )
    with pytest.raises(PlanError) as info:
        load_plan(path)
    assert info.value.problems == ["key 'owns' is given twice (line 6); keep one of them"]


def test_yaml_merge_keys_still_work(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(
        "goal: g\ndefaults: &d {objective: o, done: [{criterion: c, check: pytest}]}\n"
        "tasks:\n  - <<: *d\n    id: a\n    owns: [a.py]\n",
        encoding="utf-8",
    )
    # `defaults` is itself an unknown key: the merge worked, the typo check still runs
    with pytest.raises(PlanError) as info:
        load_plan(path)
    assert info.value.problems == [
        "field defaults: unknown key (a typo? see the plan format in README)"
    ]


@pytest.mark.parametrize(
    ("text", "start"),
    [("goal: [unclosed\n", "not valid YAML:"), ('{"goal": "x", "tasks": [}', "not valid JSON:")],
)
def test_syntax_errors(tmp_path: Path, text: str, start: str) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PlanError) as info:
        load_plan(path)
    assert len(info.value.problems) == 1
    assert info.value.problems[0].startswith(start)


def test_missing_file_and_unreadable_paths(tmp_path: Path) -> None:
    with pytest.raises(PlanError) as info:
        load_plan(tmp_path / "nope.yaml")
    assert info.value.problems == ["file not found"]
    assert str(tmp_path / "nope.yaml") in info.value.render()
    with pytest.raises(PlanError) as info:
        load_plan(tmp_path)
    assert info.value.problems[0].startswith("cannot be read")
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00goal")
    with pytest.raises(PlanError) as info:
        load_plan(binary)
    assert info.value.problems[0].startswith("cannot be read")


# hashing and helpers --------------------------------------------------------------------


def test_plan_hash_is_canonical_and_sensitive() -> None:
    a = validate_plan_data(VALID)
    reordered = validate_plan_data(json.loads(json.dumps(VALID, sort_keys=True)))
    assert plan_hash(a) == plan_hash(reordered) == a.sha256()
    assert len(plan_hash(a)) == 64
    changed = json.loads(json.dumps(VALID))
    changed["tasks"][0]["objective"] = "something else"
    assert plan_hash(validate_plan_data(changed)) != plan_hash(a)


@pytest.mark.parametrize(
    ("goal", "slug"),
    [
        ("Add a User model!", "add-a-user-model"),
        ("???", "run"),
        ("x" * 60, "x" * 40),
        ("Über straße", "ber-stra-e"),
    ],
)
def test_run_name_slug(goal: str, slug: str) -> None:
    plan = validate_plan_data(plan_data(task("a"), goal=goal))
    assert plan.run_name == slug
    assert plan_checks.NAME_RE.fullmatch(slug)


@pytest.mark.parametrize(
    ("path", "patterns", "expected"),
    [
        ("app/models.py", ["app/models.py"], True),
        ("app/models.py", ["app/*.py"], True),
        ("app/sub/models.py", ["app/*.py"], False),
        ("app/sub/models.py", ["app/**"], True),
        ("app/sub/models.py", ["app/"], True),
        ("app/models.py", ["**/models.py"], True),
        ("models.py", ["**/models.py"], True),
        ("app/models.py", ["./app/models.py"], True),
        ("app/models.py", ["app"], False),
        ("app/models.py", ["lib/**", "docs/*"], False),
    ],
)
def test_path_matches(path: str, patterns: list[str], expected: bool) -> None:
    assert path_matches(path, patterns) is expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("a/b.py", "a/b.py", True),
        ("a/*.py", "a/b.py", True),
        ("a/**", "a/b/c/d.py", True),
        ("**", "x", True),
        ("a/*.py", "b/*.py", False),
        ("*.md", "*.py", False),
        ("test_*", "*.py", True),
        ("a/b", "a/b/c", False),
        ("a/**/z.py", "a/b/*/z.py", True),
        ("a/**/z.py", "a/b/y.py", False),
    ],
)
def test_patterns_overlap(a: str, b: str, expected: bool) -> None:
    assert patterns_overlap(a, b) is expected
    assert patterns_overlap(b, a) is expected


def test_semantic_problems_on_a_constructed_plan_with_a_cycle() -> None:
    plan = Plan.model_construct(
        goal="g",
        name=None,
        tasks=[
            validate_plan_data(plan_data(task("a")))
            .tasks[0]
            .model_copy(update={"depends_on": ["b"]}),
            validate_plan_data(plan_data(task("b")))
            .tasks[0]
            .model_copy(update={"depends_on": ["a"]}),
        ],
        done_tasks=[],
    )
    problems = semantic_problems(plan)
    assert problems == [
        "dependency cycle: a -> b -> a; break it by removing one depends_on/consumes edge"
    ]
    with pytest.raises(PlanError):
        schedule.topological_order(plan)


# node labels (placing a task on a cluster node) ---------------------------------


def test_node_labels_are_optional_and_kept() -> None:
    plan = validate_plan_data(plan_data(task("gpu", node_labels={"lo-node": "gpu"}), task("b")))
    assert plan.task("gpu").node_labels == {"lo-node": "gpu"}
    assert plan.task("b").node_labels == {}


@pytest.mark.parametrize(
    "labels",
    [{"lo-node": "two words"}, {"": "gpu"}, {"-lead": "x"}, {"k": "a/b"}, {"k" * 64: "v"}],
)
def test_a_malformed_node_label_names_the_task_and_the_rule(labels: dict[str, str]) -> None:
    problem = only_problem(plan_data(task("gpu", node_labels=labels)))
    assert "task 'gpu'" in problem and "node_labels" in problem
    assert "is not a Ray node label" in problem


def test_node_labels_change_the_approved_hash_only_when_set() -> None:
    # A plan approved before the field existed keeps its hash; asking for a node is a change
    # Gate 1 must see again.
    plain = validate_plan_data(plan_data(task("a")))
    dumped = plain.model_dump(mode="json")
    del dumped["tasks"][0]["node_labels"]
    legacy = json.dumps(dumped, sort_keys=True, separators=(",", ":"))
    assert plan_hash(plain) == hashlib.sha256(legacy.encode()).hexdigest()
    placed = validate_plan_data(plan_data(task("a", node_labels={"lo-node": "gpu"})))
    assert plan_hash(placed) != plan_hash(plain)

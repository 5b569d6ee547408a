"""The documents agree with the code: the README's command table, docs/architecture.md, the
layer rules it states, and the one version number."""

from __future__ import annotations

import ast
import importlib
import json
import re
import tomllib
import typing
from pathlib import Path

import click

import loop_orchestrator
from loop_orchestrator.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "loop_orchestrator"
COMMON_OPTIONS = {"--repo", "--help", "-h"}


def _readme_command_rows() -> dict[str, str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Commands", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = re.split(r"(?<!\\)\|", line)  # a cell may hold an escaped \|
        if len(cells) < 3:
            continue
        first = cells[1]
        for name in re.findall(r"`lo-orch ([a-z][a-z-]*)", first):
            rows[name] = rows.get(name, "") + first
    return rows


def _commands() -> dict[str, click.Command]:
    return {name: cmd for name, cmd in cli.commands.items() if not cmd.hidden}


def test_the_readme_command_table_lists_exactly_the_commands() -> None:
    rows = _readme_command_rows()
    commands = _commands()
    assert sorted(rows) == sorted(commands), (
        "README's ## Commands table and the click commands differ: "
        f"only in README {sorted(set(rows) - set(commands))}, "
        f"only in the CLI {sorted(set(commands) - set(rows))}"
    )


def test_every_option_of_a_command_is_in_its_readme_row() -> None:
    rows = _readme_command_rows()
    missing: list[str] = []
    for name, cmd in _commands().items():
        for param in cmd.params:
            if not isinstance(param, click.Option):
                continue
            longs = [o for o in param.opts if o.startswith("--")]
            if set(longs) & COMMON_OPTIONS or not longs:
                continue
            if not any(o in rows.get(name, "") for o in longs):
                missing.append(f"lo-orch {name} {longs[0]}")
    assert not missing, f"options missing from README's command table: {missing}"


def _modules() -> list[Path]:
    return sorted(
        p
        for p in PACKAGE.rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
        and p.parent.name != "cli"
        and "_data" not in p.parts
    )


def unplaced(doc: str, modules: list[str]) -> list[str]:
    """The modules (paths inside the package) that ``doc`` does not place: a top-level
    module must be named, one in a subfolder must be named in its folder's table row
    (the row naming ``loop_orchestrator/<folder>/``) or by its path, so that
    ``commands/doctor.py`` is not taken as placed because ``doctor.py`` is."""
    rows: dict[str, str] = {}
    for line in doc.splitlines():
        if line.startswith("|"):
            for folder in re.findall(r"`loop_orchestrator/([\w/]+)/`", line):
                rows[folder] = rows.get(folder, "") + line
    mentioned = set(re.findall(r"`(?:[\w/]+/)?(\w+\.py)`", doc))
    out = []
    for module in modules:
        folder, _, name = module.rpartition("/")
        if folder:
            placed = f"`{name}`" in rows.get(folder, "") or f"{module}`" in doc
        else:
            placed = name in mentioned
        if not placed:
            out.append(module)
    return out


def test_architecture_names_only_modules_that_exist_and_places_every_module() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = re.findall(r"`(loop_orchestrator/[\w/]+(?:\.py|/))`", doc)
    assert named, "docs/architecture.md names no module"
    gone = [n for n in named if not (ROOT / n).exists()]
    assert not gone, f"docs/architecture.md names modules that do not exist: {gone}"
    modules = [p.relative_to(PACKAGE).as_posix() for p in _modules()]
    missing = unplaced(doc, modules)
    assert not missing, f"modules not placed in docs/architecture.md: {missing}"


def test_a_module_is_placed_only_by_its_own_folder_row() -> None:
    # made-up module names: a rename of real modules must not change this test
    doc = (
        "| supervision | `loop_orchestrator/checkup.py` | checks |\n"
        "| commands | `loop_orchestrator/commands/` | `plan.py` (`plan`) |\n"
        "the agents' `terminal.py` is described elsewhere\n"
    )
    assert unplaced(doc, ["checkup.py", "commands/plan.py"]) == []
    # named only as another module (the top-level checkup.py), or outside its folder's row
    assert unplaced(doc, ["commands/checkup.py", "agents/terminal.py", "status.py"]) == [
        "commands/checkup.py",
        "agents/terminal.py",
        "status.py",
    ]
    assert unplaced(doc + "see `commands/checkup.py`\n", ["commands/checkup.py"]) == []


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


#: calls that start a process (besides the subprocess module): only proc.py makes them
SPAWNING_CALLS = {
    "os.system",
    "os.popen",
    "os.fork",
    "os.forkpty",
    "pty.fork",
    "pty.spawn",
    "asyncio.create_subprocess_exec",
    "asyncio.create_subprocess_shell",
}


def spawn_violations(source: str) -> list[str]:
    """How a module starts processes other than through proc.py: the subprocess or
    multiprocessing modules, or a call of SPAWNING_CALLS or ``os.spawn*``/``os.posix_spawn*``
    (``os.exec*`` replaces the process and starts none)."""
    tree = ast.parse(source)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                modules = [node.module or ""]
            out += [
                f"line {node.lineno}: imports {m}"
                for m in modules
                if m.split(".")[0] in ("subprocess", "multiprocessing") or m == "asyncio.subprocess"
            ]
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                called = f"{f.value.id}.{f.attr}"
                if called in SPAWNING_CALLS or called.startswith(("os.spawn", "os.posix_spawn")):
                    out.append(f"line {node.lineno}: calls {called}")
    return out


def test_the_package_never_imports_the_cli_and_only_proc_starts_subprocesses() -> None:
    # the process entry sits above the CLI: it hands what is not a session's call to click
    upward = [
        str(p.relative_to(ROOT))
        for p in _modules()
        if p != PACKAGE / "entry.py"
        and any(m.startswith("loop_orchestrator.cli") for m in _imports(p))
    ]
    assert not upward, f"modules below the CLI import it: {upward}"
    spawners = {
        str(p.relative_to(ROOT)): v
        for p in PACKAGE.rglob("*.py")
        if p.name != "proc.py" and (v := spawn_violations(p.read_text(encoding="utf-8")))
    }
    assert not spawners, f"processes started outside proc.py: {spawners}"


def test_each_way_of_starting_a_process_is_caught() -> None:
    for source in (
        "import subprocess\n",
        "from subprocess import run\n",
        "import multiprocessing\n",
        "import os\nos.system('ls')\n",
        "import os\nos.posix_spawnp('ls', ['ls'], {})\n",
        "import os\npid = os.fork()\n",
        "import pty\npty.spawn(['sh'])\n",
        "import asyncio\nasyncio.create_subprocess_exec('ls')\n",
    ):
        assert spawn_violations(source), source
    assert spawn_violations("import os\nos.execvp('ls', ['ls'])\nos.getpid()\n") == []


def test_the_version_is_written_once() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "version" not in project and "version" in project.get("dynamic", []), (
        "pyproject.toml must take the version from loop_orchestrator/__init__.py"
    )
    manifest = json.loads((ROOT / ".claude-plugin" / "plugin.json").read_text(encoding="utf-8"))
    assert manifest.get("version", loop_orchestrator.__version__) == loop_orchestrator.__version__
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## {loop_orchestrator.__version__}" in changelog, (
        "CHANGELOG.md has no section for the current version"
    )


# The layers (docs/architecture.md, "Rules the layers keep"): a front end reaches the
# package through commands/, one application function per command.

#: what a module of cli/ may import from the package besides cli/ and commands/ (and why)
CLI_MAY_IMPORT = {
    "loop_orchestrator.errors": "the exception families, mapped to exit codes",
    "loop_orchestrator.hints": "hints spelled as the command that works here",
    "loop_orchestrator.columns": "the status table's layout, shared with the dashboard",
}
CLI_EXCEPTIONS = {
    ("main.py", "loop_orchestrator.__version__"): "`lo-orch --version`",
    ("dashboard.py", "loop_orchestrator.dashboard.app"): "the other front end",
    ("dashboard.py", "loop_orchestrator.dashboard.web"): "the other front end, served",
}
#: the modules of cli/ that hold no command
CLI_SUPPORT = {"__init__", "main", "common", "render"}

#: each click command -> the functions of commands/ its callback calls (module.function)
COMMAND_FUNCTIONS = {
    "plan": {"plan.plan"},
    "approve": {"plan.approve"},
    "run": {"run.run"},
    "retry": {"run.retry"},
    "status": {"status.status"},
    "merge": {"merge.review", "merge.merge"},
    "cleanup": {"merge.cleanup"},
    "pr": {"pr.pr", "pr.follow"},
    "attach": {"session.attach"},
    "send": {"session.send"},
    "permit": {"session.permit"},
    "signal": {"session.signal"},
    "hook": {"session.hook"},
    "audit": {"audit.audit"},
    "doctor": {"doctor.doctor"},
    "demo": {"demo.demo"},
    "comment": {"review.comment"},
    "comments": {"review.comments"},
    "request-changes": {"review.request_changes"},
    "dashboard": set(),  # a front end of its own: its keys call commands/ (below)
}

#: the dashboard's keys (and its view) -> the same functions as the command they mirror
DASHBOARD_FUNCTIONS = {
    ("app.py", "action_attach"): {"session.attach"},
    ("app.py", "action_send"): {"session.send"},
    ("app.py", "action_retry"): {"run.retry"},
    ("app.py", "action_gate1"): {"plan.approve"},
    ("app.py", "action_gate2"): {"merge.review", "merge.merge"},
    ("app.py", "gate2_comment"): {"review.comment"},
    ("app.py", "gate2_request_changes"): {"review.request_changes"},
    ("app.py", "action_permit"): {"session.permit"},
    ("view.py", "load_snapshot"): {"status.status"},
}

#: what only commands/ calls: a front end calling one of these skips a command's rules (the
#: modules behind the other commands are in FRONT_ENDS_NEVER_IMPORT)
BEHIND_THE_COMMANDS = {
    "approve_plan",
    "retry_task",
    "send_message",
    "record_comment",
    "run_hook",
    "signal_task",
    "run_demo",
    "run_checks",
    "audit_task",
    "status_document",
    "status_rows",
    "status_title",
    "plan_from_file",
    "plan_from_goal",
    "plan_from_issue",
    "record_plan",
    "lock_holder",
}
#: modules a front end never imports: what they do goes through commands/
FRONT_ENDS_NEVER_IMPORT = {
    "loop_orchestrator.workspace.integration",
    "loop_orchestrator.sessions.attach",
    "loop_orchestrator.permissions.requests",
    "loop_orchestrator.supervisor.main",
    "loop_orchestrator.sessions.hooks",
    "loop_orchestrator.readiness",
    "loop_orchestrator.simulator.demo_flow",
    "loop_orchestrator.verify.on_demand",
}


def _package_imports(tree: ast.AST) -> set[str]:
    """Every ``loop_orchestrator...`` name a module imports (``from a import b`` as ``a.b``)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in found if m.startswith("loop_orchestrator.")}


def _commands_aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> what it is in commands/: a module (``plan``) or a function
    (``plan.plan``)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full.startswith("loop_orchestrator.commands."):
                    aliases[a.asname or a.name] = full.removeprefix("loop_orchestrator.commands.")
    return aliases


def _commands_calls(fn: ast.AST, aliases: dict[str, str]) -> set[str]:
    called: set[str] = set()
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            module = aliases.get(f.value.id)
            if module is not None and "." not in module:
                called.add(f"{module}.{f.attr}")
        elif isinstance(f, ast.Name) and "." in aliases.get(f.id, ""):
            called.add(aliases[f.id])
    return called


def _function(tree: ast.Module, name: str) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"no function {name}")


def _front_end_problems(folder: Path) -> list[str]:
    """A front end's modules that import what only commands/ may, or call a function that
    is behind a command."""
    problems: list[str] = []
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        problems += [
            f"{folder.name}/{path.name} imports {name}"
            for name in sorted(_package_imports(tree))
            if any(name.startswith(m + ".") for m in FRONT_ENDS_NEVER_IMPORT)
            and not _cli_exception(path.name, name)
        ]
        for node in ast.walk(tree):
            used = (
                node.attr
                if isinstance(node, ast.Attribute)
                else node.id
                if isinstance(node, ast.Name)
                else None
            )
            if used in BEHIND_THE_COMMANDS:
                problems.append(f"{folder.name}/{path.name} uses {used} (not its commands/)")
    return problems


def _cli_exception(file: str, name: str) -> bool:
    return any(f == file and (name == m or name.startswith(m + ".")) for f, m in CLI_EXCEPTIONS)


def test_the_cli_reaches_the_package_only_through_commands() -> None:
    wrong: list[str] = []
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        for name in sorted(_package_imports(ast.parse(path.read_text(encoding="utf-8")))):
            allowed = (
                name.startswith(("loop_orchestrator.cli.", "loop_orchestrator.commands."))
                or any(name.startswith(m + ".") for m in CLI_MAY_IMPORT)
                or _cli_exception(path.name, name)
            )
            if not allowed:
                wrong.append(f"cli/{path.name} imports {name}")
    assert not wrong, (
        f"cli/ goes around commands/: {wrong}; call the command's function in "
        "loop_orchestrator/commands/ (or list a real exception in CLI_EXCEPTIONS)"
    )


def test_every_click_command_calls_its_own_function_of_commands() -> None:
    import inspect
    import textwrap

    from loop_orchestrator import commands

    assert sorted(cli.commands) == sorted(COMMAND_FUNCTIONS), "a command is missing here"
    wrong: list[str] = []
    for name, cmd in cli.commands.items():
        callback = cmd.callback
        assert callback is not None
        module = ast.parse(Path(inspect.getfile(callback)).read_text(encoding="utf-8"))
        fn = ast.parse(textwrap.dedent(inspect.getsource(callback)))
        called = _commands_calls(fn, _commands_aliases(module))
        if called != COMMAND_FUNCTIONS[name]:
            wrong.append(f"lo-orch {name} calls {sorted(called)}, not {COMMAND_FUNCTIONS[name]}")
    assert not wrong, wrong
    untyped: list[str] = []
    for qualname in sorted(set().union(*COMMAND_FUNCTIONS.values())):
        module_name, function = qualname.split(".")
        target = getattr(importlib.import_module(f"{commands.__name__}.{module_name}"), function)
        if not _is_typed_result(typing.get_type_hints(target).get("return")):
            untyped.append(qualname)
    assert not untyped, f"not a frozen dataclass, pydantic model or named tuple: {untyped}"


def _is_typed_result(returns: object) -> bool:
    """A frozen dataclass, a pydantic model or a named tuple (never None, a dict, a str)."""
    import dataclasses

    from pydantic import BaseModel

    if not isinstance(returns, type):
        return False
    if dataclasses.is_dataclass(returns):
        return bool(returns.__dataclass_params__.frozen)  # type: ignore[attr-defined]
    return issubclass(returns, BaseModel) or (
        issubclass(returns, tuple) and hasattr(returns, "_fields")
    )


def test_cli_maps_one_to_one_onto_commands() -> None:
    """``cli/<name>.py`` holds exactly the click commands whose application functions are
    in ``commands/<name>.py`` (the dashboard, a front end of its own, in cli/dashboard.py)."""
    import inspect

    wrong: list[str] = []
    for name, cmd in cli.commands.items():
        assert cmd.callback is not None
        where = Path(inspect.getfile(cmd.callback)).stem
        homes = {f.split(".")[0] for f in COMMAND_FUNCTIONS[name]} or {"dashboard"}
        if homes != {where}:
            wrong.append(f"lo-orch {name} is in cli/{where}.py, its functions in {sorted(homes)}")
    assert not wrong, wrong
    holders = {p.stem for p in (PACKAGE / "cli").glob("*.py")} - CLI_SUPPORT
    applications = {p.stem for p in (PACKAGE / "commands").glob("*.py")} - {"__init__", "repo"}
    assert holders == applications | {"dashboard"}


def test_the_dashboard_keys_call_the_same_functions_as_the_commands() -> None:
    wrong: list[str] = []
    for (file, function), expected in DASHBOARD_FUNCTIONS.items():
        tree = ast.parse((PACKAGE / "dashboard" / file).read_text(encoding="utf-8"))
        called = _commands_calls(_function(tree, function), _commands_aliases(tree))
        if called != expected:
            wrong.append(f"dashboard/{file} {function} calls {sorted(called)}, not {expected}")
    assert not wrong, wrong


def test_no_front_end_calls_what_is_behind_a_command() -> None:
    problems = _front_end_problems(PACKAGE / "cli") + _front_end_problems(PACKAGE / "dashboard")
    assert not problems, problems


def test_commands_never_print_ask_or_exit() -> None:
    """commands/ returns results and raises errors; printing, asking and exit codes are the
    front ends' (a function that printed would be invisible to the dashboard)."""
    wrong: list[str] = []
    for path in sorted((PACKAGE / "commands").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for name in sorted(_imports(path)):
            if name.split(".")[0] in ("click", "rich", "textual") or name.startswith(
                ("loop_orchestrator.cli", "loop_orchestrator.dashboard")
            ):
                wrong.append(f"commands/{path.name} imports {name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                called = (
                    f.id
                    if isinstance(f, ast.Name)
                    else f"{f.value.id}.{f.attr}"
                    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                    else ""
                )
                if called in ("print", "input", "exit", "sys.exit", "os._exit", "os.execvp"):
                    wrong.append(f"commands/{path.name} calls {called}")
    assert not wrong, wrong

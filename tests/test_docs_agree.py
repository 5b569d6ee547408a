"""The documents agree with the code: the README's command table, docs/architecture.md, the
layer rules it states, and the one version number."""

from __future__ import annotations

import ast
import json
import re
import tomllib
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


def test_architecture_names_only_modules_that_exist_and_places_every_module() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = re.findall(r"`(loop_orchestrator/[\w/]+(?:\.py|/))`", doc)
    assert named, "docs/architecture.md names no module"
    gone = [n for n in named if not (ROOT / n).exists()]
    assert not gone, f"docs/architecture.md names modules that do not exist: {gone}"
    mentioned = set(re.findall(r"`(?:[\w/]+/)?(\w+\.py)`", doc))
    unplaced = [str(p.relative_to(ROOT)) for p in _modules() if p.name not in mentioned]
    assert not unplaced, f"modules not placed in docs/architecture.md: {unplaced}"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_package_never_imports_the_cli_and_only_proc_starts_subprocesses() -> None:
    upward = [
        str(p.relative_to(ROOT))
        for p in _modules()
        if any(m.startswith("loop_orchestrator.cli") for m in _imports(p))
    ]
    assert not upward, f"modules below the CLI import it: {upward}"
    spawners = [
        str(p.relative_to(ROOT))
        for p in PACKAGE.rglob("*.py")
        if "subprocess" in _imports(p) and p.name != "proc.py"
    ]
    assert not spawners, f"subprocess used outside proc.py: {spawners}"


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

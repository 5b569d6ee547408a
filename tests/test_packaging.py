"""The wheel: built from this tree, installed into a fresh venv, it runs and finds its data.

The fresh venv gets only the wheel (``pip install --no-deps --no-index``); its
dependencies come from the project's own venv through a ``.pth`` line, so the test needs no
network. A ``.pth`` line adds a folder to ``sys.path`` without processing the ``.pth``
files inside it, so the project's editable install cannot leak into the fresh venv; the
test checks that the package is imported from the fresh venv all the same.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow

#: source folder -> where resources puts it in an installed package (pyproject force-include)
SHIPPED = {
    "templates": "templates",
    ".claude-plugin": "plugin/.claude-plugin",
    "skills": "plugin/skills",
    "agents": "plugin/agents",
    "hooks": "plugin/hooks",
    "examples": "examples",
}

PROBE = """
import json, sys
import loop_orchestrator
from loop_orchestrator import resources
print(json.dumps({
    "file": loop_orchestrator.__file__,
    "templates": str(resources.templates_dir()),
    "plugin": str(resources.plugin_dir()),
    "examples": str(resources.examples_dir()),
    "prefix": sys.prefix,
}))
"""


def clean_env() -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def run(
    args: list[str | Path], cwd: Path, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result


def source_files(folder: Path) -> Iterator[Path]:
    for path in folder.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            yield path.relative_to(folder)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Build the wheel and install it into a fresh venv (once for this module)."""
    work = tmp_path_factory.mktemp("packaging")
    dist = work / "dist"
    # The build backend from this venv when it is there (no download); otherwise an
    # isolated build, which fetches hatchling from the package index.
    isolation = [] if importlib.util.find_spec("hatchling") is None else ["--no-isolation"]
    run(
        [sys.executable, "-m", "build", "--wheel", *isolation, "--outdir", dist, REPO_ROOT],
        cwd=work,
    )
    wheels = list(dist.glob("loop_orchestrator-*.whl"))
    assert len(wheels) == 1, wheels
    venv = work / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=work)
    python = venv / "bin" / "python"
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--no-deps",
            "--no-index",
            wheels[0],
        ],
        cwd=work,
    )
    site = Path(
        run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=work
        ).stdout.strip()
    )
    (site / "zz_project_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return {"work": work, "venv": venv, "python": python, "site": site, "wheel": wheels[0]}


def test_lo_orch_runs_from_the_installed_venv(installed: dict[str, Path]) -> None:
    lo_orch = installed["venv"] / "bin" / "lo-orch"
    assert lo_orch.is_file()
    result = run([lo_orch, "--help"], cwd=installed["work"])
    assert result.stdout.startswith("Usage: lo-orch")
    for command in ("plan", "approve", "status"):
        assert f"  {command} " in result.stdout
    version = run([lo_orch, "--version"], cwd=installed["work"])
    assert version.stdout.strip() == f"lo-orch, version {installed['wheel'].name.split('-')[1]}"


def test_the_installed_package_finds_its_data_inside_site_packages(
    installed: dict[str, Path],
) -> None:
    probe = json.loads(run([installed["python"], "-c", PROBE], cwd=installed["work"]).stdout)
    site = installed["site"]
    assert Path(probe["file"]).is_relative_to(site), probe  # the wheel, not the source tree
    data = site / "loop_orchestrator" / "_data"
    templates, plugin, examples = (Path(probe[k]) for k in ("templates", "plugin", "examples"))
    assert templates == data / "templates"
    assert plugin == data / "plugin"
    assert examples == data / "examples"

    assert sorted(p.name for p in templates.glob("*.j2")), "no templates shipped"
    assert (templates / "conflict_matrix.md.j2").is_file()
    assert (plugin / ".claude-plugin" / "plugin.json").is_file()
    json.loads((plugin / ".claude-plugin" / "plugin.json").read_text())
    assert (examples / "plan.yaml").is_file()
    assert (examples / "tools.example.json").is_file()

    # every file of the shipped source folders is in the wheel, byte for byte
    for source, target in SHIPPED.items():
        folder = REPO_ROOT / source
        if not folder.is_dir():
            continue
        for rel in source_files(folder):
            installed_file = data / target / rel
            assert installed_file.is_file(), f"{source}/{rel} is not in the wheel"
            assert installed_file.read_bytes() == (folder / rel).read_bytes(), rel

    # hooks are run directly by Claude Code: the executable bit must survive the wheel
    for hook in (REPO_ROOT / "hooks").iterdir() if (REPO_ROOT / "hooks").is_dir() else []:
        if hook.is_file() and os.access(hook, os.X_OK):
            assert os.access(plugin / "hooks" / hook.name, os.X_OK), hook.name


def test_plan_of_the_shipped_example_from_the_installed_wheel(
    installed: dict[str, Path], git_repo: Path
) -> None:
    lo_orch = installed["venv"] / "bin" / "lo-orch"
    probe = json.loads(run([installed["python"], "-c", PROBE], cwd=installed["work"]).stdout)
    example = Path(probe["examples"]) / "plan.yaml"
    result = run([lo_orch, "plan", example, "--repo", git_repo], cwd=installed["work"])
    assert "Wave 1: note-model" in result.stdout
    orch = git_repo / ".orchestration"
    doc = json.loads((orch / "plan.json").read_text())
    assert len(doc["sha256"]) == 64
    assert "Wave 3: notes-cli" in (orch / "conflict-matrix.md").read_text()
    status = json.loads(run([lo_orch, "status", "--json"], cwd=git_repo).stdout)
    assert [t["phase"] for t in status["tasks"]] == ["pending"] * 4
    run([lo_orch, "approve", "--repo", git_repo], cwd=installed["work"])
    run_json = json.loads((orch / "run.json").read_text())
    assert run_json["approved_plan_sha256"] == doc["sha256"]


def test_the_wheel_ships_the_simulator_and_no_test_double(installed: dict[str, Path]) -> None:
    import zipfile

    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    simulator = {n.rsplit("/", 1)[1] for n in names if n.startswith("loop_orchestrator/simulator/")}
    # what `lo-orch demo` runs is shipped, on purpose
    assert {"agent.py", "script.py", "endpoint.py", "replies.py", "demo_flow.py"} <= simulator
    # the endpoints only the tests use are not, nor anything of tests/ or benchmarks/
    assert not [n for n in names if "codex_endpoint" in n or "gemini_endpoint" in n]
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "helpers/"))]

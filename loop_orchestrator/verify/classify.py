"""What kind of file a repo-relative path is: test code, CI, test configuration, lock file.

Pure functions of the path (and, for pyproject.toml / setup.cfg / package.json, of the two
versions of the file), so every check classifies the same way.
"""

from __future__ import annotations

import configparser
import json
import tomllib
from fnmatch import fnmatchcase
from pathlib import PurePosixPath
from typing import Any

PY_SUFFIXES = (".py",)
JS_SUFFIXES = (".js", ".jsx", ".ts", ".tsx", ".mjs", ".cjs", ".mts", ".cts")
DOC_SUFFIXES = (".md", ".rst", ".txt", ".adoc")

#: folders whose files are test code (helpers and fixtures included)
TEST_DIRS = frozenset({"tests", "test", "__tests__", "testing", "spec", "specs"})

#: continuous integration: a task never changes how its work is checked
CI_PATTERNS = (
    ".github/**",
    ".gitlab-ci.yml",
    ".gitlab-ci.yaml",
    ".gitlab/**",
    ".ci/**",
    ".circleci/**",
    "Jenkinsfile",
    "**/Jenkinsfile",
    "azure-pipelines.yml",
    "azure-pipelines.yaml",
    ".azure-pipelines/**",
    ".travis.yml",
    "bitbucket-pipelines.yml",
    ".buildkite/**",
    ".drone.yml",
    "appveyor.yml",
    ".appveyor.yml",
    ".woodpecker.yml",
    ".woodpecker/**",
    ".pre-commit-config.yaml",
    ".pre-commit-hooks.yaml",
)

#: test configuration: decides which tests run and how they are judged (every file pytest
#: reads its configuration from, by name: pytest 9's ``CONFIG_LOADERS_BY_NAME``; setup.cfg
#: and pyproject.toml hold other settings too and are judged by content)
TEST_CONFIG_PATTERNS = (
    "**/conftest.py",
    "**/pytest.ini",
    "**/.pytest.ini",
    "**/pytest.toml",
    "**/.pytest.toml",
    "**/tox.ini",
    "**/noxfile.py",
    "**/.coveragerc",
    "**/jest.config.*",
    "**/jest.setup.*",
    "**/vitest.config.*",
    "**/vitest.workspace.*",
    "**/vitest.setup.*",
    "**/.mocharc*",
    "**/karma.conf.*",
    "**/playwright.config.*",
    "**/cypress.config.*",
    "**/ava.config.*",
    "**/.nycrc*",
)

#: lock files: out of scope unless the task owns them
LOCK_PATTERNS = (
    "**/poetry.lock",
    "**/uv.lock",
    "**/Pipfile.lock",
    "**/pdm.lock",
    "**/package-lock.json",
    "**/npm-shrinkwrap.json",
    "**/yarn.lock",
    "**/pnpm-lock.yaml",
    "**/bun.lockb",
    "**/bun.lock",
    "**/Cargo.lock",
    "**/go.sum",
    "**/Gemfile.lock",
    "**/composer.lock",
    "**/mix.lock",
    "**/flake.lock",
    "**/packages.lock.json",
    "**/gradle.lockfile",
)

#: git metadata that changes how diffs are read or what is checked out: as lock files
GIT_META_PATTERNS = ("**/.gitattributes", ".gitmodules")

#: lo-orch's own folders: never part of a task
ORCH_PATTERNS = (".orchestration/**", ".worktrees/**", ".git/**")


def _norm(path: str) -> str:
    path = path.replace("\\", "/")
    return path[2:] if path.startswith("./") else path


def _match(path: str, patterns: tuple[str, ...]) -> bool:
    p = PurePosixPath(_norm(path))
    text = str(p)
    for pat in patterns:
        if pat.startswith("**/"):
            if fnmatchcase(p.name, pat[3:]) or fnmatchcase(text, pat[3:]):
                return True
        elif pat.endswith("/**"):
            root = pat[:-3]
            if text == root or text.startswith(root + "/"):
                return True
        elif fnmatchcase(text, pat):
            return True
    return False


def is_ci(path: str) -> bool:
    return _match(path, CI_PATTERNS)


def is_test_config_path(path: str) -> bool:
    """Test configuration by name alone (pyproject/setup.cfg/package.json need content)."""
    return _match(path, TEST_CONFIG_PATTERNS)


#: module names the interpreter's ``site`` runs at start-up, from whatever folder of the
#: path holds them
_START_MODULES = frozenset({"sitecustomize", "usercustomize"})


def is_interpreter_hook(path: str) -> bool:
    """Start-up code for the interpreter: a ``.pth`` file, or a ``sitecustomize`` /
    ``usercustomize`` module or package (any suffix: .py, .pyc, .so). No task adds one."""
    p = PurePosixPath(_norm(path))
    name = p.name.lower()
    if name.endswith(".pth") or any(part.lower() in _START_MODULES for part in p.parts[:-1]):
        return True
    return name.split(".", 1)[0] in _START_MODULES and not is_doc(name)


#: folders a virtual environment lives in; checkouts link the user's own one in by name
ENV_DIRS = frozenset({".venv", "venv"})


def is_environment_path(path: str) -> bool:
    """A file of a Python virtual environment: anything under a top-level ``.venv``/``venv``
    folder, or a ``pyvenv.cfg``. Committed, it would replace the environment the checks
    run in (``.venv/bin/python`` could be any program)."""
    p = PurePosixPath(_norm(path))
    return (len(p.parts) > 1 and p.parts[0] in ENV_DIRS) or p.name == "pyvenv.cfg"


def is_lock_file(path: str) -> bool:
    return _match(path, LOCK_PATTERNS)


def is_git_meta(path: str) -> bool:
    return _match(path, GIT_META_PATTERNS)


def is_orchestration(path: str) -> bool:
    return _match(path, ORCH_PATTERNS)


def is_python(path: str) -> bool:
    return path.endswith(PY_SUFFIXES)


def is_js(path: str) -> bool:
    return path.endswith(JS_SUFFIXES)


def is_doc(path: str) -> bool:
    return path.lower().endswith(DOC_SUFFIXES)


def is_python_test_module(path: str) -> bool:
    """A module pytest collects by default: ``test_*.py`` or ``*_test.py``."""
    name = PurePosixPath(path).name
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def is_js_test_module(path: str) -> bool:
    """``*.test.ts``, ``*.spec.js``..., any script under ``__tests__/``, and a script right
    in a top-level ``test/`` or ``tests/`` folder (mocha's default: ``test/parser.js``, as in
    jshttp/range-parser; deeper folders hold fixtures and helpers)."""
    p = PurePosixPath(path)
    if not is_js(path):
        return False
    stem_parts = p.name.split(".")
    return (
        "test" in stem_parts[1:-1]
        or "spec" in stem_parts[1:-1]
        or "__tests__" in p.parts
        or (len(p.parts) == 2 and p.parts[0] in ("test", "tests"))
    )


def is_test_module(path: str) -> bool:
    return is_python_test_module(path) or is_js_test_module(path)


def is_test_code(path: str) -> bool:
    """Test modules, and everything under a tests folder (helpers, fixtures, conftest)."""
    p = PurePosixPath(path)
    return is_test_module(path) or any(part in TEST_DIRS for part in p.parts[:-1])


# content-dependent test configuration ---------------------------------------------------


def _pyproject_test_sections(text: str | None) -> Any:
    if not text:
        return None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return {"<unparseable>": text}
    tool = data.get("tool", {}) if isinstance(data, dict) else {}
    out: dict[str, Any] = {}
    for key in ("pytest", "coverage", "tox", "nox"):
        if key in tool:
            out[key] = tool[key]
    hatch_envs = tool.get("hatch", {}).get("envs") if isinstance(tool.get("hatch"), dict) else None
    if hatch_envs is not None:
        out["hatch.envs"] = hatch_envs
    return out


def _setup_cfg_test_sections(text: str | None) -> Any:
    if not text:
        return None
    parser = configparser.RawConfigParser()
    try:
        parser.read_string(text)
    except configparser.Error:
        return {"<unparseable>": text}
    wanted = ("tool:pytest", "pytest", "coverage:", "tox", "aliases")
    return {name: dict(parser.items(name)) for name in parser.sections() if name.startswith(wanted)}


def _package_json_test_keys(text: str | None) -> Any:
    if not text:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return {"<unparseable>": text}
    if not isinstance(data, dict):
        return None
    raw_scripts = data.get("scripts")
    scripts: dict[str, Any] = raw_scripts if isinstance(raw_scripts, dict) else {}
    return {
        "jest": data.get("jest"),
        "mocha": data.get("mocha"),
        "ava": data.get("ava"),
        "c8": data.get("c8"),
        "nyc": data.get("nyc"),
        "scripts.test": {k: v for k, v in scripts.items() if k == "test" or k.startswith("test:")},
    }


def embedded_test_config_changed(path: str, old: str | None, new: str | None) -> str | None:
    """For files that hold test settings among others, which settings changed (or None).

    ``[tool.pytest...]``/coverage in pyproject.toml, pytest/coverage sections of setup.cfg,
    jest/mocha keys and test scripts in package.json.
    """
    name = PurePosixPath(path).name
    if name == "pyproject.toml":
        before, after = _pyproject_test_sections(old), _pyproject_test_sections(new)
        what = "the [tool.pytest]/[tool.coverage]/test environment settings in pyproject.toml"
    elif name == "setup.cfg":
        before, after = _setup_cfg_test_sections(old), _setup_cfg_test_sections(new)
        what = "the pytest/coverage sections of setup.cfg"
    elif name == "package.json":
        before, after = _package_json_test_keys(old), _package_json_test_keys(new)
        what = "the test runner settings or test scripts in package.json"
    else:
        return None
    if (before or None) == (after or None):
        return None
    return what

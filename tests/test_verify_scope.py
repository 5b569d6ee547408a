"""Scope: changes outside ``owns``, CI and test configuration, lock files, links.

Git-level cases run on real repositories and read the change list through
``gitutil.changed_paths`` (``--no-renames``), as verification does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.git import git

from loop_orchestrator.git import gateway as gitutil
from loop_orchestrator.plan.globs import path_matches
from loop_orchestrator.verify import classify
from loop_orchestrator.verify.models import Finding
from loop_orchestrator.verify.scope import check_scope, literally_owned


@dataclass(frozen=True)
class Ch:
    status: str
    path: str
    old_mode: str = "100644"
    new_mode: str = "100644"


def scope_of(changes: list[Ch], owns: list[str], **kw: object) -> list[tuple[str, str, str]]:
    findings = check_scope(changes, owns, matches=path_matches, **kw)  # type: ignore[arg-type]
    return [(f.check, f.severity.value, f.path or "") for f in findings]


def test_owned_changes_pass() -> None:
    changes = [
        Ch("M", "app/models.py"),
        Ch("A", "tests/test_models.py"),
        Ch("D", "app/old.py"),
        Ch("M", "app/run.sh", "100644", "100755"),
    ]
    assert scope_of(changes, ["app/**", "tests/test_models.py"]) == []


def test_edit_outside_owns_is_blocking_and_names_the_owner() -> None:
    findings = check_scope(
        [Ch("M", "app/views.py")],
        ["app/models.py"],
        matches=path_matches,
        other_owners={"views": ["app/views.py"]},
    )
    assert [(f.check, f.severity.value) for f in findings] == [("scope.unowned", "blocking")]
    assert "task 'views'" in findings[0].message


@pytest.mark.parametrize(
    "path",
    [
        ".github/workflows/ci.yml",
        ".gitlab-ci.yml",
        ".circleci/config.yml",
        "Jenkinsfile",
        "azure-pipelines.yml",
        ".ci/run",
    ],
)
def test_ci_files_are_out_of_scope_even_under_an_owned_glob(path: str) -> None:
    assert scope_of([Ch("M", path)], ["**"]) == [("scope.ci", "blocking", path)]


@pytest.mark.parametrize(
    "path",
    [
        "conftest.py",
        "tests/conftest.py",
        "pytest.ini",
        "tox.ini",
        "jest.config.js",
        "web/vitest.config.ts",
        ".mocharc.yml",
    ],
)
def test_test_configuration_is_out_of_scope_even_under_an_owned_glob(path: str) -> None:
    assert scope_of([Ch("A", path)], ["**"]) == [("scope.test-config", "blocking", path)]


def test_literal_ownership_of_test_config_downgrades_to_a_warning() -> None:
    assert literally_owned("tests/conftest.py", ["tests/conftest.py"])
    assert not literally_owned("tests/conftest.py", ["tests/*.py"])
    assert scope_of([Ch("A", "tests/conftest.py")], ["tests/conftest.py"]) == [
        ("scope.test-config", "warning", "tests/conftest.py")
    ]


def test_orchestration_paths_are_always_out_of_scope() -> None:
    assert scope_of([Ch("A", ".orchestration/status/x.json")], ["**"]) == [
        ("scope.orchestration", "blocking", ".orchestration/status/x.json")
    ]


def test_lock_files_need_ownership() -> None:
    assert scope_of([Ch("M", "uv.lock")], ["app/**"]) == [("scope.unowned", "blocking", "uv.lock")]
    assert scope_of([Ch("M", "uv.lock")], ["app/**", "uv.lock"]) == []
    msg = check_scope([Ch("M", "web/package-lock.json")], ["web/src/**"], matches=path_matches)[
        0
    ].message
    assert "lock file" in msg


def test_embedded_pytest_settings_block_even_in_an_owned_pyproject() -> None:
    old = '[project]\nname = "x"\ndependencies = []\n[tool.pytest.ini_options]\naddopts = "-q"\n'
    dep = old.replace("dependencies = []", 'dependencies = ["requests"]')
    weakened = dep.replace('addopts = "-q"', "addopts = \"-q -k 'not slow'\"")

    def contents(new: str) -> object:
        return lambda path: (old, new)

    owns = ["pyproject.toml"]
    assert scope_of([Ch("M", "pyproject.toml")], owns, contents=contents(dep)) == []
    assert scope_of([Ch("M", "pyproject.toml")], owns, contents=contents(weakened)) == [
        ("scope.test-config", "blocking", "pyproject.toml")
    ]


def test_embedded_settings_in_setup_cfg_and_package_json() -> None:
    assert classify.embedded_test_config_changed(
        "setup.cfg", "[metadata]\nname = x\n", "[metadata]\nname = x\n[tool:pytest]\naddopts = -x\n"
    )
    assert classify.embedded_test_config_changed(
        "package.json", '{"name": "x", "jest": {"bail": 1}}', '{"name": "x", "jest": {}}'
    )
    assert classify.embedded_test_config_changed(
        "package.json", '{"scripts": {"test": "jest"}}', '{"scripts": {"test": "true"}}'
    )
    assert (
        classify.embedded_test_config_changed(
            "package.json", '{"version": "1.0.0"}', '{"version": "1.1.0"}'
        )
        is None
    )


# real git -----------------------------------------------------------------------------


def commit_all(repo: Path, message: str = "change") -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-gpg-sign", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def git_scope(repo: Path, base: str, head: str, owns: list[str]) -> list[Finding]:
    changes = gitutil.changed_paths(repo, base, head)

    def contents(path: str) -> tuple[str | None, str | None]:
        return gitutil.file_at(repo, base, path), gitutil.file_at(repo, head, path)

    return check_scope(changes, owns, matches=path_matches, contents=contents)


def test_rename_hiding_a_deletion_is_caught(git_repo: Path) -> None:
    (git_repo / "app" / "legacy.py").write_text("def f():\n    return 1\n", encoding="utf-8")
    base = commit_all(git_repo, "base")
    git(git_repo, "mv", "app/legacy.py", "app/models.py")
    head = commit_all(git_repo)
    findings = git_scope(git_repo, base, head, ["app/models.py"])
    assert [(f.check, f.path) for f in findings] == [("scope.unowned", "app/legacy.py")]
    assert findings[0].message.startswith("deletes app/legacy.py")


def test_mode_change_of_an_unowned_file_is_caught(git_repo: Path) -> None:
    base = git(git_repo, "rev-parse", "HEAD").strip()
    (git_repo / "README.md").chmod(0o755)
    head = commit_all(git_repo)
    findings = git_scope(git_repo, base, head, ["app/**"])
    assert [(f.check, f.path) for f in findings] == [("scope.unowned", "README.md")]
    assert git_scope(git_repo, base, head, ["README.md"]) == []


def test_symlink_out_of_the_repository_is_blocking(git_repo: Path) -> None:
    base = git(git_repo, "rev-parse", "HEAD").strip()
    (git_repo / "app" / "secrets").symlink_to("/etc/passwd")
    (git_repo / "app" / "alias.py").symlink_to("__init__.py")
    head = commit_all(git_repo)
    found = {
        (f.path, f.check, f.severity.value) for f in git_scope(git_repo, base, head, ["app/**"])
    }
    assert found == {
        ("app/secrets", "scope.symlink", "blocking"),
        ("app/alias.py", "scope.symlink", "warning"),
    }


def test_ci_and_conftest_edits_in_a_real_commit(git_repo: Path) -> None:
    base = git(git_repo, "rev-parse", "HEAD").strip()
    (git_repo / ".github" / "workflows").mkdir(parents=True)
    (git_repo / ".github" / "workflows" / "ci.yml").write_text("on: push\n", encoding="utf-8")
    (git_repo / "tests").mkdir()
    (git_repo / "tests" / "conftest.py").write_text("collect_ignore = ['x']\n", encoding="utf-8")
    (git_repo / "app" / "models.py").write_text("X = 1\n", encoding="utf-8")
    head = commit_all(git_repo)
    findings = git_scope(git_repo, base, head, ["**"])
    assert sorted((f.check, f.path) for f in findings) == [
        ("scope.ci", ".github/workflows/ci.yml"),
        ("scope.test-config", "tests/conftest.py"),
    ]

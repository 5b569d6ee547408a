"""Commit safety ("Tamper-proof supervision", item 10): secret files by name and content, and
secrets hidden in files git shows as binary, on real repositories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.git import git

from loop_orchestrator.git.secretfiles import is_secret_path, scan_tree
from loop_orchestrator.plan.model import Task
from loop_orchestrator.verify.models import Finding
from loop_orchestrator.verify.secrets import printable_runs
from loop_orchestrator.verify.verdict import deterministic_findings

#: looks like a GitHub token to the provider pattern; not a real one
TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"

SECRET_FILES = [
    "id_rsa",
    "deploy/id_dsa",
    "home/.ssh/id_ecdsa",
    "id_ed25519",
    "id_ecdsa_sk",
    "keys/id_ed25519_sk",
    "keys/server.ppk",
    ".netrc",
    "_netrc",
    ".npmrc",
    "web/.npmrc",
    ".pypirc",
    "certs/client.p12",
    "certs/client.pfx",
    "android/release.jks",
    "android/app.keystore",
    "kubeconfig",
    "ops/prod.kubeconfig",
    "home/.kube/config",
    ".kube/config",
    "home/.docker/config.json",
    ".aws/credentials",
    ".env",
    ".env.local",
    "config/prod.env",
]
NOT_SECRET = [
    "config.json",
    "docs/kube/config.md",
    "app/keystore.py",
    "netrc.md",
    "id.py",
    "src/environment.py",
    ".docker/Dockerfile",
    "kube/config",
]


@pytest.mark.parametrize("path", SECRET_FILES)
def test_every_common_secret_file_is_secret(path: str) -> None:
    assert is_secret_path(path)


@pytest.mark.parametrize("path", NOT_SECRET)
def test_ordinary_files_are_not_secret(path: str) -> None:
    assert not is_secret_path(path)


def test_scan_tree_finds_secret_files_known_by_their_folder(tmp_path: Path) -> None:
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("x")
    (tmp_path / "kube").mkdir()
    (tmp_path / "kube" / "config").write_text("x")
    assert scan_tree(tmp_path)[0] == [".kube/config"]


def commit(repo: Path, files: dict[str, str | bytes]) -> str:
    for rel, data in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-gpg-sign", "-m", "change")
    return git(repo, "rev-parse", "HEAD").strip()


def findings_for(repo: Path, base: str, head: str) -> list[Finding]:
    task = Task(id="t", objective="o", owns=["**"], done=[])
    return deterministic_findings(repo, task, base, head)[0]


def secret_findings(findings: list[Finding]) -> set[tuple[str, str | None]]:
    return {(f.check, f.path) for f in findings if f.check.startswith("secrets.") and f.blocking}


def test_every_secret_file_kind_blocks_verification(git_repo: Path) -> None:
    base = git(git_repo, "rev-parse", "HEAD").strip()
    head = commit(git_repo, dict.fromkeys(SECRET_FILES, "harmless text\n"))
    found = secret_findings(findings_for(git_repo, base, head))
    assert found == {("secrets.file", p) for p in SECRET_FILES}


def test_service_account_key_blocks_whatever_its_name(git_repo: Path) -> None:
    base = git(git_repo, "rev-parse", "HEAD").strip()
    key = {
        "type": "service_account",
        "project_id": "shop-prod-1234",
        "private_key_id": "3f1c9a0b7d2e",
        "client_email": "ci@shop-prod-1234.iam.x.com",
        "private_key": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7" * 3,
    }
    head = commit(
        git_repo,
        {
            "deploy/shop-prod-1234-3f1c9a0b7d2e.json": json.dumps(key),
            "tests/fixtures/sa.json": json.dumps({**key, "private_key": "fake-key"}),
        },
    )
    found = secret_findings(findings_for(git_repo, base, head))
    assert {p for c, p in found if c == "secrets.cloud-credentials"} == {
        "deploy/shop-prod-1234-3f1c9a0b7d2e.json"
    }


def test_token_after_a_nul_byte_is_found(git_repo: Path) -> None:
    base = git(git_repo, "rev-parse", "HEAD").strip()
    blob = b"\x89PNG\x00\x01\x02" + f"auth={TOKEN}".encode() + b"\x00\xff\xfe"
    wide = b"\xff\xfe" + f"token {TOKEN}".encode("utf-16-le") + b"\x00\x00"
    head = commit(git_repo, {"assets/logo.png": blob, "assets/notes.bin": wide})
    # plain git calls both files binary and shows no lines for them
    assert git(git_repo, "diff", "--numstat", base, head).count("-\t-\t") == 2
    findings = findings_for(git_repo, base, head)
    assert secret_findings(findings) == {
        ("secrets.github", "assets/logo.png"),
        ("secrets.github", "assets/notes.bin"),
    }
    hit = next(f for f in findings if f.path == "assets/logo.png")
    assert "binary file" in hit.message and hit.line is None


def test_token_in_a_file_marked_binary_in_gitattributes_is_found(git_repo: Path) -> None:
    commit(git_repo, {".gitattributes": "*.dat binary\n"})
    base = git(git_repo, "rev-parse", "HEAD").strip()
    head = commit(git_repo, {"data/settings.dat": f"github = {TOKEN}\n"})
    # plain git shows no lines for it (the attribute says binary); lo-orch's diff does
    assert git(git_repo, "diff", "--numstat", base, head).startswith("-\t-\t")
    assert secret_findings(findings_for(git_repo, base, head)) == {
        ("secrets.github", "data/settings.dat")
    }


def test_binary_files_without_secrets_and_unchanged_runs_do_not_block(git_repo: Path) -> None:
    commit(git_repo, {"assets/font.bin": b"\x00\x01" + f"old {TOKEN}".encode() + b"\x00"})
    base = git(git_repo, "rev-parse", "HEAD").strip()
    head = commit(
        git_repo,
        {
            "assets/font.bin": b"\x00\x01" + f"old {TOKEN}".encode() + b"\x00more glyph data\x00",
            "assets/icon.png": b"\x89PNG\x00\x00IHDR plain image bytes\x00",
        },
    )
    assert secret_findings(findings_for(git_repo, base, head)) == set()


def test_printable_runs() -> None:
    runs = printable_runs(
        "\x00\x01short\x00a longer run\x01" + "wide text".encode("utf-16-le").decode("latin-1")
    )
    assert runs == {"a longer run", "wide text"}

"""Which files look like secrets, by name or by folder and name (docs/design.md section 9), and
a walk of a tree for them and for nested repositories.

``worktrees``, ``staging`` and ``workspace`` refuse to commit or merge such files;
``verify/secrets.py`` reports them in a task's work.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

#: basenames that look like secrets (docs/design.md sections 9 and 10); matched
#: case-insensitively against every part of a path
SECRET_PATTERNS = (
    ".env*",
    "*.env",
    "*.pem",
    "*credential*",
    "*.key",
    # SSH private keys of every type (and the *_sk hardware-token variants), PuTTY keys
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "id_xmss*",
    "*.ppk",
    # tokens of network tools and package registries
    ".netrc",
    "_netrc",
    ".npmrc",
    ".pypirc",
    ".pgpass",
    ".htpasswd",
    # key stores
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*.bks",
    # Kubernetes cluster credentials
    "kubeconfig",
    "kubeconfig.yaml",
    "kubeconfig.yml",
    "*.kubeconfig",
)
#: secret files known by their folder as well as their name (matched as a path suffix)
SECRET_PATH_PATTERNS = (
    ".kube/config",
    ".docker/config.json",
    ".aws/credentials",
    ".config/gcloud/*.json",
    ".config/gh/hosts.yml",
)
#: ``git merge-tree --write-tree`` appeared in git 2.38


def is_secret_name(name: str) -> bool:
    """Whether one file or folder name matches a secret pattern."""
    lowered = name.lower()
    return any(fnmatch.fnmatchcase(lowered, pat) for pat in SECRET_PATTERNS)


def is_secret_path(path: str) -> bool:
    """Whether a repo-relative path, or a folder on it, matches a secret pattern."""
    parts = [part.lower() for part in PurePosixPath(path).parts]
    if any(is_secret_name(part) for part in parts):
        return True
    for pattern in SECRET_PATH_PATTERNS:
        n = pattern.count("/") + 1
        if any(
            fnmatch.fnmatchcase("/".join(parts[i : i + n]), pattern)
            for i in range(len(parts) - n + 1)
        ):
            return True
    return False


def scan_tree(root: Path) -> tuple[list[str], list[str]]:
    """Secret-like files (and folders) and nested repositories under ``root``.

    Paths are relative and sorted; symlinks are not followed; ``root``'s own ``.git`` is
    skipped.
    """
    secrets: list[str] = []
    nested: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if here != root and (".git" in dirnames or ".git" in filenames):
            nested.append(here.relative_to(root).as_posix())
            dirnames.clear()
            continue
        found = [(here / n).relative_to(root).as_posix() for n in filenames]
        secrets += [rel for rel in found if is_secret_path(rel)]
        keep = []
        for name in dirnames:
            if name == ".git":
                continue
            if is_secret_name(name):
                secrets.append((here / name).relative_to(root).as_posix() + "/")
            else:
                keep.append(name)
        dirnames[:] = keep
    return sorted(secrets), sorted(nested)

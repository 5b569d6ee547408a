"""Read-only views of the base commit for signature lookup: list, grep, read.

Listing and reading are workspace's (``list_files``, ``file_at``); the ``git grep`` that
narrows a name search to the files mentioning it goes through ``gitutil.git`` (the one git
gateway) and lives here because only intake needs it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import cached_property
from pathlib import Path

from loop_orchestrator.git import gateway as gitutil
from loop_orchestrator.git.gateway import git, oid
from loop_orchestrator.git.parse import split_z
from loop_orchestrator.plan.signatures import SOURCE_SUFFIXES

log = logging.getLogger(__name__)

#: files read at most when searching the tree for names
MAX_GREP_FILES = 200


class BaseTree:
    """The files of one commit, read lazily and cached."""

    def __init__(self, repo: Path, sha: str) -> None:
        self.repo = repo
        self.sha = sha
        self._texts: dict[str, str | None] = {}

    @cached_property
    def paths(self) -> frozenset[str]:
        return frozenset(gitutil.list_files(self.repo, self.sha))

    def read(self, path: str) -> str | None:
        if path not in self._texts:
            self._texts[path] = (
                gitutil.file_at(self.repo, self.sha, path) if path in self.paths else None
            )
        return self._texts[path]

    def sources(self, paths: Iterable[str]) -> dict[str, str]:
        """path -> text for the readable files among ``paths``."""
        out: dict[str, str] = {}
        for p in paths:
            text = self.read(p)
            if text is not None:
                out[p] = text
        return out

    def files_naming(self, names: Iterable[str]) -> list[str]:
        """Python/TS/JS files of the commit in which any of ``names`` occurs as a word."""
        wanted = [n for n in dict.fromkeys(names) if n]
        if not wanted:
            return []
        args = ["-c", "core.quotepath=false", "grep", "-l", "-z", "-w", "-F", "-I"]
        for n in wanted:
            args += ["-e", n]
        sha = oid(self.repo, self.sha)
        args += [sha, "--", *(f"*{s}" for s in SOURCE_SUFFIXES)]
        res = git(self.repo, *args, check=False, view=True)
        if res.returncode not in (0, 1):  # 1: no match
            log.warning("git grep failed", extra={"stderr": res.stderr})
            return []
        prefix = f"{sha}:"
        found = [p[len(prefix) :] if p.startswith(prefix) else p for p in split_z(res.stdout)]
        return sorted(found)[:MAX_GREP_FILES]

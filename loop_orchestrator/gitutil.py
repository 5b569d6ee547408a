"""The one git gateway, and plumbing for ``workspace``: parsing git's machine output,
secret patterns.

Nothing here decides policy; ``workspace`` does (and re-exports the revision and diff
functions, which verification imports from there). Every git process lo-orch starts goes
through ``git()`` (DESIGN.md section 10, "Git"), which agents cannot steer: an argument list
via ``proc.run``, leaked ``GIT_*`` variables removed, no system or global config (an agent
runs as the same user and can edit ``~/.gitconfig``), no replace objects, no repository
hooks, fsmonitor, external diff or global attributes file, English messages, and a
``GitError`` with the command's stderr on failure. Commands that convert working-tree
content get every filter and merge driver named in the repository's config neutralised.

Work on objects alone (diffs, merges, commits, reading files) runs in the *object view*: a
private bare repository that shares only the object store with the user's, so nothing an
agent writes into ``.git`` (config, ``info/attributes``, ``info/grafts``, replace refs) or
into a tree (``.gitattributes``: textconv, ``-diff``, merge drivers) changes what the
supervisor sees. Ref names are resolved in the user's repository, then only shas travel.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import json
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from loop_orchestrator import private, proc
from loop_orchestrator.errors import GitError

if TYPE_CHECKING:
    from loop_orchestrator.config import WorkspaceConfig

#: basenames that look like secrets (DESIGN.md section 9, issue 3, and "Tamper-proof
#: supervision" item 10); matched case-insensitively against every part of a path
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
MIN_GIT = (2, 38)
#: raw content, never what a diff driver, textconv or a ``binary``/``-diff`` attribute shows
_DIFF = (
    "-c",
    "core.quotepath=false",
    "diff",
    "--no-renames",
    "--no-ext-diff",
    "--no-textconv",
    "--text",
    "--no-color",
)
#: settings no repository or user config may override for lo-orch's own git commands
HARDENING = (
    "core.hooksPath=/dev/null",  # no hook of the repository (post-commit, reference-transaction)
    "core.fsmonitor=false",
    "core.attributesFile=/dev/null",
    "core.commitGraph=false",  # objects/info/commit-graph is agent-writable: parents could lie
    "core.pager=cat",
    "diff.external=",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "protocol.allow=never",  # lo-orch never talks to a remote
)
#: environment every git process of lo-orch gets
_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_NO_REPLACE_OBJECTS": "1",
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "LC_ALL": "C",  # messages we show or match must not depend on the user's locale
}
#: subcommands that read or write working-tree content, so filter and merge drivers apply
_CONVERTING = frozenset(
    {
        "add",
        "commit",
        "status",
        "merge",
        "worktree",
        "reset",
        "checkout",
        "switch",
        "stash",
        "restore",
        "rm",
        "mv",
        "diff",
        "apply",
        "cherry-pick",
        "revert",
        "rebase",
        "read-tree",
        "checkout-index",
        "update-index",
    }
)
_DRIVER_KEY = re.compile(r"^(filter|merge)\.(.+)\.([a-z]+)$")
#: the built-in text merge, for a merge driver an agent may have named in the config
_SAFE_MERGE = "git merge-file --quiet -L ours -L base -L theirs %A %O %B"
_SHA = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?\Z")


def git(
    cwd: Path,
    *args: str,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float | None = None,
    hint: str | None = None,
    view: bool = False,
) -> proc.Result:
    """Run ``git *args`` in ``cwd`` through the gateway; ``check`` raises ``GitError``.

    With ``view`` the command runs in the object view of the repository at ``cwd`` (only
    shas mean anything there; see the module docstring).
    """
    full_env = proc.no_git_env()
    if env:
        full_env.update(env)
    full_env.update(_ENV)
    opts = [arg for item in HARDENING for arg in ("-c", item)]
    if view:
        gitdir, objects = object_view(cwd)
        full_env["GIT_OBJECT_DIRECTORY"] = str(objects)
        opts += [f"--git-dir={gitdir}"]
        cwd = gitdir  # nothing of the user's working tree (.gitattributes) is read
    elif _subcommand(args) in _CONVERTING:
        opts += _driver_overrides(cwd, full_env)
    # `git worktree add` names the new admin folder after the first free `<name>N` and reads
    # the others while one may be half-written: two at once in one process failed with
    # "failed to read .git/worktrees/tree1/commondir" (a 64-task benchmark run, git 2.39)
    serial = _WORKTREE_LOCK if _subcommand(args) == "worktree" else contextlib.nullcontext()
    with serial:
        result = proc.run(
            ["git", *opts, *args],
            cwd=cwd,
            env=full_env,
            input=input,
            timeout=timeout,
            check=False,
        )
    if check and not result.ok:
        raise git_failure(result, hint=hint)
    return result


_WORKTREE_LOCK = threading.Lock()


def _subcommand(args: Sequence[str]) -> str | None:
    i = 0
    while i < len(args):
        if args[i] == "-c":
            i += 2
        elif args[i].startswith("-"):
            i += 1
        else:
            return args[i]
    return None


def _driver_overrides(cwd: Path, env: Mapping[str, str]) -> list[str]:
    """``-c`` options that turn every filter and merge driver of the config into a no-op.

    Which driver a path uses comes from ``.gitattributes`` and ``.git/info/attributes``
    (agent-writable, no option ignores them in git 2.39); the command a driver runs comes
    from the config, so every name found there (includes followed) is overridden. A driver
    planted between this read and the command it guards would still run: the commands that
    matter most (diffs, merges, checkouts for checks) run in the object view instead.
    """
    res = proc.run(["git", "config", "--list", "--name-only", "-z"], cwd=cwd, env=env, check=False)
    opts: list[str] = []
    for key in sorted(set(split_z(res.stdout))):
        match = _DRIVER_KEY.match(key)
        if match is None:
            continue
        kind, name = match.group(1), match.group(2)
        if kind == "filter":
            sets = [f"filter.{name}.{k}=" for k in ("clean", "smudge", "process")]
            sets.append(f"filter.{name}.required=false")
        else:
            sets = [f"merge.{name}.driver={_SAFE_MERGE}", f"merge.{name}.recursive=text"]
        opts += [arg for item in sets for arg in ("-c", item)]
    return opts


def _common_dir(repo: Path) -> Path:
    res = proc.run(
        ["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
        cwd=repo,
        env={**proc.no_git_env(), **_ENV},
        check=False,
    )
    if not res.ok:
        raise git_failure(res, hint=f"{repo} is not a usable git repository.")
    return Path(res.stdout.strip()).resolve()


_VIEWS: dict[Path, tuple[Path, Path]] = {}


def object_view(repo: Path) -> tuple[Path, Path]:
    """(private git dir, the user's object store) for ``repo``: created once, ``0700``."""
    key = repo.resolve()
    known = _VIEWS.get(key)
    if known is not None and (known[0] / "HEAD").exists():
        return known
    objects = _common_dir(key) / "objects"
    gitdir = private.repo_dir(_common_dir(key)) / "objects-view.git"
    with _VIEW_LOCK:
        if not (gitdir / "HEAD").exists():
            _create_view(gitdir, objects)
        _VIEWS[key] = (gitdir, objects)
    return gitdir, objects


def _create_view(gitdir: Path, objects: Path) -> None:
    """Make the object view whole in a temporary folder, then rename it into place: two
    threads or processes creating it at once (parallel verifications) must not meet in a
    half-made repository ("could not set core.repositoryformatversion")."""
    tmp = gitdir.with_name(f".{gitdir.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    proc.run(["git", "init", "--quiet", "--bare", str(tmp)], env={**proc.no_git_env(), **_ENV})
    # for git run by checks inside a temp checkout, which do not get our environment
    alternates = tmp / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(f"{objects}\n", encoding="utf-8")
    try:
        tmp.rename(gitdir)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process made it first
        if not (gitdir / "HEAD").exists():
            raise


_VIEW_LOCK = threading.Lock()


def git_failure(result: proc.Result, *, hint: str | None = None) -> GitError:
    """A ``GitError`` naming the command and the tail of its output."""
    shown = " ".join(result.cmd)
    status = "timed out" if result.returncode is None else f"exited {result.returncode}"
    detail = (result.stderr or result.stdout).strip()
    message = f"`{shown}` {status}"
    if detail:
        message += ":\n" + "\n".join(detail.splitlines()[-15:])
    return GitError(message, hint=hint)


@functools.cache
def git_version() -> tuple[int, int]:
    """The installed git's (major, minor)."""
    out = proc.run(["git", "--version"], env={**proc.no_git_env(), **_ENV}).stdout
    match = re.search(r"(\d+)\.(\d+)", out)
    if match is None:
        msg = f"cannot read the git version from {out.strip()!r}"
        raise GitError(msg)
    return int(match.group(1)), int(match.group(2))


def require_git() -> None:
    """Refuse to work with a git too old for ``merge-tree --write-tree``."""
    version = git_version()
    if version < MIN_GIT:
        msg = (
            f"git {version[0]}.{version[1]} is too old: lo-orch needs git "
            f"{MIN_GIT[0]}.{MIN_GIT[1]} or newer (for `git merge-tree --write-tree`)"
        )
        raise GitError(
            msg,
            hint="Upgrade git (e.g. from your distribution's backports or git-scm.com).",
        )


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


def split_z(text: str) -> list[str]:
    """NUL-separated output into fields, without the empty tail."""
    return [f for f in text.split("\0") if f]


@dataclass(frozen=True)
class Change:
    """One changed path; ``status`` is A, M, D or T. A rename is a ``D`` plus an ``A``."""

    status: str
    path: str
    old_mode: str
    new_mode: str


def parse_raw_diff(text: str) -> list[Change]:
    """``git diff --raw -z --no-renames`` output into changes.

    Each record is ``:<old mode> <new mode> <old sha> <new sha> <status>\\0<path>\\0``.
    """
    fields = text.split("\0")
    changes: list[Change] = []
    i = 0
    while i < len(fields) - 1:
        meta = fields[i]
        if not meta.startswith(":"):
            i += 1
            continue
        old_mode, new_mode, _old, _new, status = meta[1:].split(" ")
        changes.append(Change(status[:1], fields[i + 1], old_mode, new_mode))
        i += 2
    return changes


@dataclass(frozen=True)
class StatusEntry:
    xy: str
    path: str


def parse_status(text: str) -> list[StatusEntry]:
    """``git status --porcelain=v1 -z --no-renames`` output into entries."""
    return [StatusEntry(rec[:2], rec[3:]) for rec in split_z(text)]


@dataclass(frozen=True)
class WorktreeInfo:
    path: Path
    head: str | None
    branch: str | None  # short name, None when detached
    locked: bool
    prunable: bool


def parse_worktrees(text: str) -> list[WorktreeInfo]:
    """``git worktree list --porcelain -z`` output into records."""
    infos: list[WorktreeInfo] = []
    record: dict[str, str] = {}

    def flush() -> None:
        if "worktree" in record:
            branch = record.get("branch")
            if branch is not None and branch.startswith("refs/heads/"):
                branch = branch[len("refs/heads/") :]
            infos.append(
                WorktreeInfo(
                    Path(record["worktree"]),
                    record.get("HEAD"),
                    branch,
                    "locked" in record,
                    "prunable" in record,
                )
            )
        record.clear()

    for field in text.split("\0"):
        if not field:
            flush()
            continue
        key, _, value = field.partition(" ")
        record[key] = value
    flush()
    return infos


_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def unquote_path(text: str) -> str:
    """Undo git's C-style quoting of a path (``"a\\tb"``); plain paths pass through."""
    if len(text) < 2 or not (text.startswith('"') and text.endswith('"')):
        return text
    body = text[1:-1]
    out = bytearray()
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\" or i + 1 == len(body):
            out += ch.encode("utf-8")
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _C_ESCAPES:
            out.append(_C_ESCAPES[nxt])
            i += 2
        elif re.fullmatch(r"[0-7]{3}", body[i + 1 : i + 4]):
            out.append(int(body[i + 1 : i + 4], 8))
            i += 4
        else:
            out += ch.encode("utf-8")
            i += 1
    return out.decode("utf-8", "replace")


_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _header_path(line: str) -> str | None:
    """The new-side path of a ``+++ b/path`` line, None for ``/dev/null``."""
    raw = line[4:]
    # git appends a TAB to ---/+++ names containing a space (for GNU patch).
    if raw.endswith("\t"):
        raw = raw[:-1]
    if raw == "/dev/null":
        return None
    raw = unquote_path(raw)
    return raw[2:] if raw.startswith("b/") else raw


def parse_added_lines(text: str) -> dict[str, list[tuple[int, str]]]:
    """Added lines per file (new-side line numbers) from a ``-U0`` patch.

    Hunks are walked by their line counts, so a content line such as ``++ x`` (shown as
    ``+++ x``) is never taken for a file header.
    """
    added: dict[str, list[tuple[int, str]]] = {}
    path: str | None = None
    old_left = new_left = 0
    lineno = 0
    # split("\n"), not splitlines(): content may hold \r, \x0b or U+2028.
    for line in text.split("\n"):
        if old_left > 0 or new_left > 0:
            tag = line[:1]
            if tag == "+":
                if path is not None:
                    added.setdefault(path, []).append((lineno, line[1:]))
                lineno += 1
                new_left -= 1
            elif tag == "-":
                old_left -= 1
            elif tag == " ":
                lineno += 1
                old_left -= 1
                new_left -= 1
            continue
        if line.startswith("diff --git "):
            path = None
        elif line.startswith("+++ "):
            path = _header_path(line)
        elif line.startswith("@@ "):
            match = _HUNK.match(line)
            if match is None:
                continue
            old_left = int(match.group(1)) if match.group(1) is not None else 1
            lineno = int(match.group(2))
            new_left = int(match.group(3)) if match.group(3) is not None else 1
    return added


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


def quote_list(items: Sequence[str], limit: int = 10) -> str:
    """``a, b, c and 4 more`` for messages."""
    shown = ", ".join(items[:limit])
    if len(items) > limit:
        shown += f" and {len(items) - limit} more"
    return shown


# revisions and diffs ----------------------------------------------------------------------


def _rev_arg(ref: str) -> str:
    if not ref or ref.startswith("-") or "\0" in ref:
        msg = f"invalid revision {ref!r}"
        raise GitError(msg, hint="Pass a branch name, tag or commit sha.")
    return ref


def rev_parse(repo: Path, ref: str) -> str:
    """The commit sha ``ref`` names; ``GitError`` if there is no such commit."""
    res = git(
        repo,
        "rev-parse",
        "--verify",
        "--quiet",
        "--end-of-options",
        f"{_rev_arg(ref)}^{{commit}}",
        check=False,
    )
    if not res.ok:
        msg = f"unknown revision {ref!r} in {repo}: no branch, tag or commit has that name"
        raise GitError(msg, hint="Check the name with `git branch` or `git log --oneline`.")
    return res.stdout.strip()


def oid(repo: Path, rev: str) -> str:
    """``rev`` as a sha: a full sha is taken as it is, a name is resolved in ``repo``."""
    return rev if _SHA.match(rev) else rev_parse(repo, rev)


def grep_files(repo: Path, commit: str, words: Sequence[str]) -> list[str]:
    """Paths in ``commit``'s tree that contain any of ``words`` as a whole word."""
    if not words:
        return []
    sha = oid(repo, commit)
    patterns = [arg for w in words for arg in ("-e", w)]
    res = git(
        repo,
        "grep",
        "--no-textconv",
        "-l",
        "-z",
        "-w",
        "-F",
        *patterns,
        sha,
        "--",
        check=False,
        view=True,
    )
    if res.returncode not in (0, 1):
        raise git_failure(res)
    return [p.removeprefix(f"{sha}:") for p in split_z(res.stdout)]


def merge_base(repo: Path, a: str, b: str) -> str:
    """The best common ancestor of ``a`` and ``b`` (``GitError`` when they share none)."""
    res = git(repo, "merge-base", oid(repo, a), oid(repo, b), check=False, view=True)
    if not res.ok or not res.stdout.strip():
        msg = f"{a!r} and {b!r} have no common ancestor in {repo}"
        raise GitError(msg, hint="Was the branch rewritten? Start the task again.")
    return res.stdout.strip()


def is_ancestor(repo: Path, a: str, b: str) -> bool:
    """Whether commit ``a`` is ``b`` or one of its ancestors."""
    res = git(
        repo, "merge-base", "--is-ancestor", oid(repo, a), oid(repo, b), check=False, view=True
    )
    if res.returncode in (0, 1):
        return res.returncode == 0
    raise git_failure(res)


def changed_paths(repo: Path, base: str, commit: str) -> list[Change]:
    """Paths changed from ``base`` to ``commit`` with modes (symlink and mode changes show)."""
    out = git(
        repo,
        *_DIFF,
        "--raw",
        "-z",
        "--no-abbrev",
        oid(repo, base),
        oid(repo, commit),
        "--",
        view=True,
    ).stdout
    return parse_raw_diff(out)


def added_lines(repo: Path, base: str, commit: str) -> dict[str, list[tuple[int, str]]]:
    """Added lines per file with their line numbers in ``commit``."""
    out = git(
        repo,
        *_DIFF,
        "-U0",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        oid(repo, base),
        oid(repo, commit),
        "--",
        view=True,
    ).stdout
    return parse_added_lines(out)


def diff_text(repo: Path, base: str, commit: str, paths: Sequence[str] | None = None) -> str:
    """The unified diff from ``base`` to ``commit``, optionally limited to ``paths``."""
    if paths is not None and not paths:
        return ""
    return git(
        repo,
        "--literal-pathspecs",
        *_DIFF,
        "--src-prefix=a/",
        "--dst-prefix=b/",
        oid(repo, base),
        oid(repo, commit),
        "--",
        *(paths or ()),
        view=True,
    ).stdout


def diff_stat(repo: Path, base: str, commit: str) -> str:
    """``git diff --stat`` from ``base`` to ``commit``."""
    return git(
        repo, *_DIFF, "--stat=120", oid(repo, base), oid(repo, commit), "--", view=True
    ).stdout


def file_at(repo: Path, commit: str, relpath: str) -> str | None:
    """The raw text of ``relpath`` in ``commit``; None when it is absent or not a file."""
    sha = oid(repo, commit)
    path = relpath.strip("/")
    parts = path.split("/")
    if not path or "\n" in path or any(p in ("", ".", "..") for p in parts):
        return None
    # one process: `<oid> <type> <size>` then the content, or `<name> missing`
    res = git(repo, "cat-file", "--batch", input=f"{sha}:{path}\n", view=True, check=False)
    head, _, rest = res.stdout.partition("\n")
    fields = head.split(" ")
    if not res.ok or len(fields) != 3 or fields[1] != "blob":
        return None
    return rest[:-1] if rest.endswith("\n") else rest


def update_ref(repo: Path, branch: str, new: str | None, old: str | None, reason: str) -> None:
    """Move ``branch`` from ``old`` to ``new`` only if it still points at ``old`` (None: only
    if it does not exist; ``new`` None: delete it), then read it back."""
    ref = f"refs/heads/{branch}"
    zero = "0" * 40
    args = ("-d", ref, old or zero) if not new else (ref, new, old or zero)
    res = git(repo, "update-ref", "-m", reason, *args, check=False)
    found = git(repo, "rev-parse", "--verify", "--quiet", ref, check=False).stdout.strip()
    if not res.ok or found != (new or ""):
        was = old[:12] if old else "absent"
        msg = (
            f"{branch} moved while lo-orch was updating it (expected {was}, found "
            f"{found[:12] or 'absent'}); nothing changed"
        )
        raise GitError(msg, hint="Something else changed the branch; run again to retry.")


def merge_tree(repo: Path, ours: str, theirs: str) -> tuple[str | None, list[str]]:
    """(tree, []) for a clean merge, (None, conflicting paths) otherwise. No checkout."""
    res = git(
        repo,
        "merge-tree",
        "--write-tree",
        "--name-only",
        "--no-messages",
        "-z",
        oid(repo, ours),
        oid(repo, theirs),
        check=False,
        view=True,
    )
    if res.returncode == 0:
        return split_z(res.stdout)[0], []
    if res.returncode == 1:
        return None, sorted(dict.fromkeys(split_z(res.stdout)[1:]))
    raise git_failure(res, hint="The two commits may have no common history.")


def identity(settings: WorkspaceConfig) -> dict[str, str]:
    return {
        "GIT_AUTHOR_NAME": settings.author_name,
        "GIT_AUTHOR_EMAIL": settings.author_email,
        "GIT_COMMITTER_NAME": settings.author_name,
        "GIT_COMMITTER_EMAIL": settings.author_email,
    }


def list_files(repo: Path, commit: str) -> list[str]:
    """Every file path (blobs, symlinks included) in ``commit``'s tree."""
    out = git(repo, "ls-tree", "-r", "-z", "--full-tree", oid(repo, commit), view=True).stdout
    files = []
    for rec in split_z(out):
        meta, _, path = rec.partition("\t")
        if meta.split(" ")[1:2] == ["blob"]:
            files.append(path)
    return files


#: untracked folders of the main checkout that ``temp_checkout`` can link into its tree
DEPENDENCY_DIRS = (".venv", "venv", "node_modules")
#: a temporary checkout's folder prefix, and the file in it naming its owner (a process
#: and a repository), so a later start removes those of a killed process (``recovery``)
CHECKOUT_PREFIX = "lo-orch-checkout-"
CHECKOUT_OWNER_FILE = "owner.json"


def _write_owner(holder: Path, repo: Path) -> None:
    start = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        stat = Path(f"/proc/{os.getpid()}/stat").read_text(encoding="utf-8", errors="replace")
        start = stat[stat.rindex(")") + 2 :].split()[19]
    (holder / CHECKOUT_OWNER_FILE).write_text(
        json.dumps({"pid": os.getpid(), "start": start, "repo": str(repo.resolve())}),
        encoding="utf-8",
    )


@contextlib.contextmanager
def temp_checkout(repo: Path, commit: str, *, link_dependencies: bool = False) -> Iterator[Path]:
    """A clean, detached checkout of ``commit`` in a temporary folder, gone afterwards.

    Checks run here may leave build output behind; the folder is ours alone, so it is
    deleted as a whole and its worktree record pruned (no user work can live in it). With
    ``link_dependencies`` the main checkout's installed dependencies (``.venv``,
    ``node_modules``...) are linked in, so the project's own test command runs there.
    """
    sha = oid(repo, commit)
    holder = Path(tempfile.mkdtemp(prefix=CHECKOUT_PREFIX))
    tree = holder / "tree"
    links: list[Path] = []
    try:
        _write_owner(holder, repo)
        # a worktree of the object view: no config, attributes or filters of the user's
        # repository apply to the files the checks run on
        git(repo, "worktree", "add", "--quiet", "--detach", str(tree), sha, view=True)
        if link_dependencies:
            for name in DEPENDENCY_DIRS:
                source, target = repo / name, tree / name
                if source.is_dir() and not target.exists() and not target.is_symlink():
                    target.symlink_to(source, target_is_directory=True)
                    links.append(target)
        yield tree
    finally:
        # Unlink our links first, so removing the folder can never walk into the user's.
        for link in links:
            with contextlib.suppress(OSError):
                link.unlink()
        shutil.rmtree(holder, ignore_errors=True)
        git(repo, "worktree", "prune", check=False, view=True)

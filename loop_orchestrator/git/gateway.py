"""The one git gateway, and the revision, diff and ref functions built on it.

Nothing here decides policy; ``workspace`` does. Parsing git's output lives in
``gitparse.py``, secret-looking file names in ``secretfiles.py``, temporary checkouts in
``tempcheckout.py``. Every git process lo-orch starts goes
through ``git()`` (docs/design.md section 10, "Git"), which agents cannot steer: an argument list
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
import functools
import os
import re
import shutil
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from loop_orchestrator import proc
from loop_orchestrator.errors import GitError
from loop_orchestrator.git.parse import Change, parse_added_lines, parse_raw_diff, split_z
from loop_orchestrator.runstate import private

if TYPE_CHECKING:
    from loop_orchestrator.config import WorkspaceConfig

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
    terminal: bool = False,
    keep_bytes: bool = False,
) -> proc.Result:
    """Run ``git *args`` in ``cwd`` through the gateway; ``check`` raises ``GitError``.

    With ``view`` the command runs in the object view of the repository at ``cwd`` (only
    shas mean anything there; see the module docstring). ``terminal``: it may talk to a
    remote whose ssh asks the person for a passphrase (``proc.run``).
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
    elif _converts(args):
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
            terminal=terminal,
            keep_bytes=keep_bytes,
        )
    if check and not result.ok:
        raise git_failure(result, hint=hint)
    return result


_WORKTREE_LOCK = threading.Lock()


def _subcommand(args: Sequence[str]) -> str | None:
    at = _subcommand_at(args)
    return None if at is None else args[at]


def _subcommand_at(args: Sequence[str]) -> int | None:
    """Where the first word that is not an option (or ``-c``'s value) is in ``args``."""
    i = 0
    while i < len(args):
        if args[i] == "-c":
            i += 2
        elif args[i].startswith("-"):
            i += 1
        else:
            return i
    return None


#: ``git worktree`` subcommands that read or write only the admin folders, never a file's
#: content (no filter or merge driver can run): a ``config --list`` before each was for
#: nothing (three ``worktree list`` a task)
_WORKTREE_ADMIN = frozenset({"list", "prune", "lock", "unlock"})


#: the only words of a ``git diff`` of the index against HEAD that lists paths (names, or
#: raw records of modes and object names) or only says whether there is a difference: it
#: compares object names, never a file's content
_INDEX_NAMES_DIFF = frozenset(
    {
        *("--cached", "--staged", "--no-renames", "-z"),
        *("--name-only", "--name-status", "--raw", "--quiet"),
    }
)


def _converts(args: Sequence[str]) -> bool:
    """Whether ``git *args`` may read or write working-tree content (filters and merge
    drivers apply: ``_driver_overrides``)."""
    at = _subcommand_at(args)
    if at is None:
        return False
    if args[at] == "worktree":
        return _subcommand(args[at + 1 :]) not in _WORKTREE_ADMIN
    if args[at] == "diff":
        rest = [a for a in args[at + 1 :] if not a.startswith("--diff-filter=")]
        cached = {"--cached", "--staged"} & set(rest)
        listed = {"--name-only", "--name-status", "--raw", "--quiet"} & set(rest)
        return not (cached and listed and set(rest) <= _INDEX_NAMES_DIFF)
    return args[at] in _CONVERTING


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


#: repository folder -> its common git folder, as git first gave it in this process
_COMMON: dict[Path, Path] = {}


def common_dir(repo: Path) -> Path:
    """The repository's shared git folder (``.git`` of the main checkout, also for a
    linked one), absolute: asked of git once per folder and process (a run asks it at
    start, before any session could rewrite a checkout's ``.git`` file)."""
    known = _COMMON.get(repo)
    if known is not None and known.is_dir():
        return known
    found = _ask_common_dir(repo)
    _COMMON[repo] = found
    return found


def _ask_common_dir(repo: Path) -> Path:
    res = proc.run(
        ["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
        cwd=repo,
        env={**proc.no_git_env(), **_ENV},
        check=False,
    )
    if not res.ok:
        raise git_failure(res, hint=f"{repo} is not a usable git repository.")
    return Path(res.stdout.strip()).resolve()


#: common git folder -> its object format (sha1 or sha256), as git gave it in this process
_FORMATS: dict[Path, str] = {}


def object_format(repo: Path) -> str:
    """The hash ``repo``'s objects are named by (``sha1`` or ``sha256``): asked of git once
    per repository and process (a repository's format is fixed when it is made)."""
    common = common_dir(repo)
    known = _FORMATS.get(common)
    if known is None:
        known = git(repo, "rev-parse", "--show-object-format").stdout.strip() or "sha1"
        _FORMATS[common] = known
    return known


_VIEWS: dict[Path, tuple[Path, Path]] = {}


def object_view(repo: Path) -> tuple[Path, Path]:
    """(private git dir, the user's object store) for ``repo``: created once, ``0700``."""
    key = repo.resolve()
    known = _VIEWS.get(key)
    if known is not None and (known[0] / "HEAD").exists():
        return known
    objects = common_dir(key) / "objects"
    gitdir = private.repo_dir(common_dir(key)) / "objects-view.git"
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


def rev_parse_all(repo: Path, refs: Sequence[str]) -> list[str]:
    """The commit sha each of ``refs`` names, asked of git in one process; ``GitError``
    naming the first that names no commit (found as ``rev_parse`` finds it)."""
    # (no --end-of-options: without --verify, git 2.39 prints it back; no argument starts
    # with "-", _rev_arg refuses that)
    args = [f"{_rev_arg(ref)}^{{commit}}" for ref in refs]
    res = git(repo, "rev-parse", *args, check=False)
    shas = res.stdout.split()
    if res.ok and len(shas) == len(refs) and all(_SHA.match(sha) for sha in shas):
        return shas
    return [rev_parse(repo, ref) for ref in refs]  # (the one at fault raises, by name)


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


def _tree_path(relpath: str) -> str | None:
    """``relpath`` as a path in a tree (``<commit>:<path>``), or None for one no tree has."""
    path = relpath.strip("/")
    parts = path.split("/")
    if not path or "\n" in path or any(p in ("", ".", "..") for p in parts):
        return None
    return path


def files_at(repo: Path, wanted: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str | None]:
    """The raw text of each (commit, path) of ``wanted``, None where it is absent or not a
    file, all read by one ``git cat-file --batch`` (a verification reads every changed file
    at the base and at the commit: a git start for each was most of what that cost)."""
    shas = {commit: oid(repo, commit) for commit, _ in wanted}
    found: dict[tuple[str, str], str | None] = dict.fromkeys(wanted)
    asked = [(key, path) for key in found if (path := _tree_path(key[1])) is not None]
    if not asked:
        return found
    specs = "".join(f"{shas[commit]}:{path}\n" for (commit, _), path in asked)
    res = git(repo, "cat-file", "--batch", input=specs, view=True, check=False, keep_bytes=True)
    answers = batch_answers(res.raw_stdout or b"", len(asked)) if res.ok else []
    for (key, _path), answer in zip(asked, answers, strict=False):
        if answer is not None and answer[0] == b"blob":
            # (decoded as command output is: a last CR, before the answer's own newline,
            # is read as that newline)
            found[key] = proc.as_text(answer[1] + b"\n")[:-1]
    return found


def batch_answers(data: bytes, count: int) -> list[tuple[bytes, bytes] | None]:
    """The first ``count`` answers in ``data``, the output of ``git cat-file --batch``, in
    order: (the object's type, its content) by the byte count its header gives, or None for
    a name git does not have (``missing``, ``ambiguous``); fewer where the output ends, or
    stops being what git writes, before the ``count``-th."""
    answers: list[tuple[bytes, bytes] | None] = []
    at = 0
    while len(answers) < count:
        end = data.find(b"\n", at)
        if end < 0:
            break
        fields = data[at:end].split(b" ")
        if fields[-1] in (b"missing", b"ambiguous"):
            answers.append(None)
            at = end + 1
            continue
        if len(fields) != 3 or not fields[2].isdigit():
            break
        size = int(fields[2])
        body = data[end + 1 : end + 1 + size]
        if len(body) != size or data[end + 1 + size : end + 2 + size] != b"\n":
            break
        answers.append((fields[1], body))
        at = end + 2 + size
    return answers


def file_at(repo: Path, commit: str, relpath: str) -> str | None:
    """The raw text of ``relpath`` in ``commit``; None when it is absent or not a file."""
    return files_at(repo, [(commit, relpath)])[(commit, relpath)]


def ref_transaction(repo: Path, updates: Sequence[tuple[str, str, str]], reason: str) -> bool:
    """Apply ``updates`` (``(ref, new, old)``; a 40-zero ``new`` deletes, a 40-zero ``old``
    requires the ref to be absent) in one atomic ``git update-ref --stdin`` transaction
    (start, prepare, commit): all of them or none. False when git refused it (a ref was not
    at its ``old`` value any more): nothing changed."""
    zero = "0" * 40
    lines = ["start"]
    for ref, new, old in updates:
        if new == zero:
            lines.append(f"delete {ref} {old}")
        else:
            lines.append(f"update {ref} {new} {old}")
    lines += ["prepare", "commit", ""]
    res = git(repo, "update-ref", "-m", reason, "--stdin", input="\n".join(lines), check=False)
    return res.ok


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


# the one place lo-orch talks to a remote (`lo-orch pr`, docs/design.md section 12) ------

#: for ls-remote and push only: the transports a person's remote uses; ``ext::`` (runs a
#: command) stays off, as do the repository's own receive/upload-pack commands and
#: credential helpers (the token comes through the environment, ``pullrequest/decide.py``)
_REMOTE_OPTS = (
    "protocol.file.allow=always",
    "protocol.ssh.allow=always",
    "protocol.https.allow=always",
    "protocol.http.allow=always",
    "protocol.git.allow=always",
    "protocol.ext.allow=never",
    "credential.helper=",
)


def remote_url(repo: Path, remote: str) -> str | None:
    """The URL ``git push REMOTE`` pushes to; None when there is no such remote."""
    if not remote or remote.startswith("-") or "\0" in remote:
        return None
    res = git(repo, "remote", "get-url", "--push", "--", remote, check=False)
    return res.stdout.strip() if res.ok and res.stdout.strip() else None


def remote_head(
    repo: Path,
    remote: str,
    branch: str,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
) -> proc.Result:
    """``git ls-remote REMOTE refs/heads/BRANCH`` (the caller reads the result)."""
    opts = [arg for item in _REMOTE_OPTS for arg in ("-c", item)]
    return git(
        repo,
        *opts,
        "ls-remote",
        "--upload-pack=git-upload-pack",
        "--",
        remote,
        f"refs/heads/{branch}",
        check=False,
        env=env,
        timeout=timeout,
        terminal=True,
    )


def push(
    repo: Path,
    remote: str,
    refspec: str,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> proc.Result:
    """``git push REMOTE REFSPEC``: never forced (a refspec with ``+`` is refused here),
    no hooks (the gateway's), the caller reads the result."""
    if refspec.startswith("+") or ":" not in refspec:
        msg = f"refused to push {refspec!r}: lo-orch pushes only `<sha>:refs/heads/<branch>`"
        raise GitError(msg, hint="This is a bug in lo-orch; please report it.")
    opts = [arg for item in _REMOTE_OPTS for arg in ("-c", item)]
    return git(
        repo,
        *opts,
        "push",
        "--porcelain",
        "--receive-pack=git-receive-pack",
        "--no-verify",
        "--",
        remote,
        refspec,
        check=False,
        env=env,
        timeout=timeout,
        terminal=True,
    )

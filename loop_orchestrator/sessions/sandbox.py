"""The OS sandbox around an agent session (bubblewrap): what an agent process may write.

An agent runs as the same user as lo-orch, so file permissions alone stop nothing. Each
agent's whole process (Claude Code with its Bash tool *and* its built-in file tools, its
hooks, a ``command`` or ``scripted`` agent) is started inside ``bwrap``, in a mount
namespace where the filesystem is the host's (``--dev-bind / /``) except:

- read-only: the repository (main checkout, ``.git``, ``.orchestration/``, other tasks'
  worktrees, the project's ``.venv``), this lo-orch's own installation (with its byte
  code), the user's lo-orch configuration and every folder on the supervisor's ``PATH`` (a
  ``git`` planted there would run outside the sandbox); for root also the system's
  folders (``/usr``, ``/etc``, ``/lib``...: root owns them, and the supervisor runs
  ``/usr/bin/git``);
- writable again on top: the task's worktree and the worktree's own admin folder
  ``.git/worktrees/<name>/`` (so ``git add``/``git status`` work; refs, ``config``,
  ``hooks``, ``info``, ``packed-refs`` stay read-only), the plans folder and the task's
  inbox ``.orchestration/inbox/<task>/``; inside those, the files that point the worktree
  at its repository (``<worktree>/.git``, ``commondir``, ``gitdir``) and the worktree's
  ``HEAD`` and ``config.worktree`` are read-only again;
- the task's own branch: ``refs/heads/lo/<run>/`` is the session's own copy of that folder,
  where only its branch can be moved, and that branch's reflog is writable
  (``workspace.ownref`` says how, and how the supervisor takes the commits);
- its own object store over ``.git/objects``, with the repository's store read-only as its
  alternate (``workspace.ownobjects``: what it adds is hashed again when it is taken). A
  launch without a run (a cluster node's) writes the repository's store as before;
- hidden (an empty read-only tmpfs): the supervisor's private state (``private.state_home()``) and
  the tmux socket folder, so no key can be read and no ``send-keys`` reach another pane;
- its own PID namespace (``--unshare-pid`` with a fresh ``/proc``): it cannot read other
  sessions' ``/proc/<pid>/environ``, signal the supervisor, and a process that detaches
  (setsid, double fork, ``env -i``) is reparented to the sandbox's init, which was started
  with ``LO_ORCH_TASK``, so ``guard.refuse_in_session`` still finds it;
- no capabilities (``--cap-drop ALL`` when lo-orch runs as root: bwrap would leave the
  agent CAP_SYS_ADMIN, and one ``mount -o remount,rw`` would undo every read-only bind),
  and, for root, a ``/dev`` of its own (``--dev``): root owns the host's disk devices, and
  one raw write to ``/dev/vda`` would undo every bind too.

The network is shared (the agent talks to its model API; ``lo-orch`` over a unix socket),
and so is the terminal session (``--new-session`` would break the interactive tty).
Measured on a shared 2-core Linux VM (bubblewrap 0.8.0), median of 200 starts of
``/bin/true``: 0.8 ms bare, 8.4-9.4 ms under a full task policy; once per session launch.

``[sandbox] mode``: ``auto`` (default: on where bwrap works, else off with a warning),
``bwrap`` (required: a clear error where it does not work), ``off``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import site
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import loop_orchestrator
from loop_orchestrator import proc
from loop_orchestrator.config import user_config_path
from loop_orchestrator.errors import ConfigError
from loop_orchestrator.files import atomic_write_text
from loop_orchestrator.git.gateway import common_dir
from loop_orchestrator.runstate import private
from loop_orchestrator.sessions import native
from loop_orchestrator.workspace.ownref import MIRROR_DIR, OwnBranch, task_branch_name

if TYPE_CHECKING:
    from loop_orchestrator.config import Settings
    from loop_orchestrator.sessions.backend import LaunchSpec

log = logging.getLogger(__name__)

BWRAP = "bwrap"
#: a pane command longer than this (bytes) hands bwrap its options in a file: tmux refuses a
#: command whose message (the command and the pane's environment) passes 16 KB
LONG_COMMAND = 8192
#: the folder of the private run folder holding those files, one per task
LAUNCH_DIR = "launch"
INSTALL_HINT = "Install bubblewrap (`apt-get install bubblewrap`)"

#: what tools running inside a session write under ``.orchestration/`` besides the inbox:
#: ``lo-orch hook``'s failure log. Status files, the ledger and ``run.json`` are the
#: supervisor's alone: hooks and signals report through the inbox socket. Nothing here is
#: for the simulator: the scripted agent writes only where any agent may.
LEGACY_REPORT_DIRS = ("logs",)
LEGACY_REPORT_FILES: tuple[str, ...] = ()


@functools.cache
def available() -> tuple[bool, str]:
    """Does bubblewrap work here? ``(True, version)`` or ``(False, why not)``."""
    exe = shutil.which(BWRAP)
    if exe is None:
        return False, f"{BWRAP} not found on PATH"
    # a real namespace setup, as used for agents: some kernels and containers forbid it
    probe = [
        exe,
        "--dev-bind",
        "/",
        "/",
        "--unshare-pid",
        "--proc",
        "/proc",
        "--die-with-parent",
        "--",
        "/bin/true",
    ]
    try:
        result = proc.run(probe, timeout=15, check=False)
    except OSError as exc:
        return False, f"{exe} cannot run: {exc}"
    if not result.ok:
        detail = (result.stderr or result.stdout).strip().splitlines()
        why = detail[-1] if detail else f"exit {result.returncode}"
        return False, f"{exe} cannot create a sandbox here: {why}"
    version = proc.run([exe, "--version"], timeout=15, check=False).stdout.strip()
    return True, version or exe


@functools.cache
def _warn_off(reason: str) -> None:
    log.warning("agent sandbox off: %s", reason, extra={"reason": reason})


def status(settings: Settings) -> tuple[bool, str]:
    """Will agents run sandboxed? ``(active, reason)`` for ``[sandbox] mode``."""
    mode = settings.sandbox.mode
    if mode == "off":
        return False, 'off ([sandbox] mode = "off")'
    ok, detail = available()
    if ok:
        return True, f'bubblewrap ({detail}), [sandbox] mode = "{mode}"'
    return False, detail


def require(settings: Settings) -> bool:
    """Whether to sandbox agents; raises when ``mode = "bwrap"`` and bwrap does not work.

    ``auto`` without a working bwrap logs a warning (once per reason) and goes on unconfined.
    """
    active, reason = status(settings)
    if active:
        return True
    if settings.sandbox.mode == "bwrap":
        msg = f'the agent sandbox is required ([sandbox] mode = "bwrap") but {reason}'
        raise ConfigError(msg, hint=f'{INSTALL_HINT}, or set [sandbox] mode = "auto".')
    if settings.sandbox.mode == "auto":
        _warn_off(reason)
    return False


def tmux_socket_dir() -> Path:
    """The folder of this user's tmux sockets (tmux: ``$TMUX_TMPDIR/tmux-<uid>``)."""
    return Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}"


def _admin_dir(worktree: Path) -> Path | None:
    """The worktree's own admin folder (``.git/worktrees/<name>``) from its ``.git`` file."""
    try:
        text = (worktree / ".git").read_text(encoding="utf-8")
    except OSError:
        return None
    if not text.startswith("gitdir:"):
        return None
    path = Path(text[len("gitdir:") :].strip())
    return (path if path.is_absolute() else worktree / path).resolve()


def _lo_orch_install() -> list[Path]:
    """Where this lo-orch's code, its byte code and its interpreter live (a ``.pth`` there
    runs in the supervisor; so does a ``.pyc`` planted for one of its modules): the package
    folder (an editable checkout too), the folders of the compiled client's builds, the
    environment's prefix, the user's site-packages and a ``PYTHONPYCACHEPREFIX`` folder,
    where Python keeps the package's byte code."""
    paths = [Path(loop_orchestrator.__file__).resolve().parent, Path(sys.prefix).resolve()]
    # the compiled client's builds (``native``): a session that replaced it would answer
    # every session's hooks, its own Stop gate and permission requests among them
    for folder in native.folders():
        if not folder.is_relative_to(paths[0]):
            # made now if missing: a missing folder is not bound, and a session could make
            # it and leave a program there for the next supervisor to hand out
            with contextlib.suppress(OSError):
                folder.mkdir(parents=True, exist_ok=True)
            paths.append(folder.resolve())
    user_site = site.getusersitepackages()
    if isinstance(user_site, str):
        paths.append(Path(user_site))
    for prefix in {sys.pycache_prefix, os.environ.get("PYTHONPYCACHEPREFIX")}:
        if prefix:
            # made now if missing (as Python would): a missing folder is not bound, and a
            # session could make it and plant byte code there
            with contextlib.suppress(OSError):
                Path(prefix).mkdir(parents=True, exist_ok=True)
            paths.append(Path(prefix).resolve())
    return paths


#: what root may write that programs outside the sandbox then run or read: the system's
#: programs and libraries (``/usr/bin/git``, libc), its configuration (``/etc/gitconfig``,
#: ``/etc/cron.d``), cron's and the package manager's state (``/var/spool/cron``, a
#: package's ``postinst``)
SYSTEM_DIRS = (
    "/usr",
    "/etc",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/boot",
    "/var/spool",
    "/var/lib",
)


def _executable_dirs() -> list[Path]:
    """The folders the supervisor finds its programs in (``git``, ``tmux``, ``bwrap``): every
    folder on its ``PATH``, and for root the system's folders. A program planted in one
    (``~/.local/bin/git``) would run outside the sandbox at the supervisor's next call."""
    found = [Path(d) for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    if os.geteuid() == 0:
        found += [Path(d) for d in SYSTEM_DIRS]
    return [p.resolve() for p in found if p.is_absolute() and p.is_dir()]


def _user_config_dirs() -> list[Path]:
    """The user's lo-orch settings and tool profile (an agent could switch the sandbox or
    the auditor off there)."""

    home = Path(os.environ.get("HOME") or Path.home())
    return [user_config_path().parent, home / ".claude" / "loop-orchestrator"]


@dataclass(frozen=True)
class Policy:
    """What one agent session may write; paths are absolute and resolved.

    Mount order (later mounts over earlier ones): ``read_only``, ``writable``, the own
    branch's mirror (``own``), ``pinned``, ``hidden``. Paths that do not exist at launch are
    left out (there is nothing to protect; a writable one could not be bound).
    """

    task: str
    read_only: tuple[Path, ...]
    writable: tuple[Path, ...]
    hidden: tuple[Path, ...]
    #: read-only again inside ``writable``: the files that tie the worktree to this
    #: repository (``<worktree>/.git``, the admin folder's ``commondir`` and ``gitdir``), so
    #: the supervisor's own git commands in the worktree cannot be pointed elsewhere
    pinned: tuple[Path, ...] = ()
    #: folders to create before the launch (a mount needs its target)
    create: tuple[Path, ...] = ()
    #: files created empty before the launch when missing, so that they can be pinned
    #: (git reads a worktree's ``config.worktree`` once the repository enables it)
    placeholders: tuple[Path, ...] = ()
    #: the task's branch, the one ref the session may move (``workspace.ownref``)
    own: OwnBranch | None = None
    #: what session-side tools write besides the inbox (``LEGACY_REPORT_DIRS``/``_FILES``)
    legacy_dirs: tuple[Path, ...] = ()
    legacy_files: tuple[Path, ...] = ()
    legacy_reporting: bool = True
    #: environment variables the session must not inherit (GitHub tokens, a node's Ray
    #: credentials)
    unset_env: tuple[str, ...] = proc.TOKEN_VARIABLES
    #: where a launch whose command is too long for tmux keeps bwrap's options (read by
    #: bwrap through ``--args``; in the private folder, hidden from every session)
    launch_args: Path | None = None

    @classmethod
    def for_task(
        cls, *, repo: Path, run_dir: Path, worktree: Path, task: str, run: str | None = None
    ) -> Policy:
        """The policy of ``task``'s session in ``repo`` (``run_dir``: ``.orchestration``);
        with ``run``, its branch ``lo/<run>/<task>`` is the one ref it may move."""
        repo = repo.resolve()
        run_dir = run_dir.resolve()
        worktree = worktree.resolve()
        common = common_dir(repo)
        inbox = run_dir / "inbox" / task
        plans = run_dir / "plans"
        state = private.state_home()
        admin = _admin_dir(worktree)
        # the object store is the session's own when it has a run (``workspace.ownobjects``)
        writable = (
            [worktree] if run is not None and admin is not None else [worktree, common / "objects"]
        )
        pinned = [worktree / ".git"]
        placeholders: list[Path] = []
        if admin is not None:
            writable.append(admin)
            # HEAD too: pointed at staging or another branch, the supervisor's own commit or
            # merge in the worktree would move that ref (a commit on the branch only locks
            # HEAD beside it and appends to logs/HEAD: both stay writable)
            pinned += [admin / name for name in ("commondir", "gitdir", "HEAD", "config.worktree")]
            placeholders.append(admin / "config.worktree")
        own = None
        launch_args = None
        if run is not None:
            launch_args = private.run_dir(repo, run, create=False) / LAUNCH_DIR / f"{task}.args"
        if run is not None and admin is not None:
            mirror = private.run_dir(repo, run, create=False) / MIRROR_DIR / task
            own = OwnBranch(
                repo, common, task_branch_name(run, task), mirror, admin / "lo-orch-objects"
            )
        # The plans folder, not only plans/<task>.md: a bind-mounted file cannot be replaced
        # by rename (EBUSY), and Claude Code writes files atomically (temp file + rename).
        writable += [plans, inbox]
        home = Path(os.environ.get("HOME") or Path.home()).resolve()
        # an interpreter prefix may be a folder above the user's home (``/``, a conda
        # install in it): read-only there would take the agent's own config folders too
        # and never a folder that holds the agent's home, temp dir or worktree (``/`` on PATH)
        tmp = Path(tempfile.gettempdir()).resolve()
        # (each resolved once: resolved again per folder it was compared with, they were
        # half of a launch policy's CPU)
        candidates = (*_lo_orch_install(), *_user_config_dirs(), *_executable_dirs())
        protect = [
            p
            for p, real in [(p, p.resolve()) for p in candidates]
            if not any(q.is_relative_to(real) for q in (home, tmp, worktree))
        ]
        return cls(
            task=task,
            read_only=(repo, common, *protect),
            writable=tuple(writable),
            # never hide a folder that holds the worktree (a state home set to /tmp, say)
            hidden=tuple(
                p for p in (state, tmux_socket_dir()) if not worktree.is_relative_to(p.resolve())
            ),
            pinned=tuple(pinned),
            placeholders=tuple(placeholders),
            own=own,
            # the tmux socket folder too: a folder that does not exist yet is not hidden, and
            # the run's tmux server (made after the first launch's policy) would appear in it
            create=(inbox, plans, state, tmux_socket_dir()),
            legacy_dirs=tuple(run_dir / name for name in LEGACY_REPORT_DIRS),
            legacy_files=tuple(run_dir / name for name in LEGACY_REPORT_FILES),
            launch_args=launch_args,
        )

    def strict(self) -> Policy:
        """This policy without even the hook failure log's grant."""
        return replace(self, legacy_reporting=False)


def wrap(argv: list[str], policy: Policy) -> list[str]:
    """``argv`` run inside bwrap under ``policy`` (paths that do not exist are skipped)."""
    return [shutil.which(BWRAP) or BWRAP, *bwrap_options(policy), "--", *argv]


def bwrap_options(policy: Policy) -> list[str]:
    """bwrap's options for ``policy``: everything before ``--`` and the command."""
    out = ["--dev-bind", "/", "/", "--unshare-pid", "--proc", "/proc"]
    if os.geteuid() == 0:
        # started by root, bwrap leaves the agent every capability, and CAP_SYS_ADMIN
        # remounts the read-only repository writable (`mount -o remount,rw`; bubblewrap
        # 0.8.0). For anyone else it keeps none (measured), and a setuid bwrap refuses
        # --cap-drop from a user who is not root. Without capabilities root still owns
        # the host's device files (``/dev/vda``: the disk, written raw under every mount):
        # the agent gets a /dev of its own (null, zero, random, tty, pts, shm...).
        out += ["--cap-drop", "ALL", "--dev", "/dev"]
    for path in _existing(policy.read_only):
        out += ["--ro-bind", str(path), str(path)]
    writable = policy.writable
    if policy.legacy_reporting:
        writable += policy.legacy_dirs + policy.legacy_files
    for path in _existing(writable):
        out += ["--bind", str(path), str(path)]
    if policy.own is not None and policy.own.refs.is_dir():
        # bwrap takes every source from the host's tree (never from an earlier mount)
        for source, target in policy.own.mounts():
            out += ["--bind", str(source), str(target)]
        for source, target in policy.own.frozen():
            out += ["--ro-bind", str(source), str(target)]
    for path in _existing(policy.pinned):
        out += ["--ro-bind", str(path), str(path)]
    for path in _existing(policy.hidden):
        if path.is_file():
            out += ["--ro-bind", "/dev/null", str(path)]  # a regular file: empty
        else:
            # an empty, read-only folder: nothing to read, nothing planted for a later look
            out += ["--tmpfs", str(path), "--remount-ro", str(path)]
    for name in dict.fromkeys(policy.unset_env):
        out += ["--unsetenv", name]
    return [*out, "--die-with-parent"]


def long_command(argv: list[str]) -> bool:
    """Whether a pane command is too long to hand tmux (``LONG_COMMAND`` bytes)."""
    return sum(len(a.encode()) + 1 for a in argv) > LONG_COMMAND


def through_args_file(argv: list[str], args_file: Path) -> list[str]:
    """``argv`` (bwrap, its options, ``--``, the command) as a short command: bwrap reads
    its options, NUL-separated, from ``args_file`` on descriptor 3 (``--args 3``); the
    command stays on the command line (bwrap takes it only from there)."""
    cut = argv.index("--")
    script = 'f=$1; shift; exec "$0" --args 3 "$@" 3<"$f"'
    return ["/bin/sh", "-c", script, argv[0], str(args_file), *argv[cut:]]


def _existing(paths: tuple[Path, ...]) -> list[Path]:
    seen: list[Path] = []
    for path in paths:
        if path not in seen and path.exists():
            seen.append(path)
    return seen


def confine(spec: LaunchSpec, policy: Policy) -> LaunchSpec:
    """``spec`` run inside the sandbox (its folders created first)."""
    for folder in policy.create:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for file in policy.placeholders:
        if file.parent.is_dir() and not file.is_symlink():
            file.touch()
    if policy.own is not None:
        policy.own.seed()
    if policy.legacy_reporting:
        for folder in policy.legacy_dirs:
            folder.mkdir(parents=True, exist_ok=True)
        for file in policy.legacy_files:
            file.touch()
    argv = wrap(spec.argv, policy)
    if policy.launch_args is not None and long_command(argv):
        # a run of many tasks freezes many refs: past tmux's message size (16 KB with the
        # environment) `split-window` fails with "command too long"
        policy.launch_args.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        options = argv[1 : argv.index("--")]
        atomic_write_text(policy.launch_args, "".join(f"{o}\0" for o in options))
        argv = through_args_file(argv, policy.launch_args)
    return replace(spec, argv=argv)

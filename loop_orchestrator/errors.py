"""The one exception root and its families.

Every error a user can cause or fix is a ``LoOrchError``; the CLI maps it to exit code 1 and
prints ``Error: <message>`` (plus the hint). Anything else that escapes is a bug: exit 3 with
a log file.
"""

from __future__ import annotations

from collections.abc import Sequence


class LoOrchError(Exception):
    """Root of every error lo-orch raises on purpose.

    ``message`` says what happened; ``hint`` says what to do next.
    """

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def render(self) -> str:
        text = self.message
        if self.hint:
            text += f"\n{self.hint}"
        return text


class UsageError(LoOrchError):
    """Bad combination of options, caught after click parsed them."""

    exit_code = 2


class ConfigError(LoOrchError):
    """A configuration or tool-profile file is invalid."""


class PlanError(LoOrchError):
    """A plan file is invalid; carries every problem found, not just the first."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = list(problems)
        count = len(self.problems)
        lines = [f"{source}: {count} problem{'s' if count != 1 else ''} in the plan"]
        lines += [f"  - {p}" for p in self.problems]
        super().__init__(
            "\n".join(lines),
            hint="Fix the plan file and run `lo-orch plan` again; nothing was written.",
        )


class StateError(LoOrchError):
    """Run state on disk is missing, inconsistent or does not allow the operation."""


class LockHeldError(StateError):
    """Another supervisor holds the repository's lock."""


class GateError(StateError):
    """A human gate has not been passed (plan not approved, review missing or stale)."""


class GitError(LoOrchError):
    """A git operation failed or was refused for safety."""


class RefMovedError(GitError):
    """A branch was not where lo-orch expected it when lo-orch moved it (its compare and
    swap failed): something else moved it, and nothing changed."""


class MergeConflictError(GitError):
    """A merge would conflict; ``paths`` are the conflicting files."""

    def __init__(self, message: str, paths: Sequence[str], *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.paths = list(paths)


class SecretFileError(GitError):
    """Files matching secret patterns were about to be committed; ``paths`` names them."""

    def __init__(self, message: str, paths: Sequence[str], *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.paths = list(paths)


class StaleReviewError(GitError, GateError):
    """Staging moved after the Gate 2 review: the reviewed commit is no longer its tip."""


class RefTamperedError(LoOrchError):
    """A ref lo-orch owns is not where lo-orch set it: something else moved it.

    Not a ``GitError`` on purpose: no handler that retries or falls back on a git failure
    may swallow it. The supervisor puts a ref only lo-orch moves back and goes on
    (``supervisor/refguard.py``); anything else (a branch a person may move, Gate 2) stops.
    """

    def __init__(
        self, ref: str, expected: str | None, found: str | None, *, hint: str | None = None
    ) -> None:
        self.ref = ref
        self.expected = expected
        self.found = found
        msg = (
            f"{ref} was changed outside lo-orch: expected {expected or 'absent'}, "
            f"found {found or 'absent'}"
        )
        super().__init__(
            msg,
            hint=hint
            or (
                "lo-orch stopped without changing anything. Something other than lo-orch (an "
                "agent session, a hook, a person) moved it; inspect it with `git reflog` and "
                f"`git log {found or expected or ref}`, put it back with "
                f"`git update-ref {ref} {expected}` if the change is unwanted, then run again."
            ),
        )


class PullRequestError(LoOrchError):
    """``lo-orch pr`` could not push or open the pull request; ``reset_at`` (epoch seconds)
    when a rate limit stopped it."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.reset_at: float | None = None


class TmuxError(LoOrchError):
    """tmux is missing or a tmux operation failed."""


class PaneGoneError(TmuxError):
    """The pane is not there (any more): killed by a person or the agent, exited, or gone
    with its cluster node. It can go between any two calls; whoever only looks at a screen
    treats it as nothing to see, and the next liveness check handles the death."""


class AgentError(LoOrchError):
    """An agent session could not be launched, reached or talked to."""


class _ScreenError(AgentError):
    """An agent error that carries the pane's last screen, shown with the message."""

    def __init__(self, message: str, screen: str = "", *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.screen = screen

    def render(self) -> str:
        text = super().render()
        if self.screen.strip():
            text += "\nLast screen of the pane:\n" + self.screen.rstrip()
        return text


class DeliveryError(_ScreenError):
    """A prompt could not be delivered; carries the pane's last screen."""


class AgentStartError(_ScreenError):
    """An agent session did not reach its ready prompt; carries the pane's last screen."""


class NotLoggedInError(AgentError):
    """Claude Code reported that it is not logged in."""


class CommandError(LoOrchError):
    """An external command failed; carries the command, exit code and output."""

    def __init__(
        self,
        cmd: Sequence[str],
        returncode: int | None,
        stdout: str = "",
        stderr: str = "",
        *,
        message: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.cmd = list(cmd)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        shown = " ".join(self.cmd)
        if message is None:
            status = "timed out" if returncode is None else f"exited {returncode}"
            message = f"`{shown}` {status}"
            detail = (stderr or stdout).strip()
            if detail:
                message += ":\n" + "\n".join(detail.splitlines()[-20:])
        super().__init__(message, hint=hint)


class IntakeError(LoOrchError):
    """An issue tracker or the planning agent could not produce a plan."""


class VerifyError(LoOrchError):
    """Verification could not run (not: verification found problems)."""


class ClusterError(LoOrchError):
    """The cluster backend (``[cluster] backend = "ray"``) cannot be used: Ray missing, the
    cluster unreachable, no node offering a session slot, a node lost beyond recovery."""

"""When a session on a Ray cluster counts as lost: pure decisions, no Ray calls.

A session actor can go away in many ways: its node's raylet killed (its process group
SIGKILLed, as when a machine dies), the machine gone, the network to it cut, the actor
process ended, its name gone from the cluster, or it simply stops answering. Ray reports
these differently (``ActorDiedError``, ``ActorUnavailableError``, ``GetTimeoutError``, a
``ValueError`` from ``get_actor``, a node no longer alive in the GCS) and sometimes not
at all. ``kind_of`` names what one call to an actor met; ``verdict`` says what it means for
the supervisor: ``live`` (it answered), ``error`` (it answered with an error of the
session's own: not a loss), ``lost`` (gone for good: relaunch the task elsewhere, counted
as a node loss) or ``silent`` (not answering yet: nothing to conclude this time, unless it
has been silent for ``grace`` seconds while the cluster itself answers, which is a loss
too: a session that nobody can reach is working unseen).
"""

from __future__ import annotations

import enum
import threading
from typing import Any, Literal

#: how long a session may stay silent, while its node is alive in the cluster and the
#: cluster answers, before it counts as lost (two unanswered calls of the default call
#: timeout); ``[cluster] loss_grace_seconds``
GRACE = 120.0

Verdict = Literal["live", "error", "lost", "silent"]


class Met(enum.Enum):
    """What one call to a session actor met."""

    #: it answered
    ANSWERED = "answered"
    #: its method raised (the session's own failure, e.g. its tmux pane gone under a live actor)
    RAISED = "raised"
    #: Ray says the actor died (its process, its node)
    DIED = "died"
    #: no actor of that name in the cluster (any more)
    NAME_GONE = "name_gone"
    #: Ray cannot reach the actor now (``ActorUnavailableError``: node or network)
    UNAVAILABLE = "unavailable"
    #: no answer within the call's timeout
    TIMEOUT = "timeout"
    #: the cluster itself did not answer (the supervisor's connection, the GCS)
    UNREACHABLE = "unreachable"


def kind_of(exc: BaseException, exceptions: Any) -> Met:
    """What an exception raised by a call to an actor means (``exceptions``: the
    ``ray.exceptions`` module, passed in so this module never imports Ray)."""
    # order matters: ActorUnavailableError is a RayActorError, and a RayTaskError is also
    # an instance of what the method raised (a ValueError included)
    if isinstance(exc, exceptions.RayTaskError):
        return Met.RAISED
    if isinstance(exc, (exceptions.ActorUnavailableError, exceptions.NodeDiedError)):
        return Met.UNAVAILABLE
    if isinstance(exc, exceptions.ObjectLostError):  # the answer went with its node
        return Met.UNAVAILABLE
    if isinstance(exc, (exceptions.RayActorError, exceptions.WorkerCrashedError)):
        return Met.DIED
    if isinstance(exc, exceptions.GetTimeoutError):
        return Met.TIMEOUT
    if isinstance(exc, ValueError):  # ray.get_actor: "Failed to look up actor"
        return Met.NAME_GONE
    # RaySystemError, the supervisor's own raylet or GCS connection (LocalRayletDiedError,
    # ConnectionError, RuntimeError), an authentication failure: the cluster, not the
    # session, is in doubt
    return Met.UNREACHABLE


def verdict(
    met: Met, *, cluster_answers: bool, node_alive: bool | None, silent_for: float, grace: float
) -> Verdict:
    """What ``met`` means for the session. ``cluster_answers``: the cluster's own state
    could be read just now; ``node_alive``: whether it lists the session's node as alive
    (None: the node is not known); ``silent_for``: seconds since the session's first
    unanswered call."""
    if met is Met.ANSWERED:
        return "live"
    if met is Met.RAISED:
        return "error"
    if met in (Met.DIED, Met.NAME_GONE):
        return "lost"
    if not cluster_answers:
        # the cluster itself is in doubt: its sessions keep working and are adopted again
        # when it answers (a supervisor cut off from the cluster must not relaunch them all)
        return "silent"
    if node_alive is False:  # the cluster dropped its node (health checks failed)
        return "lost"
    if met is Met.UNREACHABLE:  # the call's own way through the cluster failed: again
        return "silent"
    return "lost" if silent_for >= grace else "silent"


class Silences:
    """Since when each session has not answered: from its first unanswered call, until it
    answers again (a silence an answer interrupted starts over). Thread-safe."""

    def __init__(self) -> None:
        self._since: dict[str, float] = {}
        self._lock = threading.Lock()

    def unanswered(self, pane_id: str, now: float) -> float:
        """Record a call ``pane_id`` did not answer at ``now``: seconds it has been silent."""
        with self._lock:
            return now - self._since.setdefault(pane_id, now)

    def answered(self, pane_id: str) -> None:
        with self._lock:
            self._since.pop(pane_id, None)

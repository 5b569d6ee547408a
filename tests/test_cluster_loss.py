"""When a cluster session counts as lost (cluster/loss.py): every way an actor can go away,
as the exception Ray raises for it, in milliseconds (the real-cluster kinds are in
test_cluster_node_loss.py)."""

from __future__ import annotations

from typing import Any

import pytest
import ray.exceptions

from loop_orchestrator.cluster.loss import GRACE, Met, Silences, kind_of, verdict

#: Ray's exceptions (some of their constructors are untyped)
rex: Any = ray.exceptions


def _task_error(cause: Exception) -> BaseException:
    """What ``ray.get`` raises when the actor's method raised ``cause``."""
    try:
        raise cause
    except Exception as exc:
        wrapped: BaseException = rex.RayTaskError("state", "traceback", exc).as_instanceof_cause()
        return wrapped


@pytest.mark.parametrize(
    ("exc", "met"),
    [
        # the node's raylet SIGKILLed: calls meet an unavailable actor until Ray declares it dead
        (rex.ActorUnavailableError("the actor's node is unreachable", None), Met.UNAVAILABLE),
        (rex.NodeDiedError("node died"), Met.UNAVAILABLE),
        (rex.ObjectLostError("a" * 56, b"owner", "call site"), Met.UNAVAILABLE),
        (rex.ActorDiedError(), Met.DIED),
        (rex.RayActorError(), Met.DIED),
        (rex.WorkerCrashedError(), Met.DIED),
        (rex.GetTimeoutError("Get timed out"), Met.TIMEOUT),
        (ValueError("Failed to look up actor with name 'lo-x'"), Met.NAME_GONE),
        # the session's own failure under a live actor (its pane gone), whatever it raised,
        # a ValueError included: not a name gone
        (_task_error(ValueError("no pane")), Met.RAISED),
        (_task_error(AssertionError()), Met.RAISED),
        (rex.RaySystemError("system"), Met.UNREACHABLE),
        (rex.LocalRayletDiedError(), Met.UNREACHABLE),
        (rex.AuthenticationError("InvalidAuthToken"), Met.UNREACHABLE),
        (ConnectionError("GCS"), Met.UNREACHABLE),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else v.value,
)
def test_kind_of_names_what_each_ray_error_means(exc: BaseException, met: Met) -> None:
    assert kind_of(exc, rex) is met


def _verdict(
    met: Met, *, cluster: bool = True, node: bool | None = True, silent: float = 0.0
) -> str:
    return verdict(met, cluster_answers=cluster, node_alive=node, silent_for=silent, grace=GRACE)


def test_gone_for_good_is_lost_at_once_whatever_else_is_known() -> None:
    for met in (Met.DIED, Met.NAME_GONE):
        for cluster in (True, False):
            for node in (True, False, None):
                assert _verdict(met, cluster=cluster, node=node) == "lost", (met, cluster, node)


def test_an_answer_is_live_and_an_error_of_the_session_is_no_loss() -> None:
    assert _verdict(Met.ANSWERED, node=False, silent=10 * GRACE) == "live"
    assert _verdict(Met.RAISED, node=False, silent=10 * GRACE) == "error"


@pytest.mark.parametrize("met", [Met.UNAVAILABLE, Met.TIMEOUT])
def test_a_silent_session_is_lost_once_its_node_is_dropped_or_after_the_grace(met: Met) -> None:
    # the raylet killed: unavailable, and the cluster drops the node after its health checks
    assert _verdict(met, node=True) == "silent"
    assert _verdict(met, node=False) == "lost"
    # a network cut between the supervisor and one node only (the cluster still lists it):
    # silent, until the grace is over, then lost
    assert _verdict(met, node=True, silent=GRACE - 1) == "silent"
    assert _verdict(met, node=True, silent=GRACE) == "lost"
    # a restarted supervisor that does not know the session's node yet: the grace decides
    assert _verdict(met, node=None, silent=GRACE - 1) == "silent"
    assert _verdict(met, node=None, silent=GRACE) == "lost"


@pytest.mark.parametrize("met", [Met.UNAVAILABLE, Met.TIMEOUT, Met.UNREACHABLE])
def test_a_cluster_that_does_not_answer_loses_no_session(met: Met) -> None:
    """The supervisor cut off from the cluster: every session looks silent, none is lost
    (they keep working and are adopted again), however long it lasts."""
    assert _verdict(met, cluster=False, node=None, silent=100 * GRACE) == "silent"


def test_a_call_that_failed_on_the_way_is_no_loss_unless_the_node_is_dropped() -> None:
    assert _verdict(Met.UNREACHABLE, node=True, silent=100 * GRACE) == "silent"
    assert _verdict(Met.UNREACHABLE, node=None, silent=100 * GRACE) == "silent"
    assert _verdict(Met.UNREACHABLE, node=False) == "lost"


def test_a_silence_counts_from_the_first_unanswered_call_and_an_answer_ends_it() -> None:
    silences = Silences()
    assert silences.unanswered("ray:a:1", 100.0) == 0.0
    assert silences.unanswered("ray:a:1", 160.0) == 60.0
    assert silences.unanswered("ray:b:1", 170.0) == 0.0  # each session its own
    silences.answered("ray:a:1")  # e.g. the relay's poll got through meanwhile
    # a later single timeout is a new silence, not one of 200 s past the grace
    assert silences.unanswered("ray:a:1", 300.0) == 0.0
    assert silences.unanswered("ray:b:1", 300.0) == 130.0


def test_the_grace_setting_defaults_to_the_documented_window() -> None:
    from loop_orchestrator.config import ClusterConfig

    assert ClusterConfig().loss_grace_seconds == GRACE
    assert ClusterConfig().call_timeout_seconds * 2 == GRACE  # two unanswered calls

"""A Ray actor that dies after finishing an episode loses nothing it finished.

The Ray backend reads its actors' replies in whatever order ``ray.wait`` gives them. When
an actor died while running episode 5 with episode 4's reply already in, the lost-actor
error could be read first: the finished episode 4 was then dropped with the actor, run
again, and the retry was put down to episode 4 instead of 5. A scripted ``ray`` stands in
for Ray here, so the order is the bad one every time.
"""

from __future__ import annotations

from typing import Any

from rlmesh.eval.distributed.ray_actors import RayBackend


class RayError(Exception):
    pass


class RayTaskError(RayError):
    pass


class ActorDiedError(RayError):
    pass


class ScriptedRay:
    """``wait``/``get``/``kill`` over canned replies; ``wait`` answers in ``order``."""

    class exceptions:
        RayError = RayError
        RayTaskError = RayTaskError

    def __init__(self, replies: dict[str, Any], order: list[str]) -> None:
        self.replies, self.order, self.killed = replies, order, []

    def wait(self, refs: list[str], num_returns: int = 1, timeout: float | None = None) -> Any:
        ready = [r for r in self.order if r in refs and r in self.replies]
        return ready[:num_returns], [r for r in refs if r not in ready[:num_returns]]

    def get(self, ref: str) -> Any:
        reply = self.replies[ref]
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def kill(self, actor: Any, no_restart: bool = True) -> None:
        self.killed.append(actor)


def backend(ray: ScriptedRay, refs: dict[str, int]) -> RayBackend:
    b = RayBackend.__new__(RayBackend)  # no Ray to start: only poll() is exercised
    b.ray, b.refs, b.dead, b.nodes = ray, dict(refs), set(), {}
    b.actors, b.labels = {0: "actor0", 1: "actor1"}, {0: "w0", 1: "w1"}
    return b


def test_a_finished_episode_is_kept_when_its_actor_dies_on_the_next_one() -> None:
    ray = ScriptedRay(
        {"run4": ("done", "episode 4"), "run5": ActorDiedError("the actor died")},
        order=["run5", "run4"],  # the error is read first
    )
    b = backend(ray, {"run4": 0, "run5": 0})
    events = b.poll(1.0)
    assert [e[:3] for e in events[:-1]] == [("done", 0, "episode 4")]
    kind, slot, reason = events[-1]
    assert (kind, slot) == ("lost", 0) and "ActorDiedError" in reason
    assert ray.killed == ["actor0"] and b.refs == {}


def test_calls_after_the_one_that_died_are_not_reported() -> None:
    ray = ScriptedRay(
        {
            "run3": ("done", "episode 3"),
            "run4": ActorDiedError("died"),
            "run5": ActorDiedError("died"),
            "other": ("done", "episode 9"),
        },
        order=["run5", "other", "run4", "run3"],
    )
    b = backend(ray, {"run3": 0, "run4": 0, "run5": 0, "other": 1})
    events = b.poll(1.0)
    assert [e[:3] for e in events if e[0] == "done"] == [
        ("done", 1, "episode 9"),
        ("done", 0, "episode 3"),
    ]
    assert [e[:2] for e in events if e[0] == "lost"] == [("lost", 0)]
    assert events[-1][0] == "lost"  # after what the lost actor finished

"""The one history strategy of the integration tests: the project's workload generator with the
suite's small shape (a few dozen users, ~6 followees each), ids prefixed so histories never meet,
and publishing stage by stage, each stage caught up before the next."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from feed_service.settings import Settings
from feed_service.stack.stream_process import StreamProcess
from feed_service.workload.generator import generate

from .pipeline import publish

#: The suite's workload shape: small enough to stream in seconds, rich enough for every rule.
USERS, MEAN_FOLLOWING = 30, 6


def history(seed: int, prefix: str, *, users: int = USERS, events: int = 600, mean_following: float = MEAN_FOLLOWING,
            **shares: Any) -> list[dict[str, Any]]:
    """The setup (profiles, follow graph) and ``events`` changes of the workload generator, ids
    prefixed ``prefix``; ``shares``: ``repost_share``, ``reply_share``, ``hide_share``... as
    :func:`feed_service.workload.generator.generate` takes them."""
    return list(generate(users=users, events=events, seed=seed, mean_following=mean_following, prefix=prefix,
                         **shares))


def followers(events: Iterable[dict[str, Any]]) -> list[str]:
    """Every user that follows someone at some point of ``events`` (the readers), sorted."""
    return sorted({e["follower_id"] for e in events if e.get("type") == "follow"})


def split(events: Sequence[dict[str, Any]], *fractions: float) -> list[list[dict[str, Any]]]:
    """``events`` cut into consecutive stages at ``fractions`` of its length (``split(h, .5)``: halves)."""
    cuts = [0, *(int(len(events) * f) for f in fractions), len(events)]
    return [list(events[a:b]) for a, b in zip(cuts, cuts[1:])]


def publish_in_stages(pipeline: Settings, stream: StreamProcess, stages: Iterable[Sequence[dict[str, Any]]]) -> None:
    """Publish each stage and wait until ``stream`` (running) has caught up with it, so that a later
    stage's edits, deletes, unfollows and hides change rows an earlier micro-batch wrote."""
    for stage in stages:
        publish(pipeline, stage)
        stream.wait_caught_up()

"""The one history strategy of the integration tests: the project's workload generator with the
suite's small shape (a few dozen users, ~6 followees each), ids prefixed so histories never meet,
publishing stage by stage, each stage caught up before the next, and the designed pieces tests add
(prolific authors, deletes of the newest tweets, a pull-threshold crossing)."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from feed_service.settings import Settings
from feed_service.stack.stream_process import StreamProcess
from feed_service.workload.generator import WORKLOAD_EPOCH_MS, generate

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


def prolific(prefix: str, reader: str, authors: range, tweets: int, *, start: int) -> list[dict[str, Any]]:
    """``reader`` follows the push authors ``<prefix>prolific<i>`` of ``authors``, each tweeting ``tweets``
    times, interleaved in time (from tweet number ``start``; the profiles and follows come with the
    first): a reader that receives far more entries than its inbox keeps (docs/trimming.md)."""
    events: list[dict[str, Any]] = []
    names = [f"{prefix}prolific{i}" for i in authors]
    if start == 0:
        events += [{"type": "profile", "user_id": a, "version": 1, "display_name": f"Prolific {i}"}
                   for i, a in zip(authors, names)]
        events += [{"type": "follow", "op": "follow", "follower_id": reader, "followee_id": a, "version": 1}
                   for a in names]
    for n in range(start, start + tweets):
        for i, a in enumerate(names):
            events.append({"type": "tweet", "op": "upsert", "tweet_id": f"{a}-{n}", "author_id": a, "version": 1,
                           "created_at": WORKLOAD_EPOCH_MS + n * 50 + i, "text": f"{a} #{n}", "profile_version": 1})
    return events


def deletes_of_newest(events: Sequence[dict[str, Any]], author: str, newest: int) -> list[dict[str, Any]]:
    """Deletes of ``author``'s ``newest`` tweets in ``events``: room at the top of its readers' inboxes
    that only a refill fills again (docs/trimming.md#refill)."""
    own = sorted((e for e in events if e["type"] == "tweet" and e["author_id"] == author),
                 key=lambda e: e["created_at"])[-newest:]
    return [{"type": "tweet", "op": "delete", "tweet_id": e["tweet_id"], "author_id": author, "version": 2}
            for e in own]


def crossing(prefix: str, threshold: int, *, up: bool, version: int) -> list[dict[str, Any]]:
    """Follows that take ``{prefix}star`` to ``threshold + 1`` followers (up: a pull author) or back to 2
    (down: pushed again), at ``version``, with three tweets of the star in the same batch
    (docs/fan-out.md); the first crossing (version 1) comes with the star's profile."""
    star = f"{prefix}star"
    fans = [f"{prefix}fan{i}" for i in range(threshold + 1)]
    kept = fans if up else fans[:2]
    events: list[dict[str, Any]] = [
        {"type": "follow", "op": "follow" if f in kept else "unfollow", "follower_id": f, "followee_id": star,
         "version": version} for f in fans]
    events += [{"type": "tweet", "op": "upsert", "tweet_id": f"{star}-{version}-{n}", "author_id": star,
                "version": 1, "created_at": WORKLOAD_EPOCH_MS + version * 100 + n, "text": f"star {version}/{n}",
                "profile_version": 1} for n in range(3)]
    if version == 1:
        events.insert(0, {"type": "profile", "user_id": star, "version": 1, "display_name": "The Star"})
    return events

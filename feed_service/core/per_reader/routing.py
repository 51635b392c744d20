"""The per-reader stage's one entry point for its drivers: route a batch's messages by kind, step once.

The author keys' messages (:mod:`.messages`) reach the stage from three drivers: the stream's driver
(``spark_jobs/stream/per_reader.py``), the backfill (``spark_jobs/backfill/per_reader.py``) and the
in-memory view's materializer (:mod:`feed_service.core.view`). Each hands its batch here, as loose
messages (:func:`step_messages`) or as the author steps' :class:`~.author_side.SideResult`\\ s
(:func:`step_sides`), so the routing is decided once.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from feed_service.core.per_reader.audience_stage import AudienceStage, StageResult
from feed_service.core.per_reader.author_side import SideResult
from feed_service.core.per_reader.list_stage import ListFact
from feed_service.core.per_reader.messages import ConditionalTweet, Relation, RepostedTweet, RepostEdge

StageMessage = Relation | ConditionalTweet | RepostEdge | RepostedTweet
"""One message an author key owes the stage."""


def step_messages(stage: AudienceStage, messages: Iterable[StageMessage]) -> StageResult:
    """Step ``stage`` once on ``messages``, each routed to the stage's input of its kind (in order);
    ``TypeError`` on anything else."""
    by_kind: dict[type, list] = {Relation: [], ConditionalTweet: [], RepostEdge: [], RepostedTweet: []}
    for m in messages:
        inputs = by_kind.get(type(m))
        if inputs is None:
            raise TypeError(f"not a per-reader message: {m!r}")
        inputs.append(m)
    return stage.step(by_kind[Relation], by_kind[ConditionalTweet], by_kind[RepostEdge], by_kind[RepostedTweet])


def step_sides(stage: AudienceStage, sides: Iterable[SideResult], lists: Sequence[ListFact] = ()
               ) -> StageResult | None:
    """Step ``stage`` once on the messages of the author steps' ``sides`` and the list stage's
    ``lists`` facts; None (no step) when there is nothing."""
    relations: list[Relation] = []
    replies: list[ConditionalTweet] = []
    edges: list[RepostEdge] = []
    tweets: list[RepostedTweet] = []
    for side in sides:
        relations.extend(side.relations)
        replies.extend(side.replies)
        edges.extend(side.edges)
        tweets.extend(side.tweets)
    if not (relations or replies or edges or tweets or lists):
        return None
    return stage.step(relations, replies, edges, tweets, lists)

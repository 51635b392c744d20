"""The per-reader stage's one entry point for its drivers: route a batch's messages by kind, step once.

The author keys' messages (:mod:`.messages`) reach the stage from three drivers: the stream's driver
(``spark_jobs/stream/per_reader.py``), the backfill (``spark_jobs/backfill/per_reader.py``) and the
in-memory view's materializer (:mod:`feed_service.core.view`). Each hands its batch here, as loose
messages (:func:`step_messages`), or with the list stage beside it (:func:`step_batch`, the
messages of the author steps' :class:`~.author_side.SideResult`\\ s by :func:`sides_messages`), so
the routing and the order of the stages are decided once.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

from feed_service.core.events import Exclusion, ListChange, ListFollow, ListMemberChange
from feed_service.core.per_reader.audience_stage import AudienceStage, StageResult
from feed_service.core.per_reader.author_side import SideResult
from feed_service.core.per_reader.list_stage import ListFact, ListStage, ListStageResult
from feed_service.core.per_reader.messages import ConditionalTweet, ListInput, Relation, RepostedTweet, RepostEdge

StageMessage = Relation | ConditionalTweet | RepostEdge | RepostedTweet
"""One message an author key owes the stage."""


def step_messages(stage: AudienceStage, messages: Iterable[StageMessage], facts: Sequence[ListFact] = ()
                  ) -> StageResult:
    """Step ``stage`` once on ``messages``, each routed to the stage's input of its kind (in order),
    and on the list stage's ``facts`` (applied first, as :meth:`AudienceStage.step` does: the backfill
    gives them with the messages, its list stage having stepped before the author keys);
    ``TypeError`` on anything else."""
    by_kind: dict[type, list] = {Relation: [], ConditionalTweet: [], RepostEdge: [], RepostedTweet: []}
    for m in messages:
        inputs = by_kind.get(type(m))
        if inputs is None:
            raise TypeError(f"not a per-reader message: {m!r}")
        inputs.append(m)
    return stage.step(by_kind[Relation], by_kind[ConditionalTweet], by_kind[RepostEdge], by_kind[RepostedTweet], facts)


class DriverStep(NamedTuple):
    """One batch of the driver's stages (docs/lists.md#in-the-engine), each part None when it did not
    step: the per-reader stage on the keys' messages, the list stage on the batch's list changes and
    the owners' hides that step changed, then the per-reader stage again on the list stage's facts."""

    stage: StageResult | None
    lists: ListStageResult | None
    facts: StageResult | None

    @property
    def results(self) -> tuple[StageResult, ...]:
        """The per-reader stage's results, in the order they were stepped (what a driver writes)."""
        return tuple(r for r in (self.stage, self.facts) if r is not None)

    @property
    def edges(self) -> tuple[ListFollow | Exclusion, ...]:
        """The list edges the members' keys must fold next (the stream: at its next micro-batch)."""
        return () if self.lists is None else (*self.lists.follows, *self.lists.exclusions)


def step_batch(stage: AudienceStage, list_stage: ListStage, messages: Iterable[StageMessage | ListInput]
               ) -> DriverStep:
    """Step the driver's stages once on one batch of the author keys' messages (:class:`DriverStep`):
    the one order every driver (the stream's, the backfill's, the materializer) steps them in."""
    mine: list[StageMessage] = []
    changes: list[ListChange | ListMemberChange] = []
    for m in messages:
        if type(m) is ListInput:
            changes.append(m.change)
        else:
            mine.append(m)  # type: ignore[arg-type]
    first = step_messages(stage, mine) if mine else None
    hides = [(d.reader, d.user) for d in first.hidden] if first is not None else []
    if not changes and not hides:
        return DriverStep(first, None, None)
    rel = stage.rel
    done = list_stage.step(changes, hides, lambda owner, member: bool(
        (r := rel.get((owner, member))) is not None and r[2]))
    facts = stage.step([], [], [], [], done.facts) if done.facts else None
    return DriverStep(first, done, facts)


def sides_messages(sides: Iterable[SideResult]) -> list[StageMessage | ListInput]:
    """Every message of the author steps' ``sides``, in order."""
    out: list[StageMessage | ListInput] = []
    for side in sides:
        out.extend(side.relations)
        out.extend(side.replies)
        out.extend(side.edges)
        out.extend(side.tweets)
        out.extend(side.lists)
    return out

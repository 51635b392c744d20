"""The per-reader stage's store contract: restored from its inputs it is the stage that wrote them,
and a batch stepped again from the inputs before it writes exactly what it wrote the first time
(what makes a replayed micro-batch idempotent: docs/reposts-and-replies.md, "In the stream")."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from feed_service.core.per_reader.audience_stage import AudienceStage, Identity
from feed_service.core.view import Materializer
from tests.support.repost_runs import SETTINGS, Run, runs


def _shown(stage: AudienceStage) -> dict:
    return {t: {e: frozenset(r) for e, r in groups.items()} for t, groups in stage.shown.items()}


def _same(a: AudienceStage, b: AudienceStage) -> None:
    assert _shown(a) == _shown(b)
    assert a.pull == b.pull and a.clock == b.clock
    assert {u: s for u, s in a.aud.items() if s} == {u: s for u, s in b.aud.items() if s}
    assert a.involved == b.involved


class Recording(Materializer):
    """A Materializer that keeps its stage's inputs as a store would, and checks each batch against
    a stage restored from the inputs before it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stored: dict[Identity, Any] = {}

    def per_reader(self, sides):  # type: ignore[no-untyped-def]
        relations = [m for s in sides for m in s.relations]
        replies = [m for s in sides for m in s.replies]
        edges = [m for s in sides for m in s.edges]
        tweets = [m for s in sides for m in s.tweets]
        if not (relations or replies or edges or tweets):
            return
        again = AudienceStage.restore(self.stored.items(), pull_threshold=self.stage.pull_threshold)
        _same(again, self.stage)
        done = self.stage.step(relations, replies, edges, tweets)
        replayed = again.step(relations, replies, edges, tweets)
        assert replayed == done  # same rows, same timestamps, same inputs
        for identity, value, before in done.inputs:
            assert self.stored.get(identity) == before
            self.stored[identity] = value
        self.view.apply_extras(done.extras)
        self.view.apply_own_reposts(done.own_reposts)
        self.view.apply_pull_reposters(done.pull_readers)
        self.view.apply_visible(done.visible)
        self.view.apply_hidden(done.hidden)


@SETTINGS
@given(run=runs(), pull_threshold=st.sampled_from([1, 2, 1000]))
def test_a_stage_restored_from_its_inputs_steps_every_batch_as_the_stage_that_wrote_them(
        run: Run, pull_threshold: int) -> None:
    engine = Recording(inbox_cap=100, pull_threshold=pull_threshold, pull_reposters=pull_threshold < 1000)
    for batch in run.batches:
        engine.process_batch(batch)
    _same(AudienceStage.restore(engine.stored.items(), pull_threshold=engine.stage.pull_threshold), engine.stage)

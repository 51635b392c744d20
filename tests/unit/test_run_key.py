"""The stateful operator's per-key step: state parts are encoded and written only when the batch
changed them, and a key's edges part is read only when the step needs it."""

from __future__ import annotations

from typing import Any

import pytest

import feed_service.core.stored_step as stored_step
from feed_service.core.events import BlockChange, Event, FollowChange, MuteChange, TweetUpsert
from feed_service.core.state import decode_parts
from spark_jobs.timeline_join import JoinConfig, run_key
from tests.support.run_key_inputs import Routed, no_edges

CONFIG = JoinConfig(inbox_cap=800, pull_threshold=2000, clock_start=0)

FIRST = [FollowChange("ann", "bob", 1, "follow"), TweetUpsert("t1", "bob", 1, 100, "hi", 1)]


@pytest.fixture
def encodes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    real = stored_step.encode_core

    def counting(state: Any, **kwargs: Any) -> bytes:
        calls.append(state)
        return real(state, **kwargs)

    monkeypatch.setattr(stored_step, "encode_core", counting)
    return calls


def _core_after(events: list[Event]) -> bytes:
    done, _ = run_key(None, no_edges, [Routed(e) for e in events], CONFIG)
    assert done is not None and done.core is not None and done.edges is None
    return done.core


def test_an_unchanged_key_is_not_encoded(encodes: list[Any]) -> None:
    core = _core_after(FIRST)
    encodes.clear()
    # A replay of what the state already holds: no output, no write, nothing encoded.
    done, rows = run_key(core, no_edges, [Routed(e) for e in FIRST], CONFIG)
    assert done is not None and (done.core, done.edges, rows, encodes) == (None, None, [], [])


def test_a_changed_key_is_encoded_once(encodes: list[Any]) -> None:
    core = _core_after(FIRST)
    encodes.clear()
    edit = TweetUpsert("t1", "bob", 2, 100, "hi!", 1)
    done, rows = run_key(core, no_edges, [Routed(edit)], CONFIG)
    assert done is not None and len(encodes) == 1 and done.core is not None
    assert decode_parts(done.core, None).tweets["t1"][2] == "hi!" and rows


def test_a_new_key_is_encoded(encodes: list[Any]) -> None:
    core = _core_after(FIRST)
    assert len(encodes) == 1 and decode_parts(core, None).key == "bob"


def test_no_events_no_step() -> None:
    assert run_key(None, no_edges, [], CONFIG) == (None, [])


def test_a_new_key_of_blocks_only_takes_the_groups_key() -> None:
    # The block names both users: only the group's key says whose state this is.
    block = BlockChange("ann", "bob", 1, "block")
    for key, kinds in (("ann", ["block"]), ("bob", [])):  # the blocker's key writes the blocks row
        done, rows = run_key(None, no_edges, [Routed(block, key)], CONFIG, key=key)
        assert done is not None and done.core is not None and decode_parts(done.core, None).key == key
        assert [r[0] for r in rows if r[0] != "per_reader"] == kinds


def test_a_mute_is_stepped_at_the_muted_users_key() -> None:
    core = _core_after(FIRST)  # ann follows bob, who tweeted t1
    done, rows = run_key(core, no_edges, [Routed(MuteChange("ann", "bob", 1, "mute"))], CONFIG, key="bob")
    assert done is not None and done.core is not None
    assert [(r[0], r[1], r[2], r[8]) for r in rows if r[0] != "per_reader"] == [("timeline", "delete", "t1", ["ann"])]


def test_events_from_rows_reads_pandas_nulls_of_both_kinds() -> None:
    """pandas hands a null over as NaN or, in a nullable integer column, as pd.NA (an unrepost's
    time and profile version): both are None in the event."""
    from collections import namedtuple

    import pandas as pd

    from spark_jobs.timeline_join import events_from_rows

    Row = namedtuple("Row", "type op reposter_id tweet_id author_id version created_at profile_version")
    for null in (pd.NA, float("nan"), None):
        (event,) = events_from_rows([Row("repost", "unrepost", "ann", "t1", "bob", 2, null, null)])
        assert (event.op, event.created_at, event.profile_version) == ("unrepost", None, None)

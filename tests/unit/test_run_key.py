"""The stateful operator's per-key step: a state is encoded only when the batch changed it."""

from __future__ import annotations

from typing import Any

import pytest

import spark_jobs.timeline_join as timeline_join
from feed_service.core.events import Event, FollowChange, TweetUpsert, join_key
from feed_service.core.state import decode_state, encode_state
from spark_jobs.envelope import EVENT_COLUMNS
from spark_jobs.timeline_join import run_key


class Routed:
    """A routed row as the Row API hands it over: the event columns as attributes."""

    def __init__(self, event: Event) -> None:
        for name, _ in EVENT_COLUMNS:
            setattr(self, name, getattr(event, name, None))
        self.type = {TweetUpsert: "tweet", FollowChange: "follow"}[type(event)]
        self.op = getattr(event, "op", "upsert")
        self.key = join_key(event)


FIRST = [FollowChange("ann", "bob", 1, "follow"), TweetUpsert("t1", "bob", 1, 100, "hi", 1)]


@pytest.fixture
def encodes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []

    def counting(state: Any) -> bytes:
        calls.append(state)
        return encode_state(state)

    monkeypatch.setattr(timeline_join, "encode_state", counting)
    return calls


def _state_after(events: list[Event]) -> bytes:
    blob, _ = run_key(None, [Routed(e) for e in events], inbox_cap=800, clock_start=0)
    assert blob is not None
    return blob


def test_an_unchanged_key_is_not_encoded(encodes: list[Any]) -> None:
    blob = _state_after(FIRST)
    encodes.clear()
    # A replay of what the state already holds: no output, no new state, nothing encoded.
    new_blob, rows = run_key(blob, [Routed(e) for e in FIRST], inbox_cap=800, clock_start=0)
    assert (new_blob, rows, encodes) == (None, [], [])


def test_a_changed_key_is_encoded_once(encodes: list[Any]) -> None:
    blob = _state_after(FIRST)
    encodes.clear()
    edit = TweetUpsert("t1", "bob", 2, 100, "hi!", 1)
    new_blob, rows = run_key(blob, [Routed(edit)], inbox_cap=800, clock_start=0)
    assert len(encodes) == 1 and new_blob == encode_state(encodes[0])
    assert decode_state(new_blob).tweets["t1"][2] == "hi!" and rows


def test_a_new_key_is_encoded(encodes: list[Any]) -> None:
    blob = _state_after(FIRST)
    assert len(encodes) == 1 and decode_state(blob).key == "bob"

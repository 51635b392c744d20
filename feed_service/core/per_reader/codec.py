"""The reposter and reader steps' states as bytes, for a store outside the stream's operator.

Both steps run in the stream's sink (docs/reposts-and-replies.md, "Where the steps run"), so their
states live in a table, one blob per key, read and written once per batch that touches the key.
The blob is a format byte and a pickle of plain containers (as the author key's state is,
feed_service/core/state.py): it is written and read only by this module, never from outside input.
"""

from __future__ import annotations

import pickle

from feed_service.core.per_reader.reader_step import ReaderState
from feed_service.core.per_reader.reposter_step import ReposterState

_FORMAT = 1


def _plain(mapping) -> dict:
    return mapping if type(mapping) is dict else dict(mapping)


def encode_reposter_state(state: ReposterState) -> bytes:
    return bytes((_FORMAT,)) + pickle.dumps((_plain(state.audience), _plain(state.edges), _plain(state.tweets),
                                             _plain(state.joined), state.clock, state.pull, state.seers),
                                            protocol=5)


def decode_reposter_state(blob: bytes) -> ReposterState:
    payload = _payload(blob, "reposter")
    if len(payload) == 5:  # written before pull reposters: push, its seers counted from its audience
        audience = payload[0]
        return ReposterState(*payload, False, sum(1 for v in audience.values() if v[1]))
    return ReposterState(*payload)


def encode_reader_state(state: ReaderState) -> bytes:
    candidates = {k: _plain(v) for k, v in state.candidates.items()}
    return bytes((_FORMAT,)) + pickle.dumps((_plain(state.rel), _plain(state.replies), candidates,
                                             _plain(state.shown), state.clock), protocol=5)


def decode_reader_state(blob: bytes) -> ReaderState:
    """A fresh state whose containers the reader step may update in place."""
    rel, replies, candidates, shown, clock = _payload(blob, "reader")
    return ReaderState(rel, replies, candidates, shown, clock)


def _payload(blob: bytes, what: str) -> tuple:
    if not blob or blob[0] != _FORMAT:
        raise ValueError(f"{what} step state: unknown format {blob[:1]!r}, expected {_FORMAT}")
    return pickle.loads(memoryview(blob)[1:])

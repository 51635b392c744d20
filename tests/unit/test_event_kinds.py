"""The registry of event kinds is the one contract: the schema file, the parsers, keys and ranks agree with it."""

from __future__ import annotations

import json
import typing

import pytest

from feed_service import resources
from feed_service.cli.commands.schema import render
from feed_service.core.event_kinds import BASE_REJECT_CODES, EDGE_KINDS, ENVELOPE_COLUMNS, EVENT_KINDS, TYPES
from feed_service.core.event_types import RejectCode
from feed_service.core.events import edge_rank, event_to_json, hide_rank, join_keys, parse_event
from feed_service.errors import InvalidEvent
from feed_service.kafka.keys import ROLE_OF_TYPE, record_key, topic_role
from feed_service.settings import Settings

REPO_SCHEMA = "schemas/events/event.schema.json"


def test_the_schema_file_is_the_registry_written_out() -> None:
    """``feedctl schema events > schemas/events/event.schema.json`` after a change of the registry."""
    from pathlib import Path

    repo_file = Path(__file__).resolve().parents[2] / REPO_SCHEMA
    assert repo_file.read_text(encoding="utf-8") == render(), f"regenerate {REPO_SCHEMA}: feedctl schema events"
    packaged = json.loads(resources.read_text("schemas/events/event.schema.json"))
    assert packaged == json.loads(render())


def test_every_reject_code_is_declared_by_some_kind_and_every_kind_code_exists() -> None:
    declared = set(typing.get_args(RejectCode))
    from_kinds = set(BASE_REJECT_CODES).union(*(kind.reject_codes for kind in EVENT_KINDS))
    assert from_kinds == declared


def _sample(kind, op: str | None) -> dict:
    values = {"id": "u", "text": "t", "natural": 3, "optional_text": None}
    envelope = {"type": kind.type, **({"op": op} if op else {})}
    for n, spec in enumerate(kind.fields):
        envelope[spec.name] = f"u{n}" if spec.rule == "id" else values[spec.rule]
    return {k: v for k, v in envelope.items() if v is not None}


@pytest.mark.parametrize("kind", EVENT_KINDS, ids=lambda k: k.key)
def test_each_kind_parses_to_its_class_and_back(kind) -> None:
    for op in kind.ops or (None,):
        envelope = _sample(kind, op)
        event = parse_event(envelope)
        assert type(event) is kind.cls
        assert event_to_json(event) == envelope
        assert join_keys(event) == tuple(envelope[f] for f in kind.join_keys)
        assert ROLE_OF_TYPE[kind.type] == topic_role(event) == kind.topic_role
        assert kind.topic_role in Settings().topics
        key = record_key(event)
        assert all(str(envelope[f]) in key for f in kind.record_key)
        assert key.startswith(f"{kind.type}|") == kind.keyed_by_type


@pytest.mark.parametrize("kind", [k for k in EDGE_KINDS.values() if k.edge.self_code], ids=lambda k: k.key)
def test_edge_kinds_reject_self_edges_with_their_code(kind) -> None:
    envelope = _sample(kind, kind.on_op)
    envelope[kind.edge.target] = envelope[kind.edge.subject]
    with pytest.raises(InvalidEvent) as info:
        parse_event(envelope)
    assert info.value.code == kind.edge.self_code


@pytest.mark.parametrize("kind", list(EDGE_KINDS.values()), ids=lambda k: k.key)
def test_the_engine_ranks_break_ties_as_the_registry_says(kind) -> None:
    """``edge_rank`` (follows) and ``hide_rank`` (blocks, mutes) hard-code the tie rule on the hot path."""
    rank = edge_rank if kind.type == "follow" else hide_rank  # rank(version, whether the op is the on op)
    assert (rank(5, True) > rank(5, False)) == (kind.tie_winner == kind.on_op)


def test_envelope_columns_hold_every_field_once_in_registry_order() -> None:
    names = [name for name, _ in ENVELOPE_COLUMNS]
    assert names[:2] == ["type", "op"] and len(names) == len(set(names))
    assert set(names[2:]) == {f.name for kind in EVENT_KINDS for f in kind.fields}
    # The stream's state and checkpoints depend on this order: append new fields at the end.
    assert names[2:18] == ["tweet_id", "author_id", "version", "created_at", "text", "profile_version",
                           "follower_id", "followee_id", "user_id", "display_name", "avatar_url", "bio",
                           "blocker_id", "blocked_id", "muter_id", "muted_id"]


def test_types_group_kinds_that_share_an_envelope_type() -> None:
    assert [k.key for k in TYPES["tweet"]] == ["tweet:upsert", "tweet:delete"]

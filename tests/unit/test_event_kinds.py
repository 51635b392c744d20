"""The registry of event kinds is the one contract: the schema file, the parsers, keys and ranks agree with it."""

from __future__ import annotations

import json
import typing

import pytest

from feed_service import resources
from feed_service.cli.commands.schema import render
from feed_service.core.event_kinds import (
    BASE_REJECT_CODES,
    EDGE_KINDS,
    ENVELOPE_COLUMNS,
    EVENT_KINDS,
    OPTIONAL_RULES,
    RULE_REJECT_CODES,
    FieldRule,
    TOPIC_ROLES,
    CHANGELOG_ROLES,
    TYPES,
)
from feed_service.core.event_types import RejectCode
from feed_service.core.events import event_to_json, join_keys, parse_event
from feed_service.core.rules import edge_rank, hide_rank, member_rank, repost_rank
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


def test_every_reject_code_is_declared_by_some_kind_or_rule_and_every_kind_code_exists() -> None:
    """A code belongs to the base checks, a kind (its ops, self-edge rule, groups) or a field rule (one
    a kind may not use yet: a rule's codes come with it)."""
    declared = set(typing.get_args(RejectCode))
    from_kinds = set(BASE_REJECT_CODES).union(*(kind.reject_codes for kind in EVENT_KINDS))
    assert from_kinds <= declared
    assert from_kinds.union(*RULE_REJECT_CODES.values()) == declared
    assert set(RULE_REJECT_CODES) == set(typing.get_args(FieldRule))


def _sample(kind, op: str | None, *, optional: bool = False) -> dict:
    """A valid envelope of ``kind`` with the fields ``op`` carries: every id different, the optional
    fields absent, or with ``optional`` given."""
    values = {"id": "u", "text": "t", "natural": 3, "bool": True, "optional_text": "o", "optional_id": "o",
              "optional_bool": False}
    envelope = {"type": kind.type, **({"op": op} if op else {})}
    for n, spec in enumerate(kind.fields_of(op)):
        if spec.rule in OPTIONAL_RULES and not optional:
            continue
        if spec.choices:  # a value other than the default, when there is one
            envelope[spec.name] = next((c for c in reversed(spec.choices) if c != spec.default))
        else:
            envelope[spec.name] = f"u{n}" if spec.rule in ("id", "optional_id") else values[spec.rule]
    return envelope


def _with_defaults(kind, envelope: dict) -> dict:
    """``envelope`` as ``event_to_json`` writes it back: the absent fields with a default given it."""
    op = envelope.get("op")
    return {**envelope, **{f.name: f.default for f in kind.fields_of(op)
                           if f.default is not None and f.name not in envelope}}


@pytest.mark.parametrize("kind", EVENT_KINDS, ids=lambda k: k.key)
@pytest.mark.parametrize("optional", [False, True], ids=["bare", "optional_fields"])
def test_each_kind_parses_to_its_class_and_back(kind, optional: bool) -> None:
    for op in kind.ops or (None,):
        envelope = _sample(kind, op, optional=optional)
        event = parse_event(envelope)
        assert type(event) is kind.cls
        assert event_to_json(event) == _with_defaults(kind, envelope)
        assert parse_event(event_to_json(event)) == event
        assert join_keys(event) == tuple(envelope[f] for f in kind.join_keys)
        assert ROLE_OF_TYPE[kind.type] == topic_role(event) == kind.topic_role
        assert kind.topic_role in Settings().topics
        key = record_key(event)
        assert all(str(envelope[f]) in key for f in kind.record_key)
        assert key.startswith(f"{kind.type}|") == kind.keyed_by_type
        if kind.keyed_by_type or len(kind.record_key) > 1:
            assert key.split("|")[-len(kind.record_key):] == [str(envelope[f]) for f in kind.record_key]


@pytest.mark.parametrize("kind", [k for k in EVENT_KINDS if any(f.ops for f in k.fields)], ids=lambda k: k.key)
def test_fields_of_some_ops_are_required_there_and_ignored_elsewhere(kind) -> None:
    """A repost carries created_at and profile_version; an unrepost does not, and one it carries
    anyway (of any type) is dropped like an unknown field."""
    for op in kind.ops:
        own = {f.name for f in kind.fields_of(op)}
        for spec in (f for f in kind.fields if f.ops):
            envelope = _sample(kind, op)
            if spec.name in own and not spec.required:  # absent: the default
                assert getattr(parse_event(envelope), spec.name) == spec.default
            elif spec.name in own:
                del envelope[spec.name]
                with pytest.raises(InvalidEvent) as info:
                    parse_event(envelope)
                assert info.value.code == "missing_field" and spec.name in info.value.reason
            else:
                envelope[spec.name] = "not even a number"
                event = parse_event(envelope)
                assert getattr(event, spec.name) == spec.default  # None, or the field's default
                assert spec.name not in event_to_json(event)


@pytest.mark.parametrize("kind", [k for k in EVENT_KINDS if k.together], ids=lambda k: k.key)
def test_fields_that_go_together_are_given_all_or_none(kind) -> None:
    for group in kind.together:
        for name in group.names:
            for absent in ("left out", None):
                envelope = _sample(kind, kind.on_op if kind.edge else next(iter(kind.ops), None), optional=True)
                if absent is None:
                    envelope[name] = None
                else:
                    del envelope[name]
                with pytest.raises(InvalidEvent) as info:
                    parse_event(envelope)
                assert info.value.code == group.code
                assert info.value.reason == group.reason(next(n for n in group.names if n != name), name)


@pytest.mark.parametrize("kind", [k for k in EDGE_KINDS.values() if k.edge.self_code], ids=lambda k: k.key)
def test_edge_kinds_reject_self_edges_with_their_code(kind) -> None:
    envelope = _sample(kind, kind.on_op)
    envelope[kind.edge.target] = envelope[kind.edge.subject]
    with pytest.raises(InvalidEvent) as info:
        parse_event(envelope)
    assert info.value.code == kind.edge.self_code


@pytest.mark.parametrize("kind", list(EDGE_KINDS.values()), ids=lambda k: k.key)
def test_the_engine_ranks_break_ties_as_the_registry_says(kind) -> None:
    """``edge_rank`` (follows, a list's follows), ``hide_rank`` (blocks, mutes, exclusions),
    ``member_rank`` and ``repost_rank`` hard-code the tie rule on the hot path."""
    ranks = {"follow": edge_rank, "list_follow": edge_rank, "block": hide_rank, "mute": hide_rank,
             "exclusion": hide_rank, "list_member": member_rank,
             "repost": lambda version, on: repost_rank(version, on, "a", 1 if on else None, 1 if on else None)}
    rank = ranks[kind.type]  # rank(version, whether the op is the on op)
    assert (rank(5, True) > rank(5, False)) == (kind.tie_winner == kind.on_op)


def test_envelope_columns_hold_every_field_once_in_registry_order() -> None:
    names = [name for name, _ in ENVELOPE_COLUMNS]
    assert names[:2] == ["type", "op"] and len(names) == len(set(names))
    assert set(names[2:]) == {f.name for kind in EVENT_KINDS for f in kind.fields}
    # The stream's state and checkpoints depend on this order: append new fields at the end.
    assert names[2:] == ["tweet_id", "author_id", "version", "created_at", "text", "profile_version",
                         "follower_id", "followee_id", "user_id", "display_name", "avatar_url", "bio",
                         "blocker_id", "blocked_id", "muter_id", "muted_id",
                         # replies and reposts (registry revision 1)
                         "in_reply_to_tweet_id", "in_reply_to_author_id", "reposter_id",
                         # refill requests (registry revision 2)
                         "reader_id", "below_created_at", "below_tweet_id", "need",
                         # a follow's option, lists and list members (registry revision 3)
                         "show_reposts", "list_id", "owner_id", "name", "replies_policy", "exclusive",
                         "member_id"]


def test_the_changelog_topics_are_the_registry_s_topic_roles() -> None:
    """The stream subscribes to them, provisioning creates them, the producer and stream roles get them."""
    from feed_service.kafka.offsets import CHANGELOG_SOURCE_ROLES, SOURCE_ROLES
    from feed_service.security.roles import CHANGELOG_TOPICS, STREAM_INTERNAL_TOPICS

    assert SOURCE_ROLES == TOPIC_ROLES == (*CHANGELOG_TOPICS, *STREAM_INTERNAL_TOPICS)
    assert CHANGELOG_SOURCE_ROLES == CHANGELOG_ROLES == CHANGELOG_TOPICS
    declared = resources.read_json(resources.TOPICS)["topics"]
    for role in CHANGELOG_ROLES:
        assert declared[role]["config"]["cleanup.policy"] == "compact", role
    # refill requests are requests, nothing to compact; the derived list edges are assignments whose
    # latest value per edge counts (docs/lists.md#in-the-engine), so compaction keeps it
    assert {role: declared[role]["config"]["cleanup.policy"] for role in STREAM_INTERNAL_TOPICS} == {
        "refills": "delete", "list_edges": "compact"}
    assert declared["list_edges"]["name"] == "feed.list-edges.v1"
    assert declared["reposts"]["name"] == "feed.reposts.v1" and declared["reposts"]["key"].startswith("repost|")
    assert declared["lists"]["name"] == "feed.lists.v1" and declared["lists"]["key"] == "list_id"
    assert declared["list_members"]["name"] == "feed.list-members.v1"
    assert declared["list_members"]["key"] == "list_id|member_id"


def test_types_group_kinds_that_share_an_envelope_type() -> None:
    assert [k.key for k in TYPES["tweet"]] == ["tweet:upsert", "tweet:delete"]

"""The view's own changelog: what one micro-batch changed in the rows readers see, as messages.

A materialized view is itself a source of changes (docs/view-changes.md). After a micro-batch's
Cassandra writes succeed, the stream publishes one message per compact output row to the
``timeline_changes`` topic; the read service consumes it to push to watchers and to keep its caches
exact. The types here are that contract, shared by the writer (the stream's sink) and the readers.

What a consumer may assume (docs/view-changes.md has the reasoning):

- **Compact.** A change names one row's content once with all the timelines it touches
  (``timeline_ids``); a pull author's tweet is one :class:`AuthorChange`, whatever its followers.
  Lists longer than :data:`MAX_IDS_PER_MESSAGE` are split over several messages.
- **Ordered per row.** Every row (a timeline's entry, an author-timeline entry, a pull-follow or
  block pair, a profile version) is written by one join key; the message key is that join key
  (:func:`message_key`), so one row's changes are in one partition in write order, and a batch's
  messages are all acknowledged before the next batch starts.
- **At least once.** A batch replayed after a failure publishes its messages again, with the same
  contents and the same write timestamp ``ts``; a change with a ``ts`` at or below the last one
  applied to its row (the row's Cassandra primary key: ``(timeline_id, created_at, tweet_id)`` for a
  home-timeline entry) is a duplicate (the order Cassandra itself resolves writes by). An edit that
  moves ``created_at`` is a ``delete`` of the old position then an ``insert`` at the new one with the
  same ``ts``: a consumer keying entries by ``tweet_id`` alone applies equal ``ts`` in arrival order.
- ``source_ms`` is the Kafka timestamp (ms) of the source event that caused the change (for a
  change caused by several events of one batch, the latest of them): what freshness is measured from.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Literal, NamedTuple, TypeAlias

from feed_service.core.rows import DeltaOp, Entry, FollowOp
from feed_service.errors import ChangeDecodeError  # noqa: F401 - decode_change raises it; consumers import it from here

#: Timeline or follower ids per message; longer lists are split (a message stays well under Kafka's
#: default 1 MB limit at ids of up to 40 bytes).
MAX_IDS_PER_MESSAGE = 20_000


class TimelineChange(NamedTuple):
    """``op`` on the row of ``entry.tweet_id`` in each of ``timeline_ids``' home timelines."""

    op: DeltaOp
    entry: Entry
    timeline_ids: tuple[str, ...]
    ts: int
    source_ms: int | None


class AuthorChange(NamedTuple):
    """``op`` on an author-timeline row: for a pull author, a change of every follower's home timeline
    that merges it in (``pull_follows``), in one message."""

    op: DeltaOp
    entry: Entry
    ts: int
    source_ms: int | None


class PullFollowChange(NamedTuple):
    """``follower_ids`` start (``insert``) or stop (``delete``) merging ``author_id``'s timeline in."""

    op: FollowOp
    author_id: str
    follower_ids: tuple[str, ...]
    ts: int
    source_ms: int | None


class ProfileChange(NamedTuple):
    """Profile version ``(user_id, version)`` was written (versions are immutable: no content here)."""

    user_id: str
    version: int
    ts: int
    source_ms: int | None


class BlockRowChange(NamedTuple):
    """``blocker_id`` starts (``insert``) or stops (``delete``) blocking ``blocked_id``."""

    op: FollowOp
    blocker_id: str
    blocked_id: str
    ts: int
    source_ms: int | None


class ExtrasChange(NamedTuple):
    """``op`` on a row of ``timeline_id``'s ``home_extras`` partition (the per-reader entries: a
    repost entry or a conditional reply, docs/reposts-and-replies.md), written by the per-reader stage for
    ``timeline_id``. The row's identity is ``(timeline_id, entry.at, entry.tweet_id)``."""

    op: DeltaOp
    entry: Entry
    timeline_id: str
    ts: int
    source_ms: int | None


class UserRepostChange(NamedTuple):
    """``op`` on a row of ``entry.reposted_by``'s own reposts (``user_reposts``), written by that
    per-reader stage; identity ``(entry.reposted_by, entry.at, entry.tweet_id)``."""

    op: DeltaOp
    entry: Entry
    ts: int
    source_ms: int | None


class VisibleChange(NamedTuple):
    """``reader_id`` starts (``insert``) or stops (``delete``) seeing ``user_id`` (``reader_visible``:
    what a read uses to filter a pull author's replies), written by the per-reader stage."""

    op: FollowOp
    reader_id: str
    user_id: str
    ts: int
    source_ms: int | None


class PullReposterChange(NamedTuple):
    """``timeline_id`` starts (``insert``) or stops (``delete``) merging in pull reposter
    ``reposter_id``'s reposts at read (``home_timeline.pull_reposters``), written by the per-reader stage
    of ``reposter_id`` (docs/reposts-and-replies.md, hybrid fan-out)."""

    op: FollowOp
    timeline_id: str
    reposter_id: str
    ts: int
    source_ms: int | None


class HiddenChange(NamedTuple):
    """``user_id``'s tweets start (``insert``) or stop (``delete``) being hidden from ``reader_id``
    (``reader_hidden``), written by the per-reader stage."""

    op: FollowOp
    reader_id: str
    user_id: str
    ts: int
    source_ms: int | None


class ExcludedChange(NamedTuple):
    """``reader_id`` starts (``insert``) or stops (``delete``) setting ``user_id`` aside as a source of
    its home timeline (``reader_excluded``: ``user_id`` is in one of its live exclusive lists and it
    sees ``user_id``, docs/lists.md#exclusive-lists), written by the per-reader stage."""

    op: FollowOp
    reader_id: str
    user_id: str
    ts: int
    source_ms: int | None


ListOp: TypeAlias = Literal["upsert", "delete"]


class ListChange(NamedTuple):
    """The list ``list_id`` is live with owner ``owner_id`` and reply policy ``replies_policy``
    (``upsert``: its ``lists`` row and its reader's statics ``list_owner``, ``list_policy``), or no
    longer has ``owner_id`` for owner (``delete``: deleted, or moved to another owner; the row under
    ``owner_id`` goes, and with a deleted list its reader's statics; ``replies_policy`` None).
    Written by the stream's driver from the list stage's facts (docs/lists.md#in-the-engine)."""

    op: ListOp
    list_id: str
    owner_id: str
    replies_policy: str | None
    ts: int
    source_ms: int | None


ViewChange: TypeAlias = (TimelineChange | AuthorChange | PullFollowChange | ProfileChange | BlockRowChange
                         | ExtrasChange | UserRepostChange | VisibleChange | PullReposterChange | HiddenChange
                         | ExcludedChange | ListChange)
ChangeKind: TypeAlias = Literal["timeline", "author", "pull_follow", "profile", "block", "extras", "user_repost",
                                "visible", "pull_reposter", "hidden", "excluded", "list"]


def message_key(change: ViewChange) -> str:
    """The join key that wrote the change's rows: its Kafka message key (order per row)."""
    if isinstance(change, (TimelineChange, AuthorChange)):
        return change.entry.author_id
    if isinstance(change, PullFollowChange):
        return change.author_id
    if isinstance(change, ProfileChange):
        return change.user_id
    if isinstance(change, ExtrasChange):
        return change.timeline_id
    if isinstance(change, UserRepostChange):
        return change.entry.reposted_by  # type: ignore[return-value] - decode requires it
    if isinstance(change, (VisibleChange, HiddenChange, ExcludedChange)):
        return change.reader_id
    if isinstance(change, ListChange):
        return change.list_id
    if isinstance(change, PullReposterChange):
        return change.reposter_id
    return change.blocker_id


def split(change: ViewChange, max_ids: int = MAX_IDS_PER_MESSAGE) -> Iterator[ViewChange]:
    """The change as messages of at most ``max_ids`` ids each (in order; one message if it fits).

    >>> change = PullFollowChange("insert", "bob", ("ann", "cat", "dan"), 7, None)
    >>> [m.follower_ids for m in split(change, 2)]
    [('ann', 'cat'), ('dan',)]
    """
    if max_ids < 1:
        raise ValueError(f"split: max_ids must be >= 1, got {max_ids}")
    if isinstance(change, TimelineChange) and len(change.timeline_ids) > max_ids:
        ids = change.timeline_ids
        for i in range(0, len(ids), max_ids):
            yield change._replace(timeline_ids=ids[i:i + max_ids])
    elif isinstance(change, PullFollowChange) and len(change.follower_ids) > max_ids:
        ids = change.follower_ids
        for i in range(0, len(ids), max_ids):
            yield change._replace(follower_ids=ids[i:i + max_ids])
    else:
        yield change


_OPTIONAL_ENTRY_FIELDS = (("in_reply_to_tweet_id", str), ("in_reply_to_author_id", str), ("reposted_by", str),
                          ("reposted_at", int), ("reposter_profile_version", int))
"""The entry fields a reply or a repost entry has (written only when set: docs/reposts-and-replies.md)."""


def _entry_json(entry: Entry) -> dict:
    out = {"tweet_id": entry.tweet_id, "author_id": entry.author_id, "created_at": entry.created_at,
           "version": entry.version, "text": entry.text, "profile_version": entry.profile_version}
    for name, _ in _OPTIONAL_ENTRY_FIELDS:
        if (value := getattr(entry, name)) is not None:
            out[name] = value
    return out


def to_json(change: ViewChange) -> dict:
    """The message's JSON object (schemas/view-changes/view-change.schema.json)."""
    base: dict
    if isinstance(change, TimelineChange):
        base = {"kind": "timeline", "op": change.op, "entry": _entry_json(change.entry),
                "timeline_ids": list(change.timeline_ids)}
    elif isinstance(change, AuthorChange):
        base = {"kind": "author", "op": change.op, "entry": _entry_json(change.entry)}
    elif isinstance(change, PullFollowChange):
        base = {"kind": "pull_follow", "op": change.op, "author_id": change.author_id,
                "follower_ids": list(change.follower_ids)}
    elif isinstance(change, ProfileChange):
        base = {"kind": "profile", "user_id": change.user_id, "version": change.version}
    elif isinstance(change, BlockRowChange):
        base = {"kind": "block", "op": change.op, "blocker_id": change.blocker_id, "blocked_id": change.blocked_id}
    elif isinstance(change, ExtrasChange):
        base = {"kind": "extras", "op": change.op, "entry": _entry_json(change.entry), "timeline_id": change.timeline_id}
    elif isinstance(change, UserRepostChange):
        base = {"kind": "user_repost", "op": change.op, "entry": _entry_json(change.entry)}
    elif isinstance(change, VisibleChange):
        base = {"kind": "visible", "op": change.op, "reader_id": change.reader_id, "user_id": change.user_id}
    elif isinstance(change, PullReposterChange):
        base = {"kind": "pull_reposter", "op": change.op, "timeline_id": change.timeline_id,
                "reposter_id": change.reposter_id}
    elif isinstance(change, HiddenChange):
        base = {"kind": "hidden", "op": change.op, "reader_id": change.reader_id, "user_id": change.user_id}
    elif isinstance(change, ExcludedChange):
        base = {"kind": "excluded", "op": change.op, "reader_id": change.reader_id, "user_id": change.user_id}
    elif isinstance(change, ListChange):
        base = {"kind": "list", "op": change.op, "list_id": change.list_id, "owner_id": change.owner_id,
                "replies_policy": change.replies_policy}
    else:
        raise TypeError(f"not a view change: {change!r}")
    base["ts"] = change.ts
    base["source_ms"] = change.source_ms
    return base


def encode(change: ViewChange) -> bytes:
    """The message value (compact JSON, UTF-8)."""
    return json.dumps(to_json(change), ensure_ascii=False, separators=(",", ":")).encode()


_DELTA_OPS = ("insert", "update", "delete")
_FOLLOW_OPS = ("insert", "delete")
_LIST_OPS = ("upsert", "delete")


def _int(obj: dict, name: str) -> int:
    value = obj[name]
    if type(value) is not int:  # not a bool, a float or a string that int() would take
        raise ChangeDecodeError(f"field {name!r} must be an integer, got {type(value).__name__}")
    return value


def _str(obj: dict, name: str) -> str:
    value = obj[name]
    if type(value) is not str:
        raise ChangeDecodeError(f"field {name!r} must be a string, got {type(value).__name__}")
    return value


def _ids(obj: dict, name: str) -> tuple[str, ...]:
    value = obj[name]
    if type(value) is not list or not all(type(i) is str for i in value):
        raise ChangeDecodeError(f"field {name!r} must be a list of strings")
    return tuple(value)


def _entry(obj: Any) -> Entry:
    if type(obj) is not dict:
        raise ChangeDecodeError(f"field 'entry' must be an object, got {type(obj).__name__}")
    optional = tuple(_optional(obj, name, kind) for name, kind in _OPTIONAL_ENTRY_FIELDS)
    return tuple.__new__(Entry, (_str(obj, "tweet_id"), _str(obj, "author_id"), _int(obj, "created_at"),
                                 _int(obj, "version"), _str(obj, "text"), _int(obj, "profile_version"))
                         + optional)


def _optional(obj: dict, name: str, kind: type) -> Any:
    if obj.get(name) is None:
        return None
    return _int(obj, name) if kind is int else _str(obj, name)


def _op(obj: dict, allowed: tuple[str, ...]) -> str:
    op = obj["op"]
    if op not in allowed:
        raise ChangeDecodeError(f"op {op!r} is not one of {allowed}")
    return op


def decode(value: bytes | str) -> ViewChange:
    """A message value back to its change; :class:`ChangeDecodeError` for anything else (not JSON,
    not an object, an unknown kind or op, a missing field, a field of the wrong JSON type).

    >>> decode(b'{"kind":"profile","user_id":"ann","version":3,"ts":7,"source_ms":null}')
    ProfileChange(user_id='ann', version=3, ts=7, source_ms=None)
    """
    try:
        obj = json.loads(value)
        if type(obj) is not dict:
            raise ChangeDecodeError(f"a view change is a JSON object, got {type(obj).__name__}")
        kind = obj["kind"]
        ts = _int(obj, "ts")
        source = obj.get("source_ms")
        if source is not None:
            source = _int(obj, "source_ms")
        if kind == "timeline":
            return TimelineChange(_op(obj, _DELTA_OPS), _entry(obj["entry"]), _ids(obj, "timeline_ids"), ts, source)
        if kind == "author":
            return AuthorChange(_op(obj, _DELTA_OPS), _entry(obj["entry"]), ts, source)
        if kind == "pull_follow":
            return PullFollowChange(_op(obj, _FOLLOW_OPS), _str(obj, "author_id"), _ids(obj, "follower_ids"), ts,
                                    source)
        if kind == "profile":
            return ProfileChange(_str(obj, "user_id"), _int(obj, "version"), ts, source)
        if kind == "block":
            return BlockRowChange(_op(obj, _FOLLOW_OPS), _str(obj, "blocker_id"), _str(obj, "blocked_id"), ts, source)
        if kind == "extras":
            return ExtrasChange(_op(obj, _DELTA_OPS), _entry(obj["entry"]), _str(obj, "timeline_id"), ts, source)
        if kind == "user_repost":
            entry = _entry(obj["entry"])
            if entry.reposted_by is None:  # the row's partition and the message key
                raise ChangeDecodeError("a user_repost change's entry must name its reposter (reposted_by)")
            return UserRepostChange(_op(obj, _DELTA_OPS), entry, ts, source)
        if kind == "visible":
            return VisibleChange(_op(obj, _FOLLOW_OPS), _str(obj, "reader_id"), _str(obj, "user_id"), ts, source)
        if kind == "pull_reposter":
            return PullReposterChange(_op(obj, _FOLLOW_OPS), _str(obj, "timeline_id"), _str(obj, "reposter_id"), ts,
                                      source)
        if kind == "hidden":
            return HiddenChange(_op(obj, _FOLLOW_OPS), _str(obj, "reader_id"), _str(obj, "user_id"), ts, source)
        if kind == "excluded":
            return ExcludedChange(_op(obj, _FOLLOW_OPS), _str(obj, "reader_id"), _str(obj, "user_id"), ts, source)
        if kind == "list":
            op = _op(obj, _LIST_OPS)
            policy = _optional(obj, "replies_policy", str)
            if op == "upsert" and policy is None:  # a live list has a policy (its reader's static)
                raise ChangeDecodeError("a list upsert must carry its replies_policy")
            return ListChange(op, _str(obj, "list_id"), _str(obj, "owner_id"), policy,  # type: ignore[arg-type]
                              ts, source)
    except ChangeDecodeError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise ChangeDecodeError(f"not a view change: {type(exc).__name__}: {exc}") from None
    raise ChangeDecodeError(f"unknown change kind {kind!r}")

"""Record keys and topics of change events: which entity compaction keeps, and where each event goes.

The key names the entity whose latest record compaction must keep, as ``schemas/topics.json`` says
(tweet: ``tweet_id``; follow edge: ``follower_id|followee_id``; profile: ``user_id|version``; block
and mute edges: ``block|blocker_id|blocked_id`` and ``mute|muter_id|muted_id``; repost edge:
``repost|reposter_id|tweet_id``; list: ``list_id``; list membership: ``list_id|member_id``; the
stream's own list edges: ``list_follow|reader_id|member_id`` and ``exclusion|owner_id|member_id``).
"""

from __future__ import annotations

from feed_service.core.event_kinds import EVENT_KINDS, TYPES, kind_of
from feed_service.core.events import (  # noqa: F401 - doctests use them
    BlockChange,
    Event,
    FollowChange,
    MuteChange,
    ProfileVersion,
    RepostChange,
)

ROLE_OF_TYPE = {type_: kinds[0].topic_role for type_, kinds in TYPES.items()}
"""Topic role (``Settings.topics``) of each envelope ``type``."""


def _key_part(text: str) -> str:
    # An id containing "|" would make two follow edges share one key (and compaction keep only
    # one of them), so "%" and "|" are percent-escaped; ordinary ids are left as they are.
    if "|" in text or "%" in text:
        return text.replace("%", "%25").replace("|", "%7C")
    return text


_KEY_FIELDS = {kind.cls: (kind.type if kind.keyed_by_type else None, kind.record_key) for kind in EVENT_KINDS}


def record_key(event: Event) -> str:
    """Return the Kafka record key of ``event`` (the entity compaction keeps the latest record of):
    the kind's record-key fields (:mod:`feed_service.core.event_kinds`), joined by ``|`` and each
    escaped when there are several, behind the type for kinds that share a topic.

    Blocks and mutes share one topic, so their keys start with the type: the block ann -> bob and
    the mute ann -> bob are two entities, and compaction must keep the latest change of each.

    >>> record_key(FollowChange("ann", "bob", 7, "unfollow")), record_key(ProfileVersion("ann", 3, "Ann"))
    ('ann|bob', 'ann|3')
    >>> record_key(BlockChange("ann", "bob", 7, "unblock")), record_key(MuteChange("ann", "b|c", 8, "mute"))
    ('block|ann|bob', 'mute|ann|b%7Cc')
    >>> record_key(RepostChange("ann", "t|1", "bob", 9, "unrepost"))
    'repost|ann|t%7C1'

    A repost's kind is alone on its topic but keyed by type all the same: the key says what it is.
    """
    prefix, names = _KEY_FIELDS[type(event)]
    if len(names) == 1 and prefix is None:
        return str(getattr(event, names[0]))
    parts = [_key_part(str(getattr(event, name))) for name in names]
    return "|".join(parts if prefix is None else [prefix, *parts])


def topic_role(event: Event) -> str:
    """Return the topic role (``tweets``, ``follows``, ``profiles``, ``blocks_mutes``, ``reposts``,
    ``lists`` or ``list_members``) ``event`` is published to."""
    return kind_of(event).topic_role

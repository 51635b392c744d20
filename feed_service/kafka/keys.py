"""Record keys and topics of change events: which entity compaction keeps, and where each event goes.

The key names the entity whose latest record compaction must keep, as ``schemas/topics.json`` says
(tweet: ``tweet_id``; follow edge: ``follower_id|followee_id``; profile: ``user_id|version``; block
and mute edges: ``block|blocker_id|blocked_id`` and ``mute|muter_id|muted_id``).
"""

from __future__ import annotations

from feed_service.core.events import (  # noqa: F401 - doctests use ProfileVersion
    BlockChange,
    Event,
    FollowChange,
    MuteChange,
    ProfileVersion,
    TweetDelete,
    TweetUpsert,
)


ROLE_OF_TYPE = {"tweet": "tweets", "follow": "follows", "profile": "profiles",
                "block": "blocks_mutes", "mute": "blocks_mutes"}
"""Topic role (``Settings.topics``) of each envelope ``type``."""


def _key_part(text: str) -> str:
    # An id containing "|" would make two follow edges share one key (and compaction keep only
    # one of them), so "%" and "|" are percent-escaped; ordinary ids are left as they are.
    if "|" in text or "%" in text:
        return text.replace("%", "%25").replace("|", "%7C")
    return text


def record_key(event: Event) -> str:
    """Return the Kafka record key of ``event`` (the entity compaction keeps the latest record of).

    Blocks and mutes share one topic, so their keys start with the type: the block ann -> bob and
    the mute ann -> bob are two entities, and compaction must keep the latest change of each.

    >>> record_key(FollowChange("ann", "bob", 7, "unfollow")), record_key(ProfileVersion("ann", 3, "Ann"))
    ('ann|bob', 'ann|3')
    >>> record_key(BlockChange("ann", "bob", 7, "unblock")), record_key(MuteChange("ann", "b|c", 8, "mute"))
    ('block|ann|bob', 'mute|ann|b%7Cc')
    """
    if isinstance(event, (TweetUpsert, TweetDelete)):
        return event.tweet_id
    if isinstance(event, FollowChange):
        return f"{_key_part(event.follower_id)}|{_key_part(event.followee_id)}"
    if isinstance(event, BlockChange):
        return f"block|{_key_part(event.blocker_id)}|{_key_part(event.blocked_id)}"
    if isinstance(event, MuteChange):
        return f"mute|{_key_part(event.muter_id)}|{_key_part(event.muted_id)}"
    return f"{_key_part(event.user_id)}|{event.version}"


def topic_role(event: Event) -> str:
    """Return the topic role (``tweets``, ``follows``, ``profiles`` or ``blocks_mutes``) ``event`` is published to."""
    if isinstance(event, (TweetUpsert, TweetDelete)):
        return "tweets"
    if isinstance(event, FollowChange):
        return "follows"
    if isinstance(event, (BlockChange, MuteChange)):
        return "blocks_mutes"
    return "profiles"

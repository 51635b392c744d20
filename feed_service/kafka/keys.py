"""Record keys and topics of change events: which entity compaction keeps, and where each event goes.

The key names the entity whose latest record compaction must keep, as ``schemas/topics.json`` says
(tweet: ``tweet_id``; follow edge: ``follower_id|followee_id``; profile: ``user_id|version``).
"""

from __future__ import annotations

from feed_service.core.events import Event, FollowChange, ProfileVersion, TweetDelete, TweetUpsert  # noqa: F401 - doctests use ProfileVersion


ROLE_OF_TYPE = {"tweet": "tweets", "follow": "follows", "profile": "profiles"}
"""Topic role (``Settings.topics``) of each envelope ``type``."""


def _key_part(text: str) -> str:
    # An id containing "|" would make two follow edges share one key (and compaction keep only
    # one of them), so "%" and "|" are percent-escaped; ordinary ids are left as they are.
    if "|" in text or "%" in text:
        return text.replace("%", "%25").replace("|", "%7C")
    return text


def record_key(event: Event) -> str:
    """Return the Kafka record key of ``event`` (the entity compaction keeps the latest record of).

    >>> record_key(FollowChange("ann", "bob", 7, "unfollow")), record_key(ProfileVersion("ann", 3, "Ann"))
    ('ann|bob', 'ann|3')
    """
    if isinstance(event, (TweetUpsert, TweetDelete)):
        return event.tweet_id
    if isinstance(event, FollowChange):
        return f"{_key_part(event.follower_id)}|{_key_part(event.followee_id)}"
    return f"{_key_part(event.user_id)}|{event.version}"


def topic_role(event: Event) -> str:
    """Return the topic role (``tweets``, ``follows`` or ``profiles``) ``event`` is published to."""
    if isinstance(event, (TweetUpsert, TweetDelete)):
        return "tweets"
    if isinstance(event, FollowChange):
        return "follows"
    return "profiles"

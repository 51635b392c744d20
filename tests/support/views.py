"""The view as Cassandra holds it, in the reference's :class:`Entry` shape: a home timeline is its inbox
(``home_timeline``) and its per-reader entries (``home_extras``), a user timeline the user's tweets
(``author_timeline``) and reposts (``user_reposts``) (docs/reposts-and-replies.md)."""

from __future__ import annotations

from typing import Any

from feed_service.core.rows import Entry
from feed_service.settings import Settings

COLUMNS = ("tweet_id, author_id, created_at, version, text, profile_version, in_reply_to_tweet_id, "
           "in_reply_to_author_id")
EXTRA_COLUMNS = COLUMNS + ", reposted_by, reposted_at, reposter_profile_version"


def _entry(r: Any) -> Entry:
    reply = (r.in_reply_to_tweet_id or None, r.in_reply_to_author_id or None)
    repost: tuple = (None, None, None)
    if getattr(r, "reposted_by", None):
        repost = (r.reposted_by, r.reposted_at, r.reposter_profile_version)
    return Entry(r.tweet_id, r.author_id, r.created_at, r.version, r.text, r.profile_version, *reply, *repost)


def _partitions(session: Any, cql: str, key: str) -> dict[str, list[Entry]]:
    out: dict[str, list[Entry]] = {}
    for r in session.execute(cql):
        if r.tweet_id is not None:  # not a partition holding only static columns
            out.setdefault(getattr(r, key), []).append(_entry(r))
    return out


def _merged(*tables: dict[str, list[Entry]]) -> dict[str, list[Entry]]:
    out: dict[str, list[Entry]] = {}
    for table in tables:
        for uid, entries in table.items():
            out.setdefault(uid, []).extend(entries)
    return {uid: sorted(entries, key=lambda e: (e.at, e.tweet_id), reverse=True) for uid, entries in out.items()}


def read_views(settings: Settings) -> tuple[dict[str, list[Entry]], dict[str, list[Entry]]]:
    """(home timelines, user timelines) as Cassandra holds them, each its two tables merged."""
    from feed_service.store.session import connect

    cluster, session = connect(settings.as_role("server"), keyspace=settings.keyspace)
    try:
        home = _merged(
            _partitions(session, f"SELECT timeline_id, {COLUMNS} FROM home_timeline", "timeline_id"),
            _partitions(session, f"SELECT timeline_id, {EXTRA_COLUMNS} FROM home_extras", "timeline_id"))
        users = _merged(
            _partitions(session, f"SELECT author_id, {COLUMNS} FROM author_timeline", "author_id"),
            _partitions(session, f"SELECT user_id, {EXTRA_COLUMNS} FROM user_reposts", "user_id"))
        return home, users
    finally:
        cluster.shutdown()


def read_list_timelines(settings: Settings, rules: dict[str, tuple[str, str]], inbox_cap: int
                        ) -> dict[str, list[Entry]]:
    """Every non-empty list timeline of ``rules`` (list id -> its owner and replies policy: the statics
    of its reader's partition) as a list read merges it from Cassandra: its reader's inbox and extras,
    and the tweets of its reader's pull authors that the list's rule admits (``rules.list_admits``,
    with the reader's and the owner's ``reader_visible`` sets), newest first, cut at ``inbox_cap``."""
    from feed_service.core.list_readers import list_of
    from feed_service.core.rules import list_admits
    from feed_service.store.session import connect

    cluster, session = connect(settings.as_role("server"), keyspace=settings.keyspace)
    try:
        home = _merged(
            _partitions(session, f"SELECT timeline_id, {COLUMNS} FROM home_timeline", "timeline_id"),
            _partitions(session, f"SELECT timeline_id, {EXTRA_COLUMNS} FROM home_extras", "timeline_id"))
        authors = _partitions(session, f"SELECT author_id, {COLUMNS} FROM author_timeline", "author_id")
        pulls: dict[str, set[str]] = {}
        for r in session.execute("SELECT follower_id, author_id FROM pull_follows"):
            pulls.setdefault(r.follower_id, set()).add(r.author_id)
        sees: dict[str, set[str]] = {}
        for r in session.execute("SELECT reader_id, user_id FROM reader_visible"):
            sees.setdefault(r.reader_id, set()).add(r.user_id)
    finally:
        cluster.shutdown()
    out: dict[str, list[Entry]] = {}
    for reader in {*home, *pulls}:
        lid = list_of(reader)
        if lid is None or lid not in rules:
            continue
        owner, policy = rules[lid]
        entries = list(home.get(reader, []))
        for author in pulls.get(reader, ()):
            entries += [e for e in authors.get(author, []) if list_admits(
                e.author_id, e.in_reply_to_author_id, owner, policy, sees.get(reader, set()), sees.get(owner, set()))]
        if entries:
            out[lid] = sorted(entries, key=lambda e: (e.at, e.tweet_id), reverse=True)[:inbox_cap]
    return out

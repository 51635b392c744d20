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


def read_list_stores(settings: Settings) -> tuple[dict[str, set[str]], dict[str, dict[str, tuple]], dict[str, tuple]]:
    """(``reader_excluded`` by reader, ``lists`` rows by owner and list as (name, replies_policy,
    exclusive), the statics (list_owner, list_policy) of every partition that has them) as Cassandra
    holds them, read with the read service's role (docs/lists.md#in-the-engine)."""
    from feed_service.store.session import connect

    cluster, session = connect(settings.as_role("server"), keyspace=settings.keyspace)
    try:
        excluded: dict[str, set[str]] = {}
        for r in session.execute("SELECT reader_id, user_id FROM reader_excluded"):
            excluded.setdefault(r.reader_id, set()).add(r.user_id)
        lists: dict[str, dict[str, tuple]] = {}
        for r in session.execute("SELECT owner_id, list_id, name, replies_policy, exclusive FROM lists"):
            lists.setdefault(r.owner_id, {})[r.list_id] = (r.name, r.replies_policy, r.exclusive)
        rules = {r.timeline_id: (r.list_owner, r.list_policy) for r in session.execute(
            "SELECT DISTINCT timeline_id, list_owner, list_policy FROM home_timeline")
            if r.list_owner is not None or r.list_policy is not None}
        return excluded, lists, rules
    finally:
        cluster.shutdown()


def stored_view(settings: Settings, inbox_cap: int) -> Any:
    """The view Cassandra holds, loaded into the core's :class:`~feed_service.core.timeline_view.TimelineView`
    (inboxes and their statics ``pull_authors``, ``pull_reposters``; ``home_extras``, ``author_timeline``,
    ``user_reposts``, ``reader_visible``, ``reader_hidden``, ``reader_excluded``, the lists' statics), so
    that its ``entries`` reads a home or a list's reader's timeline from the stored rows as the read
    service merges them."""
    from feed_service.core.per_reader.pull_reposts import ListRule
    from feed_service.core.timeline_view import TimelineView
    from feed_service.store.session import connect

    view = TimelineView(inbox_cap=inbox_cap)

    def keyed(table: dict[str, list[Entry]]) -> dict[str, dict[tuple, Entry]]:
        return {k: {(e.at, e.tweet_id, e.author_id): e for e in entries} for k, entries in table.items()}

    cluster, session = connect(settings.as_role("server"), keyspace=settings.keyspace)
    try:
        view.timelines = keyed(_partitions(session, f"SELECT timeline_id, {COLUMNS} FROM home_timeline", "timeline_id"))
        view.extras = keyed(_partitions(session, f"SELECT timeline_id, {EXTRA_COLUMNS} FROM home_extras",
                                        "timeline_id"))
        view.author_timelines = keyed(_partitions(session, f"SELECT author_id, {COLUMNS} FROM author_timeline",
                                                  "author_id"))
        view.own_reposts = keyed(_partitions(session, f"SELECT user_id, {EXTRA_COLUMNS} FROM user_reposts", "user_id"))
        for r in session.execute("SELECT DISTINCT timeline_id, pull_authors, pull_reposters FROM home_timeline"):
            if r.pull_authors:
                view.pull_follows[r.timeline_id] = set(r.pull_authors)
            if r.pull_reposters:
                view.pull_reposters[r.timeline_id] = set(r.pull_reposters)
        for table, sets in (("reader_visible", view.visible), ("reader_hidden", view.hidden)):
            for r in session.execute(f"SELECT reader_id, user_id FROM {table}"):
                sets.setdefault(r.reader_id, set()).add(r.user_id)
    finally:
        cluster.shutdown()
    excluded, _, rules = read_list_stores(settings)
    view.excluded = {reader: set(users) for reader, users in excluded.items() if users}
    view.list_rules = {reader: ListRule(owner, policy) for reader, (owner, policy) in rules.items() if owner}
    return view

"""An in-memory :class:`~feed_service.store.ports.TimelineStore` and
:class:`~feed_service.store.ports.ViewWriter` for unit tests of the read service and the writers' callers.

Same ordering and cursor semantics as Cassandra, and the same outcome of writes: the highest write
timestamp wins, a delete wins a tie (docs/idempotent-writes.md), so a test can replay or reorder
writes as the stream does. ``fail`` set to a :class:`~feed_service.errors.StoreError` makes every
call raise it (outage simulation; a write then changes nothing). Never a stand-in for Cassandra in
a test of the system: integration tests use the real node.
"""

from __future__ import annotations

from collections import Counter
from typing import Collection, Hashable, Iterable

from feed_service.core.list_readers import list_reader
from feed_service.core.per_reader.list_stage import ListFact
from feed_service.core.per_reader.messages import (
    ExcludedDelta,
    ExtrasDelta,
    HiddenDelta,
    PullReposterDelta,
    VisibleDelta,
)
from feed_service.core.per_reader.pull_reposts import Repost, TweetKey
from feed_service.core.rows import (
    AuthorTimelineWrite,
    BlockWrite,
    Cursor,
    Entry,
    ProfileKey,
    ProfileRow,
    ProfileWrite,
    PullFollowWrite,
    TimelineFanout,
    TimelineWrite,
    TweetWrite,
)
from feed_service.errors import StoreError, StoreUnavailable
from feed_service.store.ports import InboxSlice, ListRow, WriteCounts


class MemoryStore:
    """In-memory :class:`TimelineStore` for unit tests: same ordering and cursor semantics.

    ``fail`` set to a :class:`StoreError` makes every call raise it (outage simulation).
    """

    def __init__(self) -> None:
        self.timelines: dict[str, dict[Cursor, Entry]] = {}
        self.tweets: dict[str, Entry] = {}
        self.profile_rows: dict[ProfileKey, ProfileRow] = {}
        self.author_timelines: dict[str, dict[Cursor, Entry]] = {}
        self.follows_pull: dict[str, set[str]] = {}
        self.blocked: set[tuple[str, str]] = set()
        """(blocker_id, blocked_id) of every block in force: the rows of the ``blocks`` table."""
        self.extras: dict[str, dict[Cursor, Entry]] = {}
        """timeline_id -> its ``home_extras`` rows (repost entries and conditional replies) by cursor."""
        self.user_reposts: dict[str, dict[Cursor, Entry]] = {}
        """user_id -> its ``user_reposts`` rows (its reposts of others' tweets) by cursor."""
        self.visible: dict[str, set[str]] = {}
        """reader_id -> the users it sees: the rows of ``reader_visible``."""
        self.hidden: dict[str, set[str]] = {}
        """reader_id -> the users hidden from it: the rows of ``reader_hidden``."""
        self.excluded: dict[str, set[str]] = {}
        """reader_id -> the users it sets aside as sources: the rows of ``reader_excluded``."""
        self.list_rows: dict[str, dict[str, tuple[str | None, str | None, bool]]] = {}
        """owner_id -> list_id -> (name, replies_policy, exclusive): the rows of ``lists``."""
        self.list_rules: dict[str, tuple[str, str | None]] = {}
        """a list's reader -> (list_owner, list_policy): the statics of its inbox partition, where set."""
        self.reposters_pull: dict[str, set[str]] = {}
        """user_id -> the pull reposters it merges in: ``home_timeline.pull_reposters``."""
        self.dropped: set[str] = set()
        """The timelines whose static ``inbox_dropped`` is true (docs/activity.md): the driver's
        writes, set directly by tests."""
        self.excluded: dict[str, set[str]] = {}
        """reader_id -> the users it sets aside as sources: the rows of ``reader_excluded``."""
        self.list_statics: dict[str, tuple[str, str]] = {}
        """list reader id -> (list_owner, list_policy): the statics of a live list's inbox partition."""
        self.lists: dict[str, dict[str, ListRow]] = {}
        """owner_id -> list_id -> its row of ``lists``."""
        self.written: dict[tuple[Hashable, ...], tuple[int, object]] = {}
        """(table, *primary key) -> (write timestamp, row or None: a delete) of every row
        :meth:`write` wrote, what a later write must beat (the ``add_*`` helpers bypass it)."""
        self.fail: StoreError | None = None
        self.calls: Counter[str] = Counter()
        """Calls per method: what Cassandra would have been asked, one single-partition read each
        (``inbox`` counts a ``page`` too: it reads through it, so a test's faulty ``page`` reaches it)."""

    def add_entry(self, timeline_id: str, row: Entry) -> None:
        self.timelines.setdefault(timeline_id, {})[row.cursor] = row

    def add_author_entry(self, row: Entry) -> None:
        self.author_timelines.setdefault(row.author_id, {})[row.cursor] = row

    def add_pull_follow(self, follower_id: str, author_id: str) -> None:
        self.follows_pull.setdefault(follower_id, set()).add(author_id)

    def add_block(self, blocker_id: str, blocked_id: str) -> None:
        self.blocked.add((blocker_id, blocked_id))

    def add_list(self, owner_id: str, list_id: str, reader_id: str, *, name: str = "", replies_policy: str = "list",
                 exclusive: bool = False) -> None:
        """A live list: its ``lists`` row and the statics of its reader's (``reader_id``) partition."""
        self.lists.setdefault(owner_id, {})[list_id] = ListRow(list_id, name, replies_policy, exclusive)
        self.list_statics[reader_id] = (owner_id, replies_policy)

    def add_profile(self, row: ProfileRow) -> None:
        self.profile_rows[(row.user_id, row.version)] = row

    # -- writes: ViewWriter, resolved by timestamp as Cassandra resolves them --------------------
    def _wins(self, key: tuple[Hashable, ...], ts: int, row: object) -> bool:
        """Record a write of ``row`` (None: a delete) at ``ts`` to ``key`` if it beats what the key
        holds: a higher timestamp; at a tie, a delete, then the greater row (Cassandra compares the
        cells' values; the writers never write two contents at one timestamp). False: no change."""
        held = self.written.get(key)
        if held is not None:
            held_ts, held_row = held
            if ts < held_ts or (ts == held_ts and (held_row is None
                                                   or (row is not None and repr(row) <= repr(held_row)))):
                return False
        self.written[key] = (ts, row)
        return True

    def _put(self, rows: dict[str, dict[Cursor, Entry]], table: str, partition: str, op: str, e: Entry,
             ts: int) -> None:
        if self._wins((table, partition, *e.cursor), ts, None if op == "delete" else e):
            if op == "delete":
                held = rows.get(partition, {})
                held.pop(e.cursor, None)
                if not held:  # as Cassandra: no row, no partition
                    rows.pop(partition, None)
            else:
                rows.setdefault(partition, {})[e.cursor] = e

    def _pair(self, pairs: dict[str, set[str]], table: str, a: str, b: str, op: str, ts: int) -> None:
        if self._wins((table, a, b), ts, None if op == "delete" else True):
            if op == "delete":
                held = pairs.get(a, set())
                held.discard(b)
                if not held:
                    pairs.pop(a, None)
            else:
                pairs.setdefault(a, set()).add(b)

    def write(
        self,
        *,
        timeline: Iterable[TimelineWrite] = (),
        timeline_fanout: Iterable[TimelineFanout] = (),
        tweets: Iterable[TweetWrite] = (),
        profiles: Iterable[ProfileWrite] = (),
        author_timeline: Iterable[AuthorTimelineWrite] = (),
        pull_follows: Iterable[PullFollowWrite] = (),
        blocks: Iterable[BlockWrite] = (),
        extras: Iterable[ExtrasDelta] = (),
        user_reposts: Iterable[AuthorTimelineWrite] = (),
        visible: Iterable[VisibleDelta] = (),
        pull_reposters: Iterable[PullReposterDelta] = (),
        hidden: Iterable[HiddenDelta] = (),
        excluded: Iterable[ExcludedDelta] = (),
        lists: Iterable[ListFact] = (),
    ) -> WriteCounts:
        """:meth:`ViewWriter.write`: rows in any order, any number of times; the counts are what
        :class:`~feed_service.store.cassandra_writer.CassandraWriter` returns for the same call."""
        if self.fail is not None:  # not in ``calls``: those count reads
            raise self.fail
        rows = [*timeline, *(w for f in timeline_fanout for w in f.rows())]
        tweets, profiles, author_timeline = list(tweets), list(profiles), list(author_timeline)
        pull_follows, blocks = list(pull_follows), list(blocks)
        extras, user_reposts, visible = list(extras), list(user_reposts), list(visible)
        pull_reposters, hidden = list(pull_reposters), list(hidden)
        excluded, lists = list(excluded), list(lists)
        # every row as it reads back, before anything is applied: a row Cassandra would refuse
        # raises here, with nothing written, as CassandraWriter raises before it sends anything
        stored_extras = [(op, reader, _stored(e), ts) for op, reader, e, ts in extras]
        stored_reposts = [(op, _stored(e), ts) for op, e, ts in user_reposts]
        if any(not e.reposted_by for _, e, _ in stored_reposts):
            raise ValueError(f"a user_reposts row names no reposter: {user_reposts!r}")
        for op, timeline_id, e, ts in rows:
            self._put(self.timelines, "home_timeline", timeline_id, op, _plain(e), ts)
        for tweet_id, _author_id, e, ts in tweets:
            if self._wins(("tweets", tweet_id), ts, None if e is None else _plain(e)):
                if e is None:
                    self.tweets.pop(tweet_id, None)
                else:
                    self.tweets[tweet_id] = _plain(e)
        for p, ts in profiles:  # never deleted
            if self._wins(("profiles", p.user_id, p.version), ts, p):
                self.profile_rows[(p.user_id, p.version)] = p
        for op, e, ts in author_timeline:
            self._put(self.author_timelines, "author_timeline", e.author_id, op, _plain(e), ts)
        for op, follower_id, author_id, ts in pull_follows:
            self._pair(self.follows_pull, "pull_follows", follower_id, author_id, op, ts)
        for op, blocker_id, blocked_id, ts in blocks:
            if self._wins(("blocks", blocker_id, blocked_id), ts, None if op == "delete" else True):
                (self.blocked.discard if op == "delete" else self.blocked.add)((blocker_id, blocked_id))
        for op, reader, e, ts in stored_extras:
            self._put(self.extras, "home_extras", reader, op, e, ts)
        for op, e, ts in stored_reposts:
            self._put(self.user_reposts, "user_reposts", e.reposted_by, op, e, ts)  # type: ignore[arg-type]
        for op, reader, user, ts in visible:
            self._pair(self.visible, "reader_visible", reader, user, op, ts)
        for op, reader, reposter, ts in pull_reposters:
            self._pair(self.reposters_pull, "pull_reposters", reader, reposter, op, ts)
        for op, reader, user, ts in hidden:
            self._pair(self.hidden, "reader_hidden", reader, user, op, ts)
        for op, reader, user, ts in excluded:
            self._pair(self.excluded, "reader_excluded", reader, user, op, ts)
        for f in lists:
            self._list_fact(f)
        deletes = sum(1 for w in rows if w.op == "delete")
        extras_deletes = sum(1 for w in extras if w.op == "delete")
        return WriteCounts(len(rows) - deletes, deletes, len(tweets), len(profiles), len(author_timeline),
                           len(pull_follows), len(blocks), len(extras) - extras_deletes, extras_deletes,
                           len(user_reposts), len(visible), len(pull_reposters), len(hidden), len(excluded),
                           len(lists))

    def _list_fact(self, f: ListFact) -> None:
        """A list's fact as :class:`~feed_service.store.cassandra_writer.CassandraWriter` writes it:
        the ``lists`` row under the previous owner deleted, the row and the statics set or deleted."""
        if f.previous_owner is not None and f.previous_owner != f.owner_id:
            if self._wins(("lists", f.previous_owner, f.list_id), f.ts, None):
                _drop(self.list_rows, f.previous_owner, f.list_id)
        reader = list_reader(f.list_id)
        if f.owner_id is None:
            if self._wins(("list_rule", reader), f.ts, None):
                self.list_rules.pop(reader, None)
            return
        row = (f.name, f.replies_policy, f.exclusive)
        if self._wins(("lists", f.owner_id, f.list_id), f.ts, row):
            self.list_rows.setdefault(f.owner_id, {})[f.list_id] = row
        if self._wins(("list_rule", reader), f.ts, (f.owner_id, f.replies_policy)):
            self.list_rules[reader] = (f.owner_id, f.replies_policy)

    def _check(self, method: str = "") -> None:
        self.calls[method] += 1
        if self.fail is not None:
            raise self.fail

    def _older(self, rows: dict[Cursor, Entry], before: Cursor | None, limit: int) -> list[Entry]:
        ordered = sorted(rows.values(), key=lambda r: r.cursor, reverse=True)
        return [r for r in ordered if before is None or r.cursor < before][:limit]

    def _newer(self, rows: dict[Cursor, Entry], after: Cursor | None, limit: int) -> list[Entry]:
        ordered = sorted(rows.values(), key=lambda r: r.cursor)
        return [r for r in ordered if after is None or r.cursor > after][:limit]

    async def page(self, timeline_id: str, *, before: Cursor | None, limit: int, timeout: float) -> list[Entry]:
        self._check("page")
        return self._older(self.timelines.get(timeline_id, {}), before, limit)

    async def inbox(self, timeline_id: str, *, before: Cursor | None, limit: int, timeout: float) -> InboxSlice:
        self._check("inbox")
        entries = await self.page(timeline_id, before=before, limit=limit, timeout=timeout)  # its faults too
        pull = sorted(self.follows_pull.get(timeline_id, ()))
        reposters = sorted(self.reposters_pull.get(timeline_id, ()))
        # as Cassandra: below a cursor, the static columns come only with a row
        if before is None or entries:
            return InboxSlice(entries, pull, reposters, timeline_id in self.dropped,
                              *self.list_statics.get(timeline_id, (None, None)))
        return InboxSlice(entries, None, None, None)

    async def statics(self, timeline_id: str, *, timeout: float) -> InboxSlice:
        self._check("statics")
        return InboxSlice([], sorted(self.follows_pull.get(timeline_id, ())),
                          sorted(self.reposters_pull.get(timeline_id, ())), timeline_id in self.dropped,
                          *self.list_statics.get(timeline_id, (None, None)))

    async def visible_users(self, reader_id: str, *, timeout: float) -> list[str]:
        self._check("visible_users")
        return sorted(self.visible.get(reader_id, ()))

    async def newer(self, timeline_id: str, *, after: Cursor | None, limit: int, timeout: float) -> list[Entry]:
        self._check("newer")
        return self._newer(self.timelines.get(timeline_id, {}), after, limit)

    async def author_page(self, author_id: str, *, before: Cursor | None, limit: int, timeout: float) -> list[Entry]:
        self._check("author_page")
        return self._older(self.author_timelines.get(author_id, {}), before, limit)

    async def author_newer(self, author_id: str, *, after: Cursor | None, limit: int, timeout: float) -> list[Entry]:
        self._check("author_newer")
        return self._newer(self.author_timelines.get(author_id, {}), after, limit)

    async def pull_authors(self, user_id: str, *, timeout: float) -> list[str]:
        self._check("pull_authors")
        return sorted(self.follows_pull.get(user_id, ()))

    async def extras_page(self, timeline_id: str, *, before: Cursor | None, limit: int,
                          timeout: float) -> list[Entry]:
        self._check("extras_page")
        return self._older(self.extras.get(timeline_id, {}), before, limit)

    async def extras_newer(self, timeline_id: str, *, after: Cursor | None, limit: int,
                           timeout: float) -> list[Entry]:
        self._check("extras_newer")
        return self._newer(self.extras.get(timeline_id, {}), after, limit)

    async def user_reposts_page(self, user_id: str, *, before: Cursor | None, limit: int,
                                timeout: float) -> list[Entry]:
        self._check("user_reposts_page")
        return self._older(self.user_reposts.get(user_id, {}), before, limit)

    async def user_reposts_newer(self, user_id: str, *, after: Cursor | None, limit: int,
                                 timeout: float) -> list[Entry]:
        self._check("user_reposts_newer")
        return self._newer(self.user_reposts.get(user_id, {}), after, limit)

    async def visible_among(self, reader_id: str, user_ids: Collection[str], *, timeout: float) -> set[str]:
        self._check("visible_among")
        sees = self.visible.get(reader_id, set())
        return {u for u in user_ids if u in sees}

    async def pull_reposters(self, user_id: str, *, timeout: float) -> list[str]:
        self._check("pull_reposters")
        return sorted(self.reposters_pull.get(user_id, ()))

    async def reposts_of(self, tweets: Collection[TweetKey], reposters: Collection[str], *,
                         timeout: float) -> dict[TweetKey, list[Repost]]:
        self._check("reposts_of")  # the index by tweet, here a scan of the reposters' rows
        wanted, out = set(tweets), {}
        for p in reposters:
            for e in self.user_reposts.get(p, {}).values():
                if (e.author_id, e.tweet_id) in wanted:
                    out.setdefault((e.author_id, e.tweet_id), []).append((e.reposted_at, p))
        return {k: sorted(v) for k, v in out.items()}

    async def pushed_reposts(self, reader_id: str, tweets: Collection[TweetKey], *,
                             timeout: float) -> dict[TweetKey, Repost]:
        self._check("pushed_reposts")
        wanted = set(tweets)
        return {(e.author_id, e.tweet_id): (e.reposted_at, e.reposted_by)  # type: ignore[misc]
                for e in self.extras.get(reader_id, {}).values()
                if e.reposted_by is not None and (e.author_id, e.tweet_id) in wanted}

    async def hidden_among(self, reader_id: str, user_ids: Collection[str], *, timeout: float) -> set[str]:
        self._check("hidden_among")
        hidden = self.hidden.get(reader_id, set())
        return {u for u in user_ids if u in hidden}

    async def excluded_among(self, reader_id: str, user_ids: Collection[str], *, timeout: float) -> set[str]:
        self._check("excluded_among")
        excluded = self.excluded.get(reader_id, set())
        return {u for u in user_ids if u in excluded}

    async def lists_of(self, owner_id: str, *, timeout: float) -> list[ListRow]:
        self._check("lists_of")
        return [row for _, row in sorted(self.lists.get(owner_id, {}).items())]

    async def tweet(self, tweet_id: str, *, timeout: float) -> Entry | None:
        self._check("tweet")
        return self.tweets.get(tweet_id)

    async def profile(self, user_id: str, version: int | None, *, timeout: float) -> ProfileRow | None:
        self._check("profile")
        if version is not None:
            return self.profile_rows.get((user_id, version))
        versions = [v for (u, v) in self.profile_rows if u == user_id]
        return self.profile_rows[(user_id, max(versions))] if versions else None

    async def profiles(self, keys: Iterable[ProfileKey], *, timeout: float) -> dict[ProfileKey, ProfileRow]:
        self._check("profiles")
        return {k: self.profile_rows[k] for k in keys if k in self.profile_rows}

    async def blocks(self, blocker_id: str, blocked_id: str, *, timeout: float) -> bool:
        self._check("blocks")
        return (blocker_id, blocked_id) in self.blocked

    def close(self) -> None:
        self.fail = StoreUnavailable("store closed")


def _drop(rows: dict[str, dict], partition: str, key: str) -> None:
    """Delete ``rows[partition][key]``, and the partition once empty (as Cassandra: no row, no partition)."""
    held = rows.get(partition, {})
    held.pop(key, None)
    if not held:
        rows.pop(partition, None)


def _stored(e: Entry) -> Entry:
    """``e`` as Cassandra reads it back from ``home_extras`` or ``user_reposts``: '' is no reply and
    no reposter, and an entry without a reposter has no repost time or profile version."""
    if bool(e.reposted_by) != (e.reposted_at is not None):  # as CassandraWriter refuses it
        raise ValueError(f"an entry's reposted_by and reposted_at disagree: {e!r}")
    if e.reposted_by:
        return e._replace(in_reply_to_tweet_id=e.in_reply_to_tweet_id or None,
                          in_reply_to_author_id=e.in_reply_to_author_id or None)
    return e._replace(in_reply_to_tweet_id=e.in_reply_to_tweet_id or None,
                      in_reply_to_author_id=e.in_reply_to_author_id or None,
                      reposted_by=None, reposted_at=None, reposter_profile_version=None)


def _plain(e: Entry) -> Entry:
    """``e`` as a table without repost columns (home_timeline, author_timeline, tweets) reads it back."""
    return _stored(e._replace(reposted_by=None, reposted_at=None))

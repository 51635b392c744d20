"""Idempotent, order-safe writes of the join's outputs to Cassandra.

Long (about 510 lines) on purpose: one writer holding the prepared statement of every table of the
view, each with the same ``USING TIMESTAMP`` rule, which is the point of keeping them together.

Every statement carries ``USING TIMESTAMP ts`` where ``ts`` is the owning author key's logical
clock from :func:`feed_service.core.join.step` (docs/idempotent-writes.md). Cassandra keeps, per
cell, the write with the highest timestamp (a tombstone wins a tie), so:

- a replayed micro-batch rewrites identical cells with identical timestamps: no change;
- retried or reordered writes converge to the newest step's content, whatever order they land in;
- a deleted tweet's tombstones carry a later clock than any upsert of it, so no replay of an
  older write can bring it back (for as long as ``gc_grace_seconds`` keeps the tombstone).

Rows are the write rows of :mod:`feed_service.core.rows` (``TimelineWrite``, ``TweetWrite``,
``ProfileWrite``, ``AuthorTimelineWrite``, ``PullFollowWrite``, ``BlockWrite``) and of the
per-reader stage (:class:`~feed_service.core.per_reader.messages.ExtrasDelta` for ``home_extras``,
``AuthorTimelineWrite`` of repost entries for ``user_reposts``,
:class:`~feed_service.core.per_reader.messages.VisibleDelta` for ``reader_visible``,
:class:`~feed_service.core.per_reader.messages.HiddenDelta` for ``reader_hidden``,
:class:`~feed_service.core.per_reader.messages.ExcludedDelta` for ``reader_excluded``,
:class:`~feed_service.core.per_reader.messages.PullReposterDelta` for an element of
``home_timeline.pull_reposters``, each at its step's clock), one Cassandra row each, the list stage's
:class:`~feed_service.core.per_reader.list_stage.ListFact` for a ``lists`` row and the statics
``list_owner``, ``list_policy`` of the list's reader's inbox partition (:meth:`CassandraWriter._lists`), and ``TimelineFanout``, one home-timeline row in many timelines: written as one ``UPDATE``
(or ``DELETE``) ``WHERE timeline_id IN ?`` per chunk of timelines, which sets every regular column
at one timestamp exactly as the one-row ``INSERT`` does (docs/idempotent-writes.md, fan-out
writes). :class:`CassandraWriter` implements :class:`~feed_service.store.ports.ViewWriter`.

A tweet that is no reply writes '' as its reply fields, not null: a null is a tombstone cell, and
every row would carry two (schemas/cql/feed.cql). For the same reason an entry that is no repost
writes '' as ``reposted_by`` and 0 as ``reposted_at`` and ``reposter_profile_version``.

The two indexes by tweet a read of pull reposters needs (docs/reposts-and-replies.md, hybrid
fan-out) are written from the same rows in the same call, at the same timestamps:
``home_extras_reposts`` (reader, tweet) from the repost entries of ``home_extras``, and
``reposts_by_tweet`` (tweet, reposter) from ``user_reposts``. A repost that moves in time is a delete
and an insert of two rows of the table at one timestamp but one row of the index, where a delete
would win the tie: :func:`index_changes` keeps one change per index row, what the table's rows of
that tweet are after the call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Iterator, NamedTuple

from feed_service.core.list_readers import list_reader
from feed_service.core.per_reader.list_stage import ListFact
from feed_service.core.per_reader.messages import (
    ExcludedDelta,
    ExtrasDelta,
    HiddenDelta,
    PullReposterDelta,
    VisibleDelta,
)
from feed_service.core.rows import (
    AuthorTimelineWrite,
    BlockWrite,
    Entry,
    ProfileWrite,
    PullFollowWrite,
    TimelineFanout,
    TimelineWrite,
    TweetWrite,
)
from feed_service.errors import WriteFailed
from feed_service.store.permission import permission_denied
from feed_service.store.ports import WriteCounts

if TYPE_CHECKING:
    from cassandra.cluster import Session

#: In-flight requests per writer: enough to keep one node busy, bounded to cap memory and timeouts.
DEFAULT_CONCURRENCY = 64

#: Rows per UNLOGGED batch request. The driver's per-request cost in Python, not the server, bounds
#: a writer; batching a few rows per request roughly halves that cost (bench/bench_stream.py). Each
#: statement keeps its own USING TIMESTAMP, so batching changes nothing in what the rows become.
#: Unlogged batches spanning partitions load their coordinator; keep this small on large clusters.
DEFAULT_BATCH_ROWS = 16

#: Timelines per fan-out statement (``WHERE timeline_id IN ?``). One such statement costs the
#: client about a fifth of the same rows in batches and the node about half (bench/bench_stream.py,
#: docs/idempotent-writes.md); its coordinator applies every partition, so a chunk stays moderate.
DEFAULT_FANOUT_PARTITIONS = 100

#: A fan-out to fewer timelines than this is written as rows in batches instead: a statement per
#: row of one timeline (a follow's back-fill of the followee's tweets) would cost a request per row.
MIN_FANOUT_PARTITIONS = 8


def _timeline_of(row: TimelineWrite) -> str:
    return row.timeline_id


def _reader_of(row: ExtrasDelta | VisibleDelta | HiddenDelta | ExcludedDelta | PullReposterDelta) -> str:
    return row.reader


def _reposter_of(row: AuthorTimelineWrite) -> str:
    if not row.entry.reposted_by:  # the partition key: Cassandra would refuse the row, as a bug
        raise ValueError(f"a user_reposts row names no reposter: {row!r}")
    return row.entry.reposted_by


class IndexChange(NamedTuple):
    """One row change of an index by tweet: ``entry`` None deletes the row ``key``."""

    key: tuple[str, str]
    """(partition, clustering) of the index row: (reader, tweet_id) or (tweet_id, reposter)."""
    entry: Entry | None
    ts: int


def index_changes(rows: Iterable[tuple[str, tuple[str, str], Entry, int]]) -> list[IndexChange]:
    """The index rows of table rows ``(op, index key, entry, ts)``: per index key that some repost
    entry's row changes, what the table's rows of that key hold after the call, at its newest
    change's timestamp: the last upsert of a repost entry at that timestamp whose row is not deleted
    at it too (a delete wins a tie in the table), else a delete (the tweet's row is gone, or is no
    repost entry any more). Keys whose changes are all inserts or deletes of replies write nothing."""
    by_key: dict[tuple[str, str], list[tuple[str, Entry, int]]] = {}
    for op, key, e, ts in rows:
        by_key.setdefault(key, []).append((op, e, ts))
    out: list[IndexChange] = []
    for key, changes in by_key.items():
        if all(op != "update" and not e.reposted_by for op, e, _ in changes):
            continue  # replies inserted or deleted only: no index row was ever written for them
        # (an update to a reply may replace a repost entry at the same position: the index row goes)
        newest = max(ts for _, _, ts in changes)
        gone = {(e.at, e.tweet_id) for op, e, ts in changes if ts == newest and op == "delete"}
        kept = [e for op, e, ts in changes if ts == newest and op != "delete" and (e.at, e.tweet_id) not in gone]
        out.append(IndexChange(key, kept[-1] if kept and kept[-1].reposted_by else None, newest))
    return out


def _index_partition(change: IndexChange) -> str:
    return change.key[0]


def extras_index(rows: Iterable[ExtrasDelta]) -> list[IndexChange]:
    """``home_extras_reposts`` changes, keyed (reader, tweet_id), of ``home_extras`` rows."""
    return index_changes((op, (reader, e.tweet_id), e, ts) for op, reader, e, ts in rows)


def reposts_index(rows: Iterable[AuthorTimelineWrite]) -> list[IndexChange]:
    """``reposts_by_tweet`` changes, keyed (tweet_id, reposter), of ``user_reposts`` rows."""
    return index_changes((op, (e.tweet_id, e.reposted_by), e, ts) for op, e, ts in rows)  # type: ignore[misc]


#: The columns of ``home_extras`` and ``user_reposts`` after the partition key, in :func:`_entry_values` order.
_ENTRY_ROW = ("at, tweet_id, author_id, created_at, version, text, profile_version, in_reply_to_tweet_id,"
              " in_reply_to_author_id, reposted_by, reposted_at, reposter_profile_version")


def _entry_values(e: Entry) -> tuple:
    """An entry's values for :data:`_ENTRY_ROW`: '' for no reply or no reposter, 0 for the repost
    time and profile version of an entry that is no repost (values, not tombstone cells)."""
    if bool(e.reposted_by) != (e.reposted_at is not None):  # it would read back at another position
        raise ValueError(f"an entry's reposted_by and reposted_at disagree: {e!r}")
    repost = (e.reposted_by, e.reposted_at, e.reposter_profile_version or 0) if e.reposted_by else ("", 0, 0)
    return (e.at, e.tweet_id, e.author_id, e.created_at, e.version, e.text, e.profile_version,
            e.in_reply_to_tweet_id or "", e.in_reply_to_author_id or "", *repost)


def _is_unauthorized(failure: object) -> bool:
    """Whether a failed statement's exception is Cassandra's grant refusal."""
    from cassandra import Unauthorized

    return isinstance(failure, Unauthorized)


class CassandraWriter:
    """Prepared statements for the view's tables, executed with bounded concurrency."""

    def __init__(
        self,
        session: "Session",
        keyspace: str,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        batch_rows: int = DEFAULT_BATCH_ROWS,
        fanout_partitions: int = DEFAULT_FANOUT_PARTITIONS,
        min_fanout_partitions: int = MIN_FANOUT_PARTITIONS,
    ) -> None:
        self.session = session
        self.concurrency = concurrency
        self.batch_rows = batch_rows
        self.fanout_partitions = fanout_partitions
        self.min_fanout_partitions = min_fanout_partitions
        ks = keyspace
        self._timeline_upsert = session.prepare(
            f"INSERT INTO {ks}.home_timeline (timeline_id, created_at, tweet_id, author_id, version, text,"
            " profile_version, in_reply_to_tweet_id, in_reply_to_author_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " USING TIMESTAMP ?"
        )
        self._timeline_delete = session.prepare(
            f"DELETE FROM {ks}.home_timeline USING TIMESTAMP ? WHERE timeline_id = ? AND created_at = ?"
            " AND tweet_id = ?"
        )
        # The fan-out forms: every regular column set at one timestamp, as the INSERT does, so a row
        # is the same whichever form wrote it (and a trim reads its time from any column).
        self._fanout_upsert = session.prepare(
            f"UPDATE {ks}.home_timeline USING TIMESTAMP ? SET author_id = ?, version = ?, text = ?,"
            " profile_version = ?, in_reply_to_tweet_id = ?, in_reply_to_author_id = ?"
            " WHERE timeline_id IN ? AND created_at = ? AND tweet_id = ?"
        )
        self._fanout_delete = session.prepare(
            f"DELETE FROM {ks}.home_timeline USING TIMESTAMP ? WHERE timeline_id IN ? AND created_at = ?"
            " AND tweet_id = ?"
        )
        self._tweet_upsert = session.prepare(
            f"INSERT INTO {ks}.tweets (tweet_id, author_id, created_at, version, text, profile_version,"
            " in_reply_to_tweet_id, in_reply_to_author_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
        )
        self._tweet_delete = session.prepare(f"DELETE FROM {ks}.tweets USING TIMESTAMP ? WHERE tweet_id = ?")
        self._profile_upsert = session.prepare(
            f"INSERT INTO {ks}.profiles (user_id, version, display_name, avatar_url, bio)"
            " VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ?"
        )
        self._author_upsert = session.prepare(
            f"INSERT INTO {ks}.author_timeline (author_id, created_at, tweet_id, version, text, profile_version,"
            " in_reply_to_tweet_id, in_reply_to_author_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
        )
        self._author_delete = session.prepare(
            f"DELETE FROM {ks}.author_timeline USING TIMESTAMP ? WHERE author_id = ? AND created_at = ?"
            " AND tweet_id = ?"
        )
        self._pull_follow_insert = session.prepare(
            f"INSERT INTO {ks}.pull_follows (follower_id, author_id) VALUES (?, ?) USING TIMESTAMP ?"
        )
        self._pull_follow_delete = session.prepare(
            f"DELETE FROM {ks}.pull_follows USING TIMESTAMP ? WHERE follower_id = ? AND author_id = ?"
        )
        # the same follows, as the inbox partition's static pull_authors: read with the inbox slice
        self._pull_author_add = session.prepare(
            f"UPDATE {ks}.home_timeline USING TIMESTAMP ? SET pull_authors = pull_authors + ? WHERE timeline_id = ?"
        )
        self._pull_author_remove = session.prepare(
            f"UPDATE {ks}.home_timeline USING TIMESTAMP ? SET pull_authors = pull_authors - ? WHERE timeline_id = ?"
        )
        self._block_insert = session.prepare(
            f"INSERT INTO {ks}.blocks (blocker_id, blocked_id) VALUES (?, ?) USING TIMESTAMP ?"
        )
        self._block_delete = session.prepare(
            f"DELETE FROM {ks}.blocks USING TIMESTAMP ? WHERE blocker_id = ? AND blocked_id = ?"
        )
        marks = ", ".join("?" * (_ENTRY_ROW.count(",") + 1))
        self._extras_upsert = session.prepare(
            f"INSERT INTO {ks}.home_extras (timeline_id, {_ENTRY_ROW}) VALUES (?, {marks}) USING TIMESTAMP ?"
        )
        self._extras_delete = session.prepare(
            f"DELETE FROM {ks}.home_extras USING TIMESTAMP ? WHERE timeline_id = ? AND at = ? AND tweet_id = ?"
        )
        self._user_repost_upsert = session.prepare(
            f"INSERT INTO {ks}.user_reposts (user_id, {_ENTRY_ROW}) VALUES (?, {marks}) USING TIMESTAMP ?"
        )
        self._user_repost_delete = session.prepare(
            f"DELETE FROM {ks}.user_reposts USING TIMESTAMP ? WHERE user_id = ? AND at = ? AND tweet_id = ?"
        )
        self._visible_insert = session.prepare(
            f"INSERT INTO {ks}.reader_visible (reader_id, user_id) VALUES (?, ?) USING TIMESTAMP ?"
        )
        self._visible_delete = session.prepare(
            f"DELETE FROM {ks}.reader_visible USING TIMESTAMP ? WHERE reader_id = ? AND user_id = ?"
        )
        self._hidden_insert = session.prepare(
            f"INSERT INTO {ks}.reader_hidden (reader_id, user_id) VALUES (?, ?) USING TIMESTAMP ?"
        )
        self._hidden_delete = session.prepare(
            f"DELETE FROM {ks}.reader_hidden USING TIMESTAMP ? WHERE reader_id = ? AND user_id = ?"
        )
        self._excluded_insert = session.prepare(
            f"INSERT INTO {ks}.reader_excluded (reader_id, user_id) VALUES (?, ?) USING TIMESTAMP ?"
        )
        self._excluded_delete = session.prepare(
            f"DELETE FROM {ks}.reader_excluded USING TIMESTAMP ? WHERE reader_id = ? AND user_id = ?"
        )
        self._list_upsert = session.prepare(
            f"INSERT INTO {ks}.lists (owner_id, list_id, name, replies_policy, exclusive) VALUES (?, ?, ?, ?, ?)"
            " USING TIMESTAMP ?"
        )
        self._list_delete = session.prepare(
            f"DELETE FROM {ks}.lists USING TIMESTAMP ? WHERE owner_id = ? AND list_id = ?"
        )
        # a list's rule on its reader's inbox partition, read with the inbox slice
        self._list_rule_set = session.prepare(
            f"UPDATE {ks}.home_timeline USING TIMESTAMP ? SET list_owner = ?, list_policy = ? WHERE timeline_id = ?"
        )
        self._list_rule_delete = session.prepare(
            f"DELETE list_owner, list_policy FROM {ks}.home_timeline USING TIMESTAMP ? WHERE timeline_id = ?"
        )
        # the pull reposters a reader merges in: the inbox partition's static set, as pull_authors
        self._pull_reposter_add = session.prepare(
            f"UPDATE {ks}.home_timeline USING TIMESTAMP ? SET pull_reposters = pull_reposters + ?"
            " WHERE timeline_id = ?"
        )
        self._pull_reposter_remove = session.prepare(
            f"UPDATE {ks}.home_timeline USING TIMESTAMP ? SET pull_reposters = pull_reposters - ?"
            " WHERE timeline_id = ?"
        )
        self._extras_index_upsert = session.prepare(
            f"INSERT INTO {ks}.home_extras_reposts (reader_id, tweet_id, author_id, reposted_at, reposted_by)"
            " VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ?"
        )
        self._extras_index_delete = session.prepare(
            f"DELETE FROM {ks}.home_extras_reposts USING TIMESTAMP ? WHERE reader_id = ? AND tweet_id = ?"
        )
        self._reposts_index_upsert = session.prepare(
            f"INSERT INTO {ks}.reposts_by_tweet (tweet_id, reposter_id, author_id, reposted_at)"
            " VALUES (?, ?, ?, ?) USING TIMESTAMP ?"
        )
        self._reposts_index_delete = session.prepare(
            f"DELETE FROM {ks}.reposts_by_tweet USING TIMESTAMP ? WHERE tweet_id = ? AND reposter_id = ?"
        )

    def _batched(self, statements: list[tuple]) -> list[tuple]:
        """Group (statement, values) pairs into UNLOGGED batches of ``batch_rows``."""
        from cassandra.query import BatchStatement, BatchType

        out: list[tuple] = []
        for i in range(0, len(statements), self.batch_rows):
            chunk = statements[i : i + self.batch_rows]
            if len(chunk) == 1:
                out.append(chunk[0])
                continue
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for statement, values in chunk:
                batch.add(statement, values)
            out.append((batch, None))
        return out

    # -- statement builders: one bound statement per row -------------------------------------
    def _timeline(self, rows: Iterable[TimelineWrite]) -> Iterator[tuple]:
        for op, timeline_id, e, ts in rows:
            if op == "delete":
                yield self._timeline_delete, (ts, timeline_id, e.created_at, e.tweet_id)
            else:  # insert and update both write the full row (same clustering key)
                yield self._timeline_upsert, (
                    timeline_id, e.created_at, e.tweet_id, e.author_id, e.version, e.text, e.profile_version,
                    e.in_reply_to_tweet_id or "", e.in_reply_to_author_id or "", ts
                )

    def _timeline_fanout(self, rows: Iterable[TimelineFanout]) -> Iterator[tuple]:
        step = self.fanout_partitions
        for op, timeline_ids, e, ts in rows:
            for i in range(0, len(timeline_ids), step):
                ids = list(timeline_ids[i : i + step])
                if op == "delete":
                    yield self._fanout_delete, (ts, ids, e.created_at, e.tweet_id)
                else:
                    yield self._fanout_upsert, (ts, e.author_id, e.version, e.text, e.profile_version,
                                                e.in_reply_to_tweet_id or "", e.in_reply_to_author_id or "", ids,
                                                e.created_at, e.tweet_id)

    def _tweets(self, rows: Iterable[TweetWrite]) -> Iterator[tuple]:
        for tweet_id, _author_id, e, ts in rows:
            if e is None:
                yield self._tweet_delete, (ts, tweet_id)
            else:
                yield self._tweet_upsert, (tweet_id, e.author_id, e.created_at, e.version, e.text, e.profile_version,
                                           e.in_reply_to_tweet_id or "", e.in_reply_to_author_id or "", ts)

    def _profiles(self, rows: Iterable[ProfileWrite]) -> Iterator[tuple]:
        for p, ts in rows:
            yield self._profile_upsert, (p.user_id, p.version, p.display_name, p.avatar_url, p.bio, ts)

    def _author_timeline(self, rows: Iterable[AuthorTimelineWrite]) -> Iterator[tuple]:
        for op, e, ts in rows:
            if op == "delete":
                yield self._author_delete, (ts, e.author_id, e.created_at, e.tweet_id)
            else:
                yield self._author_upsert, (e.author_id, e.created_at, e.tweet_id, e.version, e.text, e.profile_version,
                                            e.in_reply_to_tweet_id or "", e.in_reply_to_author_id or "", ts)

    def _pull_follows(self, rows: Iterable[PullFollowWrite]) -> Iterator[tuple]:
        for op, follower_id, author_id, ts in rows:
            # A set element carries its own timestamp, so the static copy orders like the row: the
            # highest timestamp wins, a removal at an equal one (docs/idempotent-writes.md).
            if op == "delete":
                yield self._pull_follow_delete, (ts, follower_id, author_id)
                yield self._pull_author_remove, (ts, {author_id}, follower_id)
            else:
                yield self._pull_follow_insert, (follower_id, author_id, ts)
                yield self._pull_author_add, (ts, {author_id}, follower_id)

    def _blocks(self, rows: Iterable[BlockWrite]) -> Iterator[tuple]:
        for op, blocker_id, blocked_id, ts in rows:
            if op == "delete":
                yield self._block_delete, (ts, blocker_id, blocked_id)
            else:
                yield self._block_insert, (blocker_id, blocked_id, ts)

    def _extras(self, rows: Iterable[ExtrasDelta]) -> Iterator[tuple]:
        for op, reader, e, ts in rows:
            if op == "delete":
                yield self._extras_delete, (ts, reader, e.at, e.tweet_id)
            else:
                yield self._extras_upsert, (reader, *_entry_values(e), ts)

    def _user_reposts(self, rows: Iterable[AuthorTimelineWrite]) -> Iterator[tuple]:
        for op, e, ts in rows:
            if op == "delete":
                yield self._user_repost_delete, (ts, e.reposted_by, e.at, e.tweet_id)
            else:
                yield self._user_repost_upsert, (e.reposted_by, *_entry_values(e), ts)

    def _visible(self, rows: Iterable[VisibleDelta]) -> Iterator[tuple]:
        for op, reader, user, ts in rows:
            if op == "delete":
                yield self._visible_delete, (ts, reader, user)
            else:
                yield self._visible_insert, (reader, user, ts)

    def _hidden(self, rows: Iterable[HiddenDelta]) -> Iterator[tuple]:
        for op, reader, user, ts in rows:
            if op == "delete":
                yield self._hidden_delete, (ts, reader, user)
            else:
                yield self._hidden_insert, (reader, user, ts)

    def _excluded(self, rows: Iterable[ExcludedDelta]) -> Iterator[tuple]:
        for op, reader, user, ts in rows:
            if op == "delete":
                yield self._excluded_delete, (ts, reader, user)
            else:
                yield self._excluded_insert, (reader, user, ts)

    def _lists(self, facts: Iterable[ListFact]) -> Iterator[tuple]:
        """A live fact upserts its ``lists`` row and sets its reader's statics; one that is not
        deletes the statics; either deletes the row under the owner the list had before, if another."""
        for f in facts:
            if f.previous_owner is not None and f.previous_owner != f.owner_id:
                yield self._list_delete, (f.ts, f.previous_owner, f.list_id)
            if f.owner_id is None:
                yield self._list_rule_delete, (f.ts, list_reader(f.list_id))
            else:
                yield self._list_upsert, (f.owner_id, f.list_id, f.name, f.replies_policy, f.exclusive, f.ts)
                yield self._list_rule_set, (f.ts, f.owner_id, f.replies_policy, list_reader(f.list_id))

    def _pull_reposters(self, rows: Iterable[PullReposterDelta]) -> Iterator[tuple]:
        for op, reader, reposter, ts in rows:  # an element's own timestamp orders it, as pull_authors'
            statement = self._pull_reposter_remove if op == "delete" else self._pull_reposter_add
            yield statement, (ts, {reposter}, reader)

    def _extras_index(self, changes: Iterable[IndexChange]) -> Iterator[tuple]:
        for (reader, tweet_id), e, ts in changes:
            if e is None:
                yield self._extras_index_delete, (ts, reader, tweet_id)
            else:
                yield self._extras_index_upsert, (reader, tweet_id, e.author_id, e.reposted_at, e.reposted_by, ts)

    def _reposts_index(self, changes: Iterable[IndexChange]) -> Iterator[tuple]:
        for (tweet_id, reposter), e, ts in changes:
            if e is None:
                yield self._reposts_index_delete, (ts, tweet_id, reposter)
            else:
                yield self._reposts_index_upsert, (tweet_id, reposter, e.author_id, e.reposted_at, ts)

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
        """Write rows (any order: timestamps decide) and the indexes by tweet of ``extras`` and
        ``user_reposts`` (:func:`index_changes`); raises :class:`WriteFailed` if any write failed, or
        :class:`~feed_service.errors.StorePermissionDenied` (role, permission, table) if Cassandra refused
        one for the role's grants."""
        from cassandra.concurrent import execute_concurrent

        timeline, tweets, profiles = list(timeline), list(tweets), list(profiles)
        fanout: list[TimelineFanout] = []
        for f in timeline_fanout:
            if len(f.timeline_ids) >= self.min_fanout_partitions:
                fanout.append(f)
            else:
                timeline.extend(f.rows())
        # Rows of one timeline next to each other: batches of them stay single-partition (cheap on
        # the node); the order of writes does not matter (timestamps decide).
        timeline.sort(key=_timeline_of)
        author_timeline, pull_follows, blocks = list(author_timeline), list(pull_follows), list(blocks)
        # the per-reader tables' rows by partition too, for the same reason
        extras, visible = sorted(extras, key=_reader_of), sorted(visible, key=_reader_of)
        user_reposts = sorted(user_reposts, key=_reposter_of)
        pull_reposters, hidden = sorted(pull_reposters, key=_reader_of), sorted(hidden, key=_reader_of)
        excluded, lists = sorted(excluded, key=_reader_of), list(lists)
        extras_rows = sorted(extras_index(extras), key=_index_partition)
        reposts_rows = sorted(reposts_index(user_reposts), key=_index_partition)
        statements = [*self._timeline(timeline), *self._tweets(tweets), *self._profiles(profiles),
                      *self._author_timeline(author_timeline), *self._pull_follows(pull_follows),
                      *self._blocks(blocks), *self._extras(extras), *self._user_reposts(user_reposts),
                      *self._visible(visible), *self._hidden(hidden), *self._excluded(excluded),
                      *self._lists(lists), *self._pull_reposters(pull_reposters),
                      *self._extras_index(extras_rows), *self._reposts_index(reposts_rows)]
        if self.batch_rows > 1:
            statements = self._batched(statements)
        statements.extend(self._timeline_fanout(fanout))  # each one spans partitions already: unbatched
        if statements:
            results = execute_concurrent(
                self.session, statements, concurrency=self.concurrency, raise_on_first_error=False,
                results_generator=True,
            )
            failures = [r.result_or_exc for r in results if not r.success]
            refused = next((f for f in failures if _is_unauthorized(f)), None)
            if refused is not None:  # the role's grants: no retry mends it (docs/operations.md)
                raise permission_denied(refused)
            if failures:
                raise WriteFailed(f"{len(failures)} of {len(statements)} writes failed; first: {failures[0]!r}")
        rows = len(timeline) + sum(len(f.timeline_ids) for f in fanout)
        deletes = sum(1 for r in timeline if r.op == "delete") + sum(
            len(f.timeline_ids) for f in fanout if f.op == "delete")
        extras_deletes = sum(1 for r in extras if r.op == "delete")
        return WriteCounts(rows - deletes, deletes, len(tweets), len(profiles), len(author_timeline),
                           len(pull_follows), len(blocks), len(extras) - extras_deletes, extras_deletes,
                           len(user_reposts), len(visible), len(pull_reposters), len(hidden), len(excluded),
                           len(lists))

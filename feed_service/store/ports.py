"""The ports of the view's storage: what the read service and the writers need, as Protocols.

Implementations: :class:`~feed_service.store.cassandra_reader.CassandraReader` and
:class:`~feed_service.store.cassandra_writer.CassandraWriter` on Cassandra, and
:class:`~feed_service.store.memory.MemoryStore` in memory for unit tests of their callers.

Contract of every implementation:

- reads return rows in timeline order (``(Entry.at, tweet_id)`` descending, or ascending where
  the method says so; ``at`` is ``created_at`` but for a repost entry) and never more than ``limit``;
- every method raises only :class:`~feed_service.errors.StoreError` subclasses for store faults
  (``StoreUnavailable``: retryable, the store cannot serve now; ``StoreTimeout``: the time budget
  ran out). Any other exception is a bug and propagates unchanged;
- ``timeout`` is in seconds and bounds the whole call (the service passes the gRPC deadline).
"""

from __future__ import annotations

from dataclasses import astuple, dataclass
from typing import Collection, Iterable, Mapping, NamedTuple, Protocol

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


class InboxSlice(NamedTuple):
    """A slice of a home timeline's inbox and the pull authors its reader merges in, read together
    (one single-partition read: the pull authors are a static column of the inbox partition)."""

    entries: list[Entry]
    pull_authors: list[str] | None
    """Sorted; None when the read cannot tell: a slice below a cursor that returned no row."""
    pull_reposters: list[str] | None = None
    """The pull reposters the user merges in (a static column too), sorted; None as ``pull_authors``."""
    inbox_dropped: bool | None = False
    """The static ``inbox_dropped``: True while the inbox is not kept (the reader is inactive or its
    inbox is being rebuilt), so its rows must not be read (docs/activity.md); None as ``pull_authors``."""
    list_owner: str | None = None
    """A list's reader (``list_reader(L)``): the static ``list_owner``, the owner of the live list L;
    None for a user's partition, for a list that does not exist (deleted, or never created), or as
    ``pull_authors`` when the read cannot tell (docs/lists.md)."""
    list_policy: str | None = None
    """A list's reader: the static ``list_policy``, the list's replies policy; None as ``list_owner``."""


class ListRow(NamedTuple):
    """A live list of one owner: a row of ``lists`` (docs/lists.md)."""

    list_id: str
    name: str
    replies_policy: str
    exclusive: bool


class TimelineStore(Protocol):
    """The reads the service needs. Every method raises only :class:`StoreError` subclasses.

    ``timeout`` is in seconds and bounds the whole call (the service passes the gRPC deadline).
    """

    async def page(self, timeline_id: str, *, before: Cursor | None, limit: int, timeout: float) -> list[Entry]:
        """Up to ``limit`` entries strictly older than ``before`` (all if None), newest first."""

    async def inbox(self, timeline_id: str, *, before: Cursor | None, limit: int, timeout: float) -> InboxSlice:
        """:meth:`page` and, from the same read, the user's pull authors (None when no row came back
        below a cursor: then only :meth:`pull_authors` can tell)."""

    async def statics(self, timeline_id: str, *, timeout: float) -> InboxSlice:
        """The inbox partition's static columns alone (no entries): the pull authors, the pull
        reposters and ``inbox_dropped`` (False when unset), and a list's reader's ``list_owner`` and
        ``list_policy``, in one read."""

    async def visible_users(self, reader_id: str, *, timeout: float) -> list[str]:
        """Every user ``reader_id`` sees (its whole ``reader_visible`` partition), sorted: bounded by
        the users it follows. What a read of a reader whose inbox is not kept merges from."""

    async def newer(self, timeline_id: str, *, after: Cursor | None, limit: int, timeout: float) -> list[Entry]:
        """Up to ``limit`` entries strictly newer than ``after`` (from the oldest if None), oldest first."""

    async def author_page(self, author_id: str, *, before: Cursor | None, limit: int, timeout: float) -> list[Entry]:
        """Like :meth:`page`, of an author's own timeline (its newest live tweets)."""

    async def author_newer(self, author_id: str, *, after: Cursor | None, limit: int, timeout: float) -> list[Entry]:
        """Like :meth:`newer`, of an author's own timeline."""

    async def pull_authors(self, user_id: str, *, timeout: float) -> list[str]:
        """The pull authors ``user_id`` follows: whose author timelines its home timeline merges in."""

    async def extras_page(self, timeline_id: str, *, before: Cursor | None, limit: int,
                          timeout: float) -> list[Entry]:
        """Like :meth:`page`, of the timeline's per-reader entries (``home_extras``: repost entries and
        replies shown for their parent), by their position ``(Entry.at, tweet_id)``."""

    async def extras_newer(self, timeline_id: str, *, after: Cursor | None, limit: int,
                           timeout: float) -> list[Entry]:
        """Like :meth:`newer`, of the timeline's ``home_extras``."""

    async def user_reposts_page(self, user_id: str, *, before: Cursor | None, limit: int,
                                timeout: float) -> list[Entry]:
        """Like :meth:`page`, of a user's own reposts of others' tweets (``user_reposts``), by repost time."""

    async def user_reposts_newer(self, user_id: str, *, after: Cursor | None, limit: int,
                                 timeout: float) -> list[Entry]:
        """Like :meth:`newer`, of a user's ``user_reposts`` (a watch's catch-up of a pull reposter)."""

    async def visible_among(self, reader_id: str, user_ids: Collection[str], *, timeout: float) -> set[str]:
        """Those of ``user_ids`` that ``reader_id`` sees (``reader_visible``): a pull author's reply
        to one of them is shown to the reader. One read for all of them, however many the reader sees."""

    async def pull_reposters(self, user_id: str, *, timeout: float) -> list[str]:
        """The pull reposters ``user_id`` sees: whose ``user_reposts`` its home timeline merges in
        (docs/reposts-and-replies.md, hybrid fan-out), sorted."""

    async def reposts_of(self, tweets: Collection[TweetKey], reposters: Collection[str], *,
                         timeout: float) -> dict[TweetKey, list[Repost]]:
        """The live reposts of each of ``tweets`` (``(author_id, tweet_id)``) by any of ``reposters``, as
        ``(reposted_at, reposter)`` (``reposts_by_tweet``, the index of ``user_reposts`` by tweet);
        tweets without one are absent."""

    async def pushed_reposts(self, reader_id: str, tweets: Collection[TweetKey], *,
                             timeout: float) -> dict[TweetKey, Repost]:
        """The reader's ``home_extras`` repost entries of ``tweets``, as ``(reposted_at, reposter)``
        (``home_extras_reposts``, the index of its repost entries by tweet); others are absent."""

    async def hidden_among(self, reader_id: str, user_ids: Collection[str], *, timeout: float) -> set[str]:
        """Those of ``user_ids`` whose tweets are hidden from ``reader_id`` (``reader_hidden``)."""

    async def excluded_among(self, reader_id: str, user_ids: Collection[str], *, timeout: float) -> set[str]:
        """Those of ``user_ids`` that ``reader_id`` sets aside as sources of its home timeline, the
        members of its exclusive lists (``reader_excluded``, docs/lists.md#exclusive-lists)."""

    async def lists_of(self, owner_id: str, *, timeout: float) -> list["ListRow"]:
        """The live lists of ``owner_id`` (its ``lists`` partition), sorted by list id."""

    async def tweet(self, tweet_id: str, *, timeout: float) -> Entry | None:
        """The latest version of a tweet; None when unknown or deleted."""

    async def profile(self, user_id: str, version: int | None, *, timeout: float) -> ProfileRow | None:
        """A profile at ``version`` (the latest if None); None when that version is not stored."""

    async def profiles(self, keys: Iterable[ProfileKey], *, timeout: float) -> dict[ProfileKey, ProfileRow]:
        """The stored profiles among ``keys`` (missing keys are absent from the result)."""

    async def blocks(self, blocker_id: str, blocked_id: str, *, timeout: float) -> bool:
        """Whether ``blocker_id`` blocks ``blocked_id`` now: reads that do not go through a home
        timeline check it (docs/api.md#blocks-and-mutes); the timelines are filtered by the join."""

    def close(self) -> None:
        """Release connections; later calls raise :class:`StoreUnavailable`."""


@dataclass(frozen=True, slots=True)
class WriteCounts:
    """Rows written by one :meth:`ViewWriter.write` call, per kind (summed with ``+``)."""

    timeline_upserts: int = 0
    timeline_deletes: int = 0
    tweets: int = 0
    profiles: int = 0
    author_timeline: int = 0
    pull_follows: int = 0
    blocks: int = 0
    extras_upserts: int = 0
    """``home_extras`` rows inserted or updated."""
    extras_deletes: int = 0
    user_reposts: int = 0
    visible: int = 0
    """``reader_visible`` rows written (inserts and deletes)."""
    pull_reposters: int = 0
    """Elements of ``home_timeline.pull_reposters`` written (inserts and deletes)."""
    hidden: int = 0
    """``reader_hidden`` rows written (inserts and deletes)."""
    excluded: int = 0
    """``reader_excluded`` rows written (inserts and deletes)."""
    lists: int = 0
    """Lists' facts written: each its ``lists`` row(s) and its reader's statics ``list_owner``, ``list_policy``."""

    def __add__(self, other: "WriteCounts") -> "WriteCounts":
        return WriteCounts(*(a + b for a, b in zip(astuple(self), astuple(other))))


class ViewWriter(Protocol):
    """Writes of the view's rows. Every row carries its write timestamp; rows may be written in any
    order and any number of times (docs/idempotent-writes.md). Raises
    :class:`~feed_service.errors.WriteFailed` when some writes failed after retries."""

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
        """Home-timeline rows come one per row (``timeline``) or one per row and many timelines
        (``timeline_fanout``, counted per timeline); both land as the same rows. ``extras`` are rows
        of the reader's ``home_extras`` (at ``entry.at``), ``user_reposts`` rows of the partition
        ``entry.reposted_by``, ``visible`` rows of ``reader_visible``, ``pull_reposters`` elements of
        the reader's ``home_timeline.pull_reposters``, ``hidden`` rows of ``reader_hidden``,
        ``excluded`` rows of ``reader_excluded``. A fact of ``lists`` at its ``ts``: a live one
        upserts the ``lists`` row (owner, list, name, policy, exclusive) and sets the statics
        ``list_owner``, ``list_policy`` of the partition ``list_reader(list_id)``; one that is not
        deletes both statics; either deletes the ``lists`` row under ``previous_owner``, if any
        (docs/lists.md#in-the-engine).

        The indexes by tweet are written from the same rows, at the same timestamps: each repost
        entry of ``extras`` is also a row of ``home_extras_reposts`` (reader, tweet) and each row of
        ``user_reposts`` one of ``reposts_by_tweet`` (tweet, reposter). A repost that moves is a
        delete and an insert at one timestamp, of one index row: the index takes the last of a key's
        changes in the call (a delete would win the timestamp tie)."""


@dataclass(frozen=True, slots=True)
class TrimResult:
    """What one :meth:`TimelineTrimmer.trim` call did (docs/trimming.md)."""

    kept: dict[str, int]
    """timeline -> rows it holds after the call (every timeline asked for)."""
    trimmed_timelines: int = 0
    """Timelines that held more than the limit (cap + slack, or lower) and were cut to the cap."""
    trimmed_rows: int = 0
    """Rows deleted."""


class ShortInbox(NamedTuple):
    """A trimmed inbox that removals left with fewer than ``inbox_cap`` rows at or above its cut line:
    what a refill needs to ask its push authors for (docs/trimming.md#refill)."""

    timeline_id: str
    below: tuple[int, str]
    """The cut line ``(created_at, tweet_id)``: rows strictly below it are refilled."""
    need: int
    """``inbox_cap`` less the rows at or above the line (> 0)."""
    push_authors: tuple[str, ...]
    """Sorted: the users the reader sees (``reader_visible``) less its pull authors, whose rows the
    inbox does not hold, and its excluded sources (``reader_excluded``): ``rules.push_authors``."""


class TimelineTrimmer(Protocol):
    """Bounds stored home timelines: a timeline holding more than ``limit`` rows (default ``inbox_cap
    + trim_slack``) keeps its newest ``inbox_cap``; ``bounds`` (upper bounds of live rows, None:
    unknown) may bound each read. Raises only :class:`~feed_service.errors.StoreError` subclasses
    for store faults."""

    def trim(self, timeline_ids: Iterable[str], *, bounds: Mapping[str, int | None] | None = None,
             limit: int | None = None) -> TrimResult: ...

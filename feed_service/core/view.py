"""In-memory home-timeline view fed by step outputs, and the driver that routes batches to keys.

:class:`TimelineView` is the reference sink: it applies :class:`~feed_service.core.join.StepResult`
outputs the way the Cassandra sink will (rows keyed by timeline and tweet, dimensions by versioned
key) and hydrates display names at read time. :class:`Materializer` is the thin driver of the engine:
parse, group by :func:`~feed_service.core.events.join_key`, one :func:`~feed_service.core.join.step`
per key, apply. The CLI and the tests use both; the Spark job replaces the driver, not the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from feed_service.errors import ViewContractError
from feed_service.core.events import (
    Event,
    FollowChange,
    InvalidEvent,
    ProfileVersion,
    RawEvent,
    TweetDelete,
    TweetUpsert,
    join_key,
    parse_event,
)
from feed_service.core.join import DEFAULT_INBOX_CAP, DEFAULT_PULL_THRESHOLD, StepResult, step
from feed_service.core.rows import Entry, ProfileRow
from feed_service.core.state import AuthorState, decode_parts
from feed_service.core.stored_step import step_stored
from feed_service.core.timeline_merge import merge_newest, timeline_order

RowKey = tuple[int, str, str]
"""(created_at, tweet_id, author_id): a row within one timeline, as a Cassandra clustering key would
be; an edit that moves created_at is therefore a delete and an insert, never an update."""


_EVENT_TYPES = (TweetUpsert, TweetDelete, FollowChange, ProfileVersion)


sort_key = timeline_order
"""Timeline order, applied descending (kept under this name for the reference)."""


def entry_dict(entry: Entry, display_name: str | None) -> dict[str, Any]:
    """Return the public shape of one timeline entry (``feedctl materialize``'s output contract)."""
    return {
        "tweet_id": entry.tweet_id,
        "author_id": entry.author_id,
        "version": entry.version,
        "text": entry.text,
        "author_display_name": display_name,
    }


class TimelineView:
    """Timelines, tweets and profiles as applied from step outputs; reads cap and hydrate.

    Inboxes hold push authors' tweets (at most ``inbox_cap`` per followed author, since each author
    key retains that many); author timelines hold every author's retained tweets; ``pull_follows``
    says which pull authors each user merges in. Reads merge those sources as the server does
    (:func:`~feed_service.core.timeline_merge.merge_newest`) and return the ``inbox_cap`` newest.
    With ``strict`` a delta that contradicts the stored rows raises :class:`ViewContractError`,
    which is how tests catch a wrong delta rather than only a wrong final result.
    """

    def __init__(self, *, inbox_cap: int = DEFAULT_INBOX_CAP, strict: bool = True) -> None:
        self.inbox_cap = inbox_cap
        self.strict = strict
        self.timelines: dict[str, dict[RowKey, Entry]] = {}
        self.tweets: dict[tuple[str, str], Entry | None] = {}
        """(author_id, tweet_id) -> latest content, None once deleted."""
        self.profiles: dict[tuple[str, int], ProfileRow] = {}
        self.author_timelines: dict[str, dict[RowKey, Entry]] = {}
        self.pull_follows: dict[str, set[str]] = {}
        """follower -> the pull authors it follows (merged in at read time)."""

    def _fail(self, message: str) -> None:
        if self.strict:
            raise ViewContractError(message)

    def apply(self, result: StepResult) -> None:
        """Apply one step's outputs."""
        strict = self.strict
        timelines = self.timelines
        for op, entry, timeline_ids in result.deltas:
            row = (entry.created_at, entry.tweet_id, entry.author_id)
            if op == "delete":
                for uid in timeline_ids:
                    rows = timelines.get(uid)
                    if rows is None or rows.pop(row, None) is None:
                        if strict:
                            raise ViewContractError(f"delete of missing row {row} in timeline {uid!r}")
                        continue
                    if not rows:
                        del timelines[uid]
            else:
                for uid in timeline_ids:
                    rows = timelines.setdefault(uid, {})
                    if strict and (row in rows) != (op == "update"):
                        raise ViewContractError(f"{op} of {'missing' if op == 'update' else 'present'} "
                                                f"row {row} in timeline {uid!r}")
                    rows[row] = entry
        for op, entry in result.author_timeline:
            rows = self.author_timelines.setdefault(entry.author_id, {})
            row = (entry.created_at, entry.tweet_id, entry.author_id)
            if op == "delete":
                if rows.pop(row, None) is None:
                    self._fail(f"delete of missing row {row} in the author timeline of {entry.author_id!r}")
            else:
                if (row in rows) != (op == "update"):
                    self._fail(f"{op} of {'missing' if op == 'update' else 'present'} row {row} in the author"
                               f" timeline of {entry.author_id!r}")
                rows[row] = entry
        for op, author_id, follower_ids in result.pull_follows:
            for uid in follower_ids:
                authors = self.pull_follows.setdefault(uid, set())
                if (author_id in authors) != (op == "delete"):
                    self._fail(f"pull-follow {op} of {'missing' if op == 'delete' else 'present'} edge "
                               f"{uid!r} -> {author_id!r}")
                (authors.discard if op == "delete" else authors.add)(author_id)
                if not authors:
                    del self.pull_follows[uid]
        for change in result.tweets:
            self.tweets[(change.author_id, change.tweet_id)] = change.entry
        for prow in result.profiles:
            self.profiles[(prow.user_id, prow.version)] = prow

    def display_name(self, author_id: str, profile_version: int) -> str | None:
        """The author's display name at exactly ``profile_version``, or None while unknown."""
        prow = self.profiles.get((author_id, profile_version))
        return None if prow is None else prow.display_name

    def entries(self, user_id: str) -> list[Entry]:
        """The ``inbox_cap`` newest entries of ``user_id``'s timeline (inbox and pull authors), newest first."""
        sources = [_newest_first(self.timelines.get(user_id, {}))]
        sources += [_newest_first(self.author_timelines.get(a, {})) for a in sorted(self.pull_follows.get(user_id, ()))]
        return merge_newest(sources, self.inbox_cap)

    def author_entries(self, author_id: str) -> list[Entry]:
        """An author's own timeline: its newest live tweets, newest first."""
        return _newest_first(self.author_timelines.get(author_id, {}))

    def read(self, user_id: str) -> list[dict[str, Any]]:
        """``user_id``'s timeline in the public entry shape, display names hydrated."""
        return [entry_dict(e, self.display_name(e.author_id, e.profile_version)) for e in self.entries(user_id)]

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        """Every non-empty timeline, by user id in sorted order."""
        users = sorted({uid for uid, rows in self.timelines.items() if rows} | set(self.pull_follows))
        return {uid: timeline for uid in users if (timeline := self.read(uid))}


def _newest_first(rows: dict[RowKey, Entry]) -> list[Entry]:
    return [rows[k] for k in sorted(rows, reverse=True)]


@dataclass(frozen=True, slots=True)
class Rejection:
    """One rejected input record: its position (line number in the CLI) and why."""

    position: int
    code: str
    reason: str


@dataclass(slots=True)
class BatchReport:
    """What one micro-batch did."""

    accepted: int = 0
    rejections: list[Rejection] = field(default_factory=list)
    keys: int = 0
    timeline_deltas: int = 0


class Materializer:
    """Drive micro-batches through :func:`step`, one call per author key, into a :class:`TimelineView`.

    ``encode_states`` keeps every key's state as stored parts between batches and steps through
    :func:`~feed_service.core.stored_step.step_stored`, as the streaming job's state store does, so
    the codec and the lazy loading of edges are exercised on the same path.
    """

    def __init__(
        self,
        *,
        inbox_cap: int = DEFAULT_INBOX_CAP,
        pull_threshold: int = DEFAULT_PULL_THRESHOLD,
        view: TimelineView | None = None,
        encode_states: bool = False,
        clock_start: int = 0,
    ) -> None:
        self.inbox_cap = inbox_cap
        self.pull_threshold = pull_threshold
        self.view = view if view is not None else TimelineView(inbox_cap=inbox_cap)
        self.encode_states = encode_states
        self.clock_start = clock_start
        self.states: dict[str, AuthorState] = {}
        self.stored: dict[str, tuple[bytes, bytes | None]] = {}
        """key -> (core part, edges part) when ``encode_states``."""
        self.rejected = 0
        self.accepted = 0

    def state(self, key: str) -> AuthorState | None:
        """The current state of ``key`` (decoded), or None if never seen."""
        if not self.encode_states:
            return self.states.get(key)
        stored = self.stored.get(key)
        return None if stored is None else decode_parts(*stored)

    def process_batch(self, raw_events: Iterable[RawEvent | Event], *, first_position: int = 0) -> BatchReport:
        """Parse, route and apply one micro-batch; rejected records are counted, never raised.

        The i-th record's position is ``first_position + i``. Parsed events pass through as they are.
        """
        report = BatchReport()
        groups: dict[str, list[Event]] = {}
        for i, raw in enumerate(raw_events):
            if isinstance(raw, _EVENT_TYPES):
                event: Event = raw
            else:
                try:
                    event = parse_event(raw)  # type: ignore[arg-type]
                except InvalidEvent as exc:
                    report.rejections.append(Rejection(first_position + i, exc.code, exc.reason))
                    continue
            groups.setdefault(join_key(event), []).append(event)
            report.accepted += 1
        for key in sorted(groups):
            result = self.step_key(key, groups[key])
            report.timeline_deltas += result.delta_count
        report.keys = len(groups)
        self.accepted += report.accepted
        self.rejected += len(report.rejections)
        return report

    def step_key(self, key: str, changes: Sequence[Event]) -> StepResult:
        """Run one key's step against its stored state, store the new state, apply the outputs."""
        if self.encode_states:
            core, edges = self.stored.get(key, (None, None))
            done = step_stored(core, lambda: edges, changes, inbox_cap=self.inbox_cap,
                               pull_threshold=self.pull_threshold, clock_start=self.clock_start)
            result = done.result
            if done.core is not None:
                edges = None if done.clear_edges else (done.edges if done.edges is not None else edges)
                self.stored[key] = (done.core, edges)
        else:
            result = step(self.states.get(key), changes, inbox_cap=self.inbox_cap,
                          pull_threshold=self.pull_threshold, clock_start=self.clock_start)
            self.states[key] = result.state
        self.view.apply(result)
        return result


"""The driver of the pure core: micro-batches routed to their keys, stepped, and applied to the model.

:class:`Materializer` is the thin driver of the engine: parse, group by
:func:`~feed_service.core.events.join_keys` (a block goes to both of its users), one
:func:`~feed_service.core.join.step` per key, the per-reader stage on the batch's messages, apply to
a :class:`~feed_service.core.timeline_view.TimelineView` (the reference sink and the model's read,
re-exported here with its entry shape). The CLI and the tests use both; the Spark job replaces the
driver, not the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from feed_service.core.event_kinds import KIND_OF_CLASS
from feed_service.core.events import (
    Event,
    InvalidEvent,
    RawEvent,
    join_keys,
    parse_event,
)
from feed_service.core.join import DEFAULT_INBOX_CAP, DEFAULT_PULL_THRESHOLD, StepResult
from feed_service.core.per_reader.author_side import SideResult
from feed_service.core.per_reader.routing import sides_messages, step_batch
from feed_service.core.per_reader.author_step import step_with_side
from feed_service.core.per_reader.audience_stage import AudienceStage
from feed_service.core.per_reader.list_stage import ListStage
from feed_service.core.retention import BEYOND_HORIZON, Retention, beyond_horizon_reason
from feed_service.core.state import AuthorState, decode_parts
from feed_service.core.stored_step import step_stored
from feed_service.core.timeline_view import RowKey, TimelineView, entry_dict, sort_key

__all__ = ["BatchReport", "Materializer", "Rejection", "RowKey", "TimelineView", "entry_dict", "sort_key"]

_EVENT_TYPES = tuple(KIND_OF_CLASS)
"""Every event class of the registry: a parsed event passes through as it is."""


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
        trim_slack: int | None = None,
        retention: Retention = Retention(None),
        pull_reposters: bool = False,
    ) -> None:
        self.inbox_cap = inbox_cap
        self.retention = retention
        self.pull_threshold = pull_threshold
        # pull_reposters: reposters seen by pull_threshold readers or more fan out to nobody and are
        # merged at read (docs/reposts-and-replies.md, hybrid fan-out); False: every reposter pushes
        self.reposter_threshold = pull_threshold if pull_reposters else None
        # trim_slack: the new view trims its inboxes (None: never; docs/trimming.md)
        self.view = view if view is not None else TimelineView(inbox_cap=inbox_cap, trim_slack=trim_slack)
        self.encode_states = encode_states
        self.clock_start = clock_start
        self.states: dict[str, AuthorState] = {}
        self.stage = AudienceStage(pull_threshold=self.reposter_threshold)
        self.lists = ListStage()
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

    def process_batch(self, raw_events: Iterable[RawEvent | Event], *, first_position: int = 0,
                      times: Sequence[int] | None = None) -> BatchReport:
        """Parse, route and apply one micro-batch; rejected records are counted, never raised.

        The i-th record's position is ``first_position + i``. Parsed events pass through as they are.
        ``times`` (one event time per record, as Kafka timestamps are) turn the retention horizon on:
        a change too far behind its key's watermark is rejected with code ``beyond_horizon``.
        """
        report = BatchReport()
        groups: dict[str, list[Event]] = {}
        positions: dict[str, list[int]] = {}
        for i, raw in enumerate(raw_events):
            if isinstance(raw, _EVENT_TYPES):
                event: Event = raw
            else:
                try:
                    event = parse_event(raw)  # type: ignore[arg-type]
                except InvalidEvent as exc:
                    report.rejections.append(Rejection(first_position + i, exc.code, exc.reason))
                    continue
            for key in join_keys(event):
                groups.setdefault(key, []).append(event)
                positions.setdefault(key, []).append(i)
            report.accepted += 1
        late: set[int] = set()
        sides: list[SideResult] = []
        for key in sorted(groups):
            key_times = None if times is None else [times[i] for i in positions[key]]
            result = self.step_key(key, groups[key], times=key_times, sides=sides)
            report.timeline_deltas += result.delta_count
            for j in result.late:
                i = positions[key][j]
                if i in late:  # a block late at both of its keys: one rejection
                    continue
                late.add(i)
                report.rejections.append(Rejection(first_position + i, BEYOND_HORIZON, beyond_horizon_reason(
                    key_times[j], result.state.watermark, self.retention)))  # type: ignore[index]
        self.per_reader(sides)
        self.refill()
        report.accepted -= len(late)
        report.rejections.sort(key=lambda r: r.position)
        report.keys = len(groups)
        self.accepted += report.accepted
        self.rejected += len(report.rejections)
        return report

    def step_key(self, key: str, changes: Sequence[Event], *, times: Sequence[int] | None = None,
                 sides: list[SideResult] | None = None) -> StepResult:
        """Run one key's step against its stored state, store the new state, apply the outputs.

        The per-reader messages of the step go to ``sides`` (the batch's, run by :meth:`per_reader`
        once every author key has stepped); without it they run at once."""
        if self.encode_states:
            core, edges = self.stored.get(key, (None, None))
            done = step_stored(core, lambda: edges, changes, inbox_cap=self.inbox_cap,
                               pull_threshold=self.pull_threshold, clock_start=self.clock_start,
                               times=times, retention=self.retention, key=key)
            result, side = done.result, done.side
            if done.core is not None:
                edges = None if done.clear_edges else (done.edges if done.edges is not None else edges)
                self.stored[key] = (done.core, edges)
        else:
            result, side = step_with_side(self.states.get(key), changes, inbox_cap=self.inbox_cap,
                                          pull_threshold=self.pull_threshold, clock_start=self.clock_start,
                                          times=times, retention=self.retention, key=key)
            self.states[key] = result.state
        self.view.apply(result)
        if sides is None:
            self.per_reader([side])
            self.refill()
        else:
            sides.append(side)
        return result

    def set_active(self, readers: Iterable[str], active: bool) -> None:
        """Keep the inboxes of ``readers`` (``active``) or drop them, between batches, as the stream's
        driver does when read activity makes readers come back or go (docs/activity.md); a
        returning reader's rebuild is asked for and answered at the end of the next batch."""
        for uid in readers:
            self.view.set_active(uid, active)

    def refill(self) -> None:
        """Answer the view's refill requests through the author keys, as the stream does in a later
        batch (docs/trimming.md#refill): their rows are written at the authors' clocks."""
        returning = sorted(self.view.returning)
        requests = self.view.refill_requests() + self.view.rebuild_requests()
        if not requests:
            self.view.rebuilt(returning)
            return
        groups: dict[str, list[Event]] = {}
        for r in requests:
            groups.setdefault(r.author_id, []).append(r)
        sides: list[SideResult] = []
        for key in sorted(groups):
            self.view.refilled_rows += self.step_key(key, groups[key], sides=sides).delta_count
        self.per_reader(sides)
        self.view.rebuilt(returning)

    def per_reader(self, sides: Sequence[SideResult]) -> None:
        """Run the driver's stages on one batch of the author keys' messages and apply their rows
        (docs/reposts-and-replies.md); the list edges they derive go to the members' keys at once,
        as the stream gives them at its next micro-batch (docs/lists.md#in-the-engine)."""
        messages = sides_messages(sides)
        while messages:
            done = step_batch(self.stage, self.lists, messages)
            if done.lists is not None:
                self.view.apply_list_facts(done.lists.facts)
            for result in done.results:
                self.view.apply_extras(result.extras)
                self.view.apply_own_reposts(result.own_reposts)
                self.view.apply_pull_reposters(result.pull_readers)
                self.view.apply_visible(result.visible)
                self.view.apply_hidden(result.hidden)
                self.view.apply_excluded(result.excluded)
            groups: dict[str, list[Event]] = {}
            for edge in done.edges:
                groups.setdefault(edge.member_id, []).append(edge)
            edge_sides: list[SideResult] = []
            for key in sorted(groups):
                self.step_key(key, groups[key], sides=edge_sides)
            messages = sides_messages(edge_sides)

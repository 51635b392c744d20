"""The session's streamed world (README.md, "Testing"): one rich corpus published once into topics and
a keyspace of its own and streamed to caught-up by one stream process, which the read-only integration
tests assert against instead of each streaming a small workload of their own.

Its settings make the one corpus exercise every rule of the view: a small inbox cap (timelines trimmed,
and refilled after removals: docs/trimming.md), a pull threshold that an author crosses in phase 2 and
another falls back under (docs/fan-out.md), reposts by pull authors (pull reposters), replies, blocks and
mutes, edits and deletes, a reader of prolific authors (thousands of entries kept within cap + slack) and
one whose newest entries are deleted after trims (refilled), and garbage records that must become dead
letters.

Two phases:

1. the first three fifths of the corpus and the garbage, streamed to caught-up (every reader active);
   ``phase1_rows`` keeps the home timelines Cassandra held then;
2. :meth:`World.advance_to_phase2` stops the stream, publishes the rest and restarts it from the same
   checkpoint with a 15 s inactivity window (docs/activity.md), so that readers nobody read since phase 1
   go inactive at its first batch: their inboxes are dropped and their reads merged.

Tests read it through :meth:`World.server`, which reports no reads to the stream (so that reading
never brings an inactive reader back, except in the test of that). Tests that only read use the
``world`` fixture (phase 1) or ``world_phase2`` (tests/integration/conftest.py);
tests/conftest.py runs the former before the latter. Destructive tests reuse ``World.topics_for`` (its
published topics) with a checkpoint and keyspace of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from feed_service.core.reference import FinalTables, reference_tables, reference_timelines
from feed_service.settings import Settings
from feed_service.stack.config import free_ports
from feed_service.stack.stream_process import StreamProcess

from .history import deletes_of_newest, followers, history, prolific, split
from .isolation import isolated, unique_suffix
from .pipeline import GARBAGE, Delivered, grpc_server, publish, read_timelines

#: The world's view settings: cap 20 with slack 5 trims most timelines; threshold 6 makes about half
#: of the 40 users pull authors, and the seed has authors crossing it both ways in phase 2.
INBOX_CAP, TRIM_SLACK, PULL_THRESHOLD = 20, 5, 6
#: Phase 2's inactivity window and read-report interval (phase 1 keeps the defaults: nobody inactive).
INACTIVE_AFTER_S, READ_REPORT_INTERVAL_S = 15, 1
SEED, USERS, EVENTS, PREFIX = 2, 40, 1200, "w-"
SHARES = {"repost_share": 0.15, "reply_share": 0.3, "hide_share": 0.05, "follow_option_share": 0.04}
#: Phase 1 in a few micro-batches (so trims happen across batches, not only within one); state stats
#: every 15 s and a micro-batch at most every second: the world's stream lives the whole session, and
#: back-to-back idle triggers and stats every few seconds would take a share of the machine's two
#: cores from every other test.
STREAM_ARGS = ("--max-offsets-per-trigger", "1000", "--state-stats-interval", "15", "--trigger-seconds", "1")
PHASE1_SHARE = 0.6
#: How long a phase may take to catch up (a loaded machine runs a micro-batch in tens of seconds).
CATCH_UP_S = 900


#: The reader of five prolific push authors (far more entries than cap + slack, across the restart), and
#: the reader of two more, whose newest entries phase 2 deletes once trimmed in (refilled).
PROLIFIC_READER, REFILLED_READER = f"{PREFIX}reader", f"{PREFIX}other"
PROLIFIC_TWEETS = 100


def corpus() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The world's two phases of valid events (deterministic)."""
    first, second = split(history(SEED, PREFIX, users=USERS, events=EVENTS, **SHARES), PHASE1_SHARE)
    first += (prolific(PREFIX, PROLIFIC_READER, range(5), PROLIFIC_TWEETS, start=0)
              + prolific(PREFIX, REFILLED_READER, range(5, 7), PROLIFIC_TWEETS, start=0))
    second += (prolific(PREFIX, PROLIFIC_READER, range(5), PROLIFIC_TWEETS, start=PROLIFIC_TWEETS)
               + prolific(PREFIX, REFILLED_READER, range(5, 7), PROLIFIC_TWEETS, start=PROLIFIC_TWEETS))
    second += deletes_of_newest(first + second, f"{PREFIX}prolific5", 30)
    return first, second


@dataclass
class World:
    """The streamed world: its settings (of the current phase), what was published, its stream."""

    settings: Settings
    folder: Path
    phase1: list[dict[str, Any]]
    phase2: list[dict[str, Any]]
    stream: StreamProcess
    #: Where each garbage record published so far was delivered.
    garbage: list[Delivered] = field(default_factory=list)
    phase: int = 0
    phase1_rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    phase1_progress: dict[str, Any] = field(default_factory=dict)
    #: Events tests published into the world (:meth:`publish`): part of the reference from then on.
    more: list[dict[str, Any]] = field(default_factory=list)
    stopped: bool = False

    @property
    def checkpoint(self) -> Path:
        return self.stream.checkpoint

    @property
    def events(self) -> list[dict[str, Any]]:
        """The valid events published so far: phase 1, the tests' own, and phase 2 once it ran."""
        return self.phase1 + self.more + (self.phase2 if self.phase >= 2 else [])

    @property
    def readers(self) -> list[str]:
        """Every user that follows someone in the whole corpus."""
        return followers(self.phase1 + self.phase2)

    def tables(self) -> FinalTables:
        """The reference's final tables of what was published so far."""
        return reference_tables(self.events)

    def reference(self) -> dict[str, list[dict[str, Any]]]:
        """The reference home timelines of what was published so far, at the world's cap."""
        return reference_timelines(self.events, inbox_cap=INBOX_CAP)

    def server(self, *, reports: bool = False):  # -> ContextManager[ServerThread]
        """A read server on the world (:func:`grpc_server`), by default reporting no reads: reading the
        shared world must not bring its inactive readers back (only a test of that does: ``reports``)."""
        # the stream's phase-2 inactivity window in every phase: the server rechecks an inbox's dropped
        # flag within a quarter of it (feed_service/server/app.py flag_recheck_s)
        return grpc_server(replace(self.settings, inactive_after_s=INACTIVE_AFTER_S,
                                   read_report_interval_s=READ_REPORT_INTERVAL_S), reports=reports)

    def topics_for(self, unique: str, **changes: Any) -> Settings:
        """Settings for a destructive test on the world's published topics: the world's topics (the
        stream's settings carry one topic suffix, so its output topics are the world's too) with a
        keyspace of the test's own (``feed_<unique>``, provisioned), no view changes (the world's read
        servers consume its change topic) and other fields replaced by ``changes``. Give it a cap no
        timeline reaches (no trims, so no refill requests into the world's topic); its dead letters
        repeat the world's (test_world.py compares them as a set)."""
        from feed_service.ops.provision import provision

        pipeline = replace(self.settings, keyspace=f"feed_{unique}", view_changes=False, **changes)
        provision(pipeline)
        return pipeline

    def start(self) -> None:
        """Phase 1: publish the first part and the garbage, stream to caught-up, keep the rows."""
        publish(self.settings, self.phase1, GARBAGE, delivered=self.garbage)
        self.stream.start()
        self.phase1_progress = self.stream.wait_caught_up(timeout=CATCH_UP_S)
        self.phase1_rows = read_timelines(self.settings)
        self.phase = 1

    def advance_to_phase2(self) -> "World":
        """Phase 2 (once): stop the stream cleanly, publish the rest, restart from the checkpoint with the
        short inactivity window, and wait until caught up."""
        if self.phase >= 2:
            return self
        code = self.stream.stop()
        assert code == 0, f"the world's stream exited with {code}; log {self.stream.log_file}"
        self.settings = replace(self.settings, inactive_after_s=INACTIVE_AFTER_S,
                                read_report_interval_s=READ_REPORT_INTERVAL_S)
        publish(self.settings, self.phase2)
        self.stream = StreamProcess(self.settings, self.stream.checkpoint, log_file=self.stream.log_file,
                                    extra_args=list(STREAM_ARGS), metrics_port=self.stream.metrics_port)
        self.phase = 2
        self.stream.start()
        self.stream.wait_caught_up(timeout=CATCH_UP_S)
        return self

    def publish(self, events: list[dict[str, Any]], garbage: list[tuple[str, bytes]] | None = None, *,
                wait: bool = True) -> None:
        """Publish ``events`` into the world's topics (users or ids of the test's own, or changes the
        reference takes in as :attr:`events`: every test on the world's topics sees them) and raw
        ``garbage`` records (their coordinates join :attr:`garbage`), and unless ``wait`` is false wait
        until the stream has caught up with them."""
        publish(self.settings, events, garbage or (), delivered=self.garbage)
        self.more.extend(events)
        if wait:
            self.stream.wait_caught_up(timeout=CATCH_UP_S)

    def stop(self) -> None:
        """Stop the stream (once; again does nothing); it must exit with code 0."""
        if self.stopped:
            return
        self.stopped = True
        code = self.stream.stop()
        assert code == 0, f"the world's stream exited with {code}; log {self.stream.log_file}:\n" + \
            self.stream.log_file.read_text(errors="replace")[-4000:]


def new_world(settings: Settings, folder: Path) -> World:
    """The world, provisioned in topics and a keyspace of its own, not yet streamed (:meth:`World.start`)."""
    pipeline = isolated(settings, f"world{unique_suffix()[:6]}", inbox_cap=INBOX_CAP, trim_slack=TRIM_SLACK,
                        pull_threshold=PULL_THRESHOLD)
    first, second = corpus()
    stream = StreamProcess(pipeline, folder / "ckpt", log_file=folder / "stream.log", extra_args=list(STREAM_ARGS),
                           metrics_port=free_ports(1)[0])
    return World(pipeline, folder, first, second, stream)

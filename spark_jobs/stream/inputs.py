"""The stream's guard of its inputs: before every start (a restart included) and before every
micro-batch, the topics must still hold what the checkpoint will read next; otherwise the stream
stops with :class:`~feed_service.errors.InputLost`, never skipping (docs/streaming.md#data-loss,
docs/operations.md#failure-modes-the-streams-inputs-and-grants).

Three checks, cheap (a few admin requests, no records read):

- **Topic ids.** ``<checkpoint>/source-topics.json`` records the Kafka topic id of every topic the
  stream reads, written at the first start of a checkpoint (and, for a checkpoint made before this
  file existed or a topic new to the stream, at its next start), compared before every start and
  every micro-batch. A topic deleted and created again has a new id:
  :class:`~feed_service.errors.TopicRecreated` (Spark would resume the new topic at the old topic's
  offsets and skip its records).
- **Records deleted unread.** A partition whose earliest offset is past the checkpoint's next offset
  for it lost records the stream never read (time retention, ``deleteRecords``); compaction never
  moves the earliest offset: :class:`~feed_service.errors.RecordsLost`.
- **Delete markers maybe removed.** The cleaner removes a delete marker of a compacted topic no
  sooner than ``delete.retention.ms`` after it was written; a marker the stream had not read by then
  may be gone. The stream keeps, in ``<checkpoint>/source-ends.json``, when it saw the compacted
  topics' partitions end where (:class:`EndsSeen`: every record at or past those offsets was written
  after that time), seeded with the checkpoint's first offsets at its first batch. If no sighting
  younger than ``delete.retention.ms`` ends at or before the offset the stream reads next, records
  it has not read may be older than that: ``RecordsLost`` too. Record timestamps are not used: they
  are event times here, and a late event may carry an old one (docs/retention.md).

The checkpoint's next offsets are the end offsets of its last committed batch in the offset log
(``join/offsets/<n>``: a version line, the batch's metadata, one JSON line per source), else the
query's initial offsets (``join/sources/0/0``), else none (a new checkpoint reads from its
``startingOffsets``). Before a micro-batch, the batch's own start (the previous entry's end) is checked.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from feed_service.errors import CheckpointError, InputLost, PipelineError, RecordsLost, TopicRecreated
from feed_service.kafka.offsets import SOURCE_ROLES, Offsets
from feed_service.settings import Settings
from spark_jobs.checkpoint import inspect_checkpoint, query_dir

log = logging.getLogger("feed.stream")

#: The file of the topic ids a checkpoint reads, in the stream's ``--checkpoint`` folder.
SOURCE_TOPICS_NAME = "source-topics.json"
SOURCE_TOPICS_VERSION = 1
#: Sightings of the compacted topics' end offsets, in the stream's ``--checkpoint`` folder.
SOURCE_ENDS_NAME = "source-ends.json"
SOURCE_ENDS_VERSION = 1
#: A sighting is kept at most once per this fraction of the shortest ``delete.retention.ms`` (and at
#: most once a second): the check errs on the safe side by at most that fraction of it.
SIGHTINGS_PER_RETENTION = 100
#: Kafka's own default ``delete.retention.ms``: what a compacted topic has when provisioning sets none
#: (``FEED_HISTORY_HORIZON_S=0``).
KAFKA_DEFAULT_DELETE_RETENTION_MS = 86_400_000
#: What an operator runs to recover; every refusal names them.
RECOVERY = ("recover by rebuilding the view from the topics as they are: `feedctl backfill --out DIR` (into"
            " truncated tables or a new keyspace: it does not remove rows), then `feedctl stream --checkpoint NEW"
            " --bootstrap-from DIR`; docs/operations.md#failure-modes-the-streams-inputs-and-grants")


class TopicsReader(Protocol):
    """What the guard asks the broker (:class:`~feed_service.kafka.source_topics.SourceTopics`)."""

    def topic_ids(self, topics: Any) -> dict[str, str]: ...

    def earliest_offsets(self, partitions: Offsets) -> Offsets: ...

    def latest_offsets(self, partitions: Offsets) -> Offsets: ...


@dataclass(frozen=True, slots=True)
class EndsSeen:
    """At wall time ``time_ms`` the partitions ended at ``offsets``: every record at or past them was
    written after ``time_ms``."""

    time_ms: int
    offsets: Offsets


def source_topics_file(checkpoint: Path) -> Path:
    return checkpoint / SOURCE_TOPICS_NAME


def recorded_topic_ids(checkpoint: Path) -> dict[str, str] | None:
    """The topic ids recorded for ``checkpoint``; None when it has no record (new, or made before it)."""
    path = source_topics_file(checkpoint)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read {path}: {exc}") from None
    ids = record.get("topic_ids") if isinstance(record, dict) else None
    if not isinstance(ids, dict):
        raise CheckpointError(f"{path} holds no topic_ids: not written by this stream (or damaged)")
    return {str(k): str(v) for k, v in ids.items()}


def record_topic_ids(checkpoint: Path, ids: Mapping[str, str]) -> None:
    """Write ``ids`` as the checkpoint's record (atomically: a half-written record is never read)."""
    path = source_topics_file(checkpoint)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"version": SOURCE_TOPICS_VERSION, "topic_ids": dict(sorted(ids.items())),
                               "recorded_at_ms": int(time.time() * 1000)}, indent=1), encoding="utf-8")
    tmp.replace(path)


def _source_offsets(text: str) -> Offsets:
    """The Kafka source's offsets in an offset-log entry's text (the JSON lines after the metadata)."""
    for line in text.splitlines()[2:]:
        try:
            sources = json.loads(line)
        except ValueError:
            continue
        if isinstance(sources, dict) and sources and all(isinstance(v, dict) for v in sources.values()):
            return {t: {str(p): int(o) for p, o in parts.items()} for t, parts in sources.items()}
    return {}


def _initial_offsets(checkpoint: Path) -> Offsets | None:
    """The Kafka source's first offsets (``join/sources/0/0``: a NUL byte, ``v1``, then JSON); None if absent."""
    try:
        text = (query_dir(checkpoint) / "sources" / "0" / "0").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    start = text.find("{")
    try:
        offsets = json.loads(text[start:]) if start >= 0 else None
    except ValueError:
        return None
    if not isinstance(offsets, dict):
        return None
    return {t: {str(p): int(o) for p, o in parts.items() if int(o) >= 0} for t, parts in offsets.items()
            if isinstance(parts, dict)}


def batch_start_offsets(checkpoint: Path, batch_id: int) -> Offsets | None:
    """Where micro-batch ``batch_id`` starts reading: the end of the offset log's entry before it, or
    the query's initial offsets for batch 0; None when neither is there."""
    if batch_id <= 0:
        return _initial_offsets(checkpoint)
    try:
        return _source_offsets((query_dir(checkpoint) / "offsets" / str(batch_id - 1)).read_text(encoding="utf-8"))
    except OSError:
        return None


def next_offsets(checkpoint: Path) -> Offsets | None:
    """Where the checkpoint's query reads next on a start: the end of its last committed batch, else
    its initial offsets (batch 0 planned, not committed); None for a new checkpoint."""
    info = inspect_checkpoint(checkpoint)
    if info.last_commit is None:
        return _initial_offsets(checkpoint)
    return batch_start_offsets(checkpoint, info.last_commit + 1)


def check_topic_ids(recorded: Mapping[str, str], current: Mapping[str, str], checkpoint: Path) -> None:
    """:class:`TopicRecreated` naming the first topic whose id is not the one recorded."""
    for topic in sorted(recorded):
        if topic in current and current[topic] != recorded[topic]:
            raise TopicRecreated(
                f"topic {topic} was deleted and created again since checkpoint {checkpoint} read it (topic id"
                f" {current[topic]}, the checkpoint's {recorded[topic]}): resuming would skip the new topic's"
                f" records up to the old offsets, so the stream will not run on this checkpoint; {RECOVERY}")


def check_not_deleted(start: Offsets, earliest: Offsets, where: str) -> None:
    """:class:`RecordsLost` naming the partitions whose earliest offset is past ``start`` (``where``: which
    reading this is, for the message)."""
    lost = [(t, p, start[t][p], earliest[t][p]) for t in sorted(start) for p in sorted(start[t], key=int)
            if p in earliest.get(t, {}) and earliest[t][p] > start[t][p]]
    if lost:
        parts = ", ".join(f"{t}[{p}] offsets {s}..{e - 1}" for t, p, s, e in lost)
        raise RecordsLost(f"records the stream had not read were deleted (retention or deleteRecords) before {where}:"
                          f" {parts} ({sum(e - s for *_, s, e in lost)} offsets); the stream will not skip them;"
                          f" {RECOVERY}")


def ends_file(checkpoint: Path) -> Path:
    return checkpoint / SOURCE_ENDS_NAME


def load_ends(checkpoint: Path) -> list[EndsSeen]:
    """The sightings recorded for ``checkpoint``, oldest first; none for a checkpoint without the file."""
    path = ends_file(checkpoint)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        return [EndsSeen(int(e["time_ms"]), e["offsets"]) for e in record["ends"]]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"cannot read {path}: {exc}") from None


def save_ends(checkpoint: Path, ends: list[EndsSeen]) -> None:
    path = ends_file(checkpoint)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"version": SOURCE_ENDS_VERSION,
                               "ends": [{"time_ms": e.time_ms, "offsets": e.offsets} for e in ends]}), encoding="utf-8")
    tmp.replace(path)


def markers_at_risk(start: Offsets, seen: list[EndsSeen], retention_ms: Mapping[str, int],
                    now_ms: int) -> list[tuple[str, str]]:
    """The partitions of ``start`` (compacted topics) whose records from ``start`` on may be older than
    their topic's ``delete.retention.ms``: no sighting younger than that ends at or before ``start``.
    A partition no sighting names (new to the stream) is not judged.

    >>> seen = [EndsSeen(1_000, {"t": {"0": 0, "1": 0}}), EndsSeen(6_000, {"t": {"0": 5, "1": 9}})]
    >>> markers_at_risk({"t": {"0": 6, "1": 6, "2": 0}}, seen, {"t": 5_000}, now_ms=10_000)  # 6..8 of 1 are older
    [('t', '1')]
    >>> markers_at_risk({"t": {"0": 6, "1": 6}}, seen, {"t": 5_000}, now_ms=12_000)  # both are, by now
    [('t', '0'), ('t', '1')]
    """
    risky = []
    for topic in sorted(start):
        oldest_ok = now_ms - retention_ms[topic]
        for part in sorted(start[topic], key=int):
            sightings = [e for e in seen if part in e.offsets.get(topic, {})]
            if sightings and not any(e.time_ms >= oldest_ok and e.offsets[topic][part] <= start[topic][part]
                                     for e in sightings):
                risky.append((topic, part))
    return risky


@dataclass
class InputGuard:
    """The checks of the module docstring for one stream: :meth:`before_start` (records the topic
    ids when the checkpoint has none) and :meth:`before_batch`."""

    settings: Settings
    checkpoint: Path
    reader: TopicsReader
    clock: Callable[[], float] = field(default=time.time, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)
    """The sightings' file is written by the batches' thread and the supervisor's (:meth:`sight`)."""

    @property
    def topics(self) -> list[str]:
        return [self.settings.topic(role) for role in SOURCE_ROLES]

    def retention_ms(self) -> dict[str, int]:
        """``delete.retention.ms`` of every compacted source topic, as provisioning sets it."""
        out = {}
        for role in SOURCE_ROLES:
            config = self.settings.topics[role].config
            if "compact" in str(config.get("cleanup.policy", "")):
                ms = config.get("delete.retention.ms", KAFKA_DEFAULT_DELETE_RETENTION_MS)
                out[self.settings.topic(role)] = int(ms)
        return out

    def before_start(self) -> None:
        """Check the topic ids and the checkpoint's next offsets; record the ids if there is no record
        (a new checkpoint, or one made before the record existed: from then on it is checked).

        Raises :class:`~feed_service.errors.InputLost` (or :class:`CheckpointError` for a damaged
        record). A broker that does not answer is logged, not raised: an outage is no reason to stop,
        and every batch checks its input again before it reads (:meth:`before_batch`)."""
        try:
            self._before_start()
        except (InputLost, CheckpointError):
            raise
        except PipelineError as exc:
            log.warning("inputs of checkpoint %s not checked before this start (%s): each batch checks them"
                        " before it reads", self.checkpoint, exc)

    def _before_start(self) -> None:
        current = self.reader.topic_ids(self.topics)
        recorded = recorded_topic_ids(self.checkpoint)
        if recorded is None:
            if inspect_checkpoint(self.checkpoint).is_new:
                log.info("checkpoint %s: recording the ids of the topics it reads", self.checkpoint)
            else:
                log.warning("checkpoint %s has no record of its topics' ids (made before the stream kept one):"
                            " recording them now; a topic re-created before this start goes unnoticed", self.checkpoint)
        else:
            check_topic_ids(recorded, current, self.checkpoint)
        start = next_offsets(self.checkpoint)
        if start:
            self._check_offsets(start, "this start")
        if recorded is None or set(current) - set(recorded):
            record_topic_ids(self.checkpoint, {**(recorded or {}), **current})

    def before_batch(self, batch_id: int) -> None:
        """Check the topic ids and the offsets micro-batch ``batch_id`` starts from (its rows are read
        after this). A broker that does not answer raises :class:`PipelineError`: the batch fails and
        is run again from the checkpoint, a restart like any other."""
        recorded = recorded_topic_ids(self.checkpoint)
        if recorded:
            check_topic_ids(recorded, self.reader.topic_ids(self.topics), self.checkpoint)
        start = batch_start_offsets(self.checkpoint, batch_id)
        if start:
            self._check_offsets(start, f"batch {batch_id}", first_batch=batch_id == 0)

    def _check_offsets(self, start: Offsets, where: str, *, first_batch: bool = False) -> None:
        start = {t: parts for t, parts in start.items() if t in set(self.topics)}
        check_not_deleted(start, self.reader.earliest_offsets(start), where)
        retention = self.retention_ms()
        compacted = {t: parts for t, parts in start.items() if t in retention}
        if not compacted:
            return
        now_ms = int(self.clock() * 1000)
        with self._lock:
            seen = load_ends(self.checkpoint)
            if not seen:
                # Nothing seen yet: a checkpoint's first batch (it reads from where the topics begin, or
                # from a backfill's snapshot), or a checkpoint made before the sightings were kept.
                if not first_batch and any(o > compacted[t][p] for t, parts in
                                           self.reader.latest_offsets(compacted).items() for p, o in parts.items()):
                    log.warning("checkpoint %s has no record of when its topics ended where (made before the"
                                " stream kept one): delete markers removed before %s cannot be told; recorded"
                                " from now on", self.checkpoint, where)
                save_ends(self.checkpoint, [EndsSeen(now_ms, compacted)])
                return
            seen = self._sighted(seen, compacted, now_ms)
        risky = markers_at_risk(compacted, seen, retention, now_ms)
        if risky and seen[-1].time_ms != now_ms:  # the ends seen now may settle it
            seen = seen + [EndsSeen(now_ms, self.reader.latest_offsets(compacted))]
            risky = markers_at_risk(compacted, seen, retention, now_ms)
        if risky:
            parts = ", ".join(f"{t}[{p}] from offset {compacted[t][p]} (delete.retention.ms {retention[t]})"
                              for t, p in risky)
            raise RecordsLost(f"the stream has not read records of compacted topics for longer than their"
                              f" delete.retention.ms before {where}: {parts}; delete markers among them may have been"
                              f" removed unread, and the view would keep what they deleted; {RECOVERY}")

    def sight(self) -> None:
        """Record where the compacted topics end now, if the last sighting is one interval old: what
        tells later checks that records past those ends are younger. The supervisor calls it every
        second, so that a stream with nothing to read (no batches) keeps sighting too."""
        retention = self.retention_ms()
        if not retention:
            return
        now_ms = int(self.clock() * 1000)
        with self._lock:
            seen = load_ends(self.checkpoint)
            if seen:  # the first batch seeds them, with the partitions the stream reads
                self._sighted(seen, seen[-1].offsets, now_ms)

    def _sighted(self, seen: list[EndsSeen], partitions: Offsets, now_ms: int) -> list[EndsSeen]:
        """``seen`` with the ends of ``partitions`` now added and saved, once an interval has passed
        since the last sighting (those older than every retention dropped); else ``seen``."""
        retention = self.retention_ms()
        if now_ms - seen[-1].time_ms < max(1000, min(retention.values()) // SIGHTINGS_PER_RETENTION):
            return seen
        oldest = now_ms - max(retention.values())
        seen = [e for e in seen if e.time_ms >= oldest] + [EndsSeen(now_ms, self.reader.latest_offsets(partitions))]
        save_ends(self.checkpoint, seen)
        return seen

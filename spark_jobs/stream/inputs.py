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
- **Delete markers maybe removed.** On a compacted topic, an unread record older than the topic's
  ``delete.retention.ms`` may have been a delete marker the cleaner removed: ``RecordsLost`` too.

The checkpoint's next offsets are the end offsets of its last committed batch in the offset log
(``join/offsets/<n>``: a version line, the batch's metadata, one JSON line per source), else the
query's initial offsets (``join/sources/0/0``), else none (a new checkpoint reads from its
``startingOffsets``). Before a micro-batch, the batch's own start (the previous entry's end) is checked.
"""

from __future__ import annotations

import json
import logging
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
#: Kafka's own default ``delete.retention.ms``: what a compacted topic has when provisioning sets none
#: (``FEED_HISTORY_HORIZON_S=0``).
KAFKA_DEFAULT_DELETE_RETENTION_MS = 86_400_000
#: What an operator runs to recover; every refusal names them.
RECOVERY = ("recover by rebuilding the view from the topics as they are: `feedctl backfill --out DIR` (into truncated"
            " tables or a new keyspace: it does not remove rows), then `feedctl stream --checkpoint NEW --bootstrap-from"
            " DIR`; docs/operations.md#failure-modes-the-streams-inputs-and-grants")


class TopicsReader(Protocol):
    """What the guard asks the broker (:class:`~feed_service.kafka.source_topics.SourceTopics`)."""

    def topic_ids(self, topics: Any) -> dict[str, str]: ...

    def earliest_offsets(self, partitions: Offsets) -> Offsets: ...

    def offsets_for_time(self, partitions: Offsets, timestamp_ms: int) -> Offsets: ...


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


def check_markers_kept(start: Offsets, old_enough: Offsets, retention_ms: Mapping[str, int], where: str) -> None:
    """:class:`RecordsLost` when an unread record of a compacted topic is older than its
    ``delete.retention.ms``: ``old_enough[t][p]`` is the first offset written within that time (-1:
    none), so one past ``start`` means records from ``start`` on are older, and a delete marker among
    them may have been removed unread."""
    stale = [(t, p) for t in sorted(start) if t in retention_ms for p in sorted(start[t], key=int)
             if p in old_enough.get(t, {}) and (old_enough[t][p] < 0 or old_enough[t][p] > start[t][p])]
    if stale:
        parts = ", ".join(f"{t}[{p}] from offset {start[t][p]} (delete.retention.ms {retention_ms[t]})"
                          for t, p in stale)
        raise RecordsLost(f"unread records of compacted topics are older than their delete.retention.ms before"
                          f" {where}: {parts}; delete markers among them may have been removed unread, and the"
                          f" view would keep what they deleted; {RECOVERY}")


@dataclass
class InputGuard:
    """The checks of the module docstring for one stream: :meth:`before_start` (records the topic
    ids when the checkpoint has none) and :meth:`before_batch`."""

    settings: Settings
    checkpoint: Path
    reader: TopicsReader
    clock: Callable[[], float] = field(default=time.time, repr=False)

    @property
    def topics(self) -> list[str]:
        return [self.settings.topic(role) for role in SOURCE_ROLES]

    def retention_ms(self) -> dict[str, int]:
        """``delete.retention.ms`` of every compacted source topic, as provisioning sets it."""
        out = {}
        for role in SOURCE_ROLES:
            config = self.settings.topics[role].config
            if "compact" in str(config.get("cleanup.policy", "")):
                out[self.settings.topic(role)] = int(config.get("delete.retention.ms", KAFKA_DEFAULT_DELETE_RETENTION_MS))
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
                            " recording them now; a topic re-created before today goes unnoticed", self.checkpoint)
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
            self._check_offsets(start, f"batch {batch_id}")

    def _check_offsets(self, start: Offsets, where: str) -> None:
        start = {t: parts for t, parts in start.items() if t in set(self.topics)}
        check_not_deleted(start, self.reader.earliest_offsets(start), where)
        retention = self.retention_ms()
        now_ms = int(self.clock() * 1000)
        by_age: dict[int, Offsets] = {}
        for topic, ms in retention.items():
            if topic in start:
                by_age.setdefault(ms, {})[topic] = start[topic]
        for ms, partitions in by_age.items():
            check_markers_kept(partitions, self.reader.offsets_for_time(partitions, now_ms - ms), retention, where)

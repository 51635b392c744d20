"""Helpers for the pipeline tests: publish a history, run the stream as a process, read Cassandra back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable

from feed_service.settings import Settings
from feed_service.stack.config import REPO_ROOT

#: Raw records that are not valid events, each with the reason code the pipeline must give.
GARBAGE: tuple[tuple[str, bytes], ...] = (
    ("tweets", b"this is not json {"),
    ("tweets", b'["an", "array"]'),
    ("tweets", b'{"type":"tweet","op":"upsert","tweet_id":"g1","author_id":"u1","version":true,'
               b'"created_at":1,"text":"x","profile_version":0}'),
    ("tweets", b'{"type":"tweet","op":"upsert","tweet_id":"g2","author_id":"u1","version":-1,'
               b'"created_at":1,"text":"x","profile_version":0}'),
    ("tweets", b'{"type":"tweet","op":"upsert","tweet_id":"g3","author_id":"u1","version":1,'
               b'"created_at":1,"text":42,"profile_version":0}'),
    ("tweets", b'{"type":"tweet","op":"retweet","tweet_id":"g4","author_id":"u1","version":1}'),
    ("follows", b'{"type":"follow","op":"follow","follower_id":"u1","followee_id":"u1","version":1}'),
    ("follows", b'{"type":"follow","op":"follow","follower_id":"u1","version":1}'),
    ("profiles", b'{"type":"profile","user_id":"","version":1,"display_name":"nobody"}'),
    ("profiles", b'{"type":"banana","user_id":"u1"}'),
)
GARBAGE_CODES = ("bad_json", "not_object", "wrong_type", "negative_value", "wrong_type", "unknown_op",
                 "self_follow", "missing_field", "empty_id", "unknown_type")


def publish(settings: Settings, events: Iterable[dict[str, Any]], garbage: Iterable[tuple[str, bytes]] = ()) -> int:
    """Publish valid events with the project's producer and raw garbage records; returns the count."""
    from confluent_kafka import Producer

    from feed_service.producing.producer import EventProducer

    count = 0
    with EventProducer(settings) as producer:
        for event in events:
            producer.publish_event(event)
            count += 1
    raw = Producer({"bootstrap.servers": settings.kafka_bootstrap})
    for role, value in garbage:
        raw.produce(settings.topic(role), key=b"garbage", value=value)
        count += 1
    assert raw.flush(30) == 0
    return count


def high_watermarks(settings: Settings) -> dict[str, dict[str, int]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": "watermarks"})
    try:
        out: dict[str, dict[str, int]] = {}
        for role in ("tweets", "follows", "profiles"):
            topic = settings.topic(role)
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            out[topic] = {
                str(p): consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions
            }
        return out
    finally:
        consumer.close()


class StreamProcess:
    """``python -m spark_jobs.stream`` in its own process group, against ``settings``."""

    def __init__(self, settings: Settings, checkpoint: Path, *, log_file: Path, extra_args: list[str] = ()) -> None:
        self.settings = settings
        self.checkpoint = checkpoint
        self.status_file = checkpoint.parent / f"{checkpoint.name}.progress.json"
        self.log_file = log_file
        self.extra_args = list(extra_args)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> "StreamProcess":
        env = {**os.environ, **self.settings.to_env()}
        cmd = [sys.executable, "-m", "spark_jobs.stream", "--checkpoint", str(self.checkpoint),
               "--status-file", str(self.status_file), *self.extra_args]
        self.status_file.unlink(missing_ok=True)
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        return self

    def progress(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.status_file.read_text())
        except (OSError, ValueError):
            return None

    def _check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            tail = self.log_file.read_text(errors="replace")[-4000:]
            raise AssertionError(f"stream exited with {self.proc.returncode}; log tail:\n{tail}")

    def wait_for_batch(self, batch_id: int, timeout: float = 240) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            p = self.progress()
            if p and (p["timeline-join"]["batch_id"] or -1) >= batch_id:
                return p
            time.sleep(0.5)
        raise AssertionError(f"no batch {batch_id} within {timeout}s; progress {self.progress()}")

    def wait_caught_up(self, timeout: float = 300) -> dict[str, Any]:
        """Until both queries' last batches ended at the topics' current end offsets."""
        target = high_watermarks(self.settings)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            p = self.progress()
            if p and all(p[q]["end_offsets"] == target for q in ("timeline-join", "dead-letters")):
                return p
            time.sleep(0.5)
        raise AssertionError(f"stream not caught up within {timeout}s: want {target}, progress {self.progress()}")

    def kill(self) -> None:
        """SIGKILL the whole process group: a crash, not a graceful stop."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        os.kill(self.proc.pid, signal.SIGTERM)  # the driver only: it stops the queries and its JVM
        try:
            return self.proc.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(30)


def read_timelines(settings: Settings) -> dict[str, list[dict[str, Any]]]:
    """Every timeline in Cassandra, newest first, hydrated like the engine's CLI output."""
    from feed_service.store.session import connect

    cluster, session = connect(settings, keyspace=settings.keyspace)
    try:
        profiles = {(r.user_id, r.version): r.display_name
                    for r in session.execute("SELECT user_id, version, display_name FROM profiles")}
        timelines: dict[str, list[tuple]] = {}
        for r in session.execute("SELECT timeline_id, created_at, tweet_id, author_id, version, text, "
                                 "profile_version FROM home_timeline"):
            timelines.setdefault(r.timeline_id, []).append(r)
        out = {}
        for uid in sorted(timelines):
            rows = sorted(timelines[uid], key=lambda r: (r.created_at, r.tweet_id), reverse=True)
            out[uid] = [
                {"tweet_id": r.tweet_id, "author_id": r.author_id, "version": r.version, "text": r.text,
                 "author_display_name": profiles.get((r.author_id, r.profile_version))}
                for r in rows
            ]
        return out
    finally:
        cluster.shutdown()


def read_table(settings: Settings, cql: str) -> list[tuple]:
    from feed_service.store.session import connect

    cluster, session = connect(settings, keyspace=settings.keyspace)
    try:
        return [tuple(r) for r in session.execute(cql)]
    finally:
        cluster.shutdown()


def consume_all(settings: Settings, topic: str, *, expect: int, timeout: float = 60) -> list[Any]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": settings.kafka_bootstrap, "group.id": f"read-{time.time_ns()}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expect and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append(msg)
        return out
    finally:
        consumer.close()

"""Helpers for the pipeline tests: publish a history, run the stream as a process, read Cassandra back,
read every home timeline through a gRPC server."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Mapping, NamedTuple

from grpc_health.v1 import health_pb2, health_pb2_grpc

from feed_service.api import timeline_pb2 as pb
from feed_service.kafka.client_config import client_config
from feed_service.security.roles import ADMIN, PRODUCER
from feed_service.server.config import ServerConfig
from feed_service.server.client_channel import ClientTLS
from feed_service.server.testing import TEST_SECRET, ServerThread, tls_options
from feed_service.settings import Settings
from feed_service.stack.stream_process import StreamProcess  # noqa: F401 - re-exported for tests

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
    ("blocks_mutes", b'{"type":"block","op":"block","blocker_id":"u1","blocked_id":"u1","version":1}'),
    ("blocks_mutes", b'{"type":"mute","op":"mute","muter_id":"u1","muted_id":"u1","version":1}'),
)
GARBAGE_CODES = ("bad_json", "not_object", "wrong_type", "negative_value", "wrong_type", "unknown_op",
                 "self_follow", "missing_field", "empty_id", "unknown_type", "self_block", "self_mute")


class Delivered(NamedTuple):
    """Where one raw record landed."""

    topic: str
    partition: int
    offset: int
    value: bytes


def publish(settings: Settings, events: Iterable[dict[str, Any]], garbage: Iterable[tuple[str, bytes]] = (),
            *, delivered: list[Delivered] | None = None) -> int:
    """Publish valid events with the project's producer and raw garbage records; returns the count.

    ``delivered``, if given, receives the coordinates of each garbage record (in delivery order).
    """
    from confluent_kafka import Producer

    from feed_service.kafka.producer import EventProducer

    count = 0
    with EventProducer(settings) as producer:
        for event in events:
            producer.publish_event(event)
            count += 1
    raw = Producer(client_config(settings, PRODUCER) | {"enable.idempotence": True})
    reports: list[Any] = []
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            reports.append(msg)

    for role, value in garbage:
        raw.produce(settings.topic(role), key=b"garbage", value=value, on_delivery=on_delivery)
        count += 1
    assert raw.flush(30) == 0
    assert errors == [], errors
    if delivered is not None:
        delivered.extend(Delivered(m.topic(), m.partition(), m.offset(), m.value()) for m in reports)
    return count


@contextmanager
def running(stream: StreamProcess) -> Iterator[StreamProcess]:
    """Start ``stream`` and stop it when the block ends.

    A failure in the block is the one reported (the stream is stopped all the same); only when the
    block passed must the stream also stop cleanly, with exit code 0.
    """
    stream.start()
    try:
        yield stream
    except BaseException as failure:
        try:
            stream.stop()
        except Exception as stop_failure:  # noqa: BLE001 - the block's failure stays the reported one
            failure.add_note(f"stopping the stream failed too: {stop_failure!r}")
        raise
    code = stream.stop()
    assert code == 0, f"stream exited with {code}; log {stream.log_file}:\n" + stream.log_file.read_text(
        errors="replace")[-4000:]


def started(stream: StreamProcess) -> StreamProcess:
    """``stream``, started if it was not yet: for a stream a module's tests share (a fixture), which the
    first test to use it starts once it has published its history, so that its first batch holds it."""
    if stream.proc is None:
        stream.start()
    return stream


def stop_cleanly(stream: StreamProcess) -> None:
    """Stop ``stream`` if it was started, and check that it exited with code 0 (now or before)."""
    if stream.proc is None:
        return
    code = stream.stop()
    assert code == 0, f"stream exited with {code}; log {stream.log_file}:\n" + stream.log_file.read_text(
        errors="replace")[-4000:]


def read_timelines(settings: Settings) -> dict[str, list[dict[str, Any]]]:
    """Every timeline in Cassandra, newest first, hydrated like the engine's CLI output."""
    from feed_service.store.session import connect

    cluster, session = connect(settings.as_role("server"), keyspace=settings.keyspace)  # a reader's rights
    try:
        return timelines_in(session)
    finally:
        cluster.shutdown()


def timelines_in(session: Any) -> dict[str, list[dict[str, Any]]]:
    """:func:`read_timelines` through a session the caller opened (e.g. one routed to a single node)."""
    profiles = {(r.user_id, r.version): r.display_name
                for r in session.execute("SELECT user_id, version, display_name FROM profiles")}
    timelines: dict[str, list[Any]] = {}
    for r in session.execute("SELECT timeline_id, created_at, tweet_id, author_id, version, text, "
                             "profile_version FROM home_timeline"):
        if r.tweet_id is not None:  # not a partition holding only its static pull_authors
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


def read_table(settings: Settings, cql: str) -> list[tuple]:
    from feed_service.store.session import connect

    cluster, session = connect(settings.as_role("server"), keyspace=settings.keyspace)  # a reader's rights
    try:
        return [tuple(r) for r in session.execute(cql)]
    finally:
        cluster.shutdown()


def consume_all(settings: Settings, topic: str, *, expect: int, timeout: float = 60) -> list[Any]:
    from confluent_kafka import Consumer

    # The test reads any topic: as the admin on a secured stack, unless the settings name a role.
    consumer = Consumer(client_config(settings, ADMIN) | {"group.id": f"read-{time.time_ns()}",
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


def page_entries(response: Any) -> list[dict[str, Any]]:
    """The entries of a timeline page in the reference's shape (:func:`feed_service.core.view.entry_dict`):
    a reply adds its parent, an entry brought by a repost its reposter and repost time."""
    out = []
    for e in response.entries:
        entry = {"tweet_id": e.tweet_id, "author_id": e.author_id, "version": e.version, "text": e.text,
                 "author_display_name": e.author_display_name or None}
        if e.in_reply_to_tweet_id:
            entry |= {"in_reply_to_tweet_id": e.in_reply_to_tweet_id, "in_reply_to_author_id": e.in_reply_to_author_id}
        if e.reposted_by:
            entry |= {"reposted_by": e.reposted_by, "reposted_at": e.reposted_at_ms}
        out.append(entry)
    return out


def read_all_home_timelines(server: ServerThread, users: list[str], page_size: int = 7) -> dict[str, list]:
    """Every user's home timeline through GetHomeTimeline, page by page (a service token), once the
    server has applied the view changes published so far (its read cache is then current)."""
    server.changes_applied()
    stub, out = server.stub(), {}
    for user in users:
        entries, token = [], ""
        while True:
            page = stub.GetHomeTimeline(pb.GetHomeTimelineRequest(user_id=user, page_size=page_size, page_token=token),
                                        metadata=server.auth("checker", "service"), timeout=10)
            entries += page_entries(page)
            token = page.next_page_token
            if not token:
                break
        if entries:
            out[user] = entries
    return out


def read_all_list_timelines(server: ServerThread, owners: Mapping[str, str], page_size: int = 7
                            ) -> dict[str, list]:
    """Every list's timeline of ``owners`` (list id -> owner) through GetListTimeline, page by page,
    read by its owner, once the server has applied the view changes published so far."""
    server.changes_applied()
    stub, out = server.stub(), {}
    for list_id, owner in sorted(owners.items()):
        entries, token = [], ""
        while True:
            page = stub.GetListTimeline(pb.GetListTimelineRequest(user_id=owner, list_id=list_id, page_size=page_size,
                                                                  page_token=token),
                                        metadata=server.auth(owner), timeout=10)
            entries += page_entries(page)
            token = page.next_page_token
            if not token:
                break
        out[list_id] = entries
    return out


def _unreported(reader_id: str, value: bytes) -> None:
    """Where a server's read reports go when they must not reach the stream: nowhere."""


@contextmanager
def grpc_server(pipeline: Settings, tls_env: Mapping[str, str] | None = None, *,
                reports: bool = True) -> Iterator[ServerThread]:
    """A read server on Cassandra, serving once connected and consuming the view changes (the read
    cache on, the TTL'd pull cache off). ``tls_env``: FEED_GRPC_* variables (a secured stack's
    ``StackSecrets.environment()``) that make it a TLS server and its channels TLS clients. ``reports``
    False: its home reads are not reported to the stream (docs/activity.md), so reading a shared
    pipeline brings no inactive reader back."""
    config = ServerConfig(auth_secret=TEST_SECRET, metrics_port=None, settings=pipeline, pull_cache_ttl_s=0,
                          **tls_options(tls_env or {}))
    quiet = {} if reports else {"report_reads": _unreported}
    with ServerThread(config, client=ClientTLS.from_env(tls_env) if tls_env else None, **quiet) as server:
        health = health_pb2_grpc.HealthStub(server.channel())
        deadline = time.monotonic() + 60
        while health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status != \
                health_pb2.HealthCheckResponse.SERVING:
            assert time.monotonic() < deadline, "the server did not connect to Cassandra"
            time.sleep(0.2)
        server.feed_live()
        yield server

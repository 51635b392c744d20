"""The event producer: validated envelopes onto the changelog topics, delivery checked.

Errors: :class:`~feed_service.errors.ProducerError` and its subclasses (``EventRejected``,
``DeliveryFailed``, ``ProducerClosed``; see :mod:`feed_service.errors`).

Records: the value is the JSON change envelope (``core/events.py``); the key names the entity whose latest record
compaction must keep, as ``schemas/topics.json`` says (tweet: ``tweet_id``; follow edge:
``follower_id|followee_id``; profile: ``user_id|version``; block and mute edges:
``block|blocker_id|blocked_id``, ``mute|muter_id|muted_id``; repost edges: ``repost|reposter_id|tweet_id``). Partitions are chosen with murmur2, like
the Java client, so every producer of these topics puts one entity's changes in one partition.
"""

from __future__ import annotations

import enum
import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

from feed_service.core.event_kinds import EDGE_KINDS
from feed_service.core.events import (
    BlockChange,
    Event,
    FollowChange,
    InvalidEvent,
    MuteChange,
    ProfileVersion,
    RepostChange,
    TweetDelete,
    TweetUpsert,
    event_to_json,
    parse_event,
)
from feed_service.errors import DeliveryFailed, EventRejected, FailedDelivery, ProducerClosed, ProducerError
from feed_service.kafka.client_config import client_config
from feed_service.kafka.keys import ROLE_OF_TYPE, record_key, topic_role
from feed_service.kafka.versions import VersionClock
from feed_service.security.roles import PRODUCER
from feed_service.settings import Settings

log = logging.getLogger(__name__)

PRODUCER_DEFAULTS: dict[str, Any] = {
    "enable.idempotence": True,  # no duplicates or reordering from retries, per partition
    "acks": "all",
    "linger.ms": 20,  # fill batches: throughput over a few ms of latency
    "batch.size": 1_000_000,
    "batch.num.messages": 10_000,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 500_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "partitioner": "murmur2_random",  # the Java client's partitioner: same key, same partition
    "delivery.report.only.error": True,  # successes need no Python callback; failures do
    "message.timeout.ms": 60_000,
}
"""librdkafka settings of :class:`EventProducer`; ``config=`` entries override them."""

DEFAULT_FLUSH_TIMEOUT = 90.0
"""Seconds :meth:`EventProducer.flush` waits; above ``message.timeout.ms`` so late failures are named."""

POLL_EVERY = 1000
"""Serve delivery callbacks after this many produce calls."""

_encode_json = json.JSONEncoder(separators=(",", ":")).encode
"""Compact JSON (ASCII: lone surrogates stay encodable); one encoder, not one per ``json.dumps`` call."""


class State(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"


class KafkaClient(Protocol):
    """What the producer needs of ``confluent_kafka.Producer`` (tests pass a fake)."""

    def produce(self, topic: str, value: bytes | None = ..., key: str | bytes | None = ...) -> None: ...
    def poll(self, timeout: float = ...) -> int: ...
    def flush(self, timeout: float = ...) -> int: ...


@dataclass(slots=True)
class ProducerStats:
    produced: int = 0
    """Events handed to the client (queued or delivered)."""
    failed: int = 0
    """Events the broker did not take (reported by delivery callbacks)."""
    rejected: int = 0
    """Events refused by validation, never sent."""

    @property
    def delivered(self) -> int:
        """After a successful flush: events acknowledged by the broker."""
        return self.produced - self.failed


class EventProducer:
    """Publish change events: validate, key, send; raise what the broker refused.

    Use it as a context manager (``close`` flushes)::

        with EventProducer(settings) as producer:
            producer.publish_profile("ann", "Ann")
            tweet = producer.publish_tweet("ann", "hello")
            producer.publish_edit(tweet, "hello, world")
            producer.follow("bob", "ann")                  # show_reposts=False: without ann's reposts
            producer.mute("bob", "ann"); producer.block("ann", "cat")
            reply = producer.publish_tweet("bob", "hi ann", in_reply_to=tweet)
            producer.repost("bob", tweet)

    Every event goes through :func:`~feed_service.core.events.parse_event` before it is queued: the
    rules the engine and the stream apply, stricter than the JSON Schema in ``schemas/events/`` (see
    :mod:`~feed_service.kafka.envelope_schema`); an invalid one raises :class:`EventRejected`. A failed
    delivery raises :class:`DeliveryFailed` from the next publish call, :meth:`flush` or :meth:`close`
    (each failure is raised once). Versions not given are taken from ``clock``.

    ``client_factory`` builds the Kafka client from the librdkafka config (which carries the
    ``on_delivery`` and ``error_cb`` callbacks); it defaults to ``confluent_kafka.Producer`` and
    lets unit tests pass an in-memory fake. It connects as ``settings.role``, else the producer role.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        bootstrap: str | None = None,
        topics: Mapping[str, str] | None = None,
        clock: VersionClock | None = None,
        config: Mapping[str, Any] | None = None,
        client_factory: Callable[[dict[str, Any]], KafkaClient] | None = None,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        settings = (settings or Settings.from_env()).as_role(PRODUCER)
        self.bootstrap = bootstrap or settings.kafka_bootstrap
        self.topics: dict[str, str] = {role: settings.topic(role) for role in ROLE_OF_TYPE.values()}
        self.topics.update(topics or {})
        self.clock = clock or VersionClock()
        self.stats = ProducerStats()
        self._new_id = new_id
        self._profile_versions: dict[str, int] = {}
        self._failures: list[FailedDelivery] = []
        self._failure_count = 0
        self._since_poll = 0
        self._state = State.OPEN
        if client_factory is None:
            from confluent_kafka import Producer as client_factory  # noqa: N813
        merged = client_config(settings, PRODUCER) | PRODUCER_DEFAULTS | (config or {})
        merged.update({"bootstrap.servers": self.bootstrap, "on_delivery": self._on_delivery,
                       "error_cb": self._on_error})
        self._client = client_factory(merged)

    # --- callbacks (run inside poll/flush, on this thread) -------------------------------------

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            return
        self.stats.failed += 1
        self._failure_count += 1
        if len(self._failures) < 100:
            key = msg.key()
            self._failures.append(FailedDelivery(
                msg.topic(), key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key), str(err)))

    def _on_error(self, err: Any) -> None:
        if getattr(err, "fatal", lambda: False)():
            self._failure_count += 1
            self._failures.append(FailedDelivery("*", "*", f"fatal producer error: {err}"))
        else:
            log.warning("kafka producer: %s", err)

    def _raise_failures(self) -> None:
        if self._failure_count:
            errors, count = self._failures, self._failure_count
            self._failures, self._failure_count = [], 0
            raise DeliveryFailed(
                f"{count} event(s) not delivered; first: {errors[0].topic} key={errors[0].key}: {errors[0].error}",
                errors, count)

    # --- sending ----------------------------------------------------------------------------

    def validate(self, envelope: Mapping[str, Any]) -> Event:
        """Return the event of ``envelope`` or raise :class:`EventRejected`; nothing is sent.

        :func:`parse_event` alone: whatever it accepts the JSON Schema accepts too (a unit test
        checks it), so a second, schema check would cost time and reject nothing more.
        """
        try:
            return parse_event(envelope)
        except InvalidEvent as exc:
            self.stats.rejected += 1
            raise EventRejected(exc.code, exc.reason) from None

    def _send(self, event: Event, value: bytes) -> None:
        if self._state is not State.OPEN:
            raise ProducerClosed("cannot publish: the producer is closed")
        topic = self.topics[topic_role(event)]
        key = record_key(event)
        client = self._client
        while True:
            try:
                client.produce(topic, value, key)
                break
            except BufferError:  # local queue full: let librdkafka deliver some, then retry
                client.poll(0.05)
                self._raise_failures()
        self.stats.produced += 1
        self._since_poll += 1
        if self._since_poll >= POLL_EVERY:
            self._since_poll = 0
            client.poll(0)
            self._raise_failures()

    def publish_event(self, event: Event | Mapping[str, Any]) -> Event:
        """Validate and send one event (a dataclass or a JSON envelope); return the parsed event.

        Unknown extra fields of an envelope are sent as they are.
        """
        envelope = event if type(event) is dict or isinstance(event, Mapping) else event_to_json(event)
        parsed = self.validate(envelope)
        self._send(parsed, _encode_json(envelope).encode())
        return parsed

    def publish_line(self, line: bytes | str) -> Event:
        """Validate and send one replay-file line as it is (its bytes become the record value)."""
        data = line.encode() if isinstance(line, str) else bytes(line)
        data = data.strip()
        try:
            envelope = json.loads(data)
        except ValueError as exc:
            self.stats.rejected += 1
            raise EventRejected("bad_json", f"bad JSON: {exc}") from None
        if not isinstance(envelope, dict):
            self.stats.rejected += 1
            raise EventRejected("not_object", f"event must be a JSON object, got {type(envelope).__name__}")
        parsed = self.validate(envelope)
        self._send(parsed, data)
        return parsed

    # --- typed helpers ----------------------------------------------------------------------

    def _profile_version_of(self, user_id: str, given: int | None) -> int:
        """``given``, else ``user_id``'s last profile published by this producer (else rejected)."""
        if given is not None:
            return given
        known = self._profile_versions.get(user_id)
        if known is None:
            self.stats.rejected += 1
            raise EventRejected("missing_field", f"profile_version of {user_id!r} unknown: publish a "
                                "profile first or pass profile_version")
        return known

    def publish_tweet(
        self, author_id: str, text: str, *, tweet_id: str | None = None, profile_version: int | None = None,
        created_at: int | None = None, version: int | None = None, in_reply_to: TweetUpsert | None = None,
        in_reply_to_tweet_id: str | None = None, in_reply_to_author_id: str | None = None,
    ) -> TweetUpsert:
        """Publish a new tweet; ``profile_version`` defaults to the author's last published profile.

        A reply names its parent: ``in_reply_to`` (a published tweet), or its two ids (both or
        neither, else ``EventRejected`` ``incomplete_reply``).
        """
        profile_version = self._profile_version_of(author_id, profile_version)
        if in_reply_to is not None:
            in_reply_to_tweet_id, in_reply_to_author_id = in_reply_to.tweet_id, in_reply_to.author_id
        version = self.clock.next() if version is None else version
        envelope: dict[str, Any] = {
            "type": "tweet", "op": "upsert", "tweet_id": tweet_id or self._new_id(), "author_id": author_id,
            "version": version, "created_at": self.clock.now_ms() if created_at is None else created_at,
            "text": text, "profile_version": profile_version,
        }
        if in_reply_to_tweet_id is not None:
            envelope["in_reply_to_tweet_id"] = in_reply_to_tweet_id
        if in_reply_to_author_id is not None:
            envelope["in_reply_to_author_id"] = in_reply_to_author_id
        event = self.publish_event(envelope)
        assert isinstance(event, TweetUpsert)
        return event

    def publish_edit(
        self, tweet: TweetUpsert, text: str, *, profile_version: int | None = None, version: int | None = None,
    ) -> TweetUpsert:
        """Publish new text for ``tweet`` (same id, created_at and parent if a reply, a higher version)."""
        if version is None:
            self.clock.observe(tweet.version)
            version = self.clock.next()
        return self.publish_tweet(
            tweet.author_id, text, tweet_id=tweet.tweet_id, created_at=tweet.created_at, version=version,
            profile_version=tweet.profile_version if profile_version is None else profile_version,
            in_reply_to_tweet_id=tweet.in_reply_to_tweet_id, in_reply_to_author_id=tweet.in_reply_to_author_id,
        )

    def publish_delete(self, tweet_id: str, author_id: str, *, version: int | None = None) -> TweetDelete:
        """Delete a tweet for good. The default version is above every version this clock issued."""
        event = self.publish_event({"type": "tweet", "op": "delete", "tweet_id": tweet_id, "author_id": author_id,
                                    "version": self.clock.next() if version is None else version})
        assert isinstance(event, TweetDelete)
        return event

    def follow(self, follower_id: str, followee_id: str, *, version: int | None = None,
               show_reposts: bool = True) -> FollowChange:
        """Make ``follower_id`` follow ``followee_id``; ``show_reposts`` False keeps the followee's reposts
        out of the follower's home timeline (a follow again with another value changes the option)."""
        return self.publish_edge("follow", "follow", follower_id, followee_id, version=version,  # type: ignore[return-value]
                                 show_reposts=show_reposts)

    def unfollow(self, follower_id: str, followee_id: str, *, version: int | None = None) -> FollowChange:
        """Make ``follower_id`` stop following ``followee_id``."""
        return self.publish_edge("follow", "unfollow", follower_id, followee_id, version=version)  # type: ignore[return-value]

    def block(self, blocker_id: str, blocked_id: str, *, version: int | None = None) -> BlockChange:
        """Make ``blocker_id`` block ``blocked_id``: neither sees the other's tweets in a home timeline."""
        return self.publish_edge("block", "block", blocker_id, blocked_id, version=version)  # type: ignore[return-value]

    def unblock(self, blocker_id: str, blocked_id: str, *, version: int | None = None) -> BlockChange:
        """End ``blocker_id``'s block of ``blocked_id``."""
        return self.publish_edge("block", "unblock", blocker_id, blocked_id, version=version)  # type: ignore[return-value]

    def mute(self, muter_id: str, muted_id: str, *, version: int | None = None) -> MuteChange:
        """Make ``muter_id`` mute ``muted_id``: ``muted_id``'s tweets leave ``muter_id``'s home timeline."""
        return self.publish_edge("mute", "mute", muter_id, muted_id, version=version)  # type: ignore[return-value]

    def unmute(self, muter_id: str, muted_id: str, *, version: int | None = None) -> MuteChange:
        """End ``muter_id``'s mute of ``muted_id``."""
        return self.publish_edge("mute", "unmute", muter_id, muted_id, version=version)  # type: ignore[return-value]

    def repost(self, reposter_id: str, tweet: TweetUpsert | tuple[str, str], *, created_at: int | None = None,
               profile_version: int | None = None, version: int | None = None) -> RepostChange:
        """Make ``reposter_id`` repost ``tweet`` (a published tweet, or ``(tweet_id, author_id)``).

        ``created_at`` (the repost time) defaults to now, ``profile_version`` to the reposter's last
        published profile, as for a tweet.
        """
        tweet_id, author_id = (tweet.tweet_id, tweet.author_id) if isinstance(tweet, TweetUpsert) else tweet
        return self.publish_edge(  # type: ignore[return-value]
            "repost", "repost", reposter_id, tweet_id, version=version, author_id=author_id, created_at=created_at,
            profile_version=self._profile_version_of(reposter_id, profile_version))

    def unrepost(self, reposter_id: str, tweet: TweetUpsert | tuple[str, str], *,
                 version: int | None = None) -> RepostChange:
        """Take back ``reposter_id``'s repost of ``tweet`` (a published tweet, or ``(tweet_id, author_id)``)."""
        tweet_id, author_id = (tweet.tweet_id, tweet.author_id) if isinstance(tweet, TweetUpsert) else tweet
        return self.publish_edge("repost", "unrepost", reposter_id, tweet_id, version=version,  # type: ignore[return-value]
                                 author_id=author_id)

    def publish_edge(self, type_: str, op: str, subject: str, target: str, *, version: int | None = None,
                     **fields: Any) -> Event:
        """Publish a change of an edge kind of the registry (follow, block, mute, repost) with its field names.

        ``fields``: the op's other fields by name (a repost's ``author_id``, ``created_at``,
        ``profile_version``); None or left out means absent, except a ``created_at`` the op carries,
        which defaults to now. A name the op does not carry raises ``TypeError``.

        Edges take versions from the clock: an unfollow (unblock, unmute, unrepost) sent after a follow
        (block, mute, repost) of the same edge is above it, so it wins (docs/producers.md, "Where versions
        come from").
        """
        kind = EDGE_KINDS.get(type_)
        if kind is None or op not in kind.ops:
            self.stats.rejected += 1
            raise EventRejected("unknown_op", f"not an edge change: {type_!r} {op!r}")
        assert kind.edge is not None
        own = {f.name for f in kind.fields_of(op)} - {kind.edge.subject, kind.edge.target, "version"}
        unknown = set(fields) - own
        if unknown:
            raise TypeError(f"publish_edge: a {type_} {op} has no field {sorted(unknown)[0]!r}")
        if "created_at" in own and fields.get("created_at") is None:
            fields["created_at"] = self.clock.now_ms()
        fields |= {kind.edge.subject: subject, kind.edge.target: target,
                   "version": self.clock.next() if version is None else version}
        envelope = {"type": type_, "op": op}  # the fields in declaration order, the absent ones left out
        envelope.update((f.name, fields[f.name]) for f in kind.fields_of(op) if fields.get(f.name) is not None)
        return self.publish_event(envelope)

    def publish_profile(
        self, user_id: str, display_name: str, *, avatar_url: str | None = None, bio: str | None = None,
        version: int | None = None,
    ) -> ProfileVersion:
        """Publish a new profile version; later :meth:`publish_tweet` calls of the user refer to it."""
        envelope: dict[str, Any] = {"type": "profile", "user_id": user_id,
                                    "version": self.clock.next() if version is None else version,
                                    "display_name": display_name}
        if avatar_url is not None:
            envelope["avatar_url"] = avatar_url
        if bio is not None:
            envelope["bio"] = bio
        event = self.publish_event(envelope)
        assert isinstance(event, ProfileVersion)
        if event.version >= self._profile_versions.get(user_id, -1):
            self._profile_versions[user_id] = event.version
        return event

    # --- lifecycle --------------------------------------------------------------------------

    def poll(self, timeout: float = 0.0) -> None:
        """Serve delivery callbacks; raise :class:`DeliveryFailed` for failures reported so far."""
        self._client.poll(timeout)
        self._raise_failures()

    def flush(self, timeout: float = DEFAULT_FLUSH_TIMEOUT) -> None:
        """Wait until every queued event is delivered; raise :class:`DeliveryFailed` if any was not."""
        remaining = self._client.flush(timeout)
        self._raise_failures()
        if remaining:
            raise DeliveryFailed(f"{remaining} event(s) still undelivered after {timeout:g}s", count=remaining)

    def close(self, timeout: float = DEFAULT_FLUSH_TIMEOUT) -> None:
        """Flush and close; a second call does nothing."""
        if self._state is State.CLOSED:
            return
        try:
            self.flush(timeout)
        finally:
            self._state = State.CLOSED

    @property
    def closed(self) -> bool:
        return self._state is State.CLOSED

    def __enter__(self) -> "EventProducer":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # already failing: deliver what is queued, but let the original error propagate
            self.close()
        except ProducerError as close_error:
            log.error("while closing after %s: %s", exc_type.__name__, close_error)
            if exc is not None:
                exc.add_note(f"while closing the producer: {close_error}")

"""What the broker says about the topics the stream reads: each topic's id and each partition's earliest
and end offsets, read with the admin client as the stream's role (``describe`` on the topics is enough).

The stream compares them with its checkpoint before every start and before every micro-batch
(spark_jobs/stream/inputs.py, docs/operations.md#failure-modes-the-streams-inputs-and-grants): a
changed topic id is a topic deleted and created again, an earliest offset past the checkpoint's next
offset is records deleted before the stream read them.

A request that gets no answer (a broker that died, often the one the client took for the controller:
``describe`` goes there, and an admin client refreshes that choice only every few minutes) is asked
again with a new client, which learns the live brokers from the bootstrap list: a broker's crash costs
the stream one timeout, not a failed batch (docs/cluster.md). An answer, such as an unknown topic, is
never asked again.
"""

from __future__ import annotations

from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable, Iterable, TypeVar

from feed_service.errors import PipelineError
from feed_service.kafka.client_config import client_config
from feed_service.kafka.offsets import Offsets
from feed_service.security.roles import STREAM
from feed_service.settings import Settings

ADMIN_TIMEOUT = 15.0
#: Tries of a request left unanswered, each but the first with a new client.
ATTEMPTS = 3

T = TypeVar("T")


class Unanswered(Exception):
    """A request the cluster did not answer (a timeout, a broker gone): worth asking a new client."""


def _unanswered(exc: BaseException) -> bool:
    """Whether ``exc`` (from a request's future) is no answer rather than the cluster's answer."""
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(exc, FutureTimeout):
        return True
    if not isinstance(exc, KafkaException) or not isinstance(exc.args[0], KafkaError):
        return False
    error: KafkaError = exc.args[0]
    return error.retriable() or error.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT,
                                                 KafkaError._ALL_BROKERS_DOWN, KafkaError.NOT_CONTROLLER,
                                                 KafkaError.REQUEST_TIMED_OUT)


class SourceTopics:
    """An admin client of ``settings``' cluster, logged in as ``settings.role`` else the stream's,
    made at first use and kept (the stream asks before every batch)."""

    def __init__(self, settings: Settings, *, timeout: float = ADMIN_TIMEOUT) -> None:
        self.settings = settings
        self.timeout = timeout
        self._admin: Any = None

    def _ask(self, request: Callable[[Any], T]) -> T:
        """``request(client)``, again with a new client while it raises :class:`Unanswered`
        (:data:`ATTEMPTS` in all, no wait between: the new client is the remedy); the last
        :class:`Unanswered` is raised."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return request(self._client())
            except Unanswered:
                self._admin = None  # the next try bootstraps a client of its own
                if attempt == ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def _client(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(client_config(self.settings, STREAM) | {"log_level": 4})
        return self._admin

    def topic_ids(self, topics: Iterable[str]) -> dict[str, str]:
        """Each topic's Kafka topic id (a UUID's text); :class:`PipelineError` if one does not exist."""
        from confluent_kafka import KafkaException, TopicCollection

        names = sorted(set(topics))

        def describe(client: Any) -> dict[str, str]:
            futures = client.describe_topics(TopicCollection(names), request_timeout=self.timeout)
            ids: dict[str, str] = {}
            for name, future in futures.items():
                try:
                    ids[name] = str(future.result(self.timeout).topic_id)
                except (KafkaException, FutureTimeout) as exc:
                    if _unanswered(exc):
                        raise Unanswered(f"topic {name!r} cannot be described: {_reason(exc)}") from None
                    raise PipelineError(f"topic {name!r} cannot be described: {_reason(exc)}") from None
            return ids

        try:
            return self._ask(describe)
        except Unanswered as exc:
            raise PipelineError(f"{exc} ({ATTEMPTS} tries)") from None

    def earliest_offsets(self, partitions: Offsets) -> Offsets:
        """The earliest offset now of every partition named in ``partitions`` (topic -> partition as
        text -> anything, e.g. the checkpoint's next offsets); one request for them all."""
        from confluent_kafka.admin import OffsetSpec

        return self._list(partitions, OffsetSpec.earliest())

    def latest_offsets(self, partitions: Offsets) -> Offsets:
        """The end offset now (the next offset to be written) of every partition named in ``partitions``."""
        from confluent_kafka.admin import OffsetSpec

        return self._list(partitions, OffsetSpec.latest())

    def _list(self, partitions: Offsets, spec: Any) -> Offsets:
        from confluent_kafka import KafkaException, TopicPartition

        wanted = {TopicPartition(topic, int(p)): spec for topic, parts in partitions.items() for p in parts}
        if not wanted:
            return {}

        def list_offsets(client: Any) -> Offsets:
            out: Offsets = {}
            for tp, future in client.list_offsets(wanted, request_timeout=self.timeout).items():
                try:
                    offset = future.result(self.timeout).offset
                except (KafkaException, FutureTimeout) as exc:
                    message = f"offset of {tp.topic}[{tp.partition}] not read: {_reason(exc)}"
                    raise (Unanswered(message) if _unanswered(exc) else PipelineError(message)) from None
                out.setdefault(tp.topic, {})[str(tp.partition)] = offset
            return out

        try:
            return self._ask(list_offsets)
        except Unanswered as exc:
            raise PipelineError(f"{exc} ({ATTEMPTS} tries)") from None


def _reason(exc: BaseException) -> str:
    return str(exc.args[0]) if exc.args else f"no answer ({type(exc).__name__})"

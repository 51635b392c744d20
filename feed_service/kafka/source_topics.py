"""What the broker says about the topics the stream reads: each topic's id and each partition's earliest
and end offsets, read with the admin client as the stream's role (``describe`` on the topics is enough).

The stream compares them with its checkpoint before every start and before every micro-batch
(spark_jobs/stream/inputs.py, docs/operations.md#failure-modes-the-streams-inputs-and-grants): a
changed topic id is a topic deleted and created again, an earliest offset past the checkpoint's next
offset is records deleted before the stream read them.
"""

from __future__ import annotations

from typing import Any, Iterable

from feed_service.errors import PipelineError
from feed_service.kafka.client_config import client_config
from feed_service.kafka.offsets import Offsets
from feed_service.security.roles import STREAM
from feed_service.settings import Settings

ADMIN_TIMEOUT = 15.0


class SourceTopics:
    """An admin client of ``settings``' cluster, logged in as ``settings.role`` else the stream's,
    made at first use and kept (the stream asks before every batch)."""

    def __init__(self, settings: Settings, *, timeout: float = ADMIN_TIMEOUT) -> None:
        self.settings = settings
        self.timeout = timeout
        self._admin: Any = None

    def _client(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(client_config(self.settings, STREAM) | {"log_level": 4})
        return self._admin

    def topic_ids(self, topics: Iterable[str]) -> dict[str, str]:
        """Each topic's Kafka topic id (a UUID's text); :class:`PipelineError` if one does not exist."""
        from confluent_kafka import KafkaException, TopicCollection

        names = sorted(set(topics))
        futures = self._client().describe_topics(TopicCollection(names), request_timeout=self.timeout)
        ids: dict[str, str] = {}
        for name, future in futures.items():
            try:
                ids[name] = str(future.result(self.timeout).topic_id)
            except KafkaException as exc:
                raise PipelineError(f"topic {name!r} cannot be described: {exc.args[0]}") from None
        return ids

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
        out: Offsets = {}
        for tp, future in self._client().list_offsets(wanted, request_timeout=self.timeout).items():
            try:
                offset = future.result(self.timeout).offset
            except KafkaException as exc:
                raise PipelineError(f"offset of {tp.topic}[{tp.partition}] not read: {exc.args[0]}") from None
            out.setdefault(tp.topic, {})[str(tp.partition)] = offset
        return out

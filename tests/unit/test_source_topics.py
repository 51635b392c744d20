"""The stream's admin client of its source topics (feed_service/kafka/source_topics.py): a request left
unanswered (a dead broker the client took for the controller) is asked again with a new client; an
answer (an unknown topic) is not. Pure logic: the admin client is a fake."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from feed_service.errors import PipelineError
from feed_service.kafka import source_topics
from feed_service.kafka.source_topics import ATTEMPTS, SourceTopics
from feed_service.settings import Settings


class Described:
    def __init__(self, topic_id: str) -> None:
        self.topic_id = topic_id


def _done(value: Any = None, error: BaseException | None = None) -> Future:
    future: Future = Future()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
    return future


class FakeAdmin:
    """Answers ``describe_topics`` with the next outcome of ``outcomes`` (an error, or ids by name)."""

    made: list["FakeAdmin"] = []

    def __init__(self, outcomes: list[Any]) -> None:
        self.outcomes = outcomes
        FakeAdmin.made.append(self)

    def describe_topics(self, topics: Any, request_timeout: float) -> dict[str, Future]:
        outcome = self.outcomes.pop(0)
        names = topics.topic_names
        if isinstance(outcome, BaseException):
            return {name: _done(error=outcome) for name in names}
        return {name: _done(Described(outcome[name])) for name in names}


@pytest.fixture()
def outcomes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    shared: list[Any] = []
    FakeAdmin.made = []
    monkeypatch.setattr(source_topics.SourceTopics, "_client",
                        lambda self: self._admin if self._admin is not None else
                        setattr(self, "_admin", FakeAdmin(shared)) or self._admin)
    return shared


def test_an_unanswered_describe_is_asked_again_with_a_new_client(outcomes: list[Any]) -> None:
    controller_gone = KafkaException(KafkaError(KafkaError._TIMED_OUT, "Timed out waiting for controller"))
    outcomes += [controller_gone, TimeoutError(), {"t": "id-1"}]
    assert SourceTopics(Settings(), timeout=0.1).topic_ids(["t"]) == {"t": "id-1"}
    assert len(FakeAdmin.made) == 3 and not outcomes


def test_a_describe_never_answered_is_a_pipeline_error(outcomes: list[Any]) -> None:
    outcomes += [KafkaException(KafkaError(KafkaError._TRANSPORT))] * ATTEMPTS
    with pytest.raises(PipelineError, match=f"topic 't' cannot be described: .* \\({ATTEMPTS} tries\\)"):
        SourceTopics(Settings(), timeout=0.1).topic_ids(["t"])
    assert len(FakeAdmin.made) == ATTEMPTS


def test_an_unknown_topic_is_an_answer_not_asked_again(outcomes: list[Any]) -> None:
    outcomes += [KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)), {"t": "never asked"}]
    with pytest.raises(PipelineError, match="topic 't' cannot be described"):
        SourceTopics(Settings(), timeout=0.1).topic_ids(["t"])
    assert len(FakeAdmin.made) == 1 and len(outcomes) == 1

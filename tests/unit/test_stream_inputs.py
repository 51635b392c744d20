"""The stream's input guard (spark_jobs/stream/inputs.py) and the fatal failures its supervisor never
restarts (spark_jobs/fatal.py), without a broker or Spark: a fake topics reader over checkpoint folders
laid out as Spark lays them out, and the fake queries of tests/support/stream_driver.py. The real
broker's side: tests/integration/test_stream_inputs.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from feed_service.errors import RecordsLost, StorePermissionDenied, TopicRecreated, WriteFailed
from feed_service.kafka.offsets import SOURCE_ROLES, Offsets
from feed_service.settings import Settings
from spark_jobs import stream
from spark_jobs.fatal import fatal_error
from spark_jobs.stream.inputs import EndsSeen, InputGuard, load_ends, next_offsets, recorded_topic_ids
from tests.support.stream_driver import Driver, FakeQuery

SETTINGS = Settings()
TWEETS = SETTINGS.topic("tweets")
REFILLS = SETTINGS.topic("refills")
DAY_MS = 86_400_000
NOW_MS = 100 * DAY_MS


class Broker:
    """What the guard asks, answered from fields: topic ids, earliest and end offsets."""

    def __init__(self) -> None:
        self.ids = {SETTINGS.topic(role): f"id-{role}" for role in SOURCE_ROLES}
        self.earliest: dict[tuple[str, str], int] = {}
        self.latest: dict[tuple[str, str], int] = {}
        """(topic, partition) -> end offset; absent: the partition ends where it is asked about."""

    def topic_ids(self, topics: Any) -> dict[str, str]:
        return {t: self.ids[t] for t in topics}

    def earliest_offsets(self, partitions: Offsets) -> Offsets:
        return {t: {p: self.earliest.get((t, p), 0) for p in parts} for t, parts in partitions.items()}

    def latest_offsets(self, partitions: Offsets) -> Offsets:
        return {t: {p: self.latest.get((t, p), o) for p, o in parts.items()} for t, parts in partitions.items()}


def _offset_entry(checkpoint: Path, batch: int, offsets: Offsets, *, committed: bool = True) -> None:
    """An offset-log entry (and commit) as Spark writes them: version, metadata, one line per source."""
    query = checkpoint / "join"
    (query / "offsets").mkdir(parents=True, exist_ok=True)
    (query / "commits").mkdir(parents=True, exist_ok=True)
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {"spark.sql.shuffle.partitions": "2"}}
    (query / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(meta)}\n{json.dumps(offsets)}")
    if committed:
        (query / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def _guard(checkpoint: Path, broker: Broker, now_ms: int = NOW_MS) -> InputGuard:
    return InputGuard(SETTINGS, checkpoint, broker, clock=lambda: now_ms / 1000)


def test_a_new_checkpoint_records_its_topic_ids_and_a_recreated_topic_is_refused_by_name(tmp_path: Path) -> None:
    checkpoint, broker = tmp_path / "ckpt", Broker()
    checkpoint.mkdir()
    _guard(checkpoint, broker).before_start()
    assert recorded_topic_ids(checkpoint) == broker.ids
    _offset_entry(checkpoint, 0, {TWEETS: {"0": 5}})
    _guard(checkpoint, broker).before_start()  # same topics: runs

    broker.ids[TWEETS] = "id-new"
    with pytest.raises(TopicRecreated) as refused:
        _guard(checkpoint, broker).before_start()
    message = str(refused.value)
    assert f"topic {TWEETS} was deleted and created again" in message and "id-new" in message
    assert "feedctl backfill" in message and "--checkpoint NEW" in message and "\n" not in message
    assert recorded_topic_ids(checkpoint)[TWEETS] == "id-tweets"  # a refusal never rewrites the record


def test_a_checkpoint_made_before_the_record_records_the_ids_at_its_next_start(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    checkpoint, broker = tmp_path / "ckpt", Broker()
    _offset_entry(checkpoint, 0, {TWEETS: {"0": 5}})
    caplog.set_level(logging.WARNING, logger="feed.stream")
    _guard(checkpoint, broker).before_start()
    assert recorded_topic_ids(checkpoint) == broker.ids
    assert any("recording them now" in r.getMessage() for r in caplog.records)


def test_records_deleted_before_the_checkpoints_next_offset_are_refused_at_start_and_before_a_batch(
        tmp_path: Path) -> None:
    checkpoint, broker = tmp_path / "ckpt", Broker()
    _offset_entry(checkpoint, 0, {TWEETS: {"0": 5, "1": 7}})
    _offset_entry(checkpoint, 1, {TWEETS: {"0": 9, "1": 7}}, committed=False)  # planned, not done
    assert next_offsets(checkpoint) == {TWEETS: {"0": 5, "1": 7}}  # batch 1 is replayed from batch 0's end
    broker.earliest[(TWEETS, "1")] = 7  # up to the next offset: nothing unread is gone
    _guard(checkpoint, broker).before_start()

    broker.earliest[(TWEETS, "1")] = 12
    with pytest.raises(RecordsLost) as refused:
        _guard(checkpoint, broker).before_start()
    assert f"{TWEETS}[1] offsets 7..11" in str(refused.value) and "feedctl backfill" in str(refused.value)
    with pytest.raises(RecordsLost, match=r"before batch 1: .*\[1\] offsets 7\.\.11"):
        _guard(checkpoint, broker).before_batch(1)


def test_records_unread_for_longer_than_delete_retention_are_refused_on_compacted_topics_only(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    checkpoint, broker = tmp_path / "ckpt", Broker()
    retention = int(SETTINGS.topics["tweets"].config["delete.retention.ms"])  # the history horizon
    _offset_entry(checkpoint, 0, {TWEETS: {"0": 5}, REFILLS: {"0": 3}})
    broker.latest[(TWEETS, "0")] = 9  # 5..8 unread
    caplog.set_level(logging.WARNING, logger="feed.stream")
    _guard(checkpoint, broker).before_start()  # made before the sightings were kept: cannot tell, says so
    assert any("delete markers removed before this start cannot be told" in r.getMessage() for r in caplog.records)
    assert load_ends(checkpoint) == [EndsSeen(NOW_MS, {TWEETS: {"0": 5}})]  # refills are time-retained: not here

    _guard(checkpoint, broker, NOW_MS + retention).before_start()  # unread for exactly the retention: still kept
    later = NOW_MS + retention + DAY_MS
    with pytest.raises(RecordsLost, match=rf"{TWEETS}\[0\] from offset 5 \(delete.retention.ms {retention}\)"):
        _guard(checkpoint, broker, later).before_start()
    _offset_entry(checkpoint, 1, {TWEETS: {"0": 9}, REFILLS: {"0": 3}})  # once read up to the end seen now: fine
    _guard(checkpoint, broker, later).before_start()


def test_a_new_checkpoint_is_seeded_at_its_first_batch_and_a_stream_that_keeps_up_is_never_refused(
        tmp_path: Path) -> None:
    checkpoint, broker = tmp_path / "ckpt", Broker()
    retention = int(SETTINGS.topics["tweets"].config["delete.retention.ms"])
    checkpoint.mkdir()
    _guard(checkpoint, broker).before_start()
    sources = checkpoint / "join" / "sources" / "0"
    sources.mkdir(parents=True)
    (sources / "0").write_text("\x00v1\n" + json.dumps({TWEETS: {"0": 0}}))  # Spark's initial offsets
    broker.latest[(TWEETS, "0")] = 1_000_000  # an old topic read from its beginning
    _guard(checkpoint, broker).before_batch(0)
    assert load_ends(checkpoint) == [EndsSeen(NOW_MS, {TWEETS: {"0": 0}})]
    # Batches keep up over twice the retention: each sighting in time is passed before it ages out.
    for i, day in enumerate(range(1, 2 * retention // DAY_MS)):
        _offset_entry(checkpoint, i, {TWEETS: {"0": day * 100}})
        broker.latest[(TWEETS, "0")] = day * 100 + 50
        _guard(checkpoint, broker, NOW_MS + day * DAY_MS).before_batch(i + 1)
    assert all(e.time_ms >= NOW_MS + day * DAY_MS - retention for e in load_ends(checkpoint))  # old ones dropped


def test_an_idle_stream_keeps_sighting_so_new_records_after_a_long_quiet_are_not_refused(tmp_path: Path) -> None:
    checkpoint, broker = tmp_path / "ckpt", Broker()
    retention = int(SETTINGS.topics["tweets"].config["delete.retention.ms"])
    _offset_entry(checkpoint, 0, {TWEETS: {"0": 5}})
    _guard(checkpoint, broker).before_batch(1)  # seeds: the topic ends at 5, where the stream reads next
    for day in range(1, 2 * retention // DAY_MS):  # nothing written for twice the retention: no batches
        _guard(checkpoint, broker, NOW_MS + day * DAY_MS).sight()
    broker.latest[(TWEETS, "0")] = 7  # then two records, and their batch
    _offset_entry(checkpoint, 1, {TWEETS: {"0": 7}})
    _guard(checkpoint, broker, NOW_MS + 2 * retention).before_batch(1)


def test_fatal_errors_are_found_in_the_text_of_a_spark_failure() -> None:
    spark_text = ("[STREAM_FAILED] Query [id = 1] terminated with exception: Job aborted due to stage failure:"
                  " org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
                  '  File "sink.py", line 9, in write_partition\n'
                  "feed_service.errors.StorePermissionDenied: cassandra role feed_stream lacks MODIFY on ks.tweets:"
                  " a deployment error\n\tat org.apache.spark...")
    fatal = fatal_error(RuntimeError(spark_text))
    assert isinstance(fatal, StorePermissionDenied) and str(fatal).startswith("cassandra role feed_stream lacks MODIFY")
    driver_side = ('Traceback ...\ncassandra.Unauthorized: Error from server: code=2100 [Unauthorized]'
                   ' message="User feed_stream has no SELECT permission on <table ks.per_reader_state> or any of'
                   ' its parents"\n')
    assert "lacks SELECT on ks.per_reader_state" in str(fatal_error(RuntimeError(driver_side)))
    assert isinstance(fatal_error(RecordsLost("gone")), RecordsLost)
    assert fatal_error(RuntimeError("feed_service.errors.WriteFailed: 3 of 9 writes failed")) is None
    assert fatal_error(WriteFailed("timeout")) is None


def test_the_supervisor_never_restarts_a_fatal_failure_and_the_run_exits_2_with_its_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    denied = ("Job aborted: PythonException: Traceback\nfeed_service.errors.StorePermissionDenied: cassandra role"
              " feed_stream lacks MODIFY on ks.tweets: a deployment error, not retried")
    driver = Driver([FakeQuery(denied), FakeQuery()])
    status = tmp_path / "progress.json"
    code = stream.run(SETTINGS, stream.StreamOptions(checkpoint=tmp_path / "ckpt"), status_file=status,
                      dependencies=driver.dependencies())
    assert code == 2 and driver.started == 1 and driver.sessions_stopped == 1
    assert "feedctl stream: cassandra role feed_stream lacks MODIFY on ks.tweets" in capsys.readouterr().err
    record = json.loads(status.read_text())
    assert record["fatal"]["error"] == "StorePermissionDenied" and record["restarts"] == 0


def test_a_restart_checks_the_inputs_again_and_a_refusal_ends_the_run(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    checks: list[str] = []

    class Guard:
        def before_start(self) -> None:
            checks.append("start")
            if len(checks) == 2:  # the restart's check: the topic was re-created meanwhile
                raise TopicRecreated(f"topic {TWEETS} was deleted and created again")

    driver = Driver([FakeQuery("a broker failed over"), FakeQuery()])
    code = stream.run(SETTINGS, stream.StreamOptions(checkpoint=tmp_path / "ckpt"), status_file=tmp_path / "p.json",
                      dependencies=driver.dependencies(input_guard=lambda *a: Guard()))
    assert code == 2 and checks == ["start", "start"] and driver.started == 1
    assert f"topic {TWEETS} was deleted and created again" in capsys.readouterr().err


def test_a_running_stream_checks_the_topic_ids_before_each_batch(tmp_path: Path) -> None:
    checkpoint, broker = tmp_path / "ckpt", Broker()
    _offset_entry(checkpoint, 0, {TWEETS: {"0": 5}})
    _guard(checkpoint, broker).before_start()
    guard = _guard(checkpoint, broker)
    guard.before_batch(1)
    broker.ids[TWEETS] = "id-new"
    with pytest.raises(TopicRecreated, match=f"topic {TWEETS} was deleted and created again"):
        guard.before_batch(1)


def test_a_broker_that_does_not_answer_at_start_is_logged_and_left_to_the_batches(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from feed_service.errors import PipelineError

    class Unreachable(Broker):
        def topic_ids(self, topics: Any) -> dict[str, str]:
            raise PipelineError("topic ids not read: timed out")

        def earliest_offsets(self, partitions: Offsets) -> Offsets:
            raise PipelineError("offsets not read: timed out")

        latest_offsets = earliest_offsets

    checkpoint = tmp_path / "ckpt"
    _offset_entry(checkpoint, 0, {TWEETS: {"0": 5}})
    caplog.set_level(logging.WARNING, logger="feed.stream")
    _guard(checkpoint, Unreachable()).before_start()  # an outage is no reason to stop
    assert any("each batch checks them" in r.getMessage() for r in caplog.records)
    with pytest.raises(PipelineError) as failed:  # the batch fails and is run again: a restart, not a stop
        _guard(checkpoint, Unreachable()).before_batch(1)
    assert fatal_error(failed.value) is None


def test_the_drivers_own_cassandra_refusal_is_fatal_too() -> None:
    from cassandra import Unauthorized

    refusal = Unauthorized('Error from server: code=2100 [Unauthorized] message="User feed_backfill has no'
                           ' SELECT permission on <table ks.reader_activity> or any of its parents"')
    assert str(fatal_error(refusal)).startswith("cassandra role feed_backfill lacks SELECT on ks.reader_activity")

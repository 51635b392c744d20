"""The local stack is real: Kafka round trips, Cassandra stores, Spark reads Kafka."""

from __future__ import annotations

import json
import time

from feed_service.settings import Settings
from feed_service.stack.config import StackConfig
from feed_service.stack.local_stack import LocalStack
from feed_service.kafka.topics import describe_topics, ensure_topics


def _create_topic(bootstrap: str, name: str, partitions: int = 2) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def test_kafka_produce_and_consume_round_trip(stack_config: StackConfig, unique: str) -> None:
    from confluent_kafka import Consumer, Producer

    topic = f"test.roundtrip.{unique}"
    _create_topic(stack_config.kafka_bootstrap, topic)
    producer = Producer({"bootstrap.servers": stack_config.kafka_bootstrap, "acks": "all", "enable.idempotence": True})
    sent = {f"k{i}": json.dumps({"i": i}) for i in range(50)}
    for key, value in sent.items():
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0

    consumer = Consumer({
        "bootstrap.servers": stack_config.kafka_bootstrap,
        "group.id": f"g-{unique}",
        "auto.offset.reset": "earliest",
    })
    consumer.subscribe([topic])
    received: dict[str, str] = {}
    deadline = time.monotonic() + 30
    while len(received) < len(sent) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            received[msg.key().decode()] = msg.value().decode()
    consumer.close()
    assert received == sent


def test_cassandra_create_write_read(settings: Settings, unique: str) -> None:
    from feed_service.store.session import connect

    cluster, session = connect(settings, keyspace=settings.keyspace)
    try:
        table = f"probe_{unique}"
        session.execute(f"CREATE TABLE {table} (k text, c int, v text, PRIMARY KEY ((k), c))")
        insert = session.prepare(f"INSERT INTO {table} (k, c, v) VALUES (?, ?, ?)")
        for c in range(5):
            session.execute(insert, ("a", c, f"v{c}"))
        rows = session.execute(f"SELECT c, v FROM {table} WHERE k = 'a' ORDER BY c DESC LIMIT 3")
        assert [(r.c, r.v) for r in rows] == [(4, "v4"), (3, "v3"), (2, "v2")]
        session.execute(f"DROP TABLE {table}")
    finally:
        cluster.shutdown()


def test_schema_tables_exist(settings: Settings) -> None:
    from feed_service.store.session import connect

    cluster, session = connect(settings)
    try:
        rows = session.execute(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (settings.keyspace,)
        )
        assert {"home_timeline", "tweets", "profiles"} <= {r.table_name for r in rows}
    finally:
        cluster.shutdown()


def test_spark_batch_reads_kafka_topic(stack_config: StackConfig, spark, unique: str) -> None:
    from confluent_kafka import Producer

    topic = f"test.spark.{unique}"
    _create_topic(stack_config.kafka_bootstrap, topic, partitions=3)
    producer = Producer({"bootstrap.servers": stack_config.kafka_bootstrap})
    for i in range(30):
        producer.produce(topic, key=f"user{i % 3}", value=json.dumps({"n": i}))
    assert producer.flush(30) == 0

    df = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", stack_config.kafka_bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    from pyspark.sql import functions as F

    totals = (
        df.select(F.col("key").cast("string").alias("key"),
                  F.get_json_object(F.col("value").cast("string"), "$.n").cast("int").alias("n"))
        .groupBy("key").agg(F.count("*").alias("count"), F.sum("n").alias("total"))
        .collect()
    )
    assert {r["key"]: (r["count"], r["total"]) for r in totals} == {
        "user0": (10, sum(range(0, 30, 3))),
        "user1": (10, sum(range(1, 30, 3))),
        "user2": (10, sum(range(2, 30, 3))),
    }


def test_provisioning_is_idempotent_and_reports_drift(settings: Settings, unique: str) -> None:
    from dataclasses import replace

    specs = [replace(s, name=f"{s.name}.{unique}") for s in settings.topics.values()]
    names = sorted(s.name for s in specs)
    first = ensure_topics(settings, specs)
    assert sorted((r.name, r.created) for r in first) == [(name, True) for name in names]
    second = ensure_topics(settings, specs)
    assert sorted((r.name, r.created, r.drift) for r in second) == [(name, False, []) for name in names]

    drifted = [replace(specs[0], config={**specs[0].config, "min.compaction.lag.ms": "1234"})]
    report = describe_topics(settings, drifted)[0]
    assert report.drift == ["min.compaction.lag.ms=60000 (want 1234)"]
    ensure_topics(settings, drifted)
    assert describe_topics(settings, drifted)[0].drift == []


def test_stack_up_twice_starts_no_duplicates(stack_config: StackConfig) -> None:
    stack = LocalStack(stack_config)
    before = {s.name: (s.running, s.pid) for s in stack.status()}
    assert sorted(before) == ["cassandra", "kafka"] and all(running and pid for running, pid in before.values())
    stack.up()
    after = {s.name: (s.running, s.pid) for s in stack.status()}
    assert after == before  # the same processes, nothing started twice

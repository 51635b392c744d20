"""Producer throughput to a running broker: events/s through validation, keying and delivery.

    .venv/bin/feedctl stack up
    .venv/bin/python bench/bench_producer.py [--bootstrap 127.0.0.1:9092] [--events 300000]

Events come from the workload generator (profiles, the follow graph, then the mixed stream), made
before the clock starts. Each run publishes them to fresh topics (same specs as schemas/topics.json,
unique names, deleted afterwards) and reports: validation alone, ``publish_event`` (dict envelopes,
as the workload and services send), and ``publish_line`` (replay-file lines), each including the
final flush, i.e. every event acknowledged by the broker (acks=all, idempotent).
Target: >= 50,000 events/s from one process.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from feed_service.kafka.producer import EventProducer  # noqa: E402
from feed_service.settings import Settings  # noqa: E402
from feed_service.kafka.topics import ensure_topics  # noqa: E402
from feed_service.workload.generator import generate  # noqa: E402
from isolated import drop  # noqa: E402

TARGET = 50_000


def _fresh_settings(bootstrap: str) -> Settings:
    suffix = "bench." + uuid.uuid4().hex[:8]
    base = Settings(kafka_bootstrap=bootstrap)
    topics = {r: dataclasses.replace(s, name=f"{s.name}.{suffix}") for r, s in base.topics.items()}
    ensure_topics(base, topics.values())
    return dataclasses.replace(base, topics=topics)


def run(bootstrap: str, n: int, users: int) -> dict[str, float]:
    gen = generate(users=users, events=None, seed=1)
    events = [next(gen) for _ in range(n)]
    lines = [json.dumps(e, separators=(",", ":")).encode() for e in events]
    size = sum(len(b) for b in lines) / n
    results: dict[str, float] = {}

    producer = EventProducer(Settings(kafka_bootstrap=bootstrap), client_factory=lambda cfg: None)  # type: ignore
    started = time.perf_counter()
    for e in events:
        producer.validate(e)
    results["validate only"] = n / (time.perf_counter() - started)

    for label, method, items in (("publish_event (dicts)", "publish_event", events),
                                 ("publish_line (replay lines)", "publish_line", lines)):
        settings = _fresh_settings(bootstrap)
        try:
            producer = EventProducer(settings)
            publish = getattr(producer, method)
            producer.publish_event(events[0])  # connect and get metadata before timing
            producer.flush()
            started = time.perf_counter()
            for item in items:
                publish(item)
            queued = time.perf_counter()
            producer.close()
            done = time.perf_counter()
            assert producer.stats.delivered == n + 1 and producer.stats.failed == 0
            results[label] = n / (done - started)
            results[label + " queue only"] = n / (queued - started)
        finally:
            drop(settings, keyspace=False)
    print(f"bench_producer: {n:,} workload events ({users:,} users, mean value {size:.0f} B) to {bootstrap}")
    for label, rate in results.items():
        print(f"  {label:<42} {rate:>10,.0f} events/s")
    best = min(results["publish_event (dicts)"], results["publish_line (replay lines)"])
    print(f"  target {TARGET:,} events/s: {'met' if best >= TARGET else 'NOT met'} (slowest delivered path {best:,.0f})")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--users", type=int, default=10_000)
    args = parser.parse_args(argv)
    results = run(args.bootstrap, args.events, args.users)
    return 0 if min(results["publish_event (dicts)"], results["publish_line (replay lines)"]) >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())

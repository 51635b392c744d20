"""What reporting read activity costs a read (docs/activity.md#read-activity): the reporter's hit (a
reader already reported within the interval: a TTL'd set's membership test) and miss (encode the
record, enqueue it in a confluent-kafka producer), and the memory each tracked reader holds.

In one process, no stack: the producer points at a port nobody listens on, so a miss measures the
enqueue only (what the read pays; sending happens on librdkafka's threads). Prints figures and the
load average; asserts nothing.

    .venv/bin/python bench/bench_read_activity.py
"""

from __future__ import annotations

import argparse
import logging
import os
import timeit
import tracemalloc

from feed_service.kafka.read_activity import ReadActivityProducer
from feed_service.server.activity import ReadReporter
from feed_service.settings import Settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hits", type=int, default=1_000_000)
    parser.add_argument("--readers", type=int, default=50_000, help="distinct readers of the miss and memory runs")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the unreachable broker's errors
    print(f"load average at start: {os.getloadavg()[0]:.2f}")

    reports = ReadActivityProducer(Settings(kafka_bootstrap="127.0.0.1:1"))
    reporter = ReadReporter(reports.produce, interval_s=3600, max_readers=args.readers + 1)
    reporter.read("hot")
    hit = timeit.timeit(lambda: reporter.read("hot"), number=args.hits) / args.hits
    readers = iter([f"reader-{n:010d}" for n in range(args.readers)])
    miss = timeit.timeit(lambda: reporter.read(next(readers)), number=args.readers) / args.readers
    print(f"hit  {hit * 1e6:.2f} µs per read ({args.hits:,} reads of one reader)")
    print(f"miss {miss * 1e6:.2f} µs per read ({args.readers:,} readers, each reported once)")
    reports.close(0)

    ids = [f"reader-{n:010d}" for n in range(args.readers)]
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    tracked = ReadReporter(lambda reader, value: None, interval_s=3600, max_readers=args.readers)
    for reader in ids:
        tracked.read(reader)
    held = (tracemalloc.get_traced_memory()[0] - start) / args.readers
    key = ids[0].__sizeof__()
    print(f"memory {held:.0f} B per tracked reader, plus its id ({key} B for a 17-character id)")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""What the tests share (README.md, "Testing"): the pipeline helpers (publish, run a stream, read
Cassandra and gRPC back: :mod:`tests.support.pipeline`), the isolated pipeline (own topics and
keyspace: :mod:`tests.support.isolation`), the one history strategy (:mod:`tests.support.history`),
the session's streamed world (:mod:`tests.support.world`) and the unit tests' model harness of the
read path (:mod:`tests.support.model`), and how many random cases they all take (:mod:`tests.support.sizes`).

The unit tests' other shared helpers, one concern a module: the random histories of the property
tests (:mod:`~tests.support.join_runs` for the plain join, :mod:`~tests.support.repost_runs` with
reposts and replies), the StatefulProcessor's harness (:mod:`~tests.support.processor_harness`),
``run_key``'s routed rows (:mod:`~tests.support.run_key_inputs`), the stream's per-reader path
(:mod:`~tests.support.per_reader_stream`), the backfill's frames and stages
(:mod:`~tests.support.backfill_frames`, :mod:`~tests.support.backfill_stages`), the repost indexes
(:mod:`~tests.support.repost_indexes`), the driver loop's fakes (:mod:`~tests.support.stream_driver`),
the broker-less producer (:mod:`~tests.support.fake_producer`), the loopback server's config
(:mod:`~tests.support.loopback`) and the changes that race a page (:mod:`~tests.support.page_races`).

Test modules import from here, never from one another."""

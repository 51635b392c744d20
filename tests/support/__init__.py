"""What the tests share (README.md, "Testing"): the pipeline helpers (publish, run a stream, read
Cassandra and gRPC back: :mod:`tests.support.pipeline`), the isolated pipeline (own topics and
keyspace: :mod:`tests.support.isolation`), the one history strategy (:mod:`tests.support.history`),
the session's streamed world (:mod:`tests.support.world`) and the unit tests' model harness of the
read path (:mod:`tests.support.model`). Test modules import from here, never from one another."""

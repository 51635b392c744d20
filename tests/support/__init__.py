"""What the integration tests share (README.md, "Testing"): the pipeline helpers (publish, run a stream,
read Cassandra and gRPC back: :mod:`tests.support.pipeline`), the isolated pipeline (own topics and
keyspace: :mod:`tests.support.isolation`), the one history strategy (:mod:`tests.support.history`) and
the session's streamed world (:mod:`tests.support.world`). Test modules import from here, never from
one another."""

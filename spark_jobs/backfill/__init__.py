"""The backfill job: rebuild the timelines from the compacted changelog topics.

A Spark batch job in stages, one module each, reported on stderr by :mod:`.progress`:

1. :mod:`.snapshot`: the end offset of every partition of the changelog topics (tweets, follows,
   profiles, blocks and mutes), taken once at start; everything below reads exactly
   ``[earliest, snapshot)``.
2. :mod:`.read`: Spark's Kafka source in batch mode, the envelope validated by the stream's rules;
   tombstones skipped and counted, invalid records counted by reason (``--dead-letters`` sends them on).
3. :mod:`.winners`: each entity's winning change, by the engine's rules.
4. :mod:`.join`: each author's newest ``inbox_cap`` live tweets ⋈ the active follow edges that no
   block or mute hides: exactly the rows the stream writes.
5. :mod:`.states`: the engine's own per-key state after those changes, as parquet: the stream's
   initial state.
6. :mod:`.write`: timeline rows, tweets, profile versions, author timelines, pull follows and blocks
   to Cassandra, in place, from the executors, every write ``USING TIMESTAMP backfill_ts``.
7. manifest: ``manifest.json`` written last, atomically (:mod:`spark_jobs.bootstrap`, the contract
   with ``feedctl stream --bootstrap-from DIR``).

:mod:`.job` runs them (:func:`run_backfill`) and holds the command line. Run with ``feedctl backfill
--out DIR`` (or ``python -m spark_jobs.backfill``). Design, guarantees and figures: docs/backfill.md.
"""

from spark_jobs.backfill.job import (
    SESSION_CONF, BackfillOptions, BackfillResult, add_arguments, main, options_from_args, run, run_backfill,
)

__all__ = [
    "SESSION_CONF", "BackfillOptions", "BackfillResult", "add_arguments", "main", "options_from_args", "run",
    "run_backfill",
]

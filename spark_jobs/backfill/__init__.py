"""The backfill job: rebuild the timelines from the compacted changelog topics.

A Spark batch job in stages, one module each, reported on stderr by :mod:`.progress`:

1. :mod:`.snapshot`: the end offset of every partition of the changelog topics (tweets, follows,
   profiles, blocks and mutes, reposts), taken once at start; everything below reads exactly
   ``[earliest, snapshot)``.
2. :mod:`.read`: Spark's Kafka source in batch mode, the envelope validated by the stream's rules;
   tombstones skipped and counted, invalid records counted by reason (``--dead-letters`` sends them on).
3. :mod:`.winners`: each entity's winning change, by the engine's rules.
4. :mod:`.lists`: the list stage over the lists' and memberships' winners, in the driver: the list
   follows and exclusions the members' keys fold with their other winners, the lists' facts, and
   its inputs as parquet, which the bootstrapped stream restores the list stage from.
5. :mod:`.states`: each author key's whole step after those changes (its per-reader side included),
   as parquet: the stream's initial state; and the messages the key owes the per-reader stage.
6. :mod:`.per_reader`: the per-reader stage over those messages and the lists' facts, as one batch;
   its inputs as parquet, which the bootstrapped stream restores the stage from.
7. :mod:`.join`: each author's retained live tweets (newest ``inbox_cap`` per class) ⋈ the active
   follow edges (a list's reader's list follows among them) that no block, mute or exclusion
   withholds, a reply to another user X only to X: exactly the rows the stream writes.
8. :mod:`.write`: timeline rows, tweets, profile versions, author timelines, pull follows, blocks and
   the per-reader tables (``home_extras``, ``user_reposts``, ``reader_visible``...) to Cassandra, in
   place, from the executors, every write ``USING TIMESTAMP backfill_ts``.
9. manifest: ``manifest.json`` written last, atomically (:mod:`spark_jobs.bootstrap`, the contract
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

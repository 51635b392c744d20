"""The reposter and reader steps' state per key, kept in Cassandra (``per_reader_state``).

The stream loads the state of every key a micro-batch touches, runs the step, and saves what each
key became together with the state it was computed from. Each row holds
``(batch_id, state, previous)``: the batch that wrote it, the state after that batch, the state
before it. Loading for batch ``b`` returns ``previous`` when the row's ``batch_id`` is ``b``, else
``state``. So a micro-batch replayed after a crash (Spark runs the same ``batch_id`` on the same
input), or a task retried after part of its keys were saved, starts every key from the state it had
before ``b`` whether or not ``b`` saved it already, and recomputes exactly the same states and the
same output rows with the same timestamps (a step is a pure function of its state and input): the
view's writes stay idempotent (docs/idempotent-writes.md). Overwriting ``state`` alone would make a
replay apply the batch twice.

Rows are read and written at the session's default consistency, as the stream's other writes and
the trimmer's reads: a cluster needs reads and writes that overlap (``LOCAL_QUORUM`` both,
docs/cluster.md), or a load may miss the last save. Each row is its own request (no batches: a
state can be large, and a batch over ``batch_size_fail_threshold`` is refused).

:class:`MemoryStepStates` has the same API and rule in memory, for unit tests of the stream's glue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Mapping, Protocol

from feed_service.errors import StoreError, WriteFailed

if TYPE_CHECKING:
    from cassandra.cluster import Session

#: In-flight requests per call, as the view's writer.
DEFAULT_CONCURRENCY = 64


class StepStates(Protocol):
    """Batch-versioned state of one keyed step (``stage``) per key."""

    def load(self, stage: str, keys: Iterable[str], batch_id: int) -> dict[str, bytes | None]:
        """Every key's state before ``batch_id`` (None: the key has none)."""

    def save(self, stage: str, states: Mapping[str, tuple[bytes, bytes | None]], batch_id: int, *,
             ts: int | None = None) -> int:
        """Store key -> (state after ``batch_id``, the state it was computed from, as :meth:`load`
        returned it), written at ``ts`` if given; returns the rows written. Raises
        :class:`WriteFailed` if some were not."""


def loaded(row: tuple[int, bytes | None, bytes | None] | None, batch_id: int) -> bytes | None:
    """The state a key starts ``batch_id`` from, given its stored ``(batch_id, state, previous)``.

    >>> loaded((7, b"after 7", b"after 6"), 8), loaded((7, b"after 7", b"after 6"), 7)
    (b'after 7', b'after 6')
    >>> loaded(None, 7), loaded((7, b"after 7", None), 7)
    (None, None)
    """
    if row is None:
        return None
    stored_batch, state, previous = row
    return previous if stored_batch == batch_id else state


class CassandraStepStates:
    """:class:`StepStates` on the ``per_reader_state`` table, reads and writes run concurrently."""

    def __init__(self, session: "Session", keyspace: str, *, concurrency: int = DEFAULT_CONCURRENCY) -> None:
        from cassandra.cluster import EXEC_PROFILE_DEFAULT
        from cassandra.query import tuple_factory

        self.session = session
        self.concurrency = concurrency
        self._profile = session.execution_profile_clone_update(EXEC_PROFILE_DEFAULT, row_factory=tuple_factory)
        self._select = session.prepare(
            f"SELECT batch_id, state, previous FROM {keyspace}.per_reader_state WHERE stage = ? AND key = ?")
        self._upsert = session.prepare(
            f"INSERT INTO {keyspace}.per_reader_state (stage, key, batch_id, state, previous) VALUES (?, ?, ?, ?, ?)"
            " USING TIMESTAMP ?")

    def _run(self, statement: object, params: list[tuple]) -> list:
        from cassandra.concurrent import execute_concurrent_with_args

        from feed_service.store.cassandra_reader import translate_driver_error

        if not params:
            return []
        try:
            return list(execute_concurrent_with_args(
                self.session, statement, params, concurrency=self.concurrency, raise_on_first_error=False,
                execution_profile=self._profile))
        except Exception as exc:  # session shut down, no connection pool...
            raise translate_driver_error(exc) from exc

    def load(self, stage: str, keys: Iterable[str], batch_id: int) -> dict[str, bytes | None]:
        """Every key's state before ``batch_id``; raises a :class:`StoreError` if a read failed."""
        from feed_service.store.cassandra_reader import translate_driver_error

        wanted = list(dict.fromkeys(keys))
        out: dict[str, bytes | None] = {}
        for key, (ok, result) in zip(wanted, self._run(self._select, [(stage, k) for k in wanted])):
            if not ok:
                raise translate_driver_error(result)
            out[key] = loaded(result.one(), batch_id)
        return out

    def save(self, stage: str, states: Mapping[str, tuple[bytes, bytes | None]], batch_id: int, *,
             ts: int | None = None) -> int:
        """Write ``(batch_id, state, previous)`` of every key; raises :class:`WriteFailed` if some
        write failed after the driver's retries (the batch is then run again: saves are idempotent).

        ``ts`` is the write timestamp (USING TIMESTAMP), else the driver's clock: a timestamp that
        grows with ``batch_id`` keeps a late write of an earlier batch (a killed task's request
        still in flight) from overwriting a later batch's row."""
        from cassandra.query import UNSET_VALUE

        stamp = UNSET_VALUE if ts is None else ts
        params = [(stage, key, batch_id, state, previous, stamp) for key, (state, previous) in states.items()]
        results = self._run(self._upsert, params)
        failures = [result for ok, result in results if not ok]
        if failures:
            raise WriteFailed(f"{len(failures)} of {len(params)} state writes failed; first: {failures[0]!r}")
        return len(params)


class MemoryStepStates:
    """:class:`StepStates` in memory, for unit tests; ``fail`` set to a :class:`StoreError` makes
    every call raise it, with nothing saved."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], tuple[int, bytes, bytes | None]] = {}
        """(stage, key) -> (batch_id, state, previous): the table's rows."""
        self.stamps: dict[tuple[str, str], int] = {}
        """(stage, key) -> the ``ts`` of its last save that gave one: an older one changes nothing."""
        self.fail: StoreError | None = None

    def load(self, stage: str, keys: Iterable[str], batch_id: int) -> dict[str, bytes | None]:
        if self.fail is not None:
            raise self.fail
        return {key: loaded(self.rows.get((stage, key)), batch_id) for key in keys}

    def save(self, stage: str, states: Mapping[str, tuple[bytes, bytes | None]], batch_id: int, *,
             ts: int | None = None) -> int:
        if self.fail is not None:
            raise self.fail
        for key, (state, previous) in states.items():
            if ts is not None:
                if ts < self.stamps.get((stage, key), ts):
                    continue
                self.stamps[(stage, key)] = ts
            self.rows[(stage, key)] = (batch_id, state, previous)
        return len(states)

"""The per-reader stage's inputs, kept in Cassandra (``per_reader_inputs``), versioned by micro-batch.

The stage (:mod:`feed_service.core.per_reader.audience_stage`) lives in the stream driver's memory
between micro-batches; what it was built from is kept here, one row per input it was assigned (a
relation, a conditional tweet, a reposted tweet's content, a repost edge, a pull mode, its clock),
so that a new driver restores it (:meth:`AudienceStage.restore`) and a batch writes only the inputs
it changed: bytes in proportion to what changed, never a reader's whole state.

Each row holds ``(batch_id, value, previous)``: the batch that wrote it, the value after that
batch, the value before it. Loading for batch ``b`` takes ``previous`` where the row's ``batch_id``
is ``b``, else ``value``. A micro-batch replayed after a crash (Spark runs the same ``batch_id`` on
the same input) therefore restores the stage as it was before ``b``, whether or not ``b`` saved
some rows already, and computes exactly the same rows with the same timestamps: the view's writes
stay idempotent (docs/idempotent-writes.md). Spark never starts ``b + 1`` before ``b`` committed, so
no row needs an older value than that.

A stage's rows are spread over :data:`BUCKETS` partitions by a hash of the input's identity, so a
restore reads a fixed number of partitions, paged, and a save writes single rows concurrently.
Values are pickles of the core's plain records, written and read only by the stream's role.

:class:`MemoryStageInputs` has the same API and rule in memory, for unit tests of the stream's glue.
"""

from __future__ import annotations

import json
import pickle
import zlib
from typing import TYPE_CHECKING, Any, Iterable, NamedTuple, Protocol, Sequence

from feed_service.errors import StoreError, WriteFailed

if TYPE_CHECKING:
    from cassandra.cluster import Session

Identity = tuple[str, ...]
"""An input's identity, as the stage names it (``("rel", reader, user)``, ``("clock",)``...)."""

BUCKETS = 32
"""Partitions per stage."""
DEFAULT_CONCURRENCY = 64
FETCH_SIZE = 5000


class Saved(NamedTuple):
    """What a save wrote: rows, and the bytes of their identities and values (the state a batch
    writes, which follows what it changed)."""

    rows: int
    bytes: int


def identity_key(identity: Identity) -> str:
    """The text key of an identity (JSON: any id is safe in it).

    >>> identity_key(("rel", "ann", "bob"))
    '["rel","ann","bob"]'
    """
    return json.dumps(list(identity), separators=(",", ":"))


def bucket_of(key: str) -> int:
    """The partition of an input's key within its stage.

    >>> bucket_of('["clock"]') == bucket_of('["clock"]') and 0 <= bucket_of('["clock"]') < BUCKETS
    True
    """
    return zlib.crc32(key.encode()) % BUCKETS


def loaded(row: tuple[int, Any, Any] | None, batch_id: int) -> Any:
    """The value an input has before ``batch_id``, given its stored ``(batch_id, value, previous)``.

    >>> loaded((7, "after 7", "after 6"), 8), loaded((7, "after 7", "after 6"), 7), loaded(None, 7)
    ('after 7', 'after 6', None)
    """
    if row is None:
        return None
    stored_batch, value, previous = row
    return previous if stored_batch == batch_id else value


class StageInputs(Protocol):
    """Batch-versioned inputs of one stage."""

    def load(self, stage: str, batch_id: int) -> list[tuple[Identity, Any]]:
        """Every input of ``stage`` with its value before ``batch_id`` (inputs without one left out)."""

    def save(self, stage: str, rows: Sequence[tuple[Identity, Any, Any]], batch_id: int) -> Saved:
        """Store each (identity, value after ``batch_id``, value before it, as :meth:`load` gave it);
        returns what was written; raises :class:`WriteFailed` if some were not."""


def _blob(value: Any) -> bytes | None:
    return None if value is None else pickle.dumps(value, protocol=5)


def _value(blob: bytes | None) -> Any:
    return None if blob is None else pickle.loads(blob)


class CassandraStageInputs:
    """:class:`StageInputs` on the ``per_reader_inputs`` table."""

    def __init__(self, session: "Session", keyspace: str, *, concurrency: int = DEFAULT_CONCURRENCY) -> None:
        from cassandra.cluster import EXEC_PROFILE_DEFAULT
        from cassandra.query import tuple_factory

        self.session = session
        self.concurrency = concurrency
        self._profile = session.execution_profile_clone_update(EXEC_PROFILE_DEFAULT, row_factory=tuple_factory)
        self._select = session.prepare(
            f"SELECT identity, batch_id, value, previous FROM {keyspace}.per_reader_inputs"
            " WHERE stage = ? AND bucket = ?")
        self._select.fetch_size = FETCH_SIZE
        self._upsert = session.prepare(
            f"INSERT INTO {keyspace}.per_reader_inputs (stage, bucket, identity, batch_id, value, previous)"
            " VALUES (?, ?, ?, ?, ?, ?)")

    def load(self, stage: str, batch_id: int) -> list[tuple[Identity, Any]]:
        """Every input's value before ``batch_id``; raises a :class:`StoreError` if a read failed."""
        from feed_service.store.cassandra_reader import translate_driver_error

        out: list[tuple[Identity, Any]] = []
        try:
            for bucket in range(BUCKETS):
                for key, stored_batch, value, previous in self.session.execute(
                        self._select, (stage, bucket), execution_profile=self._profile):
                    blob = previous if stored_batch == batch_id else value
                    if blob is not None:
                        out.append((tuple(json.loads(key)), _value(blob)))
        except StoreError:
            raise
        except Exception as exc:  # a read failed, the session is gone...
            raise translate_driver_error(exc) from exc
        return out

    def save(self, stage: str, rows: Sequence[tuple[Identity, Any, Any]], batch_id: int) -> Saved:
        from cassandra.concurrent import execute_concurrent_with_args

        from feed_service.store.cassandra_reader import translate_driver_error

        params = []
        size = 0
        for identity, value, before in rows:
            key = identity_key(identity)
            blob, previous = _blob(value), _blob(before)
            size += len(key) + len(blob or b"") + len(previous or b"")
            params.append((stage, bucket_of(key), key, batch_id, blob, previous))
        if not params:
            return Saved(0, 0)
        try:
            results = execute_concurrent_with_args(self.session, self._upsert, params, concurrency=self.concurrency,
                                                   raise_on_first_error=False, execution_profile=self._profile)
        except Exception as exc:  # session shut down, no connection pool...
            raise translate_driver_error(exc) from exc
        failures = [result for ok, result in results if not ok]
        if failures:
            raise WriteFailed(f"{len(failures)} of {len(params)} per-reader input writes failed; first: {failures[0]!r}")
        return Saved(len(params), size)


class MemoryStageInputs:
    """:class:`StageInputs` in memory, for unit tests; ``fail`` set to a :class:`StoreError` makes every
    call raise it, with nothing saved."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], tuple[int, bytes | None, bytes | None]] = {}
        """(stage, identity key) -> (batch_id, value, previous), pickled as in Cassandra."""
        self.fail: StoreError | None = None

    def load(self, stage: str, batch_id: int) -> list[tuple[Identity, Any]]:
        if self.fail is not None:
            raise self.fail
        out = []
        for (s, key), row in sorted(self.rows.items()):
            blob = loaded(row, batch_id) if s == stage else None
            if blob is not None:
                out.append((tuple(json.loads(key)), _value(blob)))
        return out

    def save(self, stage: str, rows: Sequence[tuple[Identity, Any, Any]], batch_id: int) -> Saved:
        if self.fail is not None:
            raise self.fail
        size = 0
        for identity, value, before in rows:
            key = identity_key(identity)
            self.rows[(stage, key)] = row = (batch_id, _blob(value), _blob(before))
            size += len(key) + len(row[1] or b"") + len(row[2] or b"")
        return Saved(len(rows), size)

    def saved(self, stage: str) -> Iterable[str]:
        """The identity keys stored for ``stage``."""
        return [key for s, key in self.rows if s == stage]

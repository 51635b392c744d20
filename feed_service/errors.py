"""Every error the service raises on purpose, in one tree.

Adapters translate their library's exceptions (librdkafka, cassandra-driver, grpc, Spark) into
this tree once, where they call the library; everything above an adapter catches only these. An
exception that is not a :class:`FeedError` is a bug: callers let it through (the gRPC server maps
it to INTERNAL and logs its traceback) instead of guessing that it is retryable. Only the CLI entry
point turns errors into exit codes (``feed_service.cli.main``)::

    FeedError
    ├── InvalidEvent          an input record is not a valid event (``code``, ``reason``): rejected, counted
    ├── ConfigError           a setting or argument is invalid; nothing was started
    ├── ViewContractError     a delta contradicts the view it is applied to (an engine bug, strict mode)
    ├── EdgesNotLoaded        the engine read edges of a state decoded without them (a caller bug)
    ├── ChangeDecodeError     a view-change message this version cannot read (counted and skipped)
    ├── ProducerError         publishing to Kafka
    │   ├── EventRejected     invalid event, nothing sent (``code``, ``reason``)
    │   ├── DeliveryFailed    the broker did not take one or more records (``errors``, ``count``)
    │   └── ProducerClosed    used after close
    ├── StoreError            Cassandra
    │   ├── StoreUnavailable  no connection or replica, overloaded, session closed: retryable
    │   ├── StorePermissionDenied  the role lacks a grant (role, permission, table): a deployment error, fatal
    │   ├── StoreTimeout      the call's time budget ran out: retryable
    │   └── WriteFailed       some writes of a batch failed after the driver's retries: retry the batch
    ├── PipelineError         the Spark jobs
    │   ├── CheckpointError   a checkpoint cannot continue as asked (other operator, other settings)
    │   ├── BootstrapError    a backfill folder cannot bootstrap a stream (missing, other format/topics)
    │   └── InputLost         the stream's topics no longer hold what its checkpoint expects: fatal
    │       ├── TopicRecreated  a topic was deleted and created again under the checkpoint
    │       └── RecordsLost     records the stream had not read were deleted (retention, deleteRecords)
    ├── AuthError             a bearer token is missing, malformed, forged or expired (UNAUTHENTICATED)
    ├── PageTokenError        a page or resume token is malformed, forged or for another call (INVALID_ARGUMENT)
    └── StackError            the local development stack (downloads, start-up, the stream process)
        └── StreamNotReady    the stream process exited or did not progress in time

Two subclasses live beside their only user because they never leave it: ``RpcFailure``
(``server/calls.py``, a call's end as a gRPC status, turned into an abort in one place) and the
local stack's ``_Exited``.

The fatal ones (``StorePermissionDenied``, ``InputLost``) stop a running job at once: the stream's
supervisor never restarts a query that failed with one (spark_jobs/stream/restarts.py,
docs/operations.md#failure-modes-the-streams-inputs-and-grants). Their messages are one line, so
that the supervisor can find them again in the text of a Spark failure.

Errors that callers tell apart by meaning also derive from the matching built-in (``ValueError``
for bad input and settings, ``RuntimeError`` for state), so generic code keeps working.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


class FeedError(Exception):
    """Root of every error the service raises on purpose."""


class InvalidEvent(FeedError, ValueError):
    """An input record that is not a valid event; it is counted and skipped, never applied.

    ``code`` names the kind of fault (one value per kind, for metrics and dead letters); the message
    says which field was wrong.
    """

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class ConfigError(FeedError, ValueError):
    """A setting, a configuration file or a command-line argument is invalid."""


class EdgesNotLoaded(FeedError, RuntimeError):
    """The engine needed a key's follow edges (or the block and mute edges stored with them), but the
    state was decoded without them: a caller bug (``needs_edges`` said they were not needed)."""


class ChangeDecodeError(FeedError, ValueError):
    """A message that is not a view change of this version (the consumer counts and skips it)."""


class ViewContractError(FeedError, RuntimeError):
    """A delta that does not fit the view (insert of a present row, update or delete of a missing one)."""


# --- Kafka ---------------------------------------------------------------------------------------


class ProducerError(FeedError):
    """Publishing change events failed."""


class EventRejected(ProducerError, ValueError):
    """The event is invalid and was not sent; ``code`` is the :class:`InvalidEvent` code."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason


@dataclass(frozen=True, slots=True)
class FailedDelivery:
    """One record the broker did not take."""

    topic: str
    key: str
    error: str


class DeliveryFailed(ProducerError):
    """Records were not delivered; ``errors`` lists the first failures, ``count`` all of them."""

    def __init__(self, message: str, errors: Sequence[FailedDelivery] = (), count: int = 0) -> None:
        super().__init__(message)
        self.errors = list(errors)
        self.count = count


class ProducerClosed(ProducerError, RuntimeError):
    """The producer was used after it was closed."""


# --- Cassandra -----------------------------------------------------------------------------------


class StoreError(FeedError):
    """A Cassandra read or write failed; the subclasses say whether a retry may succeed."""


class StoreUnavailable(StoreError):
    """Cassandra cannot serve the call now (down, unreachable, overloaded, session closed)."""


class StorePermissionDenied(StoreError):
    """Cassandra refused the call for this process's role: a deployment error (the role's grants,
    docs/security.md), which no retry mends. The message names the role, the permission and the table."""


class StoreTimeout(StoreError):
    """The call did not complete within its time budget."""


class WriteFailed(StoreError):
    """Some writes failed after the driver's retries; the batch must be retried (writes are idempotent)."""


# --- Spark jobs ----------------------------------------------------------------------------------


class PipelineError(FeedError):
    """The streaming or backfill job cannot run as asked."""


class CheckpointError(PipelineError):
    """A checkpoint cannot continue with the requested operator or settings."""


class BootstrapError(PipelineError):
    """A backfill's output cannot be used (no manifest, other format or topics, missing state)."""


class InputLost(PipelineError):
    """The stream's topics no longer hold what its checkpoint expects to read next: running on would
    skip records silently, so the stream stops and never restarts (docs/operations.md). The message
    names the topic and the recovery commands."""


class TopicRecreated(InputLost):
    """A topic the checkpoint read was deleted and created again (its Kafka topic id changed)."""


class RecordsLost(InputLost):
    """Records of a partition the stream had not read yet are gone: the partition's earliest offset is
    past the checkpoint's next offset (time retention, ``deleteRecords``), or delete markers of a
    compacted topic may have been removed while the stream was stopped longer than ``delete.retention.ms``."""


# --- read service --------------------------------------------------------------------------------


class AuthError(FeedError, ValueError):
    """A bearer token is missing, malformed, forged or expired; the message says which."""


class PageTokenError(FeedError, ValueError):
    """A page or resume token is malformed, tampered with, of another kind or for another timeline."""


# --- local development stack ---------------------------------------------------------------------


class StackError(FeedError, RuntimeError):
    """The local stack could not be fetched, started or reached; the message names the service and log."""


class StreamNotReady(StackError):
    """The stream process exited or did not reach the expected progress in time (message: log tail)."""

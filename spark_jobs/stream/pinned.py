"""What a stream's checkpoint fixes at its creation and keeps for good: the clock start of its write
timestamps, its stateful operator, its state layout (buckets of join keys or one state per key),
its number of state partitions (docs/streaming.md)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from feed_service.errors import CheckpointError
from spark_jobs.checkpoint import inspect_checkpoint

log = logging.getLogger("feed.stream")


def clock_start_for(checkpoint: Path, initial: int | None = None) -> int:
    """The checkpoint's first write timestamp, fixed on first use: ``initial`` (a backfill's clock)
    or now in µs since epoch. Restarts read it back, so replayed batches reuse their timestamps."""
    path = checkpoint / "clock_start"
    try:
        return int(path.read_text())
    except FileNotFoundError:
        checkpoint.mkdir(parents=True, exist_ok=True)
        value = initial if initial is not None else time.time_ns() // 1000
        tmp = checkpoint / ".clock_start.tmp"
        tmp.write_text(str(value))
        tmp.replace(path)
        return value


OPERATOR_FILE = "operator"
OPERATOR = "transformWithState"
"""The stateful operator the stream runs, the only one, written into a new checkpoint's
:data:`OPERATOR_FILE`. It is recorded (and that record kept as earlier releases wrote it) so that a
checkpoint made by an earlier release with one of :data:`RETIRED_OPERATORS`, whose state
``transformWithState`` cannot read, is refused at start rather than misread (docs/streaming.md,
"One stateful operator")."""
#: Operators of earlier releases (``--operator`` then): a checkpoint that recorded one is refused.
RETIRED_OPERATORS: tuple[str, ...] = ("transformWithStateInPandas", "applyInPandasWithState")


def retired_operator_refusal(checkpoint: Path, recorded: str) -> CheckpointError:
    """The refusal of a checkpoint made with a retired pandas operator: its state cannot be read by
    ``transformWithState``; the way to move it is a backfill and a new checkpoint bootstrapped from it
    (docs/streaming.md, "One stateful operator")."""
    return CheckpointError(
        f"checkpoint {checkpoint} was created with --operator {recorded}, which this release no longer runs"
        f" (only {OPERATOR}); move it with `feedctl reshard --checkpoint {checkpoint} --via backfill"
        " --partitions N` (or `feedctl backfill --out DIR` and `feedctl stream --checkpoint NEW --bootstrap-from"
        " DIR`): docs/streaming.md, \"One stateful operator\"")


def recorded_operator(checkpoint: Path) -> str | None:
    """The operator a checkpoint recorded at creation, None if it recorded none (a new checkpoint)."""
    try:
        return (checkpoint / OPERATOR_FILE).read_text().strip()
    except FileNotFoundError:
        return None


def refuse_retired_operator(checkpoint: Path) -> None:
    """:func:`retired_operator_refusal` raised if ``checkpoint`` was made with a retired operator
    (what ``feedctl reshard`` in place and ``feedctl state-stats`` check before their Spark session)."""
    recorded = recorded_operator(checkpoint)
    if recorded in RETIRED_OPERATORS:
        raise retired_operator_refusal(checkpoint, recorded)


def pin_operator(checkpoint: Path) -> None:
    """Record :data:`OPERATOR` in a new checkpoint; a checkpoint that recorded it continues.
    :class:`CheckpointError` for a checkpoint of a retired operator (:func:`retired_operator_refusal`)
    or of an operator this release does not know."""
    recorded = recorded_operator(checkpoint)
    if recorded is None:
        checkpoint.mkdir(parents=True, exist_ok=True)
        (checkpoint / OPERATOR_FILE).write_text(OPERATOR)
        return
    if recorded in RETIRED_OPERATORS:
        raise retired_operator_refusal(checkpoint, recorded)
    if recorded != OPERATOR:
        raise CheckpointError(f"{checkpoint / OPERATOR_FILE} names an unknown operator {recorded!r}")


STATE_BUCKETS_FILE = "state_buckets"


def recorded_state_buckets(checkpoint: Path) -> int:
    """The state buckets a checkpoint recorded; 0 (one state per key) for one made before buckets."""
    try:
        return int((checkpoint / STATE_BUCKETS_FILE).read_text().strip())
    except FileNotFoundError:
        return 0
    except ValueError:
        raise CheckpointError(f"{checkpoint / STATE_BUCKETS_FILE} does not hold a number of state buckets") from None


def state_buckets_for(checkpoint: Path, requested: int) -> int:
    """The checkpoint's state layout, fixed at creation (docs/state-buckets.md): the number of buckets
    of join keys it groups its state by, or 0 for one state per join key.

    A new checkpoint takes ``requested``; a
    checkpoint that ran before this was recorded keeps one state per key (every checkpoint of the
    releases before buckets), which the stream still runs. A different ``requested`` on an existing
    checkpoint is logged, naming ``feedctl reshard --via backfill``, the way to move it.
    """
    path = checkpoint / STATE_BUCKETS_FILE
    if path.exists():
        recorded = recorded_state_buckets(checkpoint)
    else:
        info = inspect_checkpoint(checkpoint) if (checkpoint / "join").exists() else None
        if info is not None and not info.is_new:
            recorded = 0  # created by a release before state buckets: one state per key
        else:
            recorded = requested
        checkpoint.mkdir(parents=True, exist_ok=True)
        tmp = checkpoint / f".{STATE_BUCKETS_FILE}.tmp"
        tmp.write_text(str(recorded))
        tmp.replace(path)
        log.info("checkpoint %s: %s", checkpoint,
                 f"state in {recorded} buckets of join keys" if recorded else "one state per join key")
        return recorded
    if recorded != requested:
        log.warning("state buckets: %d asked (FEED_STATE_BUCKETS) but checkpoint %s keeps %s; to change the"
                    " layout stop the stream and run `feedctl reshard --checkpoint %s --via backfill --partitions N`",
                    requested, checkpoint, recorded or "one state per key", checkpoint)
    return recorded


def state_partitions_for(checkpoint: Path, requested: int) -> int:
    """The state partitions the query runs with: ``requested`` for a new checkpoint, else the number
    the checkpoint pinned (Spark takes it from the offset log whatever the session says).

    A difference is logged as a warning naming ``feedctl reshard``, the one way to change it; an
    offset log this cannot read is left to Spark (docs/streaming.md, "State partitions").
    """
    try:
        info = inspect_checkpoint(checkpoint)
    except CheckpointError as exc:
        log.warning("cannot read the pinned state partitions (%s); Spark uses the checkpoint's own", exc)
        return requested
    if info.is_new or info.state_partitions is None:
        log.info("new checkpoint %s: %d state partitions, pinned from its first batch on", checkpoint, requested)
        return requested
    pinned = info.state_partitions
    log.info("checkpoint %s has %d state partitions (pinned in its offset log)", checkpoint, pinned)
    if pinned != requested:
        log.warning("state partitions: %d asked (--state-partitions or FEED_STATE_PARTITIONS) but checkpoint %s"
                    " keeps its %d; to change them stop the stream and run `feedctl reshard --checkpoint %s"
                    " --partitions %d`", requested, checkpoint, pinned, checkpoint, requested)
    return pinned


PER_READER_LAYOUT_FILE = "per_reader_layout"
PER_READER_LAYOUT = "audience-stage"
"""The per-reader state a checkpoint keeps: the stage's inputs in ``per_reader_inputs``
(docs/reposts-and-replies.md, "In the stream")."""


def per_reader_layout_for(checkpoint: Path) -> str:
    """The checkpoint's per-reader layout, recorded at its first start. A checkpoint that committed
    batches before it was recorded kept its per-reader state as the reposter and reader steps' blobs,
    which the stage cannot read: :class:`CheckpointError`, naming the way to move it (a backfill and
    a new checkpoint bootstrapped from it: docs/reposts-and-replies.md, "Moving a checkpoint")."""
    path = checkpoint / PER_READER_LAYOUT_FILE
    try:
        recorded = path.read_text().strip()
    except FileNotFoundError:
        info = inspect_checkpoint(checkpoint) if (checkpoint / "join").exists() else None
        if info is not None and not info.is_new:
            raise CheckpointError(
                f"checkpoint {checkpoint} keeps its reposts and replies in the reposter and reader steps' state,"
                " which this release replaced by the per-reader stage; move it with `feedctl backfill --out DIR`"
                f" and `feedctl stream --checkpoint NEW --bootstrap-from DIR` (docs/reposts-and-replies.md,"
                " \"Moving a checkpoint\")") from None
        checkpoint.mkdir(parents=True, exist_ok=True)
        tmp = checkpoint / f".{PER_READER_LAYOUT_FILE}.tmp"
        tmp.write_text(PER_READER_LAYOUT)
        tmp.replace(path)
        return PER_READER_LAYOUT
    if recorded != PER_READER_LAYOUT:
        raise CheckpointError(f"{path} says {recorded!r}; this release runs {PER_READER_LAYOUT!r}")
    return recorded

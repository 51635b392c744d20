"""Many single-partition statements at once, with bounded concurrency: what the stream's trimmer,
refill check and activity store each run in rounds. Driver faults come back translated as the
reader translates them (:func:`~feed_service.store.cassandra_reader.translate_driver_error`)."""

from __future__ import annotations

from typing import Any

from feed_service.store.cassandra_reader import translate_driver_error


def execute_concurrently(session: Any, statements: list[tuple[Any, Any]], *, concurrency: int,
                         profile: Any) -> tuple[list[Any], list[Any]]:
    """(every statement's result in order, the raw failures); a session that cannot run them at all
    (shut down, no connection pool) raises translated."""
    if not statements:
        return [], []
    from cassandra.concurrent import execute_concurrent

    try:
        results = execute_concurrent(session, statements, concurrency=concurrency, raise_on_first_error=False,
                                     execution_profile=profile)
    except Exception as exc:
        raise translate_driver_error(exc) from exc
    return [r.result_or_exc for r in results], [r.result_or_exc for r in results if not r.success]


def execute_all(session: Any, statements: list[tuple[Any, Any]], *, concurrency: int, profile: Any) -> list[Any]:
    """Every statement's result in order, or the first failure translated."""
    results, failures = execute_concurrently(session, statements, concurrency=concurrency, profile=profile)
    if failures:
        raise translate_driver_error(failures[0])
    return results


def all_rows(result: Any) -> list[tuple[Any, ...]]:
    """Every row of ``result``; later pages, if any, are fetched here, so their faults are translated too."""
    try:
        return list(result)
    except Exception as exc:
        raise translate_driver_error(exc) from exc

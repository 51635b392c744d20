"""Failures no retry mends, found in what a Spark job's failure says.

A Python exception raised on an executor (the stream's sink, the backfill's writers) or in the
stream's ``foreachBatch`` reaches the driver as a Spark exception whose text holds the Python
traceback, not as the exception itself. :func:`fatal_error` finds a fatal one in that text again:
the fatal errors of the tree (:data:`FATAL_ERRORS`: a missing Cassandra grant, lost input) and
Cassandra's own ``Unauthorized`` (raised by a driver-side store that does not translate it). The
stream's supervisor does not restart a query that failed with one, the backfill stops with it
(docs/operations.md#failure-modes-the-streams-inputs-and-grants). Pure Python, no Spark.
"""

from __future__ import annotations

import re

from feed_service.errors import FeedError, InputLost, RecordsLost, StorePermissionDenied, TopicRecreated
from feed_service.store.permission import permission_denied

FATAL_ERRORS: tuple[type[FeedError], ...] = (StorePermissionDenied, InputLost)
_BY_NAME: dict[str, type[FeedError]] = {cls.__name__: cls for cls in (StorePermissionDenied, TopicRecreated,
                                                                      RecordsLost, InputLost)}
#: A traceback's last line of one of them: ``feed_service.errors.RecordsLost: message`` (one line).
_FATAL_LINE = re.compile(r"feed_service\.errors\.(?P<name>%s): (?P<message>[^\n]*)" % "|".join(_BY_NAME))
#: The driver's own refusal, untranslated: ``cassandra.Unauthorized: Error from server: ...``.
_UNAUTHORIZED_LINE = re.compile(r"cassandra\.Unauthorized: (?P<message>[^\n]*)")


def fatal_error(error: object) -> FeedError | None:
    """The fatal error ``error`` is or carries (in its text: a Spark failure's Python traceback), else None.

    >>> fatal_error(RuntimeError("Job aborted: Traceback ...\\nfeed_service.errors.RecordsLost: t[0] lost\\n at ..."))
    RecordsLost('t[0] lost')
    >>> fatal_error(RuntimeError("feed_service.errors.WriteFailed: 1 of 9 writes failed")) is None
    True
    """
    if isinstance(error, FATAL_ERRORS):
        return error
    if type(error).__name__ == "Unauthorized" and type(error).__module__.startswith("cassandra"):
        return permission_denied(error)  # the driver's own session, untranslated
    text = str(error)
    found = _FATAL_LINE.search(text)
    if found is not None:
        return _BY_NAME[found["name"]](found["message"].strip())
    found = _UNAUTHORIZED_LINE.search(text)
    if found is not None:
        return permission_denied(found["message"])
    return None

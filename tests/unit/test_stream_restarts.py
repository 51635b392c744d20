"""The stream's restart bookkeeping: give up on failures in a row, report restarts in all."""

from __future__ import annotations

from spark_jobs.stream.restarts import MAX_ERROR_CHARS, Restarts


def test_failures_in_a_row_decide_and_a_batch_resets_them() -> None:
    r = Restarts(max_consecutive=2, backoff_seconds=5.0, clock=lambda: 42.0)
    assert r.failed("a") and r.backoff() == 5.0
    r.restarted()
    assert r.failed("b") and r.backoff() == 10.0
    r.restarted()
    r.progressed()
    assert r.failed("c") and r.backoff() == 5.0  # in a row again from one
    r.restarted()
    assert r.failed("d")
    r.restarted()
    assert not r.failed("e")  # a third failure in a row: give up
    assert (r.consecutive, r.total) == (3, 4)


def test_record_keeps_the_total_and_the_last_error_after_progress() -> None:
    now = iter([10.0, 20.0])
    r = Restarts(max_consecutive=5, backoff_seconds=0.0, clock=lambda: next(now))
    assert r.record() == {"restarts": 0, "consecutive_failures": 0, "last_error": None}
    for error in ("first", RuntimeError("second")):
        r.failed(error)
        r.restarted()
    r.progressed()
    assert r.record() == {"restarts": 2, "consecutive_failures": 0,
                          "last_error": {"message": "second", "time": 20.0}}


def test_a_long_error_is_cut() -> None:
    r = Restarts(max_consecutive=1, backoff_seconds=0.0)
    r.failed("x" * (MAX_ERROR_CHARS + 10))
    assert len(r.record()["last_error"]["message"]) == MAX_ERROR_CHARS

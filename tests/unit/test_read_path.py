"""The read path's own machinery, without Cassandra: the profile cache (with its memory of versions
that are not stored) and the future bridge between cassandra-driver's I/O thread and the loop."""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any, Callable

import pytest

from feed_service.api import timeline_pb2 as pb
from feed_service.core.rows import Entry, ProfileRow
from feed_service.errors import StoreTimeout, StoreUnavailable
from feed_service.server.hydration import NOT_STORED, ProfileCache, hydrate_profiles
from feed_service.server.hydration import entry_fields as _entry
from feed_service.store.cassandra_reader import CassandraReader, _Completions
from feed_service.store.memory import MemoryStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingStore(MemoryStore):
    """A MemoryStore that records which profile keys each ``profiles`` call read."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[list[tuple[str, int]]] = []

    async def profiles(self, keys, *, timeout):
        keys = list(keys)
        self.reads.append(keys)
        return await super().profiles(keys, timeout=timeout)


def profile(user: str, version: int) -> ProfileRow:
    return ProfileRow(user, version, f"{user} v{version}", None, None)


def hydrate(store, cache, keys) -> dict:
    return asyncio.run(hydrate_profiles(store, cache, keys, timeout=1.0))


# -- the profile cache ---------------------------------------------------------------------
def test_a_missing_version_costs_no_read_until_it_expires() -> None:
    clock, store = Clock(), CountingStore()
    store.add_profile(profile("ann", 1))
    cache = ProfileCache(100, missing_ttl_s=5.0, timer=clock)
    keys = [("ann", 1), ("ann", 2), ("bob", 7)]
    assert hydrate(store, cache, keys) == {("ann", 1): profile("ann", 1)}
    assert store.reads == [keys]
    assert (cache.hits, cache.misses) == (0, 3)
    for _ in range(3):  # the same page again: nothing read, every lookup answered by the cache
        assert hydrate(store, cache, keys) == {("ann", 1): profile("ann", 1)}
    assert len(store.reads) == 1 and (cache.hits, cache.misses) == (9, 3)
    assert cache.lookup(("ann", 2)) is NOT_STORED
    store.add_profile(profile("ann", 2))  # arrives late, nobody says so
    clock.now += 4.9
    assert ("ann", 2) not in hydrate(store, cache, keys)  # still remembered as missing
    clock.now += 0.2
    assert hydrate(store, cache, keys)[("ann", 2)] == profile("ann", 2)  # expired: read again, found
    assert store.reads[1:] == [[("ann", 2), ("bob", 7)]]
    assert hydrate(store, cache, keys)[("ann", 2)] == profile("ann", 2) and len(store.reads) == 2  # now cached


def test_forget_missing_shows_a_late_version_at_once() -> None:
    clock, store = Clock(), CountingStore()
    cache = ProfileCache(100, missing_ttl_s=5.0, timer=clock)
    assert hydrate(store, cache, [("ann", 3)]) == {}
    store.add_profile(profile("ann", 3))
    assert hydrate(store, cache, [("ann", 3)]) == {}  # remembered as missing: not read
    cache.forget_missing(("ann", 3))  # the change topic announced the version
    assert hydrate(store, cache, [("ann", 3)]) == {("ann", 3): profile("ann", 3)}
    assert store.reads == [[("ann", 3)], [("ann", 3)]]
    cache.forget_missing(("nobody", 1))  # forgetting what is not remembered is harmless


def test_a_version_forgotten_while_its_read_runs_is_not_remembered_as_missing() -> None:
    cache = ProfileCache(100, missing_ttl_s=5.0, timer=Clock())

    class Racing(MemoryStore):
        async def profiles(self, keys, *, timeout):
            found = await super().profiles(keys, timeout=timeout)  # read before the write...
            cache.forget_missing(("ann", 4))  # ...which is announced while the answer is on its way
            return found

    assert hydrate(Racing(), cache, [("ann", 4)]) == {}
    assert cache.lookup(("ann", 4)) is None  # unknown: the next read goes to the store again


def test_the_memory_of_missing_versions_is_bounded() -> None:
    store = CountingStore()
    cache = ProfileCache(1000, missing_ttl_s=60.0, missing_size=10, timer=Clock())
    hydrate(store, cache, [(f"u{i}", 1) for i in range(50)])
    assert cache.missing_count() == 10
    assert [cache.lookup((f"u{i}", 1)) for i in range(40, 50)] == [NOT_STORED] * 10  # the newest are kept
    assert cache.lookup(("u0", 1)) is None


def test_no_caching_at_all_with_capacity_zero() -> None:
    store = CountingStore()
    store.add_profile(profile("ann", 1))
    cache = ProfileCache(0)
    for _ in range(2):
        hydrate(store, cache, [("ann", 1), ("ann", 2)])
    assert len(store.reads) == 2 and len(cache) == 0 and cache.missing_count() == 0


def test_a_stored_version_replaces_its_missing_mark() -> None:
    cache = ProfileCache(100, timer=Clock())
    cache.put_missing(("ann", 1), cache.read_started())
    cache.put(profile("ann", 1))
    assert cache.lookup(("ann", 1)) == profile("ann", 1) and cache.missing_count() == 0


def test_entry_fields_build_the_same_message() -> None:
    row = Entry("t1", "ann", 5, 2, "hello", 3)
    fields = _entry(row, ProfileRow("ann", 3, "Ann", "https://a", None))
    assert pb.GetHomeTimelineResponse(entries=[fields]).entries[0] == pb.TimelineEntry(
        tweet_id="t1", author_id="ann", created_at_ms=5, version=2, text="hello", profile_version=3,
        author_display_name="Ann", author_avatar_url="https://a")
    assert pb.TimelineEntry(**_entry(row._replace(text=None), None)).author_display_name == ""


# -- the future bridge ---------------------------------------------------------------------
class FakeResponse:
    """A driver ResponseFuture: callbacks registered, then called from another thread."""

    def __init__(self) -> None:
        self.callback: tuple[Callable, tuple] | None = None
        self.errback: tuple[Callable, tuple] | None = None

    def add_callbacks(self, callback, errback, callback_args=(), errback_args=()) -> None:
        self.callback, self.errback = (callback, callback_args), (errback, errback_args)

    def succeed(self, rows: Any) -> None:
        fn, args = self.callback
        fn(rows, *args)

    def fail(self, exc: BaseException) -> None:
        fn, args = self.errback
        fn(exc, *args)


class FakeSession:
    def __init__(self) -> None:
        self.responses: list[FakeResponse] = []

    def execute_async(self, statement, params, timeout, execution_profile) -> FakeResponse:
        response = FakeResponse()
        self.responses.append(response)
        return response


def fake_reader() -> tuple[CassandraReader, FakeSession]:
    reader = object.__new__(CassandraReader)  # no statements to prepare: only the bridge is used
    session = FakeSession()
    reader.session, reader._profile, reader._closed, reader._completions = session, None, False, None
    return reader, session


def on_driver_thread(fn: Callable[[], None]) -> None:
    thread = threading.Thread(target=fn, name="driver-io")
    thread.start()
    thread.join(5)


def test_results_and_errors_arrive_in_any_order() -> None:
    from cassandra import OperationTimedOut
    from cassandra.cluster import NoHostAvailable

    async def main() -> None:
        reader, session = fake_reader()
        futures = [reader._execute(f"q{i}", (i,), 1.0) for i in range(200)]
        outcomes: dict[int, Any] = {i: [(f"row{i}",)] for i in range(200)}
        outcomes[7] = OperationTimedOut("slow")
        outcomes[8] = NoHostAvailable("down", {})
        outcomes[9] = None  # no rows (a write, or an empty page)
        order = list(range(200))
        random.Random(3).shuffle(order)

        def answer() -> None:  # the driver thread answers in its own order, in bursts
            for i in order:
                value = outcomes[i]
                if isinstance(value, BaseException):
                    session.responses[i].fail(value)
                else:
                    session.responses[i].succeed(value)

        await asyncio.to_thread(on_driver_thread, answer)
        results = await asyncio.gather(*futures, return_exceptions=True)
        for i, result in enumerate(results):
            if i == 7:
                assert isinstance(result, StoreTimeout)
            elif i == 8:
                assert isinstance(result, StoreUnavailable)
            elif i == 9:
                assert result == []
            else:
                assert result == [(f"row{i}",)]

    asyncio.run(main())


def test_rows_are_passed_on_uncopied_and_a_cancelled_call_is_skipped() -> None:
    async def main() -> None:
        reader, session = fake_reader()
        kept, dropped = reader._execute("q", (), 1.0), reader._execute("q", (), 1.0)
        dropped.cancel()  # the call's deadline: nobody waits for this one any more
        rows = [("a",), ("b",)]
        on_driver_thread(lambda: (session.responses[1].succeed([("x",)]), session.responses[0].succeed(rows)))
        assert (await kept) is rows
        assert dropped.cancelled()

    asyncio.run(main())


def test_a_burst_wakes_the_loop_once() -> None:
    async def main() -> None:
        reader, session = fake_reader()
        loop = asyncio.get_running_loop()
        wakeups = 0
        real = loop.call_soon_threadsafe

        def counting(*args, **kwargs):
            nonlocal wakeups
            wakeups += 1
            return real(*args, **kwargs)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        futures = [reader._execute("q", (), 1.0) for _ in range(50)]
        on_driver_thread(lambda: [r.succeed([(1,)]) for r in session.responses])  # before the loop runs again
        assert await asyncio.gather(*futures) == [[(1,)]] * 50
        assert wakeups == 1

    asyncio.run(main())


def test_a_closed_loop_does_not_break_the_driver_thread() -> None:
    loop = asyncio.new_event_loop()
    completions = _Completions(loop)
    future = loop.create_future()
    loop.close()
    errors: list[BaseException] = []

    def late_answers() -> None:
        try:
            completions.rows([(1,)], future)  # the query ended after the server's loop closed
            completions.error(RuntimeError("late"), future)
            completions.rows([(2,)], future)
        except BaseException as exc:  # noqa: BLE001 - what must not happen
            errors.append(exc)

    on_driver_thread(late_answers)
    assert errors == [] and not future.done()


def test_a_closed_reader_and_an_exhausted_budget_fail_at_once() -> None:
    async def main() -> None:
        reader, session = fake_reader()
        with pytest.raises(StoreTimeout):
            await reader._execute("q", (), 0.0)
        reader._closed = True
        with pytest.raises(StoreUnavailable):
            await reader._execute("q", (), 1.0)
        assert session.responses == []

    asyncio.run(main())


def test_a_reader_serves_a_new_loop_after_the_old_one_closed() -> None:
    reader, session = fake_reader()

    async def one(value: int) -> list:
        future = reader._execute("q", (), 1.0)
        response = session.responses[-1]
        on_driver_thread(lambda: response.succeed([(value,)]))
        return await future

    assert asyncio.run(one(1)) == [(1,)]
    assert asyncio.run(one(2)) == [(2,)]  # asyncio.run: a new loop each time

"""Control changes' freshness, for bench_stream.py's freshness run: how long a mute, an unmute, an
unfollow and a follow take from their publication to showing through ``GetHomeTimeline`` and to
reaching a ``WatchHomeTimeline`` of the reader, on a real read server (``python -m feed_service
serve``, bench_watch.Server) consuming the view's change topic.

Each sample takes a reader R following an author A that tweets in the run, opens a watch of R,
publishes the change, then polls R's first page every 50 ms until A's entries have left (mute,
unfollow) or come back (unmute, follow), while the watch's messages are timed as they arrive (the
first that removes one of A's tweets, or brings one). A pair whose first page shows A takes a mute
and then an unmute, the next such pair an unfollow and then a follow, one change at a time, until
``stop`` is set.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

OPS = ("mute", "unmute", "unfollow", "follow")
GONE = {"mute": True, "unmute": False, "unfollow": True, "follow": False}


@dataclass
class ControlSamples:
    """Seconds from publication to visible, per kind of change: through reads and through a watch."""

    read: dict[str, list[float]] = field(default_factory=lambda: {op: [] for op in OPS})
    watch: dict[str, list[float]] = field(default_factory=lambda: {op: [] for op in OPS})
    missed: int = 0

    def all(self, kind: str) -> list[float]:
        return sorted(v for values in getattr(self, kind).values() for v in values)


class _Watch:
    def __init__(self, port: int, token: str, user_id: str) -> None:
        from feed_service.api import timeline_pb2, timeline_pb2_grpc
        from feed_service.server.client_channel import open_channel

        self.messages: queue.Queue = queue.Queue()
        self._channel = open_channel(f"127.0.0.1:{port}")
        stub = timeline_pb2_grpc.TimelineServiceStub(self._channel)
        self._call = stub.WatchHomeTimeline(timeline_pb2.WatchHomeTimelineRequest(user_id=user_id),
                                            metadata=[("authorization", f"Bearer {token}")])
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        import grpc

        try:
            for message in self._call:
                self.messages.put((time.perf_counter(), message))
        except grpc.RpcError:
            pass

    def first(self, author: str, gone: bool, since: float, timeout: float) -> float | None:
        """Arrival of the first message after ``since`` that removes (``gone``) or brings an entry of ``author``."""
        deadline = time.perf_counter() + timeout
        while True:
            try:
                arrived, m = self.messages.get(timeout=max(0.05, deadline - time.perf_counter()))
            except queue.Empty:
                return None
            if arrived < since:
                continue
            if gone and any(i.startswith(f"{author}-t") for i in m.removed_tweet_ids):
                return arrived
            if not gone and any(e.author_id == author for e in [*m.entries, *m.changed]):
                return arrived

    def close(self) -> None:
        self._call.cancel()
        self._channel.close()


def _shows(stub: Any, token: str, reader: str, author: str) -> bool:
    from feed_service.api import timeline_pb2

    page = stub.GetHomeTimeline(timeline_pb2.GetHomeTimelineRequest(user_id=reader, page_size=50),
                                metadata=[("authorization", f"Bearer {token}")], timeout=10)
    return any(e.author_id == author for e in page.entries)


def run_control_changes(settings: Any, port: int, token: str, graph: dict[str, list[str]], start: threading.Event,
                        stop: threading.Event, out: ControlSamples, timeout: float = 30.0) -> None:
    """The samples (module docstring), from when ``start`` is set until ``stop`` is; into ``out``."""
    from feed_service.api import timeline_pb2_grpc
    from feed_service.kafka.producer import EventProducer
    from feed_service.server.client_channel import open_channel

    start.wait()
    # the first follower of each author is where bench_stream samples tweets: never a control reader
    pairs = [(followers[i], author) for i in range(1, len(next(iter(graph.values()))))
             for author, followers in graph.items()]
    with open_channel(f"127.0.0.1:{port}") as channel, EventProducer(settings) as producer:
        stub = timeline_pb2_grpc.TimelineServiceStub(channel)
        for n in range(10 ** 6):
            if stop.is_set():
                break
            reader, author = pairs[n % len(pairs)]
            if not _shows(stub, token, reader, author):
                continue  # nothing of A in R's first page yet: nothing a change would move
            for op in OPS[2 * (n % 2): 2 * (n % 2) + 2]:  # mute then unmute, or unfollow then follow
                if stop.is_set():
                    break
                _sample(producer, stub, port, token, reader, author, op, timeout, out)


def _sample(producer: Any, stub: Any, port: int, token: str, reader: str, author: str, op: str, timeout: float,
            out: ControlSamples) -> None:
    gone = GONE[op]
    watch = _Watch(port, token, reader)
    time.sleep(0.3)  # the watch has subscribed
    try:
        sent = time.perf_counter()
        getattr(producer, op)(reader, author)
        producer.flush()
        read_at = None
        deadline = sent + timeout
        while time.perf_counter() < deadline:
            if _shows(stub, token, reader, author) != gone:
                read_at = time.perf_counter()
                break
            time.sleep(0.05)
        watch_at = watch.first(author, gone, sent, max(0.1, deadline - time.perf_counter()))
    finally:
        watch.close()
    if read_at is None or watch_at is None:
        out.missed += 1
    if read_at is not None:
        out.read[op].append(read_at - sent)
    if watch_at is not None:
        out.watch[op].append(watch_at - sent)

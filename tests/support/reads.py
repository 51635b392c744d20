"""Reading a streamed view back through gRPC in the reference's shape: every page of a home or user
timeline, and watch clients that apply every message to a timeline of their own."""

from __future__ import annotations

import threading
from typing import Any

from feed_service.api import timeline_pb2 as pb
from feed_service.core.rows import Entry


def entry_key(e: Any) -> tuple:
    """An entry as a response carries it, or a reference :class:`Entry` in the same shape."""
    if isinstance(e, Entry):
        return (e.tweet_id, e.author_id, e.created_at, e.version, e.text, e.reposted_by or "", e.reposted_at or 0,
                e.in_reply_to_tweet_id or "", e.in_reply_to_author_id or "")
    return (e.tweet_id, e.author_id, e.created_at_ms, e.version, e.text, e.reposted_by, e.reposted_at_ms,
            e.in_reply_to_tweet_id, e.in_reply_to_author_id)


def pages(server: Any, rpc: str, user: str, size: int) -> list[tuple]:
    """Every entry of ``user``'s timeline through ``rpc`` (GetHomeTimeline or GetUserTimeline), page by
    page of ``size``, as a service reads it, in :func:`entry_key` shape."""
    request = pb.GetHomeTimelineRequest if rpc == "GetHomeTimeline" else pb.GetUserTimelineRequest
    out, token = [], ""
    while True:
        page = getattr(server.stub(), rpc)(request(user_id=user, page_size=size, page_token=token),
                                           metadata=server.auth("checker", "service"), timeout=10)
        out += [entry_key(e) for e in page.entries]
        token = page.next_page_token
        if not token:
            return out


class WatchClient:
    """A watch client on a thread of its own: its timeline read in full once the watch is open
    (:meth:`seed`), then every message applied (upsert by tweet id, remove), and shown capped at
    ``cap`` entries (the view defines the newest ``inbox_cap`` entries: rows falling below it are not
    removed by any message, docs/view-changes.md)."""

    def __init__(self, server: Any, user: str, *, cap: int) -> None:
        self.user = user
        self.cap = cap
        self.state: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.messages = 0
        self.call = server.stub().WatchHomeTimeline(pb.WatchHomeTimelineRequest(user_id=user),
                                                    metadata=server.auth(user), timeout=600)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for message in self.call:
                with self.lock:
                    self.messages += 1
                    for e in (*message.entries, *message.changed):
                        self.state[e.tweet_id] = e
                    for tid in message.removed_tweet_ids:
                        self.state.pop(tid, None)
        except Exception:  # noqa: BLE001 - cancelled at the end
            pass

    def seed(self, server: Any) -> None:
        """Read the whole home timeline (after the watch subscribed: :func:`wait_subscribed`); the
        messages since then apply on top."""
        entries, token = [], ""
        while True:
            page = server.stub().GetHomeTimeline(
                pb.GetHomeTimelineRequest(user_id=self.user, page_size=50, page_token=token),
                metadata=server.auth(self.user), timeout=10)
            entries += page.entries
            token = page.next_page_token
            if not token:
                break
        with self.lock:
            for e in entries:
                self.state.setdefault(e.tweet_id, e)

    def timeline(self) -> list[tuple]:
        with self.lock:
            return sorted((entry_key(e) for e in self.state.values()), key=lambda k: (k[6] or k[2], k[0]),
                          reverse=True)[:self.cap]

    def wait_for(self, expected: list[tuple], seconds: float = 10) -> list[tuple]:
        """The client's timeline once it equals ``expected`` or after ``seconds`` (the last messages
        may still be on their way)."""
        for _ in range(int(seconds * 10)):
            if self.timeline() == expected:
                break
            threading.Event().wait(0.1)
        return self.timeline()


async def _subscribed(hub: Any, user: str) -> bool:
    subs = hub._by_user.get(user)
    return bool(subs) and all(s.early_from is None for s in subs)


def wait_subscribed(server: Any, users: list[str]) -> None:
    """Until the server's watch hub holds a live subscription of every one of ``users``."""
    hub = server.server.servicer.hub
    for _ in range(200):
        if all(server.run(_subscribed(hub, u)) for u in users):
            return
        threading.Event().wait(0.05)
    raise AssertionError("the watches did not subscribe")

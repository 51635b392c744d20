"""The backfill's inputs without Spark: events as the rows and frames ``applyInPandas`` hands its
per-key step, and the deduplicated changelog (the winners) of a history
(tests/unit/test_backfill_units.py, test_backfill_per_reader.py)."""

from __future__ import annotations

import pandas as pd

from feed_service.core.events import (
    BlockChange, Event, Exclusion, FollowChange, ListChange, ListFollow, ListMemberChange, MuteChange, ProfileVersion,
    RepostChange, TweetDelete, TweetUpsert,
)
from feed_service.core.reference import reference_tables
from feed_service.core.rules import hide_rank
from spark_jobs.envelope import EVENT_COLUMNS

#: The columns of the backfill's event frame: the join key, then the envelope's.
COLUMNS = ["key", *(name for name, _ in EVENT_COLUMNS)]


def event_row(ev: Event, key: str) -> dict:
    """``ev`` as a row of the backfill's event frame, grouped under ``key``: its envelope's columns, the
    others ``None``."""
    row = dict.fromkeys(COLUMNS)
    row["key"] = key
    if isinstance(ev, TweetUpsert):
        row.update(type="tweet", op="upsert", tweet_id=ev.tweet_id, author_id=ev.author_id, version=ev.version,
                   created_at=ev.created_at, text=ev.text, profile_version=ev.profile_version,
                   in_reply_to_tweet_id=ev.in_reply_to_tweet_id, in_reply_to_author_id=ev.in_reply_to_author_id)
    elif isinstance(ev, TweetDelete):
        row.update(type="tweet", op="delete", tweet_id=ev.tweet_id, author_id=ev.author_id, version=ev.version)
    elif isinstance(ev, FollowChange):
        row.update(type="follow", op=ev.op, follower_id=ev.follower_id, followee_id=ev.followee_id,
                   version=ev.version, show_reposts=ev.show_reposts if ev.active else None)
    elif isinstance(ev, BlockChange):
        row.update(type="block", op=ev.op, blocker_id=ev.blocker_id, blocked_id=ev.blocked_id, version=ev.version)
    elif isinstance(ev, MuteChange):
        row.update(type="mute", op=ev.op, muter_id=ev.muter_id, muted_id=ev.muted_id, version=ev.version)
    elif isinstance(ev, RepostChange):
        row.update(type="repost", op=ev.op, reposter_id=ev.reposter_id, tweet_id=ev.tweet_id, author_id=ev.author_id,
                   version=ev.version, created_at=ev.created_at, profile_version=ev.profile_version)
    elif isinstance(ev, ListFollow):
        row.update(type="list_follow", op=ev.op, reader_id=ev.reader_id, member_id=ev.member_id, owner_id=ev.owner_id,
                   list_id=ev.list_id, version=ev.version)
    elif isinstance(ev, Exclusion):
        row.update(type="exclusion", op=ev.op, owner_id=ev.owner_id, member_id=ev.member_id, version=ev.version)
    else:
        row.update(type="profile", user_id=ev.user_id, version=ev.version, display_name=ev.display_name,
                   avatar_url=ev.avatar_url, bio=ev.bio)
    return row


def event_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows as ``applyInPandas`` hands them over: integer columns nullable (``pd.NA``), as the
    session asks (``prefer_int_ext_dtype``)."""
    ints = {name: "Int64" for name, sql_type in EVENT_COLUMNS if sql_type == "bigint"}
    return pd.DataFrame(rows, columns=COLUMNS).astype(ints)


def winners(events: list[Event]) -> list[Event]:
    """The deduplicated changelog the Spark job builds, here from the reference's final tables (the
    lists' and memberships' winners too: :func:`list_winners` picks them out)."""
    t = reference_tables(events)
    out = [TweetUpsert(tid, a, c[0], c[1], c[2], c[3], *c[4:]) for (a, tid), c in t.tweets.items()]
    out += [TweetDelete(tid, a, 0) for a, tid in t.deleted]
    out += [FollowChange(f, e, edge[0], "follow" if edge[1] else "unfollow", len(edge) < 3 or edge[2])
            for (f, e), edge in t.follows.items()]
    out += [ProfileVersion(u, v, *p) for (u, v), p in t.profiles.items()]
    out += [RepostChange(p, tid, a, v, "unrepost" if off else "repost", None if off else at, None if off else pv)
            for (p, tid), (v, off, a, at, pv) in t.reposts.items()]
    hides: dict[tuple, BlockChange | MuteChange] = {}  # per edge, the change of greatest hide_rank
    for ev in events:
        if isinstance(ev, BlockChange):
            edge: tuple = ("block", ev.blocker_id, ev.blocked_id)
        elif isinstance(ev, MuteChange):
            edge = ("mute", ev.muter_id, ev.muted_id)
        else:
            continue
        best = hides.get(edge)
        if best is None or hide_rank(ev.version, ev.hiding) > hide_rank(best.version, best.hiding):
            hides[edge] = ev
    out += list(t.lists.values())
    out += [ListMemberChange(lid, member, v, "add" if on else "remove") for (lid, member), (v, on) in t.members.items()]
    return out + list(hides.values())


def list_winners(winners: list[Event]) -> tuple[list[Event], list[ListChange | ListMemberChange]]:
    """``winners`` split: the author keys' (every kind but lists) and the list stage's."""
    keys: list[Event] = []
    lists: list[ListChange | ListMemberChange] = []
    for ev in winners:
        (lists if isinstance(ev, (ListChange, ListMemberChange)) else keys).append(ev)  # type: ignore[arg-type]
    return keys, lists


def hidden_pairs(winners: list[Event]) -> set[tuple[str, str]]:
    """(reader, author) of every pair a block or mute in force among ``winners`` hides, as the Spark
    job's ``Winners.hidden_pairs``."""
    out: set[tuple[str, str]] = set()
    for ev in winners:
        if isinstance(ev, MuteChange) and ev.hiding:
            out.add((ev.muter_id, ev.muted_id))
        elif isinstance(ev, BlockChange) and ev.hiding:
            out |= {(ev.blocker_id, ev.blocked_id), (ev.blocked_id, ev.blocker_id)}
    return out

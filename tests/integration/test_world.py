"""The session's streamed world itself (tests/support/world.py): the corpus exercises what the world
promises, every home timeline read through gRPC equals the reference after phase 1 (with several pull
authors read-time merged) and again after phase 2 (streamed by a stream restarted from the checkpoint,
with an author crossed up to a pull author and one fallen back to a pushed one), a pull author's user
timeline pages for any reader with its display names, the stream goes on after bad input and
its /metrics page counts every record it read and every dead letter, and each garbage record became
exactly one dead letter naming its source record and the reason."""

from __future__ import annotations

import json
import time
from collections import Counter

from feed_service.kafka.offsets import SOURCE_ROLES, watermarks
from feed_service.workload.generator import in_degrees
from tests.dashboard import dashboard_metric_names, exported_names
from feed_service.api import timeline_pb2 as pb
from feed_service.core.reference import reference_entries, reference_tables, reference_user_timelines
from tests.support.pipeline import GARBAGE, GARBAGE_CODES, consume_all, read_all_home_timelines, read_table
from tests.support.reads import entry_key
from tests.support.world import INBOX_CAP, PULL_THRESHOLD, TRIM_SLACK, World


def _differences(read: dict[str, list], expected: dict[str, list]) -> dict[str, tuple]:
    """Per user whose timeline differs: (what was read, what the reference has), as (tweet id, version,
    display name) triples."""
    def short(entries: list) -> list[tuple]:
        return [(e["tweet_id"], e["version"], e["author_display_name"]) for e in entries]

    return {u: (short(read.get(u, [])), short(expected.get(u, [])))
            for u in sorted(set(read) | set(expected)) if read.get(u) != expected.get(u)}


def test_the_corpus_exercises_every_rule(world: World) -> None:
    everything = world.phase1 + world.phase2
    kinds = Counter((e["type"], e.get("op")) for e in everything)
    for kind in (("tweet", "upsert"), ("tweet", "delete"), ("follow", "follow"), ("follow", "unfollow"),
                 ("profile", None), ("block", "block"), ("block", "unblock"), ("mute", "mute"),
                 ("mute", "unmute"), ("repost", "repost"), ("repost", "unrepost")):
        assert kinds[kind] > 0, kind
    assert sum(1 for e in everything if e["type"] == "tweet" and e.get("in_reply_to_tweet_id")) > 0
    versions = Counter(e["tweet_id"] for e in everything if e["type"] == "tweet" and e["op"] == "upsert")
    assert any(n > 1 for n in versions.values())  # edits
    before, after = in_degrees(world.phase1), in_degrees(everything)
    assert any(before.get(a, 0) < PULL_THRESHOLD <= n for a, n in after.items())  # an author crosses up
    assert any(n >= PULL_THRESHOLD > after.get(a, 0) for a, n in before.items())  # and one falls back
    pull_authors = {a for a, n in after.items() if n >= PULL_THRESHOLD}
    assert any(e["type"] == "repost" and e.get("reposter_id", e.get("user_id")) in pull_authors
               for e in everything)  # pull reposters
    uncapped = world.tables()
    whole = reference_entries(uncapped, inbox_cap=None)
    assert sum(1 for t in whole.values() if len(t) > INBOX_CAP + TRIM_SLACK) >= 10  # trims
    assert any(e.get("show_reposts") is False for e in everything)  # follows with reposts turned off
    options_on = [dict(e, show_reposts=True) if e.get("show_reposts") is False else e for e in world.events]
    assert reference_entries(reference_tables(options_on), inbox_cap=None) != whole  # ... which take entries out


def _pull_authors(world: World) -> set[str]:
    """The authors of the world's ``pull_follows`` rows (those read-time merged)."""
    return {a for _, a in read_table(world.settings, "SELECT follower_id, author_id FROM pull_follows")}


def test_phase1_pages_equal_the_reference_with_pull_authors(world: World) -> None:
    assert len(_pull_authors(world) & set(in_degrees(world.phase1))) >= 3  # several read-time merged
    with world.server() as server:
        read = read_all_home_timelines(server, world.readers, page_size=6)
    assert _differences(read, {u: t for u, t in world.reference().items() if u in world.readers}) == {}


def test_a_pull_authors_user_timeline_pages_for_any_reader_with_display_names(world: World) -> None:
    """GetUserTimeline of the pull author with the most entries: its live tweets and reposts, newest
    first, in pages of 2, read with the token of a user who is not the author nor a service; each of
    its own tweets carries the display name the reference gives it in home timelines."""
    tables = world.tables()
    own = reference_user_timelines(tables, inbox_cap=INBOX_CAP)
    star = max(sorted(_pull_authors(world) & set(in_degrees(world.phase1))), key=lambda a: len(own.get(a, [])))
    names = {e["tweet_id"]: e["author_display_name"] for t in world.reference().values() for e in t
             if e["author_id"] == star and not e.get("reposted_by")}
    with world.server() as server:
        server.changes_applied()
        entries, token = [], ""
        while True:
            page = server.stub().GetUserTimeline(pb.GetUserTimelineRequest(user_id=star, page_size=2, page_token=token),
                                                 metadata=server.auth("someone-else"), timeout=10)
            entries += list(page.entries)
            token = page.next_page_token
            if not token:
                break
    assert len(own[star]) > 2 and [entry_key(e) for e in entries] == [entry_key(e) for e in own[star]]
    named = [(e.tweet_id, e.author_display_name or None) for e in entries
             if not e.reposted_by and e.tweet_id in names]
    assert named and named == [(tid, names[tid]) for tid, _ in named]


def test_the_stream_goes_on_after_bad_input_and_its_metrics_count_every_record_and_dead_letter(
        world: World) -> None:
    """Phase 1: more garbage and edits of the world's tweets land after the first; the job keeps
    running, the pages equal the reference, and its /metrics page (spark_jobs/stream/metrics.py) has
    every stream series the Grafana dashboard charts, counts every record of its input topics once
    (none replayed: one process since offset 0) and every dead letter, and its lag came down to 0 (it
    is refreshed every few seconds, hence the wait)."""
    edits = [{**e, "text": "later: " + e["text"], "version": e["version"] + 1000}
             for e in world.phase1 if e["type"] == "tweet" and e["op"] == "upsert"][:20]
    world.publish(edits, GARBAGE[:2])
    assert world.stream.proc is not None and world.stream.proc.poll() is None
    with world.server() as server:
        read = read_all_home_timelines(server, world.readers, page_size=6)
    assert _differences(read, {u: t for u, t in world.reference().items() if u in world.readers}) == {}

    _, high = watermarks(world.settings, SOURCE_ROLES)  # the stream's input: sources, reads, refills
    records = sum(n for parts in high.values() for n in parts.values())
    wanted = {name for name in dashboard_metric_names() if name.startswith("feed_stream_")}
    deadline = time.monotonic() + 30
    while True:
        series = exported_names(world.stream.metrics_text())
        done = (wanted <= series.keys() and series["feed_stream_consumer_lag"] == 0
                and series["feed_stream_input_rows_total"] >= records)
        if done or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert wanted <= series.keys(), f"missing: {sorted(wanted - series.keys())}"
    assert series["feed_stream_restarts_total"] == 0
    assert series["feed_stream_batches_total"] > 0 and series["feed_stream_rows_written_total"] > 0
    assert series["feed_stream_input_rows_total"] == records
    # the world's garbage, these two again, and any bad records tests published (test_hybrid_fanout.py)
    assert series["feed_stream_dead_letters_total"] == len(world.garbage) >= len(GARBAGE) + 2
    assert series["feed_stream_consumer_lag"] == 0
    assert series["feed_stream_state_keys"] > 0 and series["feed_stream_state_bytes"] > 0


def test_the_garbage_became_dead_letters(world: World) -> None:
    """One dead letter per bad record, each naming its exact source record and the reason (the
    reasons of the world's garbage here; a test that publishes a bad record of its own checks its
    reason itself: test_hybrid_fanout.py's self-block)."""
    codes = {raw: code for (_, raw), code in zip(GARBAGE, GARBAGE_CODES)}
    expected = sorted((f"{d.topic}/{d.partition}/{d.offset}", d.topic, d.partition, d.offset, d.value,
                       codes.get(d.value)) for d in world.garbage)
    topic = world.settings.topic("dead_letter")
    letters = consume_all(world.settings, topic, expect=sum(watermarks(world.settings, ("dead_letter",))[1][topic].values()))
    got = {(m.key().decode(), r["source_topic"], r["source_partition"], r["source_offset"], r["value"].encode(),
            r["reason_code"] if r["value"].encode() in codes else None) for m in letters for r in [json.loads(m.value())]}
    # a set: a destructive test's stream on the world's topics (World.topics_for) letters them again
    assert len(expected) >= len(GARBAGE) and sorted(got) == expected


def test_phase2_from_the_restarted_stream_pages_equal_the_reference(world_phase2: World) -> None:
    world = world_phase2
    activity = (world.stream.progress() or {}).get("activity") or {}
    assert activity.get("inactive_readers", 0) > 0, activity  # readers unread since phase 1 went inactive
    before, after = in_degrees(world.phase1), in_degrees(world.phase1 + world.phase2)
    up = {a for a, n in after.items() if before.get(a, 0) < PULL_THRESHOLD <= n}
    down = {a for a, n in before.items() if n >= PULL_THRESHOLD > after.get(a, 0)}
    pulls = _pull_authors(world)
    assert up and up <= pulls  # crossed up: read-time merged now
    assert down and not down & pulls  # fell back: pushed to its remaining followers
    with world.server() as server:
        read = read_all_home_timelines(server, world.readers, page_size=6)
    assert _differences(read, {u: t for u, t in world.reference().items() if u in world.readers}) == {}

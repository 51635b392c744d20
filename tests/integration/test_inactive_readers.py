"""Inactive readers end to end on the real stack (docs/activity.md), on the streamed world's phase 2
(tests/support/world.py): its stream restarts with a 15 s inactivity window, so the readers nobody read
since phase 1 go inactive at its first batch, their inboxes dropped and their rows skipped. A read of
one is exact at once (merged from the author timelines) and brings it back: the stream asks its push
authors to rebuild its inbox, and once that is written the inbox is read again, every page equal to the
reference."""

from __future__ import annotations

import time

from feed_service.settings import Settings
from tests.support.pipeline import read_all_home_timelines, read_table
from tests.support.world import World


def _flag_and_rows(pipeline: Settings, reader: str) -> tuple[bool | None, int]:
    rows = read_table(pipeline, f"SELECT tweet_id, inbox_dropped FROM home_timeline WHERE timeline_id = '{reader}'")
    flag = rows[0][1] if rows else None
    return flag, sum(1 for r in rows if r[0] is not None)


def test_a_reader_goes_inactive_misses_writes_reads_exactly_and_comes_back(world_phase2: World) -> None:
    world = world_phase2
    pipeline, stream = world.settings, world.stream
    reference = world.reference()
    gone = (stream.progress() or {}).get("activity") or {}
    # every reader the stream wrote to in phase 1 and nobody read since (those first written in phase 2
    # stay for a window; readers of pull authors only have no inbox rows to skip)
    assert gone.get("inactive_readers", 0) >= 10 and gone.get("skipped_rows", 0) > 0, gone
    assert gone.get("dropped_rows", 0) > 0, gone
    dropped = [u for u in world.readers if u in reference and _flag_and_rows(pipeline, u) == (True, 0)]
    assert dropped  # dropped, no rows kept
    reader = max(dropped, key=lambda u: len(world.phase1_rows.get(u, [])))
    assert world.phase1_rows.get(reader)  # it had an inbox, written while first seen

    with world.server(reports=True) as server:
        # the first read of an inactive reader is exact: merged from the author timelines
        assert read_all_home_timelines(server, [reader])[reader] == reference[reader]
        time.sleep(2)  # the read report reaches the topic (produced in the background)
        deadline = time.monotonic() + 600  # batches take tens of seconds on a loaded machine
        nudge = 0
        while _flag_and_rows(pipeline, reader)[0] is not False:
            assert time.monotonic() < deadline, (stream.progress() or {}).get("activity")
            # the reader keeps reading (so it stays active), exactly while its inbox is rebuilt
            assert read_all_home_timelines(server, [reader])[reader] == reference[reader]
            nudge += 1  # a batch, for the reader's return and the rebuild's answers (a user nobody follows)
            world.publish([{"type": "profile", "user_id": "w-nudge", "version": nudge, "display_name": "n"}])
        back = (stream.progress() or {}).get("activity") or {}
        assert back.get("rebuilds", 0) >= 1 and back.get("rebuild_requests", 0) >= 1, back
        flag, rows = _flag_and_rows(pipeline, reader)
        assert rows > 0  # rebuilt: read from the inbox again
    # every page of the returning reader, and of everyone else (inactive: merged), is exact (read by a
    # server that reports no reads: the others stay as they are for the tests after this one)
    with world.server() as server:
        read = read_all_home_timelines(server, world.readers, page_size=6)
    assert read[reader] == reference[reader]
    assert {u: rows for u, rows in read.items() if rows} == {u: reference[u] for u in world.readers if u in reference}

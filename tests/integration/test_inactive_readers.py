"""Inactive readers end to end on the real stack (docs/activity.md): readers nobody reads go inactive,
their inboxes are dropped and the stream skips their rows; a read of one is exact at once (merged from
the author timelines) and brings it back: the stream asks its push authors to rebuild its inbox, and
once that is written the inbox is read again, every page equal to the reference."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from feed_service.core.reference import reference_timelines
from feed_service.ops.provision import provision
from feed_service.settings import Settings
from feed_service.workload.generator import generate

from tests.support.pipeline import StreamProcess, grpc_server, publish, read_all_home_timelines, read_table, running

CAP, SLACK, THRESHOLD = 20, 5, 6
WINDOW_S = 15


def _flag_and_rows(pipeline: Settings, reader: str) -> tuple[bool | None, int]:
    rows = read_table(pipeline, f"SELECT tweet_id, inbox_dropped FROM home_timeline WHERE timeline_id = '{reader}'")
    flag = rows[0][1] if rows else None
    return flag, sum(1 for r in rows if r[0] is not None)


def test_a_reader_goes_inactive_misses_writes_reads_exactly_and_comes_back(
        settings: Settings, unique: str, tmp_path: Path) -> None:
    pipeline = replace(settings.with_topic_suffix(f".{unique}"), keyspace=f"feed_{unique}", inbox_cap=CAP,
                       trim_slack=SLACK, pull_threshold=THRESHOLD, inactive_after_s=WINDOW_S,
                       read_report_interval_s=1)
    provision(pipeline)
    prefix = f"ia{unique[-6:]}-"
    events = list(generate(users=30, events=900, seed=4, mean_following=6, prefix=prefix))
    first, second, third = events[:500], events[500:800], events[800:]
    everyone = sorted({e["follower_id"] for e in events if e["type"] == "follow"})
    reference = reference_timelines(events, inbox_cap=CAP)
    reader = max((u for u in everyone if u in reference), key=lambda u: len(reference[u]))

    publish(pipeline, first)
    args = ["--max-offsets-per-trigger", "400"]
    with running(StreamProcess(pipeline, tmp_path / "ckpt", log_file=tmp_path / "run.log", extra_args=args)) as stream:
        stream.wait_caught_up()
        assert _flag_and_rows(pipeline, reader)[1] > 0  # written while first seen
        time.sleep(WINDOW_S + 1)  # nobody reads: everyone goes at the next batch
        publish(pipeline, second)
        stream.wait_caught_up()
        gone = (stream.progress() or {}).get("activity") or {}
        # every reader the stream wrote to in the first part (those first written in the second stay
        # for a window; readers of pull authors only have no inbox rows to skip)
        assert gone.get("inactive_readers", 0) >= 10 and gone.get("skipped_rows", 0) > 0, gone
        assert gone.get("dropped_rows", 0) > 0, gone
        assert _flag_and_rows(pipeline, reader) == (True, 0)  # dropped, no rows kept

        with grpc_server(pipeline) as server:
            # the first read of an inactive reader is exact: merged from the author timelines
            before = reference_timelines(first + second, inbox_cap=CAP)
            assert read_all_home_timelines(server, [reader])[reader] == before.get(reader, [])
            time.sleep(2)  # the read report reaches the topic (produced in the background)
            publish(pipeline, third)  # batches: the reader comes back, its rebuild is asked and answered
            stream.wait_caught_up()
            deadline = time.monotonic() + 120
            while _flag_and_rows(pipeline, reader)[0] is not False:
                assert time.monotonic() < deadline, (stream.progress() or {}).get("activity")
                # the reader keeps reading (so it stays active), exactly while its inbox is rebuilt
                assert read_all_home_timelines(server, [reader])[reader] == reference[reader]
                publish(pipeline, [{"type": "profile", "user_id": f"{prefix}nudge", "version": int(time.time()),
                                    "display_name": "n"}])  # a batch, for the answers' check
                stream.wait_caught_up()
            back = (stream.progress() or {}).get("activity") or {}
            assert back.get("rebuilds", 0) >= 1 and back.get("rebuild_requests", 0) >= 1, back
            flag, rows = _flag_and_rows(pipeline, reader)
            assert rows > 0  # rebuilt: read from the inbox again
            # every page of the returning reader, and of everyone else (inactive: merged), is exact
            read = read_all_home_timelines(server, everyone, page_size=6)
    assert read[reader] == reference[reader]
    assert {u: rows for u, rows in read.items() if rows} == {u: reference[u] for u in everyone if u in reference}

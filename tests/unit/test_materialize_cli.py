"""``python -m feed_service materialize``, end to end in a subprocess (its output contract: docs/join-engine.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from feed_service.core.reference import reference_timelines

ROOT = Path(__file__).parents[2]

LINES = [
    '{"type":"follow","op":"follow","follower_id":"ann","followee_id":"bob","version":1}',
    '{"type":"tweet","op":"upsert","tweet_id":"t1","author_id":"bob","version":1,"created_at":10,"text":"hi","profile_version":1}',
    "",
    "garbage",
    '{"type":"tweet","op":"upsert","tweet_id":"t2","author_id":"bob","version":1,"created_at":20,"text":"yo","profile_version":2}',
    '{"type":"follow","op":"follow","follower_id":"cat","followee_id":"cat","version":1}',
    '{"type":"profile","user_id":"bob","version":1,"display_name":"Bob"}',
    '{"type":"follow","op":"follow","follower_id":"cat","followee_id":"ann","version":1}',
    '{"type":"tweet","op":"upsert","tweet_id":"t1","author_id":"bob","version":2,"created_at":10,"text":"hi!","profile_version":1}',
]


def run_cli(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "feed_service", "materialize", str(path), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_materialize_prints_timelines_and_reports_rejects(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(LINES) + "\n")
    proc = run_cli(path, "--batch-size", "2")
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    assert document == {
        "timelines": {
            "ann": [
                {"tweet_id": "t2", "author_id": "bob", "version": 1, "text": "yo", "author_display_name": None},
                {"tweet_id": "t1", "author_id": "bob", "version": 2, "text": "hi!", "author_display_name": "Bob"},
            ]
        },
        "lists": {},
        "rejected": 2,
    }
    assert document["timelines"] == reference_timelines(LINES)
    assert "line 4: bad_json" in proc.stderr
    assert "line 6: self_follow" in proc.stderr


def test_batch_size_and_inbox_cap_options(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(LINES))
    one = json.loads(run_cli(path, "--batch-size", "1").stdout)
    capped = json.loads(run_cli(path, "--batch-size", "100", "--inbox-cap", "1").stdout)
    assert one["timelines"] == reference_timelines(LINES)
    assert [e["tweet_id"] for e in capped["timelines"]["ann"]] == ["t2"]


def test_missing_file_and_bad_options_fail(tmp_path: Path) -> None:
    assert run_cli(tmp_path / "nope.jsonl").returncode == 2
    assert run_cli(tmp_path / "nope.jsonl", "--batch-size", "0").returncode == 2


def test_inbox_cap_below_one_is_refused_before_reading(tmp_path) -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "feed_service", "materialize", "--inbox-cap", "0",
                           str(tmp_path / "missing.jsonl")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "inbox cap must be an integer >= 1" in proc.stderr


def test_pull_threshold_changes_nothing_in_the_output(tmp_path) -> None:
    """The same events give the same JSON whether every author is push or most are pull."""
    import json
    import subprocess
    import sys

    from feed_service.core.reference import reference_timelines
    from feed_service.workload.generator import generate

    events = list(generate(users=60, events=600, seed=3))
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    outputs = []
    for threshold in ("1", "3", "100000"):
        proc = subprocess.run([sys.executable, "-m", "feed_service", "materialize", "--pull-threshold", threshold,
                               str(path)], capture_output=True, text=True, timeout=120, check=True)
        outputs.append(json.loads(proc.stdout))
    assert outputs[0] == outputs[1] == outputs[2]
    assert outputs[0]["timelines"] == reference_timelines([json.dumps(e) for e in events])


def test_trim_slack_option_trims_like_the_stream(tmp_path: Path) -> None:
    # Cap 1, slack 0: bob's t1 is trimmed when dan's t2 arrives; after t2 is deleted the trimmed
    # inbox is refilled from bob's author timeline (docs/trimming.md#refill): both show t1 again.
    lines = [LINES[0], LINES[1], LINES[0].replace("bob", "dan"), LINES[4].replace("bob", "dan"),
             '{"type":"tweet","op":"delete","tweet_id":"t2","author_id":"dan","version":2}']
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines))
    trimmed = json.loads(run_cli(path, "--batch-size", "1", "--inbox-cap", "1", "--trim-slack", "0").stdout)
    roomy = json.loads(run_cli(path, "--batch-size", "1", "--inbox-cap", "1", "--trim-slack", "5").stdout)
    assert trimmed["timelines"] == roomy["timelines"] == reference_timelines(lines, inbox_cap=1) != {}
    bad = run_cli(path, "--trim-slack", "-1")
    assert bad.returncode == 2 and "trim slack must be an integer >= 0" in bad.stderr


def test_reposts_and_filtered_replies_print_as_the_reference_has_them(tmp_path: Path) -> None:
    # A generated history with reposts and replies (docs/reposts-and-replies.md): the JSON entries
    # name the reposter and the parent, and the timelines equal the reference's.
    path = tmp_path / "events.jsonl"
    made = subprocess.run([sys.executable, "-m", "feed_service", "workload", "--users", "150", "--count", "3000",
                           "--repost-share", "0.1", "--reply-share", "0.2", "--out", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    proc = run_cli(path, "--batch-size", "500")
    assert proc.returncode == 0, proc.stderr
    timelines = json.loads(proc.stdout)["timelines"]
    assert timelines == reference_timelines(path.read_text().splitlines())
    entries = [e for timeline in timelines.values() for e in timeline]
    assert any("reposted_by" in e and "reposted_at" in e for e in entries)
    assert any("in_reply_to_author_id" in e for e in entries)


def test_trimmed_timelines_equal_the_reference_exactly_after_removals(tmp_path: Path) -> None:
    # A workload history with deletes, unfollows, blocks and mutes, at a small cap so that inboxes
    # are trimmed and then lose rows: refilled, they equal the definition at any slack, batching
    # and order (docs/trimming.md#refill). Before the refill some timelines came out short.
    import random

    from feed_service.workload.generator import generate

    events = [json.dumps(e) for e in generate(users=60, events=4_000, seed=5, mean_following=12)]
    expected = reference_timelines(events, inbox_cap=40)
    shuffled = events[:]
    random.Random(1).shuffle(shuffled)
    for lines, args in ((events, ("--trim-slack", "0")), (events, ("--trim-slack", "7", "--batch-size", "333")),
                        (shuffled, ("--trim-slack", "3", "--batch-size", "500"))):
        path = tmp_path / "events.jsonl"
        path.write_text("\n".join(lines) + "\n")
        proc = run_cli(path, "--inbox-cap", "40", *args)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["timelines"] == expected, args


def test_materialize_prints_every_live_list_s_timeline_as_the_reference_does(tmp_path: Path) -> None:
    from feed_service.core.reference import reference_lists

    lines = [*LINES,
             '{"type":"list","op":"create","list_id":"l1","owner_id":"cat","version":1,"name":"bobs"}',
             '{"type":"list_member","op":"add","list_id":"l1","member_id":"bob","version":1}',
             '{"type":"list","op":"create","list_id":"l2","owner_id":"cat","version":1,"name":"empty"}',
             '{"type":"list","op":"create","list_id":"l3","owner_id":"cat","version":1,"name":"gone"}',
             '{"type":"list","op":"delete","list_id":"l3","owner_id":"cat","version":2}']
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    document = json.loads(run_cli(path, "--batch-size", "3").stdout)
    assert document["lists"] == reference_lists(lines)
    assert [e["tweet_id"] for e in document["lists"]["l1"]] == ["t2", "t1"] and document["lists"]["l2"] == []
    assert "l3" not in document["lists"] and document["timelines"] == reference_timelines(lines)

"""``feedctl demo``: the main job end to end on the local stack, narrated step by step.

Long (about 600 lines) on purpose: one narrated scenario whose steps share the stack, the stream and
the published events; its reads and checks are helpers of that one script.

stack up + provisioning -> streaming join (Spark) -> gRPC server -> a timed demo workload (with
blocks and mutes) -> wait until the stream has caught up -> print one home timeline read through
the gRPC API, and check every page of it against the engine's batch reference over the same events;
then that user mutes the author most present in it and unmutes again: the author's entries leave
the timeline and come back exactly (docs/blocks-and-mutes.md), and a watch of that timeline is
pushed both changes through the view's change topic (docs/api.md#watch); then it keeps following
the followee whose reposts bring most of its entries but turns that followee's reposts off and on
again (docs/lists.md#per-follow-options); then it lists its three most present followees and reads
the list's timeline (GetListTimeline, which another user is refused), makes the list exclusive (the
members' entries leave its home timeline) and non-exclusive again (they come back exactly:
docs/lists.md); last, the server's freshness and read cache figures.

The stack is left running (``feedctl stack down`` stops it); the stream and the server are stopped
at the end unless ``--keep-running``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import time
import uuid
from itertools import islice
from pathlib import Path
from typing import Any, Iterator

from feed_service.core.rules import is_pull_author, is_pull_reposter
from feed_service.core.trim_tracker import default_margin
from feed_service.cli.arg_types import pull_threshold
from feed_service.settings import Settings

#: The demo's FEED_INACTIVE_AFTER_S: short enough that readers nobody reads go inactive during a
#: one-minute workload, long enough that the printed reader does not between its reads.
DEMO_INACTIVE_AFTER_S = 20
from feed_service.stack.config import SINGLE, TOPOLOGIES, StackConfig, free_ports


#: Low enough that the demo workload's most followed authors are pull authors (the service's
#: default, measured for production-sized graphs, is in feed_service.core.join).
DEMO_PULL_THRESHOLD = 150
#: Reposts among the workload's changes and replies among its new tweets (docs/reposts-and-replies.md).
DEMO_REPOST_SHARE = 0.08
DEMO_REPLY_SHARE = 0.2


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("demo", help="run the whole pipeline on the local stack and print a timeline")
    parser.add_argument("--users", type=int, default=2000, help="demo workload users (default 2000)")
    parser.add_argument("--rate", type=float, default=200.0, help="workload events/s after set-up (default 200)")
    parser.add_argument("--duration", type=float, default=60.0, help="workload seconds (default 60)")
    parser.add_argument("--seed", type=int, default=None, help="workload seed (default: random)")
    parser.add_argument("--page-size", type=int, default=10, help="entries printed (default 10)")
    parser.add_argument("--pull-threshold", type=pull_threshold, default=str(DEMO_PULL_THRESHOLD),
                        help="active followers from which an author's tweets are merged in at read time (default"
                             f" {DEMO_PULL_THRESHOLD}: the demo's most followed authors; docs/fan-out.md)")
    parser.add_argument("--repost-share", type=float, default=DEMO_REPOST_SHARE,
                        help=f"share of the workload's changes that are reposts (default {DEMO_REPOST_SHARE})")
    parser.add_argument("--reply-share", type=float, default=DEMO_REPLY_SHARE,
                        help=f"share of the new tweets that are replies (default {DEMO_REPLY_SHARE})")
    parser.add_argument("--inactive-after", type=int, default=DEMO_INACTIVE_AFTER_S, metavar="S",
                        help=f"FEED_INACTIVE_AFTER_S of the demo (default {DEMO_INACTIVE_AFTER_S}, so that readers"
                             " who do not read go inactive within it and one can be seen coming back;"
                             " docs/activity.md)")
    parser.add_argument("--keep-running", action="store_true", help="leave the stream and the server running")
    parser.add_argument("--topology", choices=TOPOLOGIES, default=SINGLE,
                        help="single (default): one node per service, Spark in local mode; cluster: three Kafka "
                             "brokers, three Cassandra nodes (RF 3, LOCAL_QUORUM) and the stream on a Spark "
                             "standalone master with two workers (docs/cluster.md)")
    parser.set_defaults(handler=run)


class _Narrator:
    def __init__(self) -> None:
        self.started = time.monotonic()

    def say(self, message: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {message}", flush=True)


def _recording(events: Iterator[dict[str, Any]], sink: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for event in events:
        sink.append(event)
        yield event


def _start_server(settings: Settings, stack_env: dict[str, str], secret: str, port: int, metrics_port: int,
                  log_file: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, **stack_env, **settings.to_env(), "FEED_AUTH_SECRET": secret, "FEED_GRPC_HOST": "127.0.0.1",
           "FEED_GRPC_PORT": str(port), "FEED_METRICS_HOST": "127.0.0.1", "FEED_METRICS_PORT": str(metrics_port)}
    with log_file.open("ab") as log:
        return subprocess.Popen([sys.executable, "-m", "feed_service", "serve"], env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_serving(address: str, timeout: float = 60.0) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from feed_service.server.client_channel import open_channel

    deadline = time.monotonic() + timeout
    with open_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.5)
    raise RuntimeError(f"gRPC server at {address} not SERVING within {timeout:.0f}s")


def _read_timeline(address: str, token: str, user_id: str, page_size: int) -> tuple[list[Any], list[Any]]:
    """(first page, every entry over all pages) through GetHomeTimeline."""
    from feed_service.api import timeline_pb2, timeline_pb2_grpc
    from feed_service.server.client_channel import open_channel

    metadata = [("authorization", f"Bearer {token}")]
    with open_channel(address) as channel:
        stub = timeline_pb2_grpc.TimelineServiceStub(channel)
        first = stub.GetHomeTimeline(timeline_pb2.GetHomeTimelineRequest(user_id=user_id, page_size=page_size),
                                     metadata=metadata, timeout=10)
        entries, reply = list(first.entries), first
        while reply.next_page_token:
            reply = stub.GetHomeTimeline(
                timeline_pb2.GetHomeTimelineRequest(user_id=user_id, page_size=200, page_token=reply.next_page_token),
                metadata=metadata, timeout=10)
            entries.extend(reply.entries)
        full = list(first.entries) + entries[len(first.entries):]
        return list(first.entries), full


def _read_user_timeline(address: str, token: str, author_id: str, page_size: int) -> list[Any]:
    """The first page of an author's own timeline through GetUserTimeline."""
    from feed_service.api import timeline_pb2, timeline_pb2_grpc
    from feed_service.server.client_channel import open_channel

    with open_channel(address) as channel:
        stub = timeline_pb2_grpc.TimelineServiceStub(channel)
        reply = stub.GetUserTimeline(timeline_pb2.GetUserTimelineRequest(user_id=author_id, page_size=page_size),
                                     metadata=[("authorization", f"Bearer {token}")], timeout=10)
        return list(reply.entries)


def _print_entries(entries: list[Any], pull: set[str], pull_reposters: frozenset[str] = frozenset()) -> None:
    for entry in entries:
        at = entry.reposted_at_ms if entry.reposted_by else entry.created_at_ms
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at / 1000))
        name = entry.author_display_name or entry.author_id
        mark = "*" if entry.author_id in pull and not entry.reposted_by else " "
        print(f"    {when} {mark} {name:<24} {entry.text[:68]}")
        if entry.reposted_by:
            by = entry.reposted_by_display_name or entry.reposted_by
            merged = " * (a pull reposter: merged in at read time)" if entry.reposted_by in pull_reposters else ""
            print(f"    {'':21}   \u21bb reposted by {by}{merged}")
        if entry.in_reply_to_author_id:
            print(f"    {'':21}   \u21b3 in reply to {entry.in_reply_to_author_id} ({entry.in_reply_to_tweet_id})")


def _served(entries: list[Any]) -> list[tuple]:
    """Entries read through the API, as comparable tuples (repost and reply fields included)."""
    return [(e.tweet_id, e.author_id, e.version, e.text, e.author_display_name or None, e.reposted_by or None,
             e.reposted_at_ms if e.reposted_by else None, e.in_reply_to_author_id or None) for e in entries]


def _wanted(entries: list[dict[str, Any]]) -> list[tuple]:
    """The reference's entries (feedctl materialize's shape) as :func:`_served` tuples."""
    return [(e["tweet_id"], e["author_id"], e["version"], e["text"], e["author_display_name"], e.get("reposted_by"),
             e.get("reposted_at"), e.get("in_reply_to_author_id")) for e in entries]


def run(args: argparse.Namespace) -> int:
    from feed_service.core.join import DEFAULT_INBOX_CAP
    from feed_service.core.reference import exact_timelines, reference_tables, reference_timelines, rule_violations
    from feed_service.ops.provision import provision
    from feed_service.server import auth
    from feed_service.stack.local_stack import LocalStack, StackError
    from feed_service.stack.stream_process import StreamNotReady, StreamProcess
    from feed_service.workload.generator import generate
    from feed_service.workload.sinks import publish_workload

    say = _Narrator().say
    stack_config = StackConfig.from_env(topology=args.topology)
    # the stack's own nodes, replication and consistency; everything else from the environment
    stack_env = stack_config.environment()
    settings = Settings.from_env({**os.environ, **stack_env}).replace(
        pull_threshold=args.pull_threshold, inactive_after_s=args.inactive_after,
        read_report_interval_s=max(1, min(args.inactive_after // 4, 3600)) if args.inactive_after else 3600)
    # This process reads through the gRPC API as a client of the stack: TLS and its client certificate
    # when the stack is secured (docs/security.md).
    os.environ.update({k: v for k, v in stack_env.items() if k.startswith("FEED_GRPC_") and not k.startswith("FEED_GRPC_TLS")})
    run_id = uuid.uuid4().hex[:6]
    seed = args.seed if args.seed is not None else secrets.randbelow(1_000_000)
    logs = stack_config.data_dir / "demo"
    logs.mkdir(parents=True, exist_ok=True)

    say(f"1/6 local stack ({stack_config.topology}): Kafka {stack_config.kafka_bootstrap}, Cassandra "
        f"{','.join(stack_config.hosts)}:{stack_config.cassandra_port}"
        + (f" (replication {settings.cassandra_replication}, {settings.write_consistency} writes and reads), "
           f"Spark {stack_config.spark_master_url}" if stack_config.spark_master_url else "")
        + f" (data in {stack_config.data_dir})")
    if stack_config.secure:
        say("    secured (docs/security.md): TLS on every link from the stack's own CA, a SCRAM and a Cassandra login "
            "per role (producer, stream, server, admin), Kafka ACLs and CQL grants of least privilege"
            + (", Spark's RPC authenticated and encrypted" if stack_config.spark_master_url else ""))
    try:
        timings = LocalStack(stack_config).up()
    except StackError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    say("    " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))
    for report in provision(settings):
        say(f"    topic {report}")
    say(f"    keyspace {settings.keyspace}: home_timeline, author_timeline, pull_follows, tweets, profiles, blocks,"
        " home_extras, user_reposts, reader_visible, per_reader_inputs")

    checkpoint = stack_config.data_dir / "checkpoints" / "stream"
    say(f"2/6 streaming join (Spark, checkpoint {checkpoint}; log {logs / 'stream.log'}); authors with at least"
        f" {settings.pull_threshold} active followers are merged in at read time instead of fanned out")
    spark = {"FEED_SPARK_MASTER": stack_config.spark_master_url} if stack_config.spark_master_url else {}
    if "FEED_SPARK_AUTH_SECRET_FILE" in stack_env:
        spark["FEED_SPARK_AUTH_SECRET_FILE"] = stack_env["FEED_SPARK_AUTH_SECRET_FILE"]
    stream = StreamProcess(settings, checkpoint, log_file=logs / "stream.log",
                           status_file=logs / "stream-progress.json", env=spark).start()
    secret = secrets.token_hex(32)
    port, metrics_port = free_ports(2)
    address = f"127.0.0.1:{port}"
    say(f"3/6 gRPC TimelineService on {address}{' (TLS)' if stack_config.secure else ''}, metrics on http://127.0.0.1:{metrics_port}/metrics"
        f" (log {logs / 'server.log'}); it consumes the view's change topic {settings.topic('timeline_changes')}"
        " to push watches and keep its read cache exact")
    server = _start_server(settings, stack_env, secret, port, metrics_port, logs / "server.log")
    try:
        _wait_serving(address)
        say("    server SERVING (health check)")

        published: list[dict[str, Any]] = []
        prefix = f"demo{run_id}-"
        say(f"4/6 workload: {args.users} users (power-law follow graph), then {args.rate:.0f} events/s for "
            f"{args.duration:.0f}s, seed {seed}, ids prefixed {prefix!r}")
        # Real time for created_at, so the printed timeline reads like one.
        clock = {"start_ms": int(time.time() * 1000), "events_per_second": args.rate}
        shares = {"repost_share": args.repost_share, "reply_share": args.reply_share}
        events = generate(users=args.users, events=None, seed=seed, prefix=prefix, **clock, **shares)
        setup_count = sum(1 for _ in generate(users=args.users, events=0, seed=seed, prefix=prefix, **clock,
                                              **shares))
        publishing_from = time.monotonic()
        publish_workload(settings, _recording(islice(events, setup_count), published))
        say(f"    set-up published: {setup_count} profiles and follows")
        stats = publish_workload(settings, _recording(events, published), rate=args.rate,
                                 duration=args.duration,
                                 on_tick=lambda s: say(f"    {s.sent} events sent ({s.rate:.0f}/s)"))
        hides = [e for e in published if e["type"] in ("block", "mute")]
        reposts = sum(1 for e in published if e["type"] == "repost")
        replies = sum(1 for e in published if e.get("in_reply_to_author_id"))
        say(f"    published {stats.sent} changes in {stats.elapsed:.1f}s ({stats.rate:.0f}/s), {len(hides)} of them"
            f" blocks, mutes and their reversals, {reposts} reposts and unreposts, {replies} replies")

        published_at = time.monotonic()
        say("5/6 waiting for the stream to catch up with the topics")
        progress = stream.wait_caught_up(timeout=600)
        caught_up_at = time.monotonic()
        join = progress["timeline-join"]
        say(f"    caught up: batch {join['batch_id']}, {progress['timeline_rows_written']} timeline rows written "
            f"by this run")
        say(f"    catch-up: {len(published)} events in {caught_up_at - publishing_from:.1f}s from the first publish,"
            f" {len(published) / max(caught_up_at - publishing_from, 1e-9):.0f} events/s;"
            f" {caught_up_at - published_at:.1f}s after the last")
        say("    " + _bounds_line(progress, settings))

        expected = reference_timelines(published)
        if not expected:
            say("    the workload produced no timeline entries (too few events?)")
            return 1
        tables = reference_tables(published)
        followers: dict[str, int] = {}
        for (_, followee), edge in tables.follows.items():
            followers[followee] = followers.get(followee, 0) + edge[1]
        pull = {a for a, n in followers.items() if is_pull_author(n, settings.pull_threshold)}
        say(f"    {len(pull)} pull authors (>= {settings.pull_threshold} followers, the largest"
            f" {max(followers.values(), default=0)}); their tweets are in no inbox")
        # The busiest timeline that follows a pull author among those the view must give exactly
        # (docs/trimming.md: at the cap, an entry a removal makes room for need not come back).
        # The stream's background trims cut from cap + slack - margin on (docs/trimming.md).
        exact = exact_timelines(published, inbox_cap=settings.inbox_cap,
                                trim_slack=settings.trim_slack - default_margin(settings.trim_slack))
        below_cap = ([u for u in expected if u in exact and len(expected[u]) < DEFAULT_INBOX_CAP]
                     or [u for u in expected if len(expected[u]) < DEFAULT_INBOX_CAP] or list(expected))
        seers: dict[str, int] = {}
        for sees in tables.visible().values():
            for user in sees:
                seers[user] = seers.get(user, 0) + 1
        pull_reposters = frozenset(u for u, n in seers.items() if is_pull_reposter(n, settings.reposter_threshold))
        merged = [u for u in below_cap if any(e["author_id"] in pull for e in expected[u])] or below_cap
        # prefer a timeline that shows a pull reposter's repost too (merged in at read time)
        merged = [u for u in merged if any(e.get("reposted_by") in pull_reposters for e in expected[u])] or merged
        user_id = max(merged, key=lambda u: (len(expected[u]), u))
        token = auth.mint(secret.encode(), subject=user_id, role="user")
        first, full = _read_timeline(address, token, user_id, args.page_size)
        say(f"6/6 home timeline of {user_id} through gRPC GetHomeTimeline ({len(full)} entries, newest first;"
            f" * = a pull author's tweet, merged in at read time):")
        _print_entries(first, pull, pull_reposters)
        served = _served(full)
        want = _wanted(expected[user_id])
        shown_reposts = sum(1 for e in full if e.reposted_by)
        shown_replies = sum(1 for e in full if e.in_reply_to_author_id)
        if pull_reposters:
            say(f"    {len(pull_reposters)} pull reposters (seen by >= {settings.pull_threshold} readers): their reposts"
                f" reach no reader's extras; {sum(1 for e in full if e.reposted_by in pull_reposters)} of"
                f" {user_id}'s entries are theirs, decided at read with the pushed ones")
        say(f"    of them {shown_reposts} brought by a repost (\u21bb: one entry per tweet, at its earliest"
            f" reposter {user_id} follows) and {shown_replies} replies (\u21b3: shown as {user_id} follows both"
            " sides, or the reply is to them)")
        if user_id in exact:
            same, claim = served == want, "matches the engine's batch reference"
        else:
            whole = reference_timelines(published, inbox_cap=None)
            read = [{"tweet_id": t, "author_id": a, "version": v, "text": x, "author_display_name": n}
                    for t, a, v, x, n, *_ in served]
            same = not rule_violations({user_id: read}, whole, inbox_cap=settings.inbox_cap, exact=())
            claim = "keeps the view's rule at the cap (docs/trimming.md) against the batch reference"
        if not same:
            diverge = next((i for i, (a, b) in enumerate(zip(served, want)) if a != b), min(len(served), len(want)))
            say(f"    served {len(served)} entries, reference {len(want)}; first difference at {diverge}: "
                f"{served[diverge] if diverge < len(served) else None} vs {want[diverge] if diverge < len(want) else None}")
        say(f"    {claim} over the same {len(published)} events: "
            f"{'yes' if same else 'NO'}")
        if same:
            same = _mute_and_unmute(settings, stream, address, token, user_id, full, published, pull, say)
        if same:
            same = _reposts_off_and_on(settings, stream, address, token, user_id, full, published, say)
        if same:
            same = _a_list(settings, stream, address, secret, token, user_id, full, published, args.page_size, pull,
                           say)
        if same and user_id in exact:
            same = _filtered_reply(settings, stream, address, token, user_id, published, say)
        if same and settings.inactive_after_s:
            same = _reader_comes_back(settings, stream, address, secret, user_id, published, args.page_size, say)
        say("    " + _server_metrics_line(metrics_port))
        if pull:
            star = max(pull, key=lambda a: (followers[a], a))
            own = _read_user_timeline(address, token, star, min(args.page_size, 5))
            say(f"    GetUserTimeline of {star}, the most followed author ({followers[star]} followers):")
            _print_entries(own, pull)
        if args.keep_running:
            say(f"stream (pid {stream.proc.pid if stream.proc else '?'}) and server (pid {server.pid}) left running")
        return 0 if same else 1
    except StreamNotReady as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    finally:
        if not args.keep_running:
            stream.stop()
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()


class _Watch:
    """A WatchHomeTimeline stream read on a thread: what the server pushes, as it arrives."""

    def __init__(self, address: str, token: str, user_id: str) -> None:
        import queue
        import threading

        from feed_service.api import timeline_pb2, timeline_pb2_grpc
        from feed_service.server.client_channel import open_channel

        self.messages: queue.Queue = queue.Queue()
        self._channel = open_channel(address)
        stub = timeline_pb2_grpc.TimelineServiceStub(self._channel)
        self._call = stub.WatchHomeTimeline(timeline_pb2.WatchHomeTimelineRequest(user_id=user_id),
                                            metadata=[("authorization", f"Bearer {token}")])
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        import grpc

        try:
            for message in self._call:
                self.messages.put((time.monotonic(), message))
        except grpc.RpcError:
            pass

    def until(self, predicate: Any, timeout: float = 30.0) -> tuple[float, list[Any]] | None:
        """(arrival time of the message that satisfied ``predicate``, the messages until it), or None."""
        import queue

        taken: list[Any] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                arrived, message = self.messages.get(timeout=max(0.05, deadline - time.monotonic()))
            except queue.Empty:
                return None
            taken.append(message)
            if predicate(taken):
                return arrived, taken

    def close(self) -> None:
        self._call.cancel()
        self._channel.close()


def _until_read(address: str, token: str, user_id: str, author: str, *, gone: bool,
                timeout: float = 30.0) -> float | None:
    """When ``user_id``'s timeline through GetHomeTimeline (every page) first holds no entry of
    ``author`` (``gone``) or some (not ``gone``), polled every 50 ms; None if not within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _, entries = _read_timeline(address, token, user_id, 200)
        if any(e.author_id == author for e in entries) != gone:
            return time.monotonic()
        time.sleep(0.05)
    return None


def _mute_and_unmute(settings: Settings, stream: Any, address: str, token: str, user_id: str, full: list[Any],
                     published: list[dict[str, Any]], pull: set[str], say: Any) -> bool:
    """``user_id`` mutes the author with the most entries in its timeline, then unmutes: the entries
    must leave and come back exactly as they were (the view is its definition in both directions),
    and a watch of that timeline is pushed both changes (docs/api.md#watch)."""
    from feed_service.core.events import event_to_json
    from feed_service.kafka.producer import EventProducer

    counts: dict[str, int] = {}
    for e in full:
        counts[e.author_id] = counts.get(e.author_id, 0) + 1
    if not counts:
        return True
    author = max(counts, key=lambda a: (counts[a], a))
    theirs = {e.tweet_id for e in full if e.author_id == author}
    watch = _Watch(address, token, user_id)
    time.sleep(0.5)  # the watch has subscribed
    ok = True
    try:
        for op in ("mute", "unmute"):
            sent = time.monotonic()
            with EventProducer(settings) as producer:
                published.append(event_to_json(getattr(producer, op)(user_id, author)))
            read_at = _until_read(address, token, user_id, author, gone=op == "mute")
            if op == "mute":
                pushed = watch.until(lambda ms: theirs <= {i for m in ms for i in m.removed_tweet_ids})
            else:
                pushed = watch.until(lambda ms: theirs <= {e.tweet_id for m in ms for e in [*m.entries, *m.changed]})
            if read_at is not None:
                say(f"    GetHomeTimeline of {user_id} shows the {op} {1000 * (read_at - sent):.0f} ms after it was"
                    f" published")
            stream.wait_caught_up(timeout=300)
            if pushed is None:
                say(f"    the watch of {user_id} was not pushed the {op} within 30 s: NO")
                ok = False
            else:
                arrived, messages = pushed
                say(f"    watch of {user_id} pushed the {op}: {len(theirs)} entries "
                    f"{'removed' if op == 'mute' else 'back'} in {len(messages)} message(s),"
                    f" {1000 * (arrived - sent):.0f} ms after the {op} was published")
            _, now = _read_timeline(address, token, user_id, 200)  # exact: the read cache has applied it
            if op == "mute":
                from feed_service.core.reference import reference_timelines

                left = sum(1 for e in now if e.author_id == author)
                # A tweet the muted author reposted may stay, brought by another reposter: the
                # reference says what remains.
                good = left == 0 and _served(now) == _wanted(reference_timelines(published).get(user_id, []))
                say(f"    {user_id} mutes {author}{' *' if author in pull else ''}: {counts[author]} entries leave, "
                    f"{len(now)} remain, the rest unchanged: {'yes' if good else 'NO'}")
            else:
                good = _again(now, full, f"{user_id} unmutes {author}", say)
            ok = ok and good
    finally:
        watch.close()
    return ok


def _again(now: list[Any], full: list[Any], what: str, say: Any) -> bool:
    """Whether the timeline read ``now`` is again exactly ``full`` after ``what`` undid a change; said."""
    good = _served(now) == _served(full)
    say(f"    {what}: the timeline is again exactly the {len(full)} entries it was: {'yes' if good else 'NO'}")
    return good


def _reposts_off_and_on(settings: Settings, stream: Any, address: str, token: str, user_id: str, full: list[Any],
                        published: list[dict[str, Any]], say: Any) -> bool:
    """``user_id`` turns off the reposts of the followee whose reposts bring the most of its entries,
    keeping the follow, then turns them on again (docs/lists.md#per-follow-options): that reposter's
    entries leave (a tweet another followee reposted stays, brought by that one) while the followee's
    own tweets stay, then the timeline is again exactly what it was."""
    from feed_service.core.events import event_to_json
    from feed_service.core.reference import reference_timelines
    from feed_service.kafka.producer import EventProducer

    counts: dict[str, int] = {}
    for e in full:
        if e.reposted_by:
            counts[e.reposted_by] = counts.get(e.reposted_by, 0) + 1
    if not counts:
        return True
    reposter = max(counts, key=lambda a: (counts[a], a))
    own = sum(1 for e in full if e.author_id == reposter and not e.reposted_by)
    ok = True
    for show in (False, True):
        with EventProducer(settings) as producer:
            published.append(event_to_json(producer.follow(user_id, reposter, show_reposts=show)))
        stream.wait_caught_up(timeout=300)
        want = _wanted(reference_timelines(published).get(user_id, []))
        deadline = time.monotonic() + 30  # the read cache applies the change topic's rows shortly after
        while True:
            _, now = _read_timeline(address, token, user_id, 200)
            if _served(now) == want or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if not show:
            left = sum(1 for e in now if e.reposted_by == reposter)
            kept = sum(1 for e in now if e.author_id == reposter and not e.reposted_by)
            good = left == 0 and kept == own and _served(now) == want
            say(f"    {user_id} keeps following {reposter} with reposts turned off: the {counts[reposter]} entries"
                f" its reposts brought leave, its {own} own tweets stay: {'yes' if good else 'NO'}")
        else:
            good = _again(now, full, f"{user_id} turns {reposter}'s reposts back on", say)
        ok = ok and good
    return ok


def _read_list(address: str, token: str, user_id: str, list_id: str, page_size: int) -> tuple[list[Any], list[Any]]:
    """(first page, every entry over all pages) of ``list_id`` read by ``user_id`` through GetListTimeline."""
    from feed_service.api import timeline_pb2, timeline_pb2_grpc
    from feed_service.server.client_channel import open_channel

    metadata = [("authorization", f"Bearer {token}")]
    with open_channel(address) as channel:
        stub = timeline_pb2_grpc.TimelineServiceStub(channel)
        request = timeline_pb2.GetListTimelineRequest(user_id=user_id, list_id=list_id, page_size=page_size)
        reply = stub.GetListTimeline(request, metadata=metadata, timeout=10)
        first, entries = list(reply.entries), list(reply.entries)
        while reply.next_page_token:
            request = timeline_pb2.GetListTimelineRequest(user_id=user_id, list_id=list_id, page_size=200,
                                                          page_token=reply.next_page_token)
            reply = stub.GetListTimeline(request, metadata=metadata, timeout=10)
            entries.extend(reply.entries)
        return first, entries


def _list_refused(address: str, secret: str, other: str, list_id: str) -> str:
    """The status code another user's read of ``list_id`` gets (PERMISSION_DENIED: only its owner reads it)."""
    import grpc

    from feed_service.server import auth

    token = auth.mint(secret.encode(), subject=other, role="user")
    try:
        _read_list(address, token, other, list_id, 1)
    except grpc.RpcError as exc:
        return exc.code().name
    return "OK"


def _until(read: Any, want: list[tuple], timeout: float = 30.0) -> list[Any]:
    """``read()`` again until its entries are ``want`` or ``timeout`` s passed (the read cache applies the
    change topic's rows shortly after the stream wrote them); the last read."""
    deadline = time.monotonic() + timeout
    while True:
        now = read()
        if _served(now) == want or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


def _a_list(settings: Settings, stream: Any, address: str, secret: str, token: str, user_id: str, full: list[Any],
            published: list[dict[str, Any]], page_size: int, pull: set[str], say: Any) -> bool:
    """``user_id`` makes a list of the three followees with the most own entries in its home timeline
    and reads its timeline (GetListTimeline, owner only); then makes the list exclusive, so the
    members' entries leave its home timeline, and non-exclusive again, so they come back exactly
    (docs/lists.md)."""
    from feed_service.core.events import event_to_json
    from feed_service.core.reference import reference_lists, reference_timelines
    from feed_service.kafka.producer import EventProducer

    counts: dict[str, int] = {}
    for e in full:
        if not e.reposted_by and e.author_id != user_id:
            counts[e.author_id] = counts.get(e.author_id, 0) + 1
    members = sorted(counts, key=lambda a: (-counts[a], a))[:3]
    if not members:
        return True
    list_id, name = f"{user_id}-close", "close friends"

    def publish(make: Any) -> None:
        with EventProducer(settings) as producer:
            for event in make(producer):
                published.append(event_to_json(event))
        stream.wait_caught_up(timeout=300)
        stream.wait_caught_up(timeout=300)  # the list's edges, derived by one batch, folded by the next

    publish(lambda p: [p.list_create(list_id, user_id, name, replies_policy="list"),
                       *(p.list_add(list_id, m) for m in members)])
    want = _wanted(reference_lists(published, inbox_cap=settings.inbox_cap).get(list_id, []))
    now = _until(lambda: _read_list(address, token, user_id, list_id, 200)[1], want)
    first = now[:page_size]
    say(f"    {user_id} lists {', '.join(members)} as {name!r} (replies: to list members): its list timeline through"
        f" gRPC GetListTimeline ({len(now)} entries, the members' older tweets included):")
    _print_entries(first, pull)
    refused = _list_refused(address, secret, members[0], list_id)
    good = _served(now) == want and refused == "PERMISSION_DENIED"
    say(f"    it equals the batch reference's list timeline, and {members[0]} reading it gets {refused}:"
        f" {'yes' if good else 'NO'}")
    theirs = sum(1 for e in full if e.author_id in members and not e.reposted_by)
    publish(lambda p: [p.list_create(list_id, user_id, name, replies_policy="list", exclusive=True)])
    want = _wanted(reference_timelines(published).get(user_id, []))
    now = _until(lambda: _read_timeline(address, token, user_id, 200)[1], want)
    left = sum(1 for e in now if e.author_id in members and not e.reposted_by)
    exclusive = _served(now) == want and left == 0
    say(f"    the list made exclusive: the members' {theirs} entries leave {user_id}'s home timeline (read in"
        f" the list instead), the rest is the reference's: {'yes' if exclusive else 'NO'}")
    publish(lambda p: [p.list_create(list_id, user_id, name, replies_policy="list", exclusive=False)])
    back = _again(_until(lambda: _read_timeline(address, token, user_id, 200)[1], _served(full)), full,
                  "the list made non-exclusive again", say)
    return good and exclusive and back


def _reader_comes_back(settings: Settings, stream: Any, address: str, secret: str, shown: str,
                       published: list[dict[str, Any]], page_size: int, say: Any) -> bool:
    """A reader nobody has read for FEED_INACTIVE_AFTER_S: inactive, its inbox dropped; its first read
    is exact all the same (merged from its push authors' timelines), it comes back, the stream rebuilds
    its inbox, and its reads come from the inbox again, still exact (docs/activity.md)."""
    from feed_service.core.events import ProfileVersion, event_to_json
    from feed_service.core.reference import reference_timelines
    from feed_service.kafka.producer import EventProducer
    from feed_service.server import auth
    from feed_service.store.session import connect

    import logging

    logging.getLogger("cassandra").setLevel(logging.WARNING)  # the driver's connection chatter
    expected = reference_timelines(published)
    cluster, session = connect(settings.as_role("stream"), keyspace=settings.keyspace)
    try:
        def inbox(user: str) -> tuple[bool | None, int]:
            rows = list(session.execute("SELECT tweet_id, inbox_dropped FROM home_timeline WHERE timeline_id = %s",
                                        (user,)))
            return (rows[0][1] if rows else None), sum(1 for r in rows if r[0] is not None)

        busiest = sorted((u for u in expected if u != shown and expected[u]), key=lambda u: (-len(expected[u]), u))
        user = next((u for u in busiest[:200] if inbox(u) == (True, 0)), None)
        if user is None:
            say(f"    no reader has been left unread for {settings.inactive_after_s}s yet: nothing to show coming back")
            return True
        say(f"    {user} has not read its home timeline for {settings.inactive_after_s}s: inactive, its inbox dropped"
            " (no rows), no inbox writes since")
        token = auth.mint(secret.encode(), subject=user, role="user")
        _, full = _read_timeline(address, token, user, 200)
        good = _served(full) == _wanted(expected[user])
        say(f"    its first read, merged from its push authors' timelines: {len(full)} entries, the reference's:"
            f" {'yes' if good else 'NO'}")
        started = time.monotonic()
        version = int(time.time())
        while inbox(user)[0] is not False and time.monotonic() - started < 180:
            _read_timeline(address, token, user, page_size)  # back: it keeps reading
            with EventProducer(settings) as producer:  # a micro-batch: the stream takes the read reports
                published.append(event_to_json(producer.publish_event(ProfileVersion(f"{user}-nudge", version, "n"))))
            version += 1
            stream.wait_caught_up(timeout=300)
        flag, rows = inbox(user)
        _, again = _read_timeline(address, token, user, 200)
        back = flag is False and rows > 0 and _served(again) == _wanted(reference_timelines(published)[user])
        say(f"    it came back: the stream asked its push authors to rebuild its inbox ({rows} rows,"
            f" {time.monotonic() - started:.1f}s); read from the inbox again, the reference's: {'yes' if back else 'NO'}")
        return good and back
    finally:
        cluster.shutdown()


def _filtered_reply(settings: Settings, stream: Any, address: str, token: str, user_id: str,
                    published: list[dict[str, Any]], say: Any) -> bool:
    """A reply ``user_id`` does not see because it does not follow the user replied to comes in,
    at its own time, once it follows that user (the reply rule is decided again on every follow,
    not once at insert: docs/reposts-and-replies.md); the timeline then equals the reference."""
    from feed_service.core.events import event_to_json, fields_of
    from feed_service.core.reference import reference_tables, reference_timelines
    from feed_service.core.rules import direct
    from feed_service.kafka.producer import EventProducer

    tables = reference_tables(published)
    sees = tables.visible().get(user_id, set())
    hidden = tables.hidden()
    shown = {e["tweet_id"] for e in reference_timelines(published).get(user_id, [])}
    tweets_of: dict[str, int] = {}
    for author, _ in tables.tweets:
        tweets_of[author] = tweets_of.get(author, 0) + 1
    candidates = []
    for (author, tid), c in tables.tweets.items():
        parent = fields_of(c).in_reply_to_author_id
        # a reply user_id would see once it follows the parent: its author seen, not direct for user_id
        if (author in sees and not direct(author, parent, user_id, sees) and (user_id, parent) not in hidden
                and (parent, user_id) not in hidden and (user_id, parent) not in tables.follows and tid not in shown):
            candidates.append((tweets_of.get(parent, 0), author, tid, parent))
    if not candidates:
        say(f"    no reply of a user {user_id} follows to a user it does not follow in this workload")
        return True
    _, author, tid, parent = min(candidates)  # the parent with the fewest tweets: a short timeline change
    say(f"    {author} replied to {parent} ({tid}); {user_id} follows {author}, not {parent}: the reply is not in"
        f" {user_id}'s timeline")
    with EventProducer(settings) as producer:
        published.append(event_to_json(producer.follow(user_id, parent)))
    stream.wait_caught_up(timeout=300)
    _, now = _read_timeline(address, token, user_id, 200)
    want = reference_timelines(published).get(user_id, [])
    came = [e for e in now if e.tweet_id == tid and e.author_id == author and not e.reposted_by]
    good = bool(came) and _served(now) == _wanted(want)
    say(f"    {user_id} follows {parent}: the reply comes in at its own time"
        f" ({1 + [e.tweet_id for e in now].index(tid) if came else '?'} of {len(now)}) with {parent}'s tweets,"
        f" the timeline equals the batch reference: {'yes' if good else 'NO'}")
    return good


def _server_metrics_line(metrics_port: int) -> str:
    """Freshness and read cache figures from the server's /metrics (docs/api.md#read-cache)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    except OSError as exc:
        return f"server metrics not readable: {exc}"
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    buckets = sorted((float(s.labels["le"]), s.value) for s in samples
                     if s.name == "feed_publish_to_visible_seconds_bucket")
    total = buckets[-1][1] if buckets else 0

    def quantile(q: float) -> str:
        return next((f"{le:g}" for le, n in buckets if n >= q * total), "?") if total else "?"

    hits = sum(s.value for s in samples if s.name == "feed_read_cache_total" and s.labels.get("result") == "hit")
    misses = sum(s.value for s in samples if s.name == "feed_read_cache_total" and s.labels.get("result") == "miss")
    return (f"server metrics: {total:.0f} view changes applied, publish-to-visible p50 <= {quantile(0.5)} s,"
            f" p99 <= {quantile(0.99)} s (histogram buckets; the set-up backlog included); read cache {hits:.0f}"
            f" hits, {misses:.0f} misses")


def _bounds_line(progress: dict, settings: Settings) -> str:
    """What keeps the pipeline's storage bounded, as the stream's progress reports it
    (docs/trimming.md, docs/retention.md, docs/streaming.md)."""
    state = (progress.get("timeline-join") or {}).get("state") or {}
    trims = progress.get("trimming") or {}
    horizon = f"{settings.history_horizon_s} s" if settings.history_horizon_s else "off"
    buckets = progress.get("state_buckets")
    layout = (f"state in {buckets} buckets of join keys (docs/state-buckets.md)" if buckets
              else "one state per join key")
    return (f"bounds: state {state.get('numRowsTotal', '?')} rows in RocksDB ({state.get('rocksdbSstFileSize', 0):,} B"
            f" of SST files); inboxes at most {settings.inbox_cap} + {settings.trim_slack} rows"
            f" ({trims.get('trimmed_timelines', 0)} trimmed, {trims.get('trimmed_rows', 0)} rows cut);"
            f" history horizon {horizon}; {settings.state_partitions} state partitions, {layout}")

"""The read server's CPU per call on each read path, each path alone on a fresh server process.

    flock /tmp/team/bench.lock .venv/bin/python bench/bench_read_cost.py            # every path, 10 s each
    flock /tmp/team/bench.lock .venv/bin/python bench/bench_read_cost.py --only floor,hit,miss --rounds 3
    flock /tmp/team/bench.lock .venv/bin/python bench/bench_read_cost.py --only watch --watchers 200 --changes 5
    flock /tmp/team/bench.lock .venv/bin/python bench/bench_read_cost.py --only watch,watchfloor   # server vs. floor
    flock /tmp/team/bench.lock .venv/bin/python bench/bench_read_cost.py --rounds 2 \
        --only floor,floor-tls,floor-mtls,hit,hit-tls,hit-mtls,hit-limited,connect,connect-tls,connect-mtls
    flock /tmp/team/bench.lock .venv/bin/python bench/bench_read_cost.py --rounds 3 \
        --only hit,hit-rr,uncached,uncached-rr                                   # reposts and replies vs plain
    flock /tmp/team/bench.lock .venv/bin/python bench/bench_read_cost.py --rounds 2 \
        --only hit,hit-pr,uncached,uncached-pr                                   # a pull reposter merged in vs plain
    flock /tmp/team/bench.lock .venv/bin/python bench/bench_read_cost.py --rounds 3 \
        --only hit,hit-list,uncached,uncached-list                               # a list's page vs a home page
    .venv/bin/python bench/bench_read_cost.py --populate-only [--repopulate]         # only the data set

Runs against the developer stack (``feedctl stack up``; settings from the environment) in a keyspace
(``--keyspace``, default ``feed_readcost``) and on a change topic (suffix :data:`TOPIC_SUFFIX`) of its
own: nothing it publishes reaches the stack's own topics. The data set is written through the
project's ``CassandraWriter`` once and reused while its marker row matches the options and the
schema (``--repopulate`` forces a new one): ``--users`` users without pull authors (``u*``),
``--pull-users`` users following ``--pull-follows`` of ``--pull-authors`` pull authors (``h*``),
``--watch-users`` (at least ``max(--watchers)``) users following the pull author ``star`` (``w*``),
``--rr-users`` users with an empty inbox and ``--entries`` rows in ``home_extras`` (``r*``: newest
first alternately a repost entry, a push tweet reposted by another push author, and a push author's
reply to another's tweet, as the reader step writes them; every page of theirs is all reposts and
replies, half each; no user_reposts or reader_visible rows: a home page of theirs reads none),
``--pr-users`` users with an empty inbox who merge in the pull reposter ``prstar`` (``p*``: its
``PullReposterDelta`` in ``home_timeline.pull_reposters``, and the ``reader_visible`` row of
``prstar``; nothing in ``home_extras``, no ``reader_visible`` or ``reader_hidden`` row of any author),
``--list-users`` owners (``l*``, default ``--users``) of one list each, ``L<i>`` of ``l<i>``, whose
reader's inbox partition (docs/lists.md#in-the-engine) holds ``--entries`` entries as a ``u*`` user's inbox
does, with the list's rule in its statics and its row in ``lists`` (the list's facts, written by the
writer as the stream writes them), ``prstar`` with ``--entries`` rows in ``user_reposts`` (reposts of push tweets of distinct push
authors, after every push tweet and reply; ``reposts_by_tweet`` written by the writer from them):
no p* reader sees the reposted tweets' authors, so every row is shown and every page of theirs is 20
of ``prstar``'s rows, each decided at read with the lookups (docs/reposts-and-replies.md, "Pull
reposters"); every other inbox ``--entries`` entries of ``--authors`` push authors, every pull author 60 entries
in ``author_timeline``, two profile versions per author (reposters' too, so hydration names them;
in whatever columns the tree's schema and writer have: the marker holds a digest of the schema,
and a changed schema repopulates).

Every server is the real ``python -m feed_service serve --workers 1`` (``--server-env K=V`` changes
its settings), except the two floors'; every client runs in a process of its own: one grpc.aio
channel, ``--concurrency`` calls in flight, a service token, 20-entry first pages. A path's run is:
start a server, warm up (unmeasured), then ``--seconds`` measured; the server's CPU
(``/proc/<pid>/stat``, children included) over the measured window divided by the OK calls in it.
Rows of the table:

- ``floor``: bench_grpc.py's bare grpc.aio GetHomeTimeline with a canned 20-entry response (no
  auth, no Cassandra): what gRPC alone costs; ``x floor`` divides every row by it (same round).
- ``hit``: read cache on (change topic consumed, default cache size), ``--hit-users`` users without
  pull authors, each read twice (a user's inbox head is filled on its second read), then
  ``--settle`` s (a fill is usable once the server has applied the change topic up to its read:
  docs/api.md#read-cache), then random reads of them. ``cache hit``
  is ``feed_read_cache_total`` over the window: the row is a hit run only when it is ~100 %.
- ``hit10``: the same for ``h*`` users: the inbox merged with ``--pull-follows`` pull authors' heads, all cached
  (``pull/page`` counts the pull authors' entries per page: they must be there).
- ``miss``: cache on, every call a user this server never read (``u*`` in a shuffled order): each
  call misses (and, being a user's first read, reads the store as without the cache: the cache
  fills on a second read).
- ``fill``: as ``miss``, each user read twice in a row: half the calls are first reads, half fill the
  user's head (the cost of a fill is 2 × this row − ``miss``, derived).
- ``uncached``: ``FEED_CHANGE_FEED=0`` (no change topic, no read cache), ``FEED_PULL_CACHE_TTL_S=0``,
  random ``u*`` users: every call reads Cassandra.
- ``hit-rr``, ``miss-rr``, ``uncached-rr``: ``hit``, ``miss``, ``uncached`` on the ``r*`` users instead
  of ``u*``, with the same counts (``--rr-users`` defaults to ``--users``; ``hit-rr`` reads
  ``--hit-users`` of them), so only the pages differ: what a page full of reposts and replies costs
  against a plain page, whose target is ``>= 0.8x`` the plain page's QPS. ``rr/page`` counts the
  reposts and replies per page (they must be all 20); a line per round gives each rr row's QPS and
  server CPU per call over its plain row's of the same round, with both runs' load.
- ``hit-pr``, ``miss-pr``, ``uncached-pr``: the same on the ``p*`` users (``--pr-users``, default
  ``--users``): a page of a reader who merges a pull reposter in, all 20 rows ``prstar``'s reposts,
  each decided with up to four concurrent lookups (``reposts_by_tweet``, ``home_extras_reposts``,
  ``reader_visible``, ``reader_hidden``; the read cache holds the inbox head, ``prstar``'s reposts and
  the reader's memberships, but such a reader has no encoded-page memo: ``ReadCache.home_rows``
  declines it and the other lookups go to Cassandra). ``pr/page`` counts the entries per page
  reposted by ``prstar`` (they must be all 20); a line per round gives each pr row's QPS and server
  CPU per call over its plain row's of the same round, as for rr. ``hit-pr`` reads each user three
  times before the settle, not twice: the third read keeps the reader's memberships of its page's
  authors (``reader_visible``) in the filled head, so that its ``cache hit`` is ~100 % too.
  ``miss-pr``'s ``cache hit`` is ~50 %: each call misses its reader's head and hits ``prstar``'s
  reposts, one head shared by every ``p*`` reader (cached from its second read on).
- ``hit-list``, ``uncached-list``: ``hit`` and ``uncached`` through ``GetListTimeline``, each ``l*`` owner
  reading its own list: a list's first page (the home read of the list's reader behind the owner
  check) against a home page, whose target is a server CPU per call of at most ``1.2x`` the plain
  row's (:data:`LIST_TARGET`); a line per round gives both ratios, as for rr.

Also printed: client CPU, Cassandra CPU (the local stack's JVM) per call, QPS, p50/p99 latency,
calls counted, errors and ``/proc/loadavg``'s 1-minute figure before and after each run.

``watch``: one server with the change topic; for each ``--watchers`` count K (ascending, streams
added to the same server), K ``w*`` users hold WatchHomeTimeline streams (client processes of up
to 1,000 streams each, 100 per channel, started one at a time: opened all at once, grpc.aio leaves
some thousands of them unserved). After ``--settle`` s the server's idle CPU is measured for
``--idle-seconds``; then ``--changes`` changes are published onto the change topic, ``--spacing`` s
apart, after one unmeasured warm-up change: an ``AuthorChange`` (a new tweet of ``star``, which
every watcher merges in) and then a ``TimelineChange`` of the K timelines (a push author's tweet),
their rows written to Cassandra first (``CassandraWriter``), published as the stream publishes
(``stream_publisher.publish_view_changes``). Server CPU per change = CPU over the changes' windows
minus the idle rate over the same time, divided by the changes (``(p50)``: the median of the
changes' own windows); also per watcher, the client CPU, the time from publish to the last
watcher's receipt (p50 and max over the changes), and whether every watcher received every change.

``watchfloor``: the same for a bare grpc.aio server (:func:`serve_watch_floor`, a process of its
own: no auth, Kafka, Cassandra or service code): what grpc.aio alone costs to push one message to
each of K open server-streaming calls. Its WatchHomeTimeline encodes, when a stream opens, one
1-entry ``WatchHomeTimelineResponse`` of the size a pushed change of ``star`` has, with a resume
token for the stream's user; the stream then waits on one shared asyncio event and yields those
bytes (passed through by the serializer) each time the event fires. A change is a SIGUSR1 to the
server, which fires the event: nothing per stream but the wake-up and the send. The same clients
(opened the same way, on a server of its own), counts, idle window, warm-up, ``--changes`` and
``--spacing``; its rows (``floor -> K``) stand in the watch table beside the server's at the same K,
and ``x floor`` divides each of the server's µs per watcher by the floor's. The floor's messages
are all alike, so a stream's i-th receipt counts for the i-th change published while it was open:
every stream must have received every change, and none more.

The transport's and the limits' cost (docs/security.md#what-it-costs), each row on a fresh server too:

- ``floor-tls``, ``floor-mtls``, ``hit-tls``, ``hit-mtls``: ``floor`` and ``hit`` over TLS and mutual TLS
  (the server's certificate, and the client's for mutual TLS, from a ``LocalCA`` made in the log
  directory; the server's options ``FEED_GRPC_TLS_CERT_FILE``/``_KEY_FILE``/``FEED_GRPC_CLIENT_CA_FILE``;
  the client's channel from ``feed_service.server.client_channel``). The channel stays open for the
  whole run, so these rows measure the per-record encryption, not the handshakes.
- ``connect``, ``connect-tls``, ``connect-mtls``: the floor server, each call on a channel of its own
  (a new TCP connection, and a TLS handshake on the TLS rows; no subchannel shared between
  channels): the rows' CPU per call minus ``floor``'s is what one connection costs.
- ``hit-limited``: ``hit`` with the per-principal rate limit checked on every call (the service token's
  limit, ``FEED_RATE_LIMIT_SERVICE_PER_S``, set so high that it never refuses). Every other server
  here runs without rate limits (``FEED_RATE_LIMIT_PER_S=0``; services are not limited by default).

A ``TLS cost`` table follows the rows: each transport's row against the plaintext row of its path in
the same round (server µs per call, difference and ratio; QPS ratio).

``--rounds N`` repeats the set of paths N times, alternately (each run a fresh server). Nothing is
asserted. ``--out FILE`` writes every figure as JSON; logs stay in a temporary directory named at the start.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import math
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from feed_service.settings import Settings  # noqa: E402

#: the paths run by default (one of the transports' and limits' variants below each, on --only)
DEFAULT_PATHS = ("floor", "hit", "hit10", "miss", "fill", "uncached", "watch", "watchfloor")
#: ``<path>-<variant>``: TLS, mutual TLS, the rate limiter on (docs/security.md#what-it-costs)
VARIANT_PATHS = ("floor-tls", "floor-mtls", "hit-tls", "hit-mtls", "hit-limited", "connect", "connect-tls",
                 "connect-mtls")
#: ``hit``, ``miss``, ``uncached`` on ``r*`` users, whose first pages are all reposts and replies
#: (``home_extras``), for the issue's target: such a page is read at >= 0.8x the QPS of a plain page
RR_PATHS = ("hit-rr", "miss-rr", "uncached-rr")
#: ``hit``, ``miss``, ``uncached`` on ``p*`` users, who merge the pull reposter ``prstar`` in: every
#: row of their first pages is one of its reposts, decided at read with the lookups
PR_PATHS = ("hit-pr", "miss-pr", "uncached-pr")
#: ``hit`` and ``uncached`` through GetListTimeline on the ``l*`` owners' lists (docs/lists.md)
LIST_PATHS = ("hit-list", "uncached-list")
PATHS = DEFAULT_PATHS + VARIANT_PATHS + RR_PATHS + PR_PATHS + LIST_PATHS
#: the server CPU per call a list's page may cost against a home page's
LIST_TARGET = 1.2
#: the QPS ratio the rr rows must reach against their plain rows
RR_TARGET = 0.8
PAGE_SIZE = 20
#: the change topic of this bench's servers (appended to every topic name: docs/api.md#read-cache)
TOPIC_SUFFIX = ".bench.readcost"
#: bumped when the layout of the data set changes (the marker row then no longer matches)
DATA_LAYOUT = 4
BASE_MS = 1_700_000_000_000
PULL_TWEETS = 60
STAR = "star"
PULL_PREFIX = "pa"
RR_PREFIX = "r"
PR_PREFIX = "p"
LIST_PREFIX = "l"
#: the pull reposter the p* users merge in
PR_STAR = "prstar"
#: replies per push author in the pool the r* users' replies are drawn from
REPLIES_PER_AUTHOR = 10
#: streams per watch client process, and per channel
CLIENT_STREAMS = 1000
CHANNEL_STREAMS = 100


# -- small helpers -----------------------------------------------------------------------------
def loadavg1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def server_cpu(pid: int) -> float:
    """CPU seconds of the server's process tree (workers and reaped children included)."""
    from process_cpu import tree_cpu

    return tree_cpu(pid).total


def cpu_of(pids: list[int]) -> float:
    from bench_grpc import _cpu_seconds

    return _cpu_seconds(pids)


def pct(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))] if sorted_values else math.nan


def counter(samples: dict | None, name: str, **labels: str) -> float:
    from bench_watch import metric

    return (metric(samples, name, **labels) or 0.0) if samples else 0.0


# -- the data set ------------------------------------------------------------------------------
def data_params(args: argparse.Namespace) -> dict:
    """What the marker row must match for the data set to be reused."""
    from feed_service.store.schema import schema_statements

    schema = hashlib.sha256("\n".join(schema_statements(args.keyspace)).encode()).hexdigest()[:16]
    return {"layout": DATA_LAYOUT, "users": args.users, "pull_users": args.pull_users,
            "rr_users": args.rr_users, "pr_users": args.pr_users, "list_users": args.list_users, "pull_follows": args.pull_follows,
            "pull_authors": args.pull_authors,
            "watch_users": max(args.watch_users, *args.watchers), "entries": args.entries, "authors": args.authors,
            "tweets_per_author": args.tweets_per_author, "schema": schema}


def read_meta(settings: Settings) -> dict | None:
    from feed_service.store.session import connect

    cluster, session = connect(settings)
    try:
        row = session.execute(f"SELECT v FROM {settings.keyspace}.bench_meta WHERE k = 'meta'").one()
        return json.loads(row.v) if row else None
    except Exception:  # noqa: BLE001 - no keyspace or table yet
        return None
    finally:
        cluster.shutdown()


def populate(settings: Settings, params: dict) -> dict:
    """A fresh keyspace with the project's schema and the data set of ``params``, written through
    ``CassandraWriter`` (the rows the stream would write), then the marker row."""
    from feed_service.core.list_readers import list_reader
    from feed_service.core.per_reader.list_stage import ListFact
    from feed_service.core.per_reader.messages import ExtrasDelta, PullReposterDelta, VisibleDelta
    from feed_service.core.rows import (AuthorTimelineWrite, Entry, ProfileRow, ProfileWrite, PullFollowWrite,
                                        TimelineWrite, TweetWrite)
    from bench_grpc import write_retrying
    from feed_service.store.cassandra_writer import CassandraWriter
    from feed_service.store.schema import apply_schema
    from feed_service.store.session import connect

    if settings.keyspace == "feed":
        raise SystemExit("refusing to populate the stack's own keyspace 'feed'")
    started = time.monotonic()
    cluster, session = connect(settings)
    try:
        session.execute(f"DROP KEYSPACE IF EXISTS {settings.keyspace}", timeout=180)
        apply_schema(session, settings.keyspace)
        writer = CassandraWriter(session, settings.keyspace, concurrency=64)

        def write(**rows: list) -> None:
            write_retrying(writer, **rows)

        rng = random.Random(42)
        text = "x" * 80
        push = [Entry(f"t{a}-{i}", f"a{a}", BASE_MS + rng.randrange(10**9), 1, f"tweet {i} of a{a}: {text}", 1 + i % 2)
                for a in range(params["authors"]) for i in range(params["tweets_per_author"])]
        pull_ids = [f"{PULL_PREFIX}{j}" for j in range(params["pull_authors"])] + [STAR]
        pulled = [Entry(f"{p}-{i}", p, BASE_MS + rng.randrange(10**9), 1, f"tweet {i} of {p}: {text}", 1 + i % 2)
                  for p in pull_ids for i in range(PULL_TWEETS)]
        authors = [f"a{a}" for a in range(params["authors"])] + pull_ids + [PR_STAR]
        replies = reply_pool(rng, push, params["authors"],
                             max(REPLIES_PER_AUTHOR, -(-params["entries"] // params["authors"])), text)
        write(profiles=[ProfileWrite(ProfileRow(a, v, f"Author {a} v{v}", f"https://img/{a}/{v}.png", None), 1)
                        for a in authors for v in (1, 2)],
              tweets=[TweetWrite(e.tweet_id, e.author_id, e, 1) for e in push + pulled + replies],
              author_timeline=[AuthorTimelineWrite("insert", e, 1) for e in pulled],
              # with its index by tweet (reposts_by_tweet), written by the writer from the same rows
              user_reposts=[AuthorTimelineWrite("insert", e, 1)
                            for e in pr_reposts(random.Random(43), push, params["authors"], params["entries"])])
        users = ([(f"u{i}", ()) for i in range(params["users"])]
                 + [(f"h{i}", tuple(rng.sample(pull_ids[:-1], params["pull_follows"])))
                    for i in range(params["pull_users"])]
                 + [(f"w{i}", (STAR,)) for i in range(params["watch_users"])]
                 + [(f"{RR_PREFIX}{i}", None) for i in range(params["rr_users"])]
                 + [(f"{PR_PREFIX}{i}", PR_STAR) for i in range(params["pr_users"])]
                 + [(list_reader(f"L{i}"), ()) for i in range(params.get("list_users", 0))])
        chunk: list[TimelineWrite] = []
        follows: list[PullFollowWrite] = []
        extras: list[ExtrasDelta] = []
        merged: list[PullReposterDelta] = []
        visible: list[VisibleDelta] = []
        for n, (user, followed) in enumerate(users, 1):
            if followed is None:  # an r* user: per-reader entries only, nothing in its inbox
                extras += [ExtrasDelta("insert", user, e, 1)
                           for e in rr_entries(rng, push, replies, params["authors"], params["entries"])]
            elif followed == PR_STAR:  # a p* user: merges prstar in (whom it sees), nothing in its inbox
                merged.append(PullReposterDelta("insert", user, PR_STAR, 1))
                visible.append(VisibleDelta("insert", user, PR_STAR, 1))
            else:
                chunk += [TimelineWrite("insert", user, e, 1) for e in rng.sample(push, params["entries"])]
                follows += [PullFollowWrite("insert", user, p, 1) for p in followed]
            if len(chunk) + len(extras) + len(merged) >= 20_000 or n == len(users):
                write(timeline=chunk, pull_follows=follows, extras=extras, pull_reposters=merged, visible=visible)
                chunk, follows, extras, merged, visible = [], [], [], [], []
            if n % 10_000 == 0:
                print(f"  {n:,} of {len(users):,} users written ({time.monotonic() - started:.0f}s)", flush=True)
        owners = [ListFact(f"L{i}", f"{LIST_PREFIX}{i}", "bench", "list", False, 1)
                  for i in range(params.get("list_users", 0))]
        for at in range(0, len(owners), 5_000):
            write(lists=owners[at:at + 5_000])
        meta = {**params, "populate_s": round(time.monotonic() - started, 1)}
        session.execute(f"CREATE TABLE IF NOT EXISTS {settings.keyspace}.bench_meta (k text PRIMARY KEY, v text)")
        session.execute(f"INSERT INTO {settings.keyspace}.bench_meta (k, v) VALUES ('meta', %s)", (json.dumps(meta),))
    finally:
        cluster.shutdown()
    return meta


def reply_pool(rng: random.Random, push: list, authors: int, per_author: int, text: str) -> list:
    """Replies of the push authors to other push authors' tweets, created after every push tweet,
    2 s apart (so a repost entry fits between two of them: :func:`rr_entries`)."""
    from feed_service.core.rows import Entry

    slots = list(range(authors * per_author))
    rng.shuffle(slots)
    pool = []
    for a in range(authors):
        for i in range(per_author):
            parent = rng.choice(push)
            while parent.author_id == f"a{a}":
                parent = rng.choice(push)
            created = BASE_MS + 10**9 + 2000 * (slots[a * per_author + i] + 1)
            pool.append(Entry(f"re{a}-{i}", f"a{a}", created, 1, f"reply {i} of a{a}: {text}", 1 + i % 2,
                              in_reply_to_tweet_id=parent.tweet_id, in_reply_to_author_id=parent.author_id))
    return pool


def rr_entries(rng: random.Random, push: list, replies: list, authors: int, n: int) -> list:
    """An r* user's ``home_extras``: ``n`` entries, newest first alternately a repost entry (a push
    tweet reposted by another push author, 1 s above the next reply, after every push tweet) and a
    reply, so any page of them is half each."""
    mine = sorted(rng.sample(replies, n // 2), key=lambda e: e.created_at, reverse=True)
    reposted = rng.sample(push, n - n // 2)
    out = []
    for k, tweet in enumerate(reposted):
        reposter = tweet.author_id
        while reposter == tweet.author_id:
            reposter = f"a{rng.randrange(authors)}"
        # above its reply, below the one before (2 s apart); an odd one out goes below the last
        at = mine[k].created_at + 1000 if k < len(mine) else mine[-1].created_at - 1000 if mine else BASE_MS + 10**9
        out.append(tweet._replace(reposted_by=reposter, reposted_at=at, reposter_profile_version=1 + rng.randrange(2)))
    return out + mine


def pr_reposts(rng: random.Random, push: list, authors: int, n: int) -> list:
    """``prstar``'s ``user_reposts``: ``n`` reposts of push tweets, of distinct push authors while
    there are enough (so each page's lookups ask about 20 authors), 1 s apart, after every push tweet
    and reply (``reply_pool``)."""
    by_author: dict[str, list] = {}
    for e in push:
        by_author.setdefault(e.author_id, []).append(e)
    picks = [rng.choice(by_author[f"a{a}"]) for a in rng.sample(range(authors), min(n, authors))]
    chosen = set(picks)
    picks += rng.sample([e for e in push if e not in chosen], n - len(picks))
    start = BASE_MS + 3 * 10**9
    return [tweet._replace(reposted_by=PR_STAR, reposted_at=start + 1000 * k, reposter_profile_version=1 + k % 2)
            for k, tweet in enumerate(picks)]


def dataset(settings: Settings, args: argparse.Namespace) -> dict:
    """The data set of ``args`` (reused when its marker matches) and the bench's change topic."""
    from feed_service.kafka.topics import ensure_topics

    params = data_params(args)
    meta = None if args.repopulate else read_meta(settings)
    # more watch users than needed is fine: a short run with fewer watchers keeps the data set
    stale = meta is not None and (any(meta.get(k) != v for k, v in params.items() if k != "watch_users")
                                  or meta.get("watch_users", 0) < max(args.watchers))
    if meta is None or stale:
        why = "--repopulate" if args.repopulate else ("options or schema changed" if stale else "none yet")
        print(f"populating {settings.keyspace} ({why}): {params['users']:,} + {params['pull_users']:,} +"
              f" {params['watch_users']:,} + {params['rr_users']:,} + {params['pr_users']:,} users + {params['list_users']:,}"
              f" lists x"
              f" {params['entries']} entries", flush=True)
        meta = populate(settings, params)
        print(f"populated in {meta['populate_s']}s", flush=True)
    ensure_topics(settings, [settings.topics["timeline_changes"]])
    return meta


# -- servers -----------------------------------------------------------------------------------
class FloorServer:
    """bench_grpc.py's bare grpc.aio server (canned 20-entry response) in a process of its own;
    the same interface as bench_watch's ``Server`` where the runs need it."""

    def __init__(self, workdir: Path, name: str, tls: "Transport | None" = None) -> None:
        from bench_grpc import free_port

        self.name = name
        self.port = free_port()
        self.log = workdir / f"server-{name}.log"
        self.client_tls = tls.client if tls else None
        serve_tls = ["--floor-tls", ",".join(tls.floor_files)] if tls else []
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen([sys.executable, __file__, "--serve-floor", str(self.port), *serve_tls],
                                         cwd=REPO, stdout=log, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ready(self) -> "FloorServer":
        from bench_grpc import wait_serving

        wait_serving(self.port, tls=self.client_tls)
        return self

    def scrape(self) -> None:
        return None

    def stop(self) -> None:
        from bench_grpc import stop_server

        stop_server(self.proc)


def serve_floor(port: int, tls: str = "") -> None:
    """``tls``: "cert,key,client CA" files (an empty CA: TLS without client certificates)."""
    from bench_grpc import _floor_worker

    cert, key, client_ca = (tls.split(",") + ["", "", ""])[:3] if tls else ("", "", "")
    _floor_worker(Settings(), port, 0, (cert, key, client_ca) if tls else None)


class Transport:
    """TLS or mutual TLS between the bench's clients and servers: a CA made in ``workdir`` with
    ``feed_service.security.pki.LocalCA``, the server's certificate (127.0.0.1) and a client's."""

    def __init__(self, workdir: Path, mutual: bool) -> None:
        from feed_service.security.pki import LocalCA
        from feed_service.server.client_channel import ClientTLS

        ca = LocalCA(workdir / "tls")
        ca.ensure()
        server = ca.files("grpc-server") if ca.files("grpc-server").cert.exists() else \
            ca.issue("grpc-server", ips=["127.0.0.1"], dns=["localhost"], server=True, client=False)
        client = ca.files("bench-client") if ca.files("bench-client").cert.exists() else \
            ca.issue("bench-client", server=False, client=True)
        self.mutual = mutual
        self.client = (ClientTLS(str(ca.ca_cert), str(client.cert), str(client.key)) if mutual
                       else ClientTLS(str(ca.ca_cert)))
        self.server_env = {"FEED_GRPC_TLS_CERT_FILE": str(server.cert), "FEED_GRPC_TLS_KEY_FILE": str(server.key),
                           **({"FEED_GRPC_CLIENT_CA_FILE": str(ca.ca_cert)} if mutual else {})}
        self.floor_files = (str(server.cert), str(server.key), str(ca.ca_cert) if mutual else "")

    @property
    def client_files(self) -> list[str]:
        return [self.client.ca_file, self.client.cert_file, self.client.key_file]


class WatchFloorServer:
    """:func:`serve_watch_floor` in a process of its own: ``fire`` (SIGUSR1) makes every open stream
    send one message; ``scrape`` reads its stream and message counts (one unary call) under the names
    of the real server's metrics."""

    def __init__(self, workdir: Path, name: str) -> None:
        from bench_grpc import free_port

        self.name = name
        self.port = free_port()
        self.log = workdir / f"server-{name}.log"
        self.channel: Any = None
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen([sys.executable, __file__, "--serve-watch-floor", str(self.port)], cwd=REPO,
                                         stdout=log, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ready(self) -> "WatchFloorServer":
        import grpc
        from bench_grpc import wait_serving

        from feed_service.api import timeline_pb2 as pb

        try:
            wait_serving(self.port)
        except BaseException:
            self.stop()
            raise
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self._status = self.channel.unary_unary(f"/{WATCH_FLOOR_SERVICE}/GetHomeTimeline",
                                                request_serializer=pb.GetHomeTimelineRequest.SerializeToString,
                                                response_deserializer=pb.GetHomeTimelineResponse.FromString)
        return self

    def fire(self) -> None:
        os.kill(self.proc.pid, signal.SIGUSR1)

    def scrape(self) -> dict:
        from feed_service.api import timeline_pb2 as pb

        counts = json.loads(self._status(pb.GetHomeTimelineRequest(user_id="status"), timeout=10).next_page_token)
        return {("feed_watch_streams", ()): counts["streams"], ("feed_watch_messages_total", ()): counts["messages"]}

    def wait_watch_streams(self, n: int, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while self.scrape()[("feed_watch_streams", ())] < n:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"server {self.name}: fewer than {n} watch streams open; log {self.log}")
            time.sleep(0.25)

    def stop(self) -> None:
        from bench_grpc import stop_server

        if self.channel is not None:
            self.channel.close()
        stop_server(self.proc)


WATCH_FLOOR_SERVICE = "feed.v1.TimelineService"


def serve_watch_floor(port: int) -> None:
    """A bare grpc.aio server (no auth, Kafka, Cassandra or service code) with
    ``feed.v1.TimelineService/WatchHomeTimeline``: each stream encodes its message once, when it
    opens (a 1-entry ``WatchHomeTimelineResponse`` like a pushed change of ``star``, with a resume
    token for its user), then waits on one shared asyncio event and, each time SIGUSR1 sets it,
    yields those bytes once (a serializer passes them through). ``GetHomeTimeline`` answers the
    open streams and the messages yielded so far (JSON in ``next_page_token``); health for readiness."""
    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    from feed_service.api import timeline_pb2 as pb
    from feed_service.server.page_token import KIND_WATCH, PageTokenCodec
    from feed_service.server.watch_frames import token_field

    codec = PageTokenCodec(os.urandom(32))
    # as the watch part's author change n=10 of its first count reaches the watchers (same field sizes)
    tid = f"author{CLIENT_STREAMS}-r1-10-{uuid.uuid4().hex[:6]}"
    position = (int(time.time() * 1000), tid)
    head = pb.WatchHomeTimelineResponse(entries=[pb.TimelineEntry(
        tweet_id=tid, author_id=STAR, created_at_ms=position[0], version=1,
        text=f"author change 10 to {CLIENT_STREAMS} watchers", profile_version=1,
        author_display_name=f"Author {STAR} v1", author_avatar_url=f"https://img/{STAR}/1.png")]).SerializeToString()

    def passthrough(response: bytes) -> bytes:
        return response

    async def main() -> None:
        trigger = asyncio.Event()
        counts = {"fired": 0, "streams": 0, "messages": 0}

        def fire() -> None:
            counts["fired"] += 1
            trigger.set()  # wakes every waiting stream ...
            trigger.clear()  # ... and the next wait waits for the next signal

        async def watch(request: Any, context: Any) -> Any:
            message = head + token_field(codec.encode_ascii(request.user_id, position, 0, KIND_WATCH))
            sent = counts["fired"]  # only the changes from now on, as a stream at the head
            counts["streams"] += 1
            try:
                while True:
                    while sent < counts["fired"]:  # a signal while this stream was sending is not lost
                        sent += 1
                        counts["messages"] += 1
                        yield message
                    await trigger.wait()
            finally:
                counts["streams"] -= 1

        async def status(request: Any, context: Any) -> bytes:
            return pb.GetHomeTimelineResponse(next_page_token=json.dumps(counts)).SerializeToString()

        handlers = {
            "WatchHomeTimeline": grpc.unary_stream_rpc_method_handler(
                watch, pb.WatchHomeTimelineRequest.FromString, passthrough),
            "GetHomeTimeline": grpc.unary_unary_rpc_method_handler(
                status, pb.GetHomeTimelineRequest.FromString, passthrough),
        }
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        # registered as feed_service.server.registration registers the real service
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(WATCH_FLOOR_SERVICE, handlers),))
        server.add_registered_method_handlers(WATCH_FLOOR_SERVICE, handlers)
        checks = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(checks, server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGUSR1, fire)  # before SERVING: SIGUSR1 would otherwise end the process
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        await server.start()
        await checks.set("", health_pb2.HealthCheckResponse.SERVING)
        await stop.wait()
        await server.stop(1.0)

    asyncio.run(main())


def real_server(settings: Settings, workdir: Path, name: str, env: dict[str, str],
                tls: Transport | None = None) -> Any:
    """``python -m feed_service serve --workers 1`` of this tree (bench_watch's ``Server``): ready,
    and consuming the change topic when ``env`` leaves it on; over ``tls`` when given."""
    from bench_watch import Server

    return Server(settings, workdir, name, {**env, **(tls.server_env if tls else {})}, workers=1,
                  client_tls=tls.client if tls else None).ready()


# -- the load client (a process of its own) ----------------------------------------------------
def load_client(conn: Any, spec: dict) -> None:
    """GetHomeTimeline at a fixed concurrency on one channel (``spec["tls"]``: its CA, certificate and
    key files; ``spec["connect"]``: each call on a channel of its own instead). Warms up, sends
    ``warm``, waits for ``go``, then measures ``seconds``: sends ``end`` at the window's end (before
    the calls in flight finish, so the parent reads the server's CPU at that moment) and then the figures."""
    import grpc

    from feed_service.api import timeline_pb2 as pb
    from feed_service.api import timeline_pb2_grpc as pb_grpc
    from feed_service.server.client_channel import ClientTLS, channel_for

    tls = ClientTLS(*spec["tls"]) if spec.get("tls") else ClientTLS()
    target = f"127.0.0.1:{spec['port']}"
    credentials = tls.credentials() if tls.secure else None  # files read once, not per connection
    # a channel's own subchannel pool: a new channel must not reuse another's connection
    fresh = [("grpc.use_local_subchannel_pool", 1)]

    def fresh_channel() -> Any:
        return (grpc.aio.secure_channel(target, credentials, options=fresh) if credentials
                else grpc.aio.insecure_channel(target, options=fresh))

    users: list[str] = spec["users"]
    rng = random.Random(spec["seed"])
    order = itertools.count()

    def next_user() -> str:
        if spec["mode"] == "sequential":  # each call a user not read before (until the list wraps)
            return users[next(order) % len(users)]
        return users[rng.randrange(len(users))]

    async def main() -> dict:
        md = (("authorization", f"Bearer {spec['token']}"),)
        async with channel_for(target, tls, aio=True) as channel:
            stub = pb_grpc.TimelineServiceStub(channel)

            lists = spec.get("lists", False)  # an l* owner reads its own list L<i> (docs/lists.md)

            def request_of(user: str) -> Any:
                if lists:
                    return pb.GetListTimelineRequest(user_id=user, list_id=f"L{user[len(LIST_PREFIX):]}",
                                                     page_size=PAGE_SIZE)
                return pb.GetHomeTimelineRequest(user_id=user, page_size=PAGE_SIZE)

            async def get(request: Any) -> Any:
                if lists:
                    return await stub.GetListTimeline(request, metadata=md)
                if not spec.get("connect"):
                    return await stub.GetHomeTimeline(request, metadata=md)
                async with fresh_channel() as own:
                    return await pb_grpc.TimelineServiceStub(own).GetHomeTimeline(request, metadata=md)
            latencies: list[float] = []
            errors: dict[str, int] = {}
            shape = {"entries": 0, "pulled": 0, "rr": 0, "pr": 0, "unnamed": 0}

            async def run(pick: Callable[[], str | None], seconds: float, measured: bool) -> None:
                stop_at = time.perf_counter() + seconds

                async def worker() -> None:
                    while time.perf_counter() < stop_at and (user := pick()) is not None:
                        t = time.perf_counter()
                        try:
                            r = await get(request_of(user))
                        except grpc.aio.AioRpcError as exc:
                            if measured and time.perf_counter() <= stop_at:
                                errors[exc.code().name] = errors.get(exc.code().name, 0) + 1
                            continue
                        done = time.perf_counter()
                        if measured and done <= stop_at:
                            latencies.append(done - t)
                            shape["entries"] += len(r.entries)
                            for e in r.entries:
                                if e.author_id.startswith(PULL_PREFIX):
                                    shape["pulled"] += 1
                                if e.reposted_by or e.in_reply_to_tweet_id:
                                    shape["rr"] += 1
                                    if e.reposted_by == PR_STAR:
                                        shape["pr"] += 1
                                    if e.reposted_by and not e.reposted_by_display_name:
                                        shape["unnamed"] += 1

                await asyncio.gather(*(worker() for _ in range(spec["concurrency"])))

            # every user read twice (the cache fills on a second read), then the fills settle (and, for
            # a third pass, once more: what that pass keeps in the heads must find them usable)
            for n in range(spec["prefill"]):
                todo = iter(users)
                await run(lambda: next(todo, None), 3600, False)
                if n:
                    await asyncio.sleep(spec["settle_s"])
            await run(next_user, spec["warmup_s"], False)
            conn.send(("warm", None))
            if conn.recv() != "go":  # nothing in flight: blocking the loop here costs nothing
                return {}
            cpu0, t0 = time.process_time(), time.perf_counter()

            async def closer() -> tuple[float, float]:
                await asyncio.sleep(spec["seconds"])
                at = (time.process_time() - cpu0, time.perf_counter() - t0)
                conn.send(("end", None))
                return at

            ending = asyncio.ensure_future(closer())
            await run(next_user, spec["seconds"], True)
            cpu_s, window_s = await ending
        latencies.sort()
        return {"ok": len(latencies), "errors": errors, "seconds": window_s, "cpu_s": cpu_s,
                "p50_ms": pct(latencies, 0.50) * 1000, "p99_ms": pct(latencies, 0.99) * 1000,
                "entries_per_page": shape["entries"] / len(latencies) if latencies else 0.0,
                "pulled_per_page": shape["pulled"] / len(latencies) if latencies else 0.0,
                "rr_per_page": shape["rr"] / len(latencies) if latencies else 0.0,
                "pr_per_page": shape["pr"] / len(latencies) if latencies else 0.0,
                "unnamed_reposters": shape["unnamed"],
                "wrapped": spec["mode"] == "sequential" and next(order) > len(users)}

    conn.send(("done", asyncio.run(main())))


def _expect(conn: Any, proc: Any, what: str, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while not conn.poll(0.2):
        if not proc.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"load client: no {what!r} (alive: {proc.is_alive()})")
    kind, payload = conn.recv()
    if kind != what:
        raise RuntimeError(f"load client sent {kind!r}, expected {what!r}")
    return payload


def measure_reads(server: Any, spec: dict) -> dict:
    """One measured run of the load client against ``server``: the server's (and Cassandra's) CPU over
    exactly the client's measured window, the client's figures, read-cache and profile-cache counts."""
    from bench_grpc import cassandra_pid

    ctx = multiprocessing.get_context("spawn")
    conn, child = ctx.Pipe()
    proc = ctx.Process(target=load_client, args=(child, spec), name="read-cost-client")
    proc.start()
    try:
        _expect(conn, proc, "warm", 900)
        m0 = server.scrape()
        cass = cassandra_pid()
        load0 = loadavg1()
        c0 = cpu_of([cass]) if cass else 0.0
        s0 = server_cpu(server.pid)
        conn.send("go")
        _expect(conn, proc, "end", spec["seconds"] + 60)
        s1 = server_cpu(server.pid)
        c1 = cpu_of([cass]) if cass else 0.0
        client = _expect(conn, proc, "done", 120)
        load1 = loadavg1()
        m1 = server.scrape()
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
    ok = client["ok"]
    per = (lambda s: s * 1e6 / ok) if ok else (lambda s: math.nan)
    hits = counter(m1, "feed_read_cache_total", result="hit") - counter(m0, "feed_read_cache_total", result="hit")
    misses = counter(m1, "feed_read_cache_total", result="miss") - counter(m0, "feed_read_cache_total", result="miss")
    profile_misses = (counter(m1, "feed_profile_cache_total", result="miss")
                      - counter(m0, "feed_profile_cache_total", result="miss"))
    return {"ok": ok, "errors": client["errors"], "qps": ok / client["seconds"] if client["seconds"] else 0.0,
            "p50_ms": client["p50_ms"], "p99_ms": client["p99_ms"], "server_us": per(s1 - s0),
            "client_us": per(client["cpu_s"]), "cassandra_us": per(c1 - c0) if cass else None,
            "cache_hit_ratio": hits / (hits + misses) if hits + misses else None,
            "cache_lookups_per_call": (hits + misses) / ok if ok and m1 else None,
            "profile_misses_per_call": profile_misses / ok if ok and m1 else None,
            "entries_per_page": client["entries_per_page"], "pulled_per_page": client["pulled_per_page"],
            "rr_per_page": client["rr_per_page"], "pr_per_page": client["pr_per_page"],
            "unnamed_reposters": client["unnamed_reposters"],
            "users_wrapped": client["wrapped"], "load": [load0, load1]}


def read_run(path: str, rnd: int, settings: Settings, meta: dict, args: argparse.Namespace, workdir: Path,
             token: str) -> dict:
    """One read path on a fresh server of its own."""
    rng = random.Random(1000 * rnd + PATHS.index(path))
    base, _, variant = path.partition("-")
    # the rr rows: the same plans on the r* users (a first page all reposts and replies); the pr rows:
    # on the p* users (a first page all prstar's reposts, merged in and decided at read)
    u = ([f"{RR_PREFIX}{i}" for i in range(meta["rr_users"])] if variant == "rr"
         else [f"{PR_PREFIX}{i}" for i in range(meta["pr_users"])] if variant == "pr"
         else [f"{LIST_PREFIX}{i}" for i in range(meta["list_users"])] if variant == "list"
         else [f"u{i}" for i in range(meta["users"])])
    feed_on = {"FEED_CHANGE_FEED": "1"}
    tls = transport(workdir, variant)
    plans: dict[str, tuple[dict, list[str], str, bool]] = {
        "floor": ({}, u, "random", False),
        "connect": ({}, u, "random", False),
        "hit": (feed_on, u[:args.hit_users], "random", True),
        "hit10": (feed_on, [f"h{i}" for i in range(meta["pull_users"])], "random", True),
        "miss": (feed_on, rng.sample(u, len(u)), "sequential", False),
        # each never-read user twice in a row: half the calls are first reads, half fill a head
        "fill": (feed_on, [v for user in rng.sample(u, len(u)) for v in (user, user)], "sequential", False),
        "uncached": ({"FEED_CHANGE_FEED": "0", "FEED_PULL_CACHE_TTL_S": "0"}, u, "random", False),
    }
    env, users, mode, prefill = plans[base]
    if variant == "limited":  # checked on every call and never refusing: the check's cost alone
        env = {**env, "FEED_RATE_LIMIT_SERVICE_PER_S": str(LIMITER_RATE)}
    name = f"{path}-r{rnd}"
    server = (FloorServer(workdir, name, tls).ready() if base in ("floor", "connect")
              else real_server(settings, workdir, name, {**env, **args.server_env}, tls))
    try:
        # passes over the users before the warm-up: the head fills on a second read; a p* reader's
        # memberships of its page's authors (``sees``) are kept in that head by the read after it
        passes = (3 if variant == "pr" else 2) if prefill else 0
        spec = {"port": server.port, "token": token, "users": users, "mode": mode, "prefill": passes,
                "settle_s": args.settle, "warmup_s": args.warmup, "seconds": args.seconds,
                "concurrency": args.concurrency, "seed": rnd, "tls": tls.client_files if tls else None,
                "connect": base == "connect", "lists": variant == "list"}
        result = measure_reads(server, spec)
    finally:
        server.stop()
    result.update(path=path, round=rnd, users=len(users), server_env={**env, **args.server_env})
    return result


#: the rate of ``hit-limited``'s limiter: far above any QPS here, so that it admits every call
LIMITER_RATE = 1e9
_TRANSPORTS: dict[tuple[Path, str], Transport] = {}


def transport(workdir: Path, variant: str) -> Transport | None:
    """The TLS of a path's variant (``tls``, ``mtls``; None: plaintext), made once per run."""
    if variant not in ("tls", "mtls"):
        return None
    if (workdir, variant) not in _TRANSPORTS:
        _TRANSPORTS[workdir, variant] = Transport(workdir, mutual=variant == "mtls")
    return _TRANSPORTS[workdir, variant]


# -- watch fan-out -----------------------------------------------------------------------------
class WatchFanout:
    """One server with the change topic and K watchers of ``star``; changes published by hand."""

    #: the part's name (log lines, client files) and the kinds of change delivered per watcher count
    part = "watch"
    kinds = ("author", "inbox")

    def __init__(self, settings: Settings, args: argparse.Namespace, workdir: Path, rnd: int) -> None:
        self.settings, self.args, self.workdir, self.rnd = settings, args, workdir, rnd
        self.clients: list[Any] = []
        self.published: list[dict] = []
        self.server = self._start()

    def _start(self) -> Any:
        """The server (ready), and what the changes need: here a Cassandra session to write their rows."""
        from feed_service.store.cassandra_writer import CassandraWriter
        from feed_service.store.session import connect

        server = real_server(self.settings, self.workdir, f"watch-r{self.rnd}",
                             {"FEED_CHANGE_FEED": "1", **self.args.server_env})
        try:
            self.cluster, session = connect(self.settings)
        except BaseException:
            server.stop()
            raise
        self.writer = CassandraWriter(session, self.settings.keyspace)
        return server

    def _shutdown(self) -> None:
        self.cluster.shutdown()

    def close(self) -> list[dict]:
        """Stop the clients (they report what they received), the server and the session."""
        received = []
        try:
            for client in self.clients:
                received.append(client.finish())
        finally:
            self.server.stop()
            self._shutdown()
        return received

    def open_watchers(self, k: int) -> None:
        """Streams of ``w0``..``w{k-1}`` open on the server (the ones already open are kept)."""
        from bench_watch import WatchClient

        opened = sum(len(c.users) for c in self.clients)
        for start in range(opened, k, CLIENT_STREAMS):
            users = [f"w{i}" for i in range(start, min(k, start + CLIENT_STREAMS))]
            client = WatchClient(self.server.port, users, self.workdir, f"{self.part}-r{self.rnd}-{start}",
                                 channels=math.ceil(len(users) / CHANNEL_STREAMS))
            client.users = users
            self.clients.append(client)
            # one client at a time: with several thousand streams opened at once from several
            # processes, grpc.aio (1.85) never hands some of them to the handler (a bare grpc.aio
            # server too), and they hang without an error; a thousand at a time all open
            self.server.wait_watch_streams(start + len(users), timeout=180)

    def cpu(self) -> tuple[float, float, float]:
        """(monotonic time, server CPU s, watch clients' CPU s)."""
        return time.monotonic(), server_cpu(self.server.pid), cpu_of([c.pid for c in self.clients])

    def idle(self, seconds: float) -> tuple[float, float]:
        """Server and client CPU seconds per second with every stream open and nothing published."""
        t0, s0, c0 = self.cpu()
        time.sleep(seconds)
        t1, s1, c1 = self.cpu()
        return (s1 - s0) / (t1 - t0), (c1 - c0) / (t1 - t0)

    def _entry(self, kind: str, k: int, n: int) -> Any:
        from feed_service.core.rows import Entry

        author = STAR if kind == "author" else "a0"
        tid = f"{kind}{k}-r{self.rnd}-{n}-{uuid.uuid4().hex[:6]}"
        return Entry(tid, author, int(time.time() * 1000) + n, 1, f"{kind} change {n} to {k} watchers", 1)

    def _write(self, kind: str, k: int, entries: list[Any], ts: int) -> None:
        """The changes' rows, as the stream writes them before it publishes: the pull author's
        ``author_timeline`` row, or the row in each of the ``k`` inboxes; and the tweet."""
        from feed_service.core.rows import AuthorTimelineWrite, TimelineFanout, TweetWrite

        watchers = tuple(f"w{i}" for i in range(k))
        tweets = [TweetWrite(e.tweet_id, e.author_id, e, ts) for e in entries]
        if kind == "author":
            self.writer.write(author_timeline=[AuthorTimelineWrite("insert", e, ts) for e in entries], tweets=tweets)
        else:
            self.writer.write(timeline_fanout=[TimelineFanout("insert", watchers, e, ts) for e in entries],
                              tweets=tweets)

    def _publish(self, kind: str, k: int, entry: Any, ts: int, measured: bool) -> None:
        """One change onto the bench's change topic, as the stream publishes it."""
        from feed_service.core.view_changes import AuthorChange, TimelineChange
        from feed_service.kafka.stream_publisher import publish_view_changes

        at = time.time()
        change = (AuthorChange("insert", entry, ts, int(at * 1000)) if kind == "author"
                  else TimelineChange("insert", entry, tuple(f"w{i}" for i in range(k)), ts, int(at * 1000)))
        publish_view_changes(self.settings, [change])
        self.published.append({"kind": kind, "k": k, "tweet": entry.tweet_id, "at": at, "measured": measured})

    def _messages(self) -> float:
        return counter(self.server.scrape(), "feed_watch_messages_total")

    def _wait_messages(self, target: float, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self._messages() < target:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.25)
        return True

    def deliver(self, kind: str, k: int, idle: tuple[float, float]) -> dict:
        """``--changes`` changes of ``kind`` to the ``k`` open watchers, ``--spacing`` s apart, after
        one unmeasured warm-up change; CPU per change net of the idle rate."""
        args = self.args
        load0 = loadavg1()
        entries = [self._entry(kind, k, n) for n in range(args.changes + 1)]
        ts = time.time_ns() // 1000
        self._write(kind, k, entries, ts)  # before any window: rows cost this process and Cassandra
        base = self._messages()
        self._publish(kind, k, entries[0], ts, measured=False)  # warm-up: first message of each stream
        self._wait_messages(base + k, 60)
        time.sleep(args.spacing)
        base = self._messages()
        entries = entries[1:]
        samples = [self.cpu()]
        for i, entry in enumerate(entries):
            self._publish(kind, k, entry, ts, measured=True)
            time.sleep(max(0.0, samples[0][0] + (i + 1) * args.spacing - time.monotonic()))
            samples.append(self.cpu())
        complete = self._messages() >= base + k * len(entries)
        if not complete:  # delivery outlasts the windows: extend the last one until it is done
            complete = self._wait_messages(base + k * len(entries), 120)
            samples[-1] = self.cpu()
        (t0, s0, c0), (t1, s1, c1) = samples[0], samples[-1]
        windows = sorted((b[1] - a[1]) - idle[0] * (b[0] - a[0]) for a, b in zip(samples, samples[1:]))
        server_s = (s1 - s0) - idle[0] * (t1 - t0)
        client_s = (c1 - c0) - idle[1] * (t1 - t0)
        n = len(entries)
        return {"kind": kind, "watchers": k, "changes": n, "server_ms_per_change": server_s * 1000 / n,
                "server_ms_per_change_p50": pct(windows, 0.5) * 1000, "server_us_per_watcher": server_s * 1e6 / n / k,
                "client_ms_per_change": client_s * 1000 / n, "idle_server_pct": idle[0] * 100,
                "idle_client_pct": idle[1] * 100, "seconds": t1 - t0, "messages_complete": complete,
                "load": [load0, loadavg1()]}


class FloorFanout(WatchFanout):
    """The same watch clients, counts and timing against :func:`serve_watch_floor` (a bare grpc.aio
    server): a change is a SIGUSR1 to the server, upon which every open stream sends its canned
    message once; nothing is written or published."""

    part = "watchfloor"
    kinds = ("floor",)

    def _start(self) -> Any:
        return WatchFloorServer(self.workdir, f"watchfloor-r{self.rnd}").ready()

    def _shutdown(self) -> None:
        return None

    def _entry(self, kind: str, k: int, n: int) -> Any:
        from types import SimpleNamespace

        return SimpleNamespace(tweet_id=f"{kind}{k}-r{self.rnd}-{n}")  # a name for the record only

    def _write(self, kind: str, k: int, entries: list[Any], ts: int) -> None:
        return None

    def _publish(self, kind: str, k: int, entry: Any, ts: int, measured: bool) -> None:
        at = time.time()
        self.server.fire()
        self.published.append({"kind": kind, "k": k, "tweet": entry.tweet_id, "at": at, "measured": measured})


def receipts_per_change(received: list[dict], published: list[dict], in_order: bool) -> tuple[list[dict], int]:
    """Per published change (``published``' order): watcher -> its first receipt time; and how many
    receipts matched no change. The real server's messages are told apart by tweet id; the floor's
    streams all send the same canned message (``in_order``), so the i-th message a stream received is
    the i-th change published while it was open (``w<i>`` is open from the first count above i on)."""
    got: list[dict[str, float]] = [{} for _ in published]
    unmatched = 0
    if in_order:
        times: dict[str, list[float]] = {}
        for report in received:
            for user, _tid, at, _part in report["receipts"]:
                times.setdefault(user, []).append(at)
        for user, seen in times.items():
            slots = [j for j, p in enumerate(published) if int(user[1:]) < p["k"]]
            for j, at in zip(slots, seen):
                got[j][user] = at
            unmatched += max(0, len(seen) - len(slots))
        return got, unmatched
    index = {p["tweet"]: j for j, p in enumerate(published)}
    for report in received:
        for user, tid, at, _part in report["receipts"]:
            j = index.get(tid)
            if j is None:
                unmatched += 1
                continue
            got[j][user] = min(at, got[j].get(user, at))
    return got, unmatched


def watch_runs(fanout: type[WatchFanout], settings: Settings, args: argparse.Namespace, workdir: Path,
               rnd: int) -> list[dict]:
    """Every ``--watchers`` count on one server (``fanout``'s), each kind of change in turn; then who
    received what."""
    fan = fanout(settings, args, workdir, rnd)
    tag = f"[{fan.part}]"
    rows: list[dict] = []
    try:
        for k in sorted(set(args.watchers)):
            opening = time.monotonic()
            fan.open_watchers(k)
            print(f"{tag} {k:,} streams open ({time.monotonic() - opening:.0f}s)", flush=True)
            time.sleep(args.settle)
            idle = fan.idle(args.idle_seconds)
            for kind in fan.kinds:
                row = fan.deliver(kind, k, idle)
                row.update(round=rnd, part=fan.part)
                rows.append(row)
                print(f"{tag} {kind} change to {k:,} watchers: {row['server_ms_per_change']:.1f} ms server CPU"
                      f" per change (idle {row['idle_server_pct']:.1f} %)", flush=True)
    finally:
        received = fan.close()
    published = fan.published
    got, unmatched = receipts_per_change(received, published, in_order=fanout is FloorFanout)
    ended = [r.get("ended") for r in received if r.get("ended")]
    for row in rows:
        mine = [j for j, p in enumerate(published)
                if p["measured"] and p["kind"] == row["kind"] and p["k"] == row["watchers"]]
        expected = {f"w{i}" for i in range(row["watchers"])}
        spans = sorted(max(got[j].values()) - published[j]["at"] for j in mine if got[j])
        row["received"] = sum(len(expected & got[j].keys()) for j in mine)
        row["expected"] = row["watchers"] * len(mine)
        row["last_receipt_ms_p50"] = pct(spans, 0.5) * 1000
        row["last_receipt_ms_max"] = spans[-1] * 1000 if spans else math.nan
        row["unmatched_receipts"] = unmatched
        row["streams_ended_early"] = ended
    return rows


# -- output ------------------------------------------------------------------------------------
def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:,.{digits}f}"


def print_reads(rows: list[dict]) -> None:
    """The rows; ``x floor``: over the floor of the same round (over TLS: the TLS floor, when run)."""
    floors = {(r["round"], r["path"].partition("-")[2]): r["server_us"] for r in rows if r["path"].startswith("floor")}
    rounds = len({r["round"] for r in rows}) > 1
    print(f"\n{'path':<15} {'server us/call':>14} {'x floor':>7} {'client us/call':>14} {'cass us/call':>12}"
          f" {'QPS':>7} {'p50 ms':>7} {'p99 ms':>7} {'calls':>7} {'cache hit':>9} {'pull/page':>9} {'rr/page':>7}"
          f" {'pr/page':>7}  load 1m")
    for r in rows:
        variant = r["path"].partition("-")[2]
        floor = floors.get((r["round"], variant if variant in ("tls", "mtls") else ""), floors.get((r["round"], "")))
        if r["path"].startswith("connect"):  # a connection per call: against the floor over a kept channel
            floor = floors.get((r["round"], variant), floors.get((r["round"], "")))
        name = f"{r['path']} #{r['round']}" if rounds else r["path"]
        hit = "-" if r["cache_hit_ratio"] is None else f"{r['cache_hit_ratio']:.1%}"
        print(f"{name:<15} {_num(r['server_us']):>14} {_num(r['server_us'] / floor if floor else None, 2):>7}"
              f" {_num(r['client_us']):>14} {_num(r['cassandra_us']):>12} {_num(r['qps']):>7}"
              f" {_num(r['p50_ms'], 2):>7} {_num(r['p99_ms'], 2):>7} {r['ok']:>7} {hit:>9}"
              f" {_num(r['pulled_per_page'], 1):>9} {_num(r['rr_per_page'], 1):>7} {_num(r['pr_per_page'], 1):>7}"
              f"  {r['load'][0]:.2f} -> {r['load'][1]:.2f}")
    for r in rows:
        notes = []
        if r["errors"]:
            notes.append(f"errors {r['errors']}")
        if r["path"].partition("-")[0] in ("hit", "hit10") and (r["cache_hit_ratio"] or 0) < 0.99:
            notes.append("NOT a hit run: cache hit ratio below 99 %")
        # miss-pr: the reader's own head misses, prstar's reposts (one head shared by every p* reader) hit
        if r["path"] in ("miss", "miss-rr", "miss-pr") and (r["cache_hit_ratio"] or 0) > (
                0.51 if r["path"] == "miss-pr" else 0.01):
            notes.append("not all misses" + (" of the readers' own heads" if r["path"] == "miss-pr" else ""))
        if r["path"] in ("miss", "miss-rr", "miss-pr") and r["users_wrapped"]:
            notes.append("the users wrapped around: raise " + {"miss-rr": "--rr-users", "miss-pr": "--pr-users"}
                         .get(r["path"], "--users"))
        if r["path"] in RR_PATHS and r["rr_per_page"] < PAGE_SIZE:
            notes.append(f"only {r['rr_per_page']:.1f} reposts and replies per page, not {PAGE_SIZE}")
        if r["path"] in PR_PATHS and r["pr_per_page"] < PAGE_SIZE:
            notes.append(f"only {r['pr_per_page']:.1f} reposts of {PR_STAR} per page, not {PAGE_SIZE}")
        if r.get("unnamed_reposters"):
            notes.append(f"{r['unnamed_reposters']:,} repost entries without the reposter's name")
        if r["path"] == "hit10" and not r["pulled_per_page"]:
            notes.append("no pull authors' entries in the pages")
        if (r["profile_misses_per_call"] or 0) > 0.01:
            notes.append(f"{r['profile_misses_per_call']:.2f} profile reads per call")
        if notes:
            print(f"  {r['path']} #{r['round']}: " + "; ".join(notes))
    print_variants(rows)
    print_rr(rows)


def print_variants(rows: list[dict]) -> None:
    """Each variant's row (``hit-tls`` ...) against its path's plaintext row of the same round."""
    plain = {(r["round"], r["path"]): r for r in rows if "-" not in r["path"]}
    pairs = [(r, plain.get((r["round"], r["path"].partition("-")[0]))) for r in rows
             if "-" in r["path"] and r["path"] not in RR_PATHS + PR_PATHS + LIST_PATHS]  # those: print_rr
    pairs = [(r, p) for r, p in pairs if p and p["server_us"] and p["qps"]]
    if not pairs:
        return
    print(f"\n{'TLS cost':<16} {'against':<12} {'server us/call':>19} {'+us':>6} {'ratio':>6} {'QPS':>13}"
          f" {'ratio':>6} {'client us':>15}  load 1m")
    for r, p in pairs:
        print(f"{r['path'] + ' #' + str(r['round']):<16} {p['path']:<12}"
              f" {_num(r['server_us']) + ' vs ' + _num(p['server_us']):>19} {_num(r['server_us'] - p['server_us']):>6}"
              f" {_num(r['server_us'] / p['server_us'], 2):>6} {_num(r['qps']) + ' vs ' + _num(p['qps']):>13}"
              f" {_num(r['qps'] / p['qps'], 2):>6} {_num(r['client_us']) + ' vs ' + _num(p['client_us']):>15}"
              f"  {r['load'][0]:.2f} -> {r['load'][1]:.2f}; {p['load'][0]:.2f} -> {p['load'][1]:.2f}")


def print_rr(rows: list[dict]) -> None:
    """Per round, each rr row against its plain row (QPS and server CPU per call, rr over plain):
    the issue's target is a QPS ratio of at least :data:`RR_TARGET`; then each pr row against its
    plain row the same way (no target), and each list row (target: server CPU per call at most
    :data:`LIST_TARGET` times the plain row's). Only pairs run in the same round compare: the load
    moves between rounds."""
    by = {(r["round"], r["path"]): r for r in rows}
    for paths, title in ((RR_PATHS, f"reposts and replies vs plain #{{}} (target QPS >= {RR_TARGET}x)"),
                         (PR_PATHS, f"a pull reposter merged in ({PR_STAR}) vs plain #{{}}"),
                         (LIST_PATHS, f"a list's first page vs a home page #{{}} (target server us/call"
                                      f" <= {LIST_TARGET}x)")):
        for rnd in sorted({r["round"] for r in rows}):
            parts = []
            for path in paths:
                r, p = by.get((rnd, path)), by.get((rnd, path.partition("-")[0]))
                if not r or not p or not p["qps"] or not p["server_us"]:
                    continue
                parts.append(f"{path}/{p['path']} QPS {_num(r['qps'] / p['qps'], 2)}x,"
                             f" server us/call {_num(r['server_us'] / p['server_us'], 2)}x (load 1m"
                             f" {r['load'][0]:.2f} -> {r['load'][1]:.2f}, {p['load'][0]:.2f} -> {p['load'][1]:.2f})")
            if parts:
                print(f"\n{title.format(rnd)}: " + "; ".join(parts))


def print_watch(rows: list[dict]) -> None:
    """The watch and watchfloor rows, by round and watcher count (the floor's beside the server's);
    ``x floor``: µs per watcher over the floor row's of the same round and count."""
    order = {"author": 0, "inbox": 1, "floor": 2}
    rows = sorted(rows, key=lambda r: (r["round"], r["watchers"], order.get(r["kind"], 3)))
    floors = {(r["round"], r["watchers"]): r["server_us_per_watcher"] for r in rows if r["kind"] == "floor"}
    rounds = len({r["round"] for r in rows}) > 1
    print(f"\n{'watch fan-out':<24} {'server ms/change':>16} {'(p50)':>6} {'us/watcher':>10} {'x floor':>7}"
          f" {'idle srv %':>10} {'client ms/change':>16} {'last recv ms p50/max':>20} {'received':>15}  load 1m")
    for r in rows:
        name = f"{r['kind']} -> {r['watchers']:,}" + (f" #{r['round']}" if rounds else "")
        recv = f"{r['received']:,}/{r['expected']:,}"
        floor = floors.get((r["round"], r["watchers"])) if r["kind"] != "floor" else None
        x_floor = r["server_us_per_watcher"] / floor if floor else None
        print(f"{name:<24} {_num(r['server_ms_per_change'], 1):>16} {_num(r['server_ms_per_change_p50'], 1):>6}"
              f" {_num(r['server_us_per_watcher']):>10} {_num(x_floor, 2):>7} {_num(r['idle_server_pct'], 1):>10}"
              f" {_num(r['client_ms_per_change'], 1):>16}"
              f" {_num(r['last_receipt_ms_p50']) + ' / ' + _num(r['last_receipt_ms_max']):>20} {recv:>15}"
              f"  {r['load'][0]:.2f} -> {r['load'][1]:.2f}")
        if not r["messages_complete"] or r["received"] != r["expected"]:
            print(f"  {name}: not every watcher received every change (server messages complete:"
                  f" {r['messages_complete']})")
    notes: dict[str, list[str]] = {}
    for r in rows:
        part = r.get("part", "watch")
        if r.get("streams_ended_early"):
            notes.setdefault(part, []).append(f"streams ended early: {r['streams_ended_early']}")
        if part == "watchfloor" and r.get("unmatched_receipts"):
            notes.setdefault(part, []).append(f"{r['unmatched_receipts']:,} messages more than changes")
    for part, lines in notes.items():
        for line in dict.fromkeys(lines):
            print(f"  {part}: {line}")


# -- main --------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--only", default=",".join(DEFAULT_PATHS), help="comma list of: " + ",".join(PATHS))
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per read run")
    parser.add_argument("--warmup", type=float, default=5.0, help="unmeasured seconds of calls before each run")
    parser.add_argument("--settle", type=float, default=3.0,
                        help="seconds after the hit paths' fill pass, and after the watch streams opened")
    parser.add_argument("--rounds", type=int, default=1, help="the set of paths, repeated alternately")
    parser.add_argument("--concurrency", type=int, default=8, help="calls in flight (one channel)")
    parser.add_argument("--server-env", action="append", default=[], metavar="K=V", help="a server setting")
    parser.add_argument("--out", help="also write the figures as JSON to this file")
    g = parser.add_argument_group("watch")
    g.add_argument("--watchers", default="1000,5000", help="comma list of open streams counts")
    g.add_argument("--changes", type=int, default=20, help="measured changes per kind and count")
    g.add_argument("--spacing", type=float, default=1.0, help="seconds between changes (each one's window)")
    g.add_argument("--idle-seconds", type=float, default=10.0, help="idle window per count")
    g = parser.add_argument_group("data set")
    g.add_argument("--keyspace", default="feed_readcost")
    g.add_argument("--users", type=int, default=30_000, help="users without pull authors (u*)")
    g.add_argument("--hit-users", type=int, default=5_000, help="of which the hit path reads")
    g.add_argument("--pull-users", type=int, default=2_000, help="users following --pull-follows pull authors (h*)")
    g.add_argument("--pull-follows", type=int, default=10)
    g.add_argument("--pull-authors", type=int, default=50, help="pull authors the h* users follow")
    g.add_argument("--rr-users", type=int, help="users whose pages are all reposts and replies (home_extras),"
                   " nothing in their inbox (r*); default: as many as --users, so each rr row reads as many"
                   " users as its plain row")
    g.add_argument("--pr-users", type=int, help="users with an empty inbox who merge in the pull reposter"
                   f" {PR_STAR} (p*), all of whose first pages are its reposts; default: as many as --users")
    g.add_argument("--list-users", type=int, help="owners of one list each (l*), whose list's inbox holds"
                   " --entries entries; default: as many as --users")
    g.add_argument("--watch-users", type=int, default=5_000, help="users following the pull author star (w*),"
                   " at least max(--watchers)")
    g.add_argument("--entries", type=int, default=45, help="inbox entries per user")
    g.add_argument("--authors", type=int, default=1_000, help="push authors (2 profile versions each)")
    g.add_argument("--tweets-per-author", type=int, default=30)
    g.add_argument("--repopulate", action="store_true", help="write the data set again")
    g.add_argument("--populate-only", action="store_true")
    g.add_argument("--drop", action="store_true", help="drop the keyspace and the change topic at the end")
    parser.add_argument("--serve-floor", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--floor-tls", default="", help=argparse.SUPPRESS)
    parser.add_argument("--serve-watch-floor", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_floor:
        serve_floor(args.serve_floor, args.floor_tls)
        return 0
    if args.serve_watch_floor:
        serve_watch_floor(args.serve_watch_floor)
        return 0
    only = [p.strip() for p in args.only.split(",") if p.strip()]
    if unknown := set(only) - set(PATHS):
        parser.error(f"--only: unknown path(s) {sorted(unknown)}; choose from {', '.join(PATHS)}")
    args.watchers = sorted({int(k) for k in args.watchers.split(",")})
    if args.rr_users is None:
        args.rr_users = args.users
    if args.pr_users is None:
        args.pr_users = args.users
    if args.list_users is None:
        args.list_users = args.users
    args.server_env = dict(kv.split("=", 1) for kv in args.server_env)
    if args.hit_users * 2 + 1 > 20_000:
        print("note: --hit-users x 2 cache keys exceed the default read cache (20,000 keys)", flush=True)

    from bench_grpc import BENCH_SECRET
    from isolated import drop, exit_on_sigterm

    from feed_service.server import auth

    exit_on_sigterm()
    settings = replace(Settings.from_env(), keyspace=args.keyspace).with_topic_suffix(TOPIC_SUFFIX)
    # the watch floor alone needs neither the data set nor the stack
    meta = dataset(settings, args) if args.populate_only or set(only) - {"watchfloor"} else {}
    if args.populate_only:
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="bench-read-cost-"))
    started = time.monotonic()
    print(f"bench_read_cost: {', '.join(only)}; {args.rounds} round(s) of {args.seconds:g}s; logs in {workdir};"
          f" cpus {os.cpu_count()}; loadavg {Path('/proc/loadavg').read_text().strip()}", flush=True)
    token = auth.mint(BENCH_SECRET.encode(), subject="bench-read-cost", role="service", ttl_s=24 * 3600)
    results: dict = {"args": {k: v for k, v in vars(args).items()}, "data": meta, "cpus": os.cpu_count(),
                     "loadavg_start": Path("/proc/loadavg").read_text().strip(), "reads": [], "watch": []}
    try:
        for rnd in range(1, args.rounds + 1):
            for path in only:
                if path in ("watch", "watchfloor"):
                    results["watch"] += watch_runs(FloorFanout if path == "watchfloor" else WatchFanout,
                                                   settings, args, workdir, rnd)
                    continue
                r = read_run(path, rnd, settings, meta, args, workdir, token)
                results["reads"].append(r)
                hit = "" if r["cache_hit_ratio"] is None else f", cache hit {r['cache_hit_ratio']:.1%}"
                print(f"[{path} #{rnd}] {_num(r['server_us'])} us server CPU per call, {_num(r['qps'])} QPS"
                      f"{hit}, load {r['load'][0]:.2f} -> {r['load'][1]:.2f}", flush=True)
    finally:
        if args.drop:
            drop(settings)
    results["loadavg_end"] = Path("/proc/loadavg").read_text().strip()
    print(f"\n==== GetHomeTimeline server CPU per call, {PAGE_SIZE}-entry first pages, concurrency"
          f" {args.concurrency}, {args.seconds:g}s per run, 1 server worker, {os.cpu_count()} CPUs"
          f" ({time.monotonic() - started:.0f}s; loadavg {results['loadavg_start']} -> {results['loadavg_end']})")
    if results["reads"]:
        print_reads(results["reads"])
    if results["watch"]:
        print(f"\n{args.changes} changes per row, {args.spacing:g}s apart; CPU net of the idle rate"
              f" ({args.idle_seconds:g}s idle per watcher count)")
        print_watch(results["watch"])
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2, default=str))
        print(f"figures: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

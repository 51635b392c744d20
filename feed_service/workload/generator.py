"""A seeded, reproducible workload: users, a power-law follow graph, then a stream of changes.

Pure generation, no I/O: :func:`generate` yields JSON envelopes; where they go (Kafka, a replay
file) and how fast is :mod:`feed_service.workload.sinks`' job.

What :func:`generate` yields, in order:

1. one profile per user (so every tweet can name an existing ``profile_version``);
2. the follow graph, as ``follow`` events: each user follows a log-normally distributed number of
   others (mean ``mean_following``), picked with probability ~ ``rank ** -zipf_exponent`` of a
   seeded popularity ranking, so in-degrees follow a Zipf-like power law: a few authors are
   followed by a large share of users, the median author by a handful;
3. ``events`` stream changes (endless if ``None``) drawn from :class:`Mix`: tweets, edits and
   deletes of live tweets, follows, unfollows of active edges, and new profile versions.

Time is simulated: setup happens at ``start_ms``, stream event *i* at ``start_ms + i * 1000 /
events_per_second``; ``created_at`` and versions come from that clock (a
:class:`~feed_service.kafka.versions.VersionClock` on simulated time), so one seed always gives
the same list of events, versions included. Versions increase per entity: an edit is above its
tweet, a delete above every upsert of its tweet, a re-follow above the unfollow before it.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from feed_service.kafka.versions import VersionClock

WORKLOAD_EPOCH_MS = 1_767_225_600_000
"""Default simulated start: 2026-01-01T00:00:00Z (fixed, so a seed reproduces the same events)."""

DEFAULT_USERS = 1000
DEFAULT_MEAN_FOLLOWING = 20.0
DEFAULT_ZIPF_EXPONENT = 0.8
"""Popularity weight of the author at rank r is r ** -0.8: at 100,000 users (seed 1) the top author
gets ~30,000 followers, rank 10 ~6,500, rank 100 ~1,100, the median 8."""
DEFAULT_MAX_FOLLOWING = 2000
DEFAULT_SIM_RATE = 1000.0
"""Simulated stream events per second (spacing of ``created_at``) when no rate is given."""

_FIRST = ("Ada", "Alan", "Grace", "Linus", "Barbara", "Ken", "Margaret", "Dennis", "Frances", "Edsger",
          "Radia", "Donald", "Leslie", "Shafi", "Tim", "Sophie", "John", "Karen", "Niklaus", "Hedy")
_LAST = ("Lovelace", "Turing", "Hopper", "Torvalds", "Liskov", "Thompson", "Hamilton", "Ritchie", "Allen",
         "Dijkstra", "Perlman", "Knuth", "Lamport", "Goldwasser", "Berners-Lee", "Wilson", "McCarthy",
         "Jones", "Wirth", "Lamarr")
_WORDS = ("stream", "join", "kafka", "spark", "delta", "version", "timeline", "follow", "tweet", "state",
          "batch", "replay", "offset", "partition", "compaction", "cassandra", "inbox", "fan-out", "key",
          "today", "shipped", "reading", "about", "the", "a", "of", "and", "with", "new", "why", "how",
          "finally", "again", "coffee", "deploy", "bug", "fixed", "tests", "green", "#dataeng", "#python")


@dataclass(frozen=True, slots=True)
class Mix:
    """Relative frequency of each kind of stream change (normalized; they need not sum to 1)."""

    tweet: float = 0.66
    edit: float = 0.08
    delete: float = 0.04
    follow: float = 0.12
    unfollow: float = 0.06
    profile: float = 0.04

    def cumulative(self) -> tuple[list[float], list[str]]:
        kinds = ["tweet", "edit", "delete", "follow", "unfollow", "profile"]
        weights = [getattr(self, k) for k in kinds]
        if any(w < 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(f"mix weights must be >= 0 with a positive sum: {self}")
        total = sum(weights)
        return [c / total for c in itertools.accumulate(weights)], kinds


@dataclass(slots=True)
class _Tweet:
    tweet_id: str
    author: int
    created_at: int
    version: int


@dataclass(slots=True)
class WorkloadModel:
    """The generator's state: users, popularity, active edges, live tweets, simulated time.

    Everything is kept in lists and dicts (never iterated sets), so one seed gives one sequence.
    """

    users: int
    seed: int = 0
    mean_following: float = DEFAULT_MEAN_FOLLOWING
    zipf_exponent: float = DEFAULT_ZIPF_EXPONENT
    max_following: int = DEFAULT_MAX_FOLLOWING
    mix: Mix = field(default_factory=Mix)
    start_ms: int = WORKLOAD_EPOCH_MS
    events_per_second: float = DEFAULT_SIM_RATE
    prefix: str = ""

    rng: random.Random = field(init=False)
    clock: VersionClock = field(init=False)
    now_ms: int = field(init=False)
    user_ids: list[str] = field(init=False)
    profile_version: list[int] = field(init=False)
    profile_count: list[int] = field(init=False)
    _cum_popularity: list[float] = field(init=False)
    _edges: list[tuple[int, int]] = field(init=False)
    _edge_index: dict[tuple[int, int], int] = field(init=False)
    _live: list[_Tweet] = field(init=False)
    _tweet_seq: int = field(init=False)
    _stream_seq: int = field(init=False)
    _mix: tuple[list[float], list[str]] = field(init=False)

    def __post_init__(self) -> None:
        if self.users < 1:
            raise ValueError(f"users must be >= 1, got {self.users}")
        self.rng = random.Random(self.seed)
        self.now_ms = self.start_ms
        self.clock = VersionClock(now_ms=lambda: self.now_ms)
        self.user_ids = [f"{self.prefix}u{i}" for i in range(self.users)]
        self.profile_version = [0] * self.users
        self.profile_count = [0] * self.users
        ranks = list(range(1, self.users + 1))
        self.rng.shuffle(ranks)  # popularity is unrelated to the user number
        self._cum_popularity = list(itertools.accumulate(r ** -self.zipf_exponent for r in ranks))
        self._edges, self._edge_index, self._live = [], {}, []
        self._tweet_seq = self._stream_seq = 0
        self._mix = self.mix.cumulative()

    # --- picks ----------------------------------------------------------------------------------

    def popular_user(self) -> int:
        """A user drawn with probability proportional to its popularity weight."""
        cum = self._cum_popularity
        return min(bisect.bisect_right(cum, self.rng.random() * cum[-1]), self.users - 1)

    def any_user(self) -> int:
        return self.rng.randrange(self.users)

    def _following_count(self) -> int:
        if self.users < 2:
            return 0
        sigma = 1.0
        mu = math.log(self.mean_following) - sigma * sigma / 2  # lognormal with that mean
        k = int(round(self.rng.lognormvariate(mu, sigma)))
        return max(1, min(k, self.max_following, self.users - 1))

    def _text(self) -> str:
        return " ".join(self.rng.choices(_WORDS, k=self.rng.randint(3, 16)))

    # --- events ---------------------------------------------------------------------------------

    def _profile(self, user: int) -> dict[str, Any]:
        version = self.clock.next()
        self.profile_version[user] = version
        self.profile_count[user] += 1
        n = self.profile_count[user]
        name = f"{self.rng.choice(_FIRST)} {self.rng.choice(_LAST)}"
        event: dict[str, Any] = {"type": "profile", "user_id": self.user_ids[user], "version": version,
                                 "display_name": name if n == 1 else f"{name} ({n})"}
        if self.rng.random() < 0.5:
            event["bio"] = self._text()
        if self.rng.random() < 0.3:
            event["avatar_url"] = f"https://avatars.invalid/{self.user_ids[user]}/{n}.png"
        return event

    def _edge(self, op: str, follower: int, followee: int) -> dict[str, Any]:
        if op == "follow":
            self._edge_index[(follower, followee)] = len(self._edges)
            self._edges.append((follower, followee))
        else:
            i = self._edge_index.pop((follower, followee))
            last = self._edges.pop()
            if i < len(self._edges):
                self._edges[i] = last
                self._edge_index[last] = i
        return {"type": "follow", "op": op, "follower_id": self.user_ids[follower],
                "followee_id": self.user_ids[followee], "version": self.clock.next()}

    def _tweet(self) -> dict[str, Any]:
        author = self.popular_user() if self.rng.random() < 0.5 else self.any_user()
        tweet = _Tweet(f"{self.prefix}t{self.seed}.{self._tweet_seq}", author, self.now_ms, self.clock.next())
        self._tweet_seq += 1
        self._live.append(tweet)
        return self._upsert(tweet)

    def _upsert(self, tweet: _Tweet) -> dict[str, Any]:
        return {"type": "tweet", "op": "upsert", "tweet_id": tweet.tweet_id, "author_id": self.user_ids[tweet.author],
                "version": tweet.version, "created_at": tweet.created_at, "text": self._text(),
                "profile_version": self.profile_version[tweet.author]}

    def _pick_live(self, remove: bool) -> _Tweet:
        i = self.rng.randrange(len(self._live))
        tweet = self._live[i]
        if remove:
            last = self._live.pop()
            if i < len(self._live):
                self._live[i] = last
        return tweet

    def setup(self) -> Iterator[dict[str, Any]]:
        """Yield one profile per user, then the follow graph (all at ``start_ms``)."""
        for user in range(self.users):
            yield self._profile(user)
        for follower in range(self.users):
            want = self._following_count()
            chosen: set[int] = set()
            attempts = 0
            while len(chosen) < want and attempts < 10 * want + 100:
                attempts += 1
                followee = self.popular_user()
                if followee != follower and followee not in chosen:
                    chosen.add(followee)
                    yield self._edge("follow", follower, followee)

    def step(self) -> dict[str, Any]:
        """Advance simulated time by one stream event and return that event."""
        self.now_ms = self.start_ms + 1 + int(self._stream_seq * 1000 / self.events_per_second)
        self._stream_seq += 1
        cum, kinds = self._mix
        kind = kinds[min(bisect.bisect_right(cum, self.rng.random()), len(kinds) - 1)]
        if kind == "edit" and self._live:
            tweet = self._pick_live(remove=False)
            tweet.version = self.clock.next()
            return self._upsert(tweet)
        if kind == "delete" and self._live:
            tweet = self._pick_live(remove=True)
            return {"type": "tweet", "op": "delete", "tweet_id": tweet.tweet_id,
                    "author_id": self.user_ids[tweet.author], "version": self.clock.next()}
        if kind == "follow" and self.users > 1:
            for _ in range(10):
                follower, followee = self.any_user(), self.popular_user()
                if follower != followee and (follower, followee) not in self._edge_index:
                    return self._edge("follow", follower, followee)
        if kind == "unfollow" and self._edges:
            follower, followee = self._edges[self.rng.randrange(len(self._edges))]
            return self._edge("unfollow", follower, followee)
        if kind == "profile":
            return self._profile(self.any_user())
        return self._tweet()

    def active_edges(self) -> list[tuple[str, str]]:
        """The follow edges active now, as (follower_id, followee_id)."""
        return [(self.user_ids[a], self.user_ids[b]) for a, b in self._edges]


def generate(
    users: int = DEFAULT_USERS,
    events: int | None = 10_000,
    seed: int = 0,
    *,
    setup: bool = True,
    mean_following: float = DEFAULT_MEAN_FOLLOWING,
    zipf_exponent: float = DEFAULT_ZIPF_EXPONENT,
    max_following: int = DEFAULT_MAX_FOLLOWING,
    mix: Mix | None = None,
    start_ms: int = WORKLOAD_EPOCH_MS,
    events_per_second: float = DEFAULT_SIM_RATE,
    prefix: str = "",
) -> Iterator[dict[str, Any]]:
    """Yield the workload's envelopes: setup (profiles, follow graph), then ``events`` stream changes.

    >>> first = list(generate(users=3, events=2, seed=7, mean_following=1))
    >>> [e["type"] for e in first[:3]], first == list(generate(users=3, events=2, seed=7, mean_following=1))
    (['profile', 'profile', 'profile'], True)
    """
    model = WorkloadModel(users=users, seed=seed, mean_following=mean_following, zipf_exponent=zipf_exponent,
                          max_following=max_following, mix=mix or Mix(), start_ms=start_ms,
                          events_per_second=events_per_second if events_per_second > 0 else DEFAULT_SIM_RATE,
                          prefix=prefix)
    if setup:
        yield from model.setup()
    counter = itertools.count() if events is None else range(events)
    for _ in counter:
        yield model.step()


def in_degrees(events: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Followers per user after ``events`` (last change per edge wins), users with none omitted."""
    active: dict[tuple[str, str], bool] = {}
    for e in events:
        if e.get("type") == "follow":
            active[(e["follower_id"], e["followee_id"])] = e["op"] == "follow"
    degrees: dict[str, int] = {}
    for (_, followee), on in active.items():
        if on:
            degrees[followee] = degrees.get(followee, 0) + 1
    return degrees

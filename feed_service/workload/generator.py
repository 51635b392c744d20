"""A seeded, reproducible workload: users, a power-law follow graph, then a stream of changes.

Long (about 530 lines) on purpose: one seeded generator whose phases draw from one random stream, so
that a seed gives the same workload only while they stay in one order, in one place.

Pure generation, no I/O: :func:`generate` yields JSON envelopes; where they go (Kafka, a replay
file) and how fast is :mod:`feed_service.workload.sinks`' job.

What :func:`generate` yields, in order:

1. one profile per user (so every tweet can name an existing ``profile_version``);
2. the follow graph, as ``follow`` events: each user follows a log-normally distributed number of
   others (mean ``mean_following``), picked with probability ~ ``rank ** -zipf_exponent`` of a
   seeded popularity ranking, so in-degrees follow a Zipf-like power law: a few authors are
   followed by a large share of users, the median author by a handful;
3. ``events`` stream changes (endless if ``None``): a share ``hide_share`` of them are block and
   mute changes (:class:`HideMix`), the rest are drawn from :class:`Mix`: tweets, edits and deletes
   of live tweets, follows, unfollows of active edges, and new profile versions.

Replies and reposts (``reply_share``, ``repost_share``; default 0 until the engine joins them): a
share ``reply_share`` of new tweets answer an earlier live tweet (:class:`RepostMix` says whose), and
a share ``repost_share`` of stream events are repost changes: reposts of live tweets and, now and
then, unreposts of reposts in force. Each has a random generator of its own, like blocks and mutes,
so with both at 0 the workload is exactly the one of before them, and with a share above 0 the other
events are the same ones in the same order (a reply's author may be its parent's, a thread; times
and versions move as reposts take time slots).

Follow options (``follow_option_share``, default 0): a share of stream events re-send an active
follow with its ``show_reposts`` flipped (false, later true again; an unfollow or a plain re-follow
resets it to true), from a random generator of its own, as above.

Blocks and mutes (default :data:`DEFAULT_HIDE_SHARE`, 2 % of the stream): mostly mutes, some of
both later undone, mostly aimed at accounts the user follows (:class:`HideMix` says why). They have
a random generator of their own, so ``hide_share=0`` gives exactly the workload of before they
existed, event for event, and a run with ``hide_share=0.1`` holds the same other events, in the
same order, as the run with 0 (only their times move, ``created_at`` and the versions, as the
block and mute changes take time slots of their own). Benchmarks compare the two with ``generate(..., hide_share=0.1)``
and ``generate(..., hide_share=0)``. The setup holds no blocks or mutes.

Time is simulated: setup happens at ``start_ms``, stream event *i* at ``start_ms + i * 1000 /
events_per_second``; ``created_at`` and versions come from that clock (a
:class:`~feed_service.kafka.versions.VersionClock` on simulated time), so one seed always gives
the same list of events, versions included. Versions increase per entity: an edit is above its
tweet, a delete above every upsert of its tweet, a re-follow above the unfollow before it, an
unblock or unmute above the block or mute it ends, an unrepost above the repost it ends.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from feed_service.core.event_kinds import EDGE_KINDS, HIDE_KINDS, EventKind
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
DEFAULT_HIDE_SHARE = 0.02
"""Share of stream events that are block and mute changes: one for about nine follow changes (18 % of
the stream), as hiding someone is an occasional act and following a routine one."""
DEFAULT_REPOST_SHARE = 0.0
"""Share of stream events that are repost changes; 0 until the engine joins reposts."""
DEFAULT_REPLY_SHARE = 0.0
"""Share of new tweets that are replies; 0 until the engine joins replies."""
DEFAULT_FOLLOW_OPTION_SHARE = 0.0
"""Share of stream events that flip a follow's ``show_reposts`` (0: the workload of before the option)."""

_FIRST = ("Ada", "Alan", "Grace", "Linus", "Barbara", "Ken", "Margaret", "Dennis", "Frances", "Edsger",
          "Radia", "Donald", "Leslie", "Shafi", "Tim", "Sophie", "John", "Karen", "Niklaus", "Hedy")
_LAST = ("Lovelace", "Turing", "Hopper", "Torvalds", "Liskov", "Thompson", "Hamilton", "Ritchie", "Allen",
         "Dijkstra", "Perlman", "Knuth", "Lamport", "Goldwasser", "Berners-Lee", "Wilson", "McCarthy",
         "Jones", "Wirth", "Lamarr")
_WORDS = ("stream", "join", "kafka", "spark", "delta", "version", "timeline", "follow", "tweet", "state",
          "batch", "replay", "offset", "partition", "compaction", "cassandra", "inbox", "fan-out", "key",
          "today", "shipped", "reading", "about", "the", "a", "of", "and", "with", "new", "why", "how",
          "finally", "again", "coffee", "deploy", "bug", "fixed", "tests", "green", "#dataeng", "#python")


def _cumulative(mix: object, kinds: list[str]) -> tuple[list[float], list[str]]:
    """Cumulative shares of ``mix``'s weights of ``kinds``, for a draw with one ``random()``."""
    weights = [getattr(mix, k) for k in kinds]
    if any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"mix weights must be >= 0 with a positive sum: {mix}")
    total = sum(weights)
    return [c / total for c in itertools.accumulate(weights)], kinds


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
        return _cumulative(self, ["tweet", "edit", "delete", "follow", "unfollow", "profile"])


@dataclass(frozen=True, slots=True)
class HideMix:
    """Relative frequency of each kind of block and mute change (normalized), and whom they target.

    Mutes outnumber blocks about two to one: a mute is the quiet tool (the muted user is not told and
    may keep following), a block is visible and cuts both ways. Three changes in ten undo an earlier
    one, unmutes more often than unblocks. An undo ends a block or mute in force (a new one when
    none is). A new block or mute targets, with probability ``followed``, an account the user
    follows at that moment (muting is how one quiets a followee without unfollowing), otherwise a
    user drawn by popularity, as the accounts one meets in replies and mentions without following
    them are mostly the popular ones.
    """

    mute: float = 0.45
    block: float = 0.25
    unmute: float = 0.18
    unblock: float = 0.12
    followed: float = 0.7
    """Share of new blocks and mutes aimed at an account the user follows (not a weight of the mix)."""

    def cumulative(self) -> tuple[list[float], list[str]]:
        if not 0 <= self.followed <= 1:
            raise ValueError(f"followed must be between 0 and 1: {self}")
        return _cumulative(self, ["mute", "block", "unmute", "unblock"])


@dataclass(frozen=True, slots=True)
class RepostMix:
    """How replies and reposts pick their tweets and users (shares, not weights).

    A reply answers a live tweet drawn uniformly (a conversation can start anywhere); with
    probability ``self_reply`` its author is the parent's (a thread), otherwise whoever the tweet
    draw chose. A repost is of a live tweet drawn uniformly, by a user drawn by popularity (the
    accounts that repost are mostly the followed ones), the author themself with probability
    ``own_repost``. A share ``unrepost`` of repost changes take back a repost in force.
    """

    self_reply: float = 0.2
    own_repost: float = 0.05
    unrepost: float = 0.1

    def check(self) -> None:
        for name in ("self_reply", "own_repost", "unrepost"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be between 0 and 1: {self}")


_HIDE_OPS = {op: (kind.type, op == kind.on_op) for kind in HIDE_KINDS.values() for op in kind.ops}
"""Kind of :class:`HideMix` (an op of a hiding edge) -> (envelope type, whether it hides)."""


def _edge_envelope(kind: EventKind, on: bool, subject: str, target: str, version: int) -> dict[str, Any]:
    """The envelope of an edge change, with the field names the registry declares for ``kind``."""
    assert kind.edge is not None
    return {"type": kind.type, "op": kind.on_op if on else kind.off_op, kind.edge.subject: subject,
            kind.edge.target: target, "version": version}



class _Pairs:
    """A set of edges ((user, user), or a repost's (user, tweet_id, author)) as a list and an index:
    O(1) add, remove and uniform pick, and an order that depends only on the calls made (never on
    set iteration), so a seed gives one sequence."""

    __slots__ = ("items", "_index")

    def __init__(self) -> None:
        self.items: list[tuple[Any, ...]] = []
        self._index: dict[tuple[Any, ...], int] = {}

    def __len__(self) -> int:
        return len(self.items)

    def __contains__(self, pair: tuple[Any, ...]) -> bool:
        return pair in self._index

    def add(self, pair: tuple[Any, ...]) -> None:
        self._index[pair] = len(self.items)
        self.items.append(pair)

    def remove(self, pair: tuple[Any, ...]) -> None:
        i = self._index.pop(pair)
        last = self.items.pop()
        if i < len(self.items):  # the last edge takes the removed one's place
            self.items[i] = last
            self._index[last] = i

    def pick(self, rng: random.Random) -> tuple[Any, ...]:
        return self.items[rng.randrange(len(self.items))]


@dataclass(slots=True)
class _Tweet:
    tweet_id: str
    author: int
    created_at: int
    version: int
    parent: tuple[str, int] | None = None
    """(tweet_id, author) of the tweet a reply answers: content, so every edit carries it again."""


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
    hide_share: float = DEFAULT_HIDE_SHARE
    """Share of stream events that are block and mute changes (0: none, the workload of before them)."""
    hide_mix: HideMix = field(default_factory=HideMix)
    repost_share: float = DEFAULT_REPOST_SHARE
    """Share of stream events that are repost changes (0: none, the workload of before them)."""
    reply_share: float = DEFAULT_REPLY_SHARE
    """Share of new tweets that are replies (0: none)."""
    repost_mix: RepostMix = field(default_factory=RepostMix)
    follow_option_share: float = DEFAULT_FOLLOW_OPTION_SHARE
    """Share of stream events that flip an active follow's ``show_reposts`` (a follow again, at a
    higher version; 0: none, the workload of before them)."""

    rng: random.Random = field(init=False)
    clock: VersionClock = field(init=False)
    now_ms: int = field(init=False)
    user_ids: list[str] = field(init=False)
    profile_version: list[int] = field(init=False)
    profile_count: list[int] = field(init=False)
    _cum_popularity: list[float] = field(init=False)
    _follows: _Pairs = field(init=False)
    _live: list[_Tweet] = field(init=False)
    _tweet_seq: int = field(init=False)
    _stream_seq: int = field(init=False)
    _mix: tuple[list[float], list[str]] = field(init=False)
    _hide_rng: random.Random = field(init=False)
    _hides: dict[str, _Pairs] = field(init=False)
    _hide_mix: tuple[list[float], list[str]] = field(init=False)
    _repost_rng: random.Random = field(init=False)
    _reply_rng: random.Random = field(init=False)
    _reposts: _Pairs = field(init=False)
    _option_rng: random.Random = field(init=False)
    _without_reposts: dict[tuple[int, int], bool] = field(init=False)

    def __post_init__(self) -> None:
        if self.users < 1:
            raise ValueError(f"users must be >= 1, got {self.users}")
        for name in ("hide_share", "repost_share", "reply_share", "follow_option_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be between 0 and 1, got {getattr(self, name)}")
        self.repost_mix.check()
        self.rng = random.Random(self.seed)
        self.now_ms = self.start_ms
        self.clock = VersionClock(now_ms=lambda: self.now_ms)
        self.user_ids = [f"{self.prefix}u{i}" for i in range(self.users)]
        self.profile_version = [0] * self.users
        self.profile_count = [0] * self.users
        ranks = list(range(1, self.users + 1))
        self.rng.shuffle(ranks)  # popularity is unrelated to the user number
        self._cum_popularity = list(itertools.accumulate(r ** -self.zipf_exponent for r in ranks))
        self._follows, self._live = _Pairs(), []
        self._tweet_seq = self._stream_seq = 0
        self._mix = self.mix.cumulative()
        # Blocks and mutes draw from a generator of their own, so they never shift the other
        # events' draws (module docstring).
        self._hide_rng = random.Random(f"{self.seed}/hide")
        self._hides = {kind: _Pairs() for kind in HIDE_KINDS}
        self._hide_mix = self.hide_mix.cumulative()
        # Replies and reposts too (module docstring): a share of 0 draws nothing from them.
        self._repost_rng = random.Random(f"{self.seed}/repost")
        self._reply_rng = random.Random(f"{self.seed}/reply")
        self._reposts = _Pairs()  # (reposter, tweet_id, author) of the reposts in force
        # Follow options too: a share of 0 draws nothing from them.
        self._option_rng = random.Random(f"{self.seed}/follow-option")
        self._without_reposts = {}  # the active follows whose show_reposts is false (insertion order)

    # --- picks ----------------------------------------------------------------------------------

    def popular_user(self, rng: random.Random | None = None) -> int:
        """A user drawn with probability proportional to its popularity weight (from ``rng``, default the model's)."""
        cum = self._cum_popularity
        return min(bisect.bisect_right(cum, (rng or self.rng).random() * cum[-1]), self.users - 1)

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
            self._follows.add((follower, followee))
        else:
            self._follows.remove((follower, followee))
        self._without_reposts.pop((follower, followee), None)  # a follow without the option: true
        return _edge_envelope(EDGE_KINDS["follow"], op == "follow", self.user_ids[follower],
                              self.user_ids[followee], self.clock.next())

    def _tweet(self) -> dict[str, Any]:
        author = self.popular_user() if self.rng.random() < 0.5 else self.any_user()
        parent = None
        if self.reply_share and self._live and self._reply_rng.random() < self.reply_share:
            parent = self._live[self._reply_rng.randrange(len(self._live))]
            if self._reply_rng.random() < self.repost_mix.self_reply:
                author = parent.author  # a thread: the author answers their own tweet
        tweet = _Tweet(f"{self.prefix}t{self.seed}.{self._tweet_seq}", author, self.now_ms, self.clock.next(),
                       None if parent is None else (parent.tweet_id, parent.author))
        self._tweet_seq += 1
        self._live.append(tweet)
        return self._upsert(tweet)

    def _upsert(self, tweet: _Tweet) -> dict[str, Any]:
        event = {"type": "tweet", "op": "upsert", "tweet_id": tweet.tweet_id, "author_id": self.user_ids[tweet.author],
                 "version": tweet.version, "created_at": tweet.created_at, "text": self._text(),
                 "profile_version": self.profile_version[tweet.author]}
        if tweet.parent is not None:
            event["in_reply_to_tweet_id"] = tweet.parent[0]
            event["in_reply_to_author_id"] = self.user_ids[tweet.parent[1]]
        return event

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

    def _hide_change(self) -> dict[str, Any] | None:
        """A block or mute change drawn from :class:`HideMix`, or None when no pair can be found."""
        rng = self._hide_rng
        cum, kinds = self._hide_mix
        kind, hiding = _HIDE_OPS[kinds[min(bisect.bisect_right(cum, rng.random()), len(kinds) - 1)]]
        active = self._hides[kind]
        if not hiding and active:
            pair = active.pick(rng)
            active.remove(pair)
        else:  # a new block or mute (also for an undo with nothing to undo)
            pair = self._hide_target(active)
            if pair is None:
                return None
            active.add(pair)
            hiding = True
        return _edge_envelope(HIDE_KINDS[kind], hiding, self.user_ids[pair[0]], self.user_ids[pair[1]],
                              self.clock.next())

    def _hide_target(self, active: _Pairs) -> tuple[int, int] | None:
        """(user, target) of a new block or mute, not already in ``active`` and never a self-edge."""
        rng = self._hide_rng
        for _ in range(10):
            if self._follows and rng.random() < self.hide_mix.followed:
                pair = self._follows.pick(rng)
            else:
                pair = (rng.randrange(self.users), self.popular_user(rng))
            if pair[0] != pair[1] and pair not in active:
                return pair
        return None

    def _repost_change(self) -> dict[str, Any] | None:
        """A repost of a live tweet, or an unrepost of a repost in force; None when there is neither."""
        rng, active = self._repost_rng, self._reposts
        if active and rng.random() < self.repost_mix.unrepost:
            reposter, tweet_id, author = active.pick(rng)
            active.remove((reposter, tweet_id, author))
            return {"type": "repost", "op": "unrepost", "reposter_id": self.user_ids[reposter], "tweet_id": tweet_id,
                    "author_id": self.user_ids[author], "version": self.clock.next()}
        for _ in range(10):
            if not self._live:
                return None
            tweet = self._live[rng.randrange(len(self._live))]
            reposter = tweet.author if rng.random() < self.repost_mix.own_repost else self.popular_user(rng)
            edge = (reposter, tweet.tweet_id, tweet.author)
            if edge not in active:
                active.add(edge)
                return {"type": "repost", "op": "repost", "reposter_id": self.user_ids[reposter],
                        "tweet_id": tweet.tweet_id, "author_id": self.user_ids[tweet.author],
                        "version": self.clock.next(), "created_at": self.now_ms,
                        "profile_version": self.profile_version[reposter]}
        return None

    def _follow_option_change(self) -> dict[str, Any] | None:
        """An active follow sent again with its ``show_reposts`` flipped; None when no follow is active."""
        if not self._follows:
            return None
        edge = self._follows.pick(self._option_rng)
        show = edge in self._without_reposts  # false now: flip it back to true
        if show:
            del self._without_reposts[edge]
        else:
            self._without_reposts[edge] = False
        event = _edge_envelope(EDGE_KINDS["follow"], True, self.user_ids[edge[0]], self.user_ids[edge[1]],
                               self.clock.next())
        event["show_reposts"] = show
        return event

    def step(self) -> dict[str, Any]:
        """Advance simulated time by one stream event and return that event."""
        self.now_ms = self.start_ms + 1 + int(self._stream_seq * 1000 / self.events_per_second)
        self._stream_seq += 1
        # follow_option_share 0 draws nothing here, as repost_share 0 below.
        if self.follow_option_share and self._option_rng.random() < self.follow_option_share:
            event = self._follow_option_change()
            if event is not None:
                return event
        # repost_share 0 draws nothing here: the stream is then exactly the one of before reposts; reposts
        # come first, so the steps left to the other events see the same block and mute draws.
        if self.repost_share and self._repost_rng.random() < self.repost_share:
            event = self._repost_change()
            if event is not None:
                return event
        # nor does hide_share 0: the stream is then exactly the one of before blocks and mutes
        if self.hide_share and self._hide_rng.random() < self.hide_share:
            event = self._hide_change()
            if event is not None:
                return event
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
                if follower != followee and (follower, followee) not in self._follows:
                    return self._edge("follow", follower, followee)
        if kind == "unfollow" and self._follows:
            follower, followee = self._follows.pick(self.rng)
            return self._edge("unfollow", follower, followee)
        if kind == "profile":
            return self._profile(self.any_user())
        return self._tweet()

    def active_edges(self) -> list[tuple[str, str]]:
        """The follow edges active now, as (follower_id, followee_id)."""
        return self._ids(self._follows)

    def active_blocks(self) -> list[tuple[str, str]]:
        """The blocks in force now, as (blocker_id, blocked_id)."""
        return self._ids(self._hides["block"])

    def active_mutes(self) -> list[tuple[str, str]]:
        """The mutes in force now, as (muter_id, muted_id)."""
        return self._ids(self._hides["mute"])

    def active_reposts(self) -> list[tuple[str, str]]:
        """The reposts in force now, as (reposter_id, tweet_id)."""
        return [(self.user_ids[reposter], tweet_id) for reposter, tweet_id, _ in self._reposts.items]

    def follows_without_reposts(self) -> list[tuple[str, str]]:
        """The active follows whose show_reposts is false now, as (follower_id, followee_id)."""
        return [(self.user_ids[a], self.user_ids[b]) for a, b in self._without_reposts]

    def _ids(self, pairs: _Pairs) -> list[tuple[str, str]]:
        return [(self.user_ids[a], self.user_ids[b]) for a, b in pairs.items]


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
    hide_share: float = DEFAULT_HIDE_SHARE,
    hide_mix: HideMix | None = None,
    repost_share: float = DEFAULT_REPOST_SHARE,
    reply_share: float = DEFAULT_REPLY_SHARE,
    repost_mix: RepostMix | None = None,
    follow_option_share: float = DEFAULT_FOLLOW_OPTION_SHARE,
) -> Iterator[dict[str, Any]]:
    """Yield the workload's envelopes: setup (profiles, follow graph), then ``events`` stream changes,
    a share ``hide_share`` of them block and mute changes (0: none, the workload of before them), a
    share ``repost_share`` repost changes, a share ``follow_option_share`` flips of a follow's
    show_reposts, and a share ``reply_share`` of the new tweets replies.

    >>> first = list(generate(users=3, events=2, seed=7, mean_following=1))
    >>> [e["type"] for e in first[:3]], first == list(generate(users=3, events=2, seed=7, mean_following=1))
    (['profile', 'profile', 'profile'], True)
    """
    model = WorkloadModel(users=users, seed=seed, mean_following=mean_following, zipf_exponent=zipf_exponent,
                          max_following=max_following, mix=mix or Mix(), start_ms=start_ms,
                          events_per_second=events_per_second if events_per_second > 0 else DEFAULT_SIM_RATE,
                          prefix=prefix, hide_share=hide_share, hide_mix=hide_mix or HideMix(),
                          repost_share=repost_share, reply_share=reply_share, repost_mix=repost_mix or RepostMix(),
                          follow_option_share=follow_option_share)
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

"""The per-reader stage: replies and reposts decided as a join over audiences (docs/reposts-and-replies.md).

The author keys decide every plain row. What needs the reader is decided here, per *tweet*, from
indexed sets instead of one message per reader:

- ``aud[U]``: the readers who see U (actively follow U, nothing hides); ``hid[U]``: the readers
  from whom U's tweets are hidden; ``quiet[U]``: the readers of ``aud[U]`` who turned U's reposts
  off (docs/lists.md#per-follow-options); ``excl[U]``: the readers of ``aud[U]`` with U in one of
  their exclusive lists (docs/lists.md#exclusive-lists). All from the author keys' :class:`Relation`
  messages. A list's reader (docs/lists.md#in-the-engine) is a reader like any other in them.
- per tweet T by A: its conditional content (a push author's retained reply to a third user X,
  :class:`ConditionalTweet`), its content for reposts (:class:`RepostedTweet`) and its live
  reposts (a :class:`RepostEdge` whose winning change names A, joined with a live content).

For a tweet T by A replying to X (X None for no reply) and its pushed reposts ordered by
``(repost time, reposter)``, the rows of ``home_extras`` are, as the batch reference defines them:

    src(A)         = aud[A] − excl[A]                    (the readers A may bring a direct entry)
    conditional(T) = src(A) ∩ aud[X] − {X}               (X's own row is in X's inbox)
    direct(T)      = src(A) if X in (None, A) else src(A) ∩ (aud[X] ∪ {X})
    rep(P)         = aud[P] − quiet[P] − excl[P]         (the readers P's reposts reach)
    repost by P_i  = rep(P_i) − direct(T) − hid[A] − ⋃_{j<i} rep(P_j)

with a list's reader decided by its list's replies policy instead of the reply rule
(:func:`~feed_service.core.rules.shown_in_list`) and hidden from A when its owner is
(``owner ∈ hid[A]``).

each a set operation in C, and the changes leave as compact :class:`ExtrasFanout` (one entry, many
readers). A tweet whose inputs changed is decided whole (:meth:`AudienceStage._decide`); a
reader whose relation to some U changed is decided alone, for just the tweets involving U
(:meth:`AudienceStage._decide_one`), so a batch costs what changed: a repost costs a few set
operations over its reposter's audience, a follow the tweets its followee is involved in.

A reposter seen by ``pull_threshold`` readers or more is a *pull reposter* (when enabled): its
reposts are merged at read (:mod:`~feed_service.core.per_reader.pull_reposts`) and take no part
here, except its reposts of its own replies to third users, which no read can merge.

Every input is an assignment versioned by its sender's clock; the stage keeps the newest per
identity, so its state, and therefore every decision, is a function of the final tables whatever
the order, batching or duplication of the messages.

Longer than one module should be (about 550 lines) because its indexes, decisions and written rows
are one state kept consistent within each step; the rules it applies (the reply rule, "direct", the
earliest reposter, the pull reposter test) are :mod:`feed_service.core.rules`', shared with the
reference and the reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from feed_service.core.list_readers import list_of, list_reader
from feed_service.core.rules import (conditional_readers, direct, direct_among, is_pull_reposter, reply_class, repost_order,
                                     shown_in_inbox, shown_in_list)
from feed_service.core.per_reader.list_stage import ListFact
from feed_service.core.per_reader.messages import (
    ConditionalTweet,
    ExcludedDelta,
    ExtrasFanout,
    HiddenDelta,
    PullReposterDelta,
    Relation,
    RepostedTweet,
    RepostEdge,
    VisibleDelta,
)
from feed_service.core.rows import AuthorTimelineDelta, Entry

TweetKey = tuple[str, str]
"""(author_id, tweet_id): a tweet's identity."""
Identity = tuple[str, ...]
"""One input of the stage: ``("rel", reader, user)``, ``("cond", author, tweet)``, ``("content",
author, tweet)``, ``("edge", reposter, tweet)``, ``("pull", user)`` or ``("clock",)``."""
Groups = dict[Entry, set[str]]
"""What a tweet shows in ``home_extras``: entry -> the readers whose row it is."""

_NOBODY: frozenset[str] = frozenset()
_ONE_BY_ONE = 32
"""Up to this many readers of one tweet whose relations changed are decided one by one; more, with
set operations (measured: bench/bench_reposts_engine.py, docs/reposts-and-replies.md)."""


@dataclass(frozen=True, slots=True)
class StageResult:
    """What one batch of the stage wrote."""

    extras: tuple[ExtrasFanout, ...]
    own_reposts: tuple[AuthorTimelineDelta, ...]
    """Changes of reposters' own timeline rows of reposts of others' tweets (``user_reposts``)."""
    visible: tuple[VisibleDelta, ...]
    hidden: tuple[HiddenDelta, ...]
    pull_readers: tuple[PullReposterDelta, ...]
    ts: int
    inputs: tuple[tuple[Identity, Any, Any], ...] = ()
    """Every input the batch assigned: (identity, value after the batch, value before it); what a
    store of the stage keeps (:meth:`AudienceStage.restore` rebuilds the stage from the values)."""
    excluded: tuple[ExcludedDelta, ...] = ()


@dataclass(slots=True)
class AudienceStage:
    """The stage's state (the indexes above) and its step; see the module docstring."""

    pull_threshold: int | None = None
    """Readers from which on a reposter is a pull reposter; None: every reposter pushes."""
    rel: dict[tuple[str, str], tuple] = field(default_factory=dict)
    """(reader, user) -> (ts, reader sees user, user hidden from reader), with a fourth item True
    when the reader sees the user but turned its reposts off."""
    aud: dict[str, set[str]] = field(default_factory=dict)
    hid: dict[str, set[str]] = field(default_factory=dict)
    quiet: dict[str, set[str]] = field(default_factory=dict)
    excl: dict[str, set[str]] = field(default_factory=dict)
    """user -> the readers of ``aud[user]`` with the user in one of their exclusive lists: no source
    of their home timelines (docs/lists.md#exclusive-lists)."""
    list_aud: dict[str, set[str]] = field(default_factory=dict)
    """user -> the lists' readers in ``aud[user]`` (docs/lists.md#in-the-engine)."""
    list_sees: dict[str, set[str]] = field(default_factory=dict)
    """a list's reader -> the users it sees (``aud`` read the other way, for lists only)."""
    lists: dict[str, tuple[str, str]] = field(default_factory=dict)
    """a live list's reader -> (owner, replies policy), from the list stage's facts."""
    owned: dict[str, set[str]] = field(default_factory=dict)
    """owner -> the readers of its live lists."""
    cond: dict[TweetKey, tuple[int, Entry | None]] = field(default_factory=dict)
    content: dict[TweetKey, tuple[int, Entry | None]] = field(default_factory=dict)
    edges: dict[tuple[str, str], tuple[int, tuple]] = field(default_factory=dict)
    """(reposter, tweet_id) -> (ts, the edge's winning rank)."""
    naming: dict[TweetKey, set[str]] = field(default_factory=dict)
    """tweet -> reposters whose winning edge reposts it (unreposts excluded)."""
    reposts: dict[TweetKey, dict[str, Entry]] = field(default_factory=dict)
    """tweet -> reposter -> the repost entry, for the live reposts (edge on, content live)."""
    by_reposter: dict[str, set[TweetKey]] = field(default_factory=dict)
    pull: set[str] = field(default_factory=set)
    """The pull reposters after the last batch."""
    shown: dict[TweetKey, Groups] = field(default_factory=dict)
    order: dict[TweetKey, tuple[tuple[int, str, Entry], ...]] = field(default_factory=dict)
    """tweet -> its pushed reposts, earliest first (what decides its repost rows)."""
    involved: dict[str, set[TweetKey]] = field(default_factory=dict)
    """user -> the tweets whose rows depend on the user's audience (author, parent, reposter)."""
    users_of: dict[TweetKey, frozenset[str]] = field(default_factory=dict)
    clock: int = 0
    clock_saved: bool = False
    """Whether the clock is among the stored inputs (a new stage's starts unsaved)."""
    written: dict[Identity, tuple[Any, Any]] = field(default_factory=dict)
    """The inputs the current batch assigned: identity -> (value now, value before the batch)."""

    @classmethod
    def restore(cls, values: Iterable[tuple[Identity, Any]], *, pull_threshold: int | None = None,
                clock: int = 0, lists: Iterable[ListFact] = ()) -> "AudienceStage":
        """The stage whose inputs are ``values`` (as :attr:`StageResult.inputs` left them; None
        values are absent), with every tweet's rows decided as the batches that assigned them did."""
        stage = cls(pull_threshold=pull_threshold, clock=clock)
        stage._apply_facts(lists)
        relations, conditional, edges, tweets = [], [], [], []
        for identity, value in values:
            kind = identity[0]
            if value is None:
                continue
            if kind == "rel":
                relations.append(Relation(identity[1], identity[2], value[1], value[2], value[0], _quiet(value),
                                          _excluded(value)))
            elif kind == "cond":
                conditional.append(ConditionalTweet(identity[1], identity[2], value[1], value[0]))
            elif kind == "content":
                tweets.append(RepostedTweet("", identity[1], identity[2], value[1], value[0]))
            elif kind == "edge":
                edges.append(RepostEdge(identity[1], identity[2], value[1], value[0]))
            elif kind == "pull":
                stage.pull.add(identity[1])
            elif kind == "clock":
                stage.clock, stage.clock_saved = value, True
            else:
                raise ValueError(f"per-reader stage: unknown input {identity!r}")
        stage._apply_relations(relations)
        whole: set[TweetKey] = set()
        stage._apply_conditional(conditional, whole)
        stage._apply_reposts(edges, tweets, whole)
        for t in sorted(whole):
            stage._order(t)
            stage._store(t, stage._decide(t))
        stage.written = {}
        return stage

    def _note(self, identity: Identity, value: Any, before: Any) -> None:
        had = self.written.get(identity)
        self.written[identity] = (value, before if had is None else had[1])

    def step(self, relations: Sequence[Relation], conditional: Sequence[ConditionalTweet],
             edges: Sequence[RepostEdge], tweets: Sequence[RepostedTweet], lists: Sequence[ListFact] = ()
             ) -> StageResult:
        """Apply one batch of the author keys' messages (and the list stage's facts: ``lists``) and
        return what changed."""
        ts = self.clock + 1
        self.written = {}
        relisted = self._apply_facts(lists)
        changed_pairs = self._apply_relations(relations)
        whole: set[TweetKey] = set()
        self._apply_conditional(conditional, whole)
        own = self._apply_reposts(edges, tweets, whole)
        pull_readers = self._pull_modes(changed_pairs, whole, ts)
        extras: list[ExtrasFanout] = []
        for t in sorted(whole):
            self._order(t)
            self._replace(t, self._decide(t), extras, ts)
        some: dict[TweetKey, set[str]] = {}
        involved = self.involved
        owned = self.owned
        for reader, user in changed_pairs:
            lists_too = owned.get(reader)  # an owner's relation decides its lists' rows too
            for t in involved.get(user, ()):
                if t not in whole:
                    readers = some.get(t)
                    if readers is None:
                        some[t] = readers = {reader}
                    else:
                        readers.add(reader)
                    if lists_too:
                        readers.update(lists_too)
        for reader in relisted:  # a list's owner or policy changed: its rows decided again
            for user in self.list_sees.get(reader, ()):
                for t in involved.get(user, ()):
                    if t not in whole:
                        some.setdefault(t, set()).add(reader)
        for t in sorted(some):
            readers = some[t]
            if len(readers) <= _ONE_BY_ONE:
                for reader in sorted(readers):
                    self._replace_one(t, reader, self._decide_one(t, reader), extras, ts)
            else:
                self._replace(t, self._decide(t, readers), extras, ts, readers)
        visible: list[VisibleDelta] = []
        hidden: list[HiddenDelta] = []
        excluded: list[ExcludedDelta] = []
        rel = self.rel
        for p in sorted(changed_pairs):
            was_seen, was_hidden, _, was_excluded = changed_pairs[p]
            seen, hides, excludes = rel[p][1], rel[p][2], _excluded(rel[p])
            if was_seen != seen:
                visible.append(VisibleDelta("insert" if seen else "delete", p[0], p[1], ts))
            if was_hidden != hides:
                hidden.append(HiddenDelta("insert" if hides else "delete", p[0], p[1], ts))
            if was_excluded != excludes:
                excluded.append(ExcludedDelta("insert" if excludes else "delete", p[0], p[1], ts))
        if extras or own or visible or hidden or pull_readers or excluded:
            self._note(("clock",), ts, self.clock if self.clock_saved else None)
            self.clock, self.clock_saved = ts, True
        inputs = tuple([(identity, *pair) for identity, pair in self.written.items()])
        self.written = {}
        return StageResult(tuple(extras), tuple(own), tuple(visible), tuple(hidden), tuple(pull_readers), ts,
                           inputs, tuple(excluded))

    # -- inputs ------------------------------------------------------------------------------------

    def _apply_relations(self, relations: Sequence[Relation]) -> dict[tuple[str, str], tuple[bool, bool, bool, bool]]:
        """Assign the newest relation per pair; return the pairs whose value changed, with the old
        one as (sees, hidden, quiet, excluded)."""
        newest: dict[tuple[str, str], Relation] = {}
        for m in relations:
            k = (m.reader, m.user)
            n = newest.get(k)
            if n is None or m.ts > n.ts:
                newest[k] = m
        changed: dict[tuple[str, str], tuple[bool, bool, bool, bool]] = {}
        for k, m in newest.items():
            old = self.rel.get(k)
            if old is not None and m.ts <= old[0]:
                continue
            quiet, excluded = m.visible and m.quiet, m.visible and m.excluded
            self.rel[k] = ((m.ts, m.visible, m.hidden, quiet, excluded) if quiet or excluded
                           else (m.ts, m.visible, m.hidden))
            self._note(("rel", *k), self.rel[k], old)
            was = (False, False, False, False) if old is None else (old[1], old[2], _quiet(old), _excluded(old))
            if was == (m.visible, m.hidden, quiet, excluded):
                continue
            changed[k] = was
            reader, user = k
            if was[0] != m.visible:
                _toggle(self.aud, user, reader, m.visible)
                if list_of(reader) is not None:
                    _toggle(self.list_aud, user, reader, m.visible)
                    _toggle(self.list_sees, reader, user, m.visible)
            if was[1] != m.hidden:
                _toggle(self.hid, user, reader, m.hidden)
            if was[2] != quiet:
                _toggle(self.quiet, user, reader, quiet)
            if was[3] != excluded:
                _toggle(self.excl, user, reader, excluded)
        return changed

    def _apply_facts(self, facts: Iterable[ListFact]) -> list[str]:
        """Keep the live lists' owners and policies; return the readers of the lists whose owner or
        policy changed, sorted."""
        changed: set[str] = set()
        for f in facts:
            reader = list_reader(f.list_id)
            old = self.lists.get(reader)
            new = (f.owner_id, f.replies_policy) if f.live else None
            if old == new:
                continue
            if old is not None:
                _toggle(self.owned, old[0], reader, False)
                del self.lists[reader]
            if new is not None:
                self.lists[reader] = new  # type: ignore[assignment]
                _toggle(self.owned, new[0], reader, True)
            changed.add(reader)
        return sorted(changed)

    def _list_direct(self, reader: str, author: str, parent: str | None) -> bool:
        """Whether a tweet of ``author`` replying to ``parent`` is direct for a list's ``reader``
        (:func:`~feed_service.core.rules.shown_in_list`); never for a list that is not live."""
        facts = self.lists.get(reader)
        if facts is None:
            return False
        owner, policy = facts
        return shown_in_list(author, parent, owner, policy, _Sees(self.aud, reader), _Sees(self.aud, owner))

    def _list_hidden(self, reader: str, author: str) -> bool:
        """Whether ``author``'s tweets are hidden from a list's ``reader``: from its owner (or the
        list is not live)."""
        facts = self.lists.get(reader)
        return facts is None or facts[0] in self.hid.get(author, _NOBODY)

    def _apply_conditional(self, messages: Sequence[ConditionalTweet], whole: set[TweetKey]) -> None:
        for m in messages:
            t = (m.author_id, m.tweet_id)
            old = self.cond.get(t)
            if old is None or m.ts > old[0]:
                self.cond[t] = (m.ts, m.entry)
                self._note(("cond", *t), self.cond[t], old)
                if old is None or old[1] != m.entry:
                    whole.add(t)

    def _apply_reposts(self, edges: Sequence[RepostEdge], tweets: Sequence[RepostedTweet],
                       whole: set[TweetKey]) -> list[AuthorTimelineDelta]:
        """Assign edges and contents, join them again where they changed; the reposters' own rows."""
        rejoin: set[tuple[str, TweetKey]] = set()
        for m in tweets:
            t = (m.author_id, m.tweet_id)
            old = self.content.get(t)
            if old is None or m.ts > old[0]:
                self.content[t] = (m.ts, m.entry)
                self._note(("content", *t), self.content[t], old)
                if old is None or old[1] != m.entry:
                    rejoin.update((p, t) for p in self.naming.get(t, ()))
        for m in edges:
            k = (m.reposter, m.tweet_id)
            old = self.edges.get(k)
            if old is not None and m.ts <= old[0]:
                continue
            self.edges[k] = (m.ts, m.rank)
            self._note(("edge", *k), self.edges[k], old)
            for rank, on in ((None if old is None else old[1], False), (m.rank, True)):
                if rank is None or rank[1]:
                    continue
                t = (rank[2], m.tweet_id)
                _toggle(self.naming, t, m.reposter, on)
                rejoin.add((m.reposter, t))
        own: list[AuthorTimelineDelta] = []
        for reposter, t in sorted(rejoin):
            old_e = self.reposts.get(t, {}).get(reposter)
            new_e = self._join(reposter, t)
            if old_e == new_e:
                continue
            whole.add(t)
            if new_e is None:
                _pop(self.reposts, t, reposter)
                _toggle(self.by_reposter, reposter, t, False)
            else:
                self.reposts.setdefault(t, {})[reposter] = new_e
                _toggle(self.by_reposter, reposter, t, True)
            if t[0] != reposter:  # one's own tweet shows as the tweet in one's own timeline
                if old_e is not None and (new_e is None or old_e.at != new_e.at):
                    own.append(AuthorTimelineDelta("delete", old_e))
                    old_e = None
                if new_e is not None:
                    own.append(AuthorTimelineDelta("insert" if old_e is None else "update", new_e))
        return own

    def _join(self, reposter: str, t: TweetKey) -> Entry | None:
        edge = self.edges.get((reposter, t[1]))
        if edge is None or edge[1][1] or edge[1][2] != t[0]:
            return None
        content = self.content.get(t)
        if content is None or content[1] is None:
            return None
        rank = edge[1]
        return content[1]._replace(reposted_by=reposter, reposted_at=rank[3], reposter_profile_version=rank[4])

    def _pull_modes(self, changed_pairs: Mapping[tuple[str, str], tuple[bool, bool, bool, bool]], whole: set[TweetKey],
                    ts: int) -> list[PullReposterDelta]:
        """Reposters crossing the threshold (on their audience) are decided again whole; the readers
        who merge them in (those their reposts reach: seeing them, reposts not turned off)."""
        if self.pull_threshold is None:
            return []
        comers: dict[str, dict[str, bool]] = {}
        for (reader, user), (was_seen, _, was_quiet, was_excluded) in changed_pairs.items():
            now = self.rel[(reader, user)]
            if was_seen != now[1] or was_quiet != _quiet(now) or was_excluded != _excluded(now):
                comers.setdefault(user, {})[reader] = was_seen and not was_quiet and not was_excluded
        out: list[PullReposterDelta] = []
        for user in sorted(comers):
            seen_by = len(self.aud.get(user, _NOBODY))
            audience = self._reached(user)
            was_pull, pull = user in self.pull, is_pull_reposter(seen_by, self.pull_threshold)
            if pull != was_pull:
                (self.pull.add if pull else self.pull.discard)(user)
                self._note(("pull", user), True if pull else None, True if was_pull else None)
                whole.update(self.by_reposter.get(user, ()))
                before = ({r for r in audience if comers[user].get(r, True)}
                          | {r for r, seen in comers[user].items() if seen}) if was_pull else set()
                after = audience if pull else _NOBODY
                members = sorted(before | after)
            elif pull:
                before = {r for r, seen in comers[user].items() if seen}
                after = audience
                members = sorted(comers[user])
            else:
                continue
            for reader in members:
                b, a = reader in before, reader in after
                if b != a:
                    out.append(PullReposterDelta("insert" if a else "delete", reader, user, ts))
        return out

    # -- decisions ---------------------------------------------------------------------------------

    def _pushed(self, reposter: str, t: TweetKey, e: Entry) -> bool:
        """Whether ``reposter``'s repost ``e`` of ``t`` is decided here (not merged at read)."""
        if reposter not in self.pull:
            return True
        return t[0] == reposter and reply_class(reposter, e.in_reply_to_author_id) is not None

    def _order(self, t: TweetKey) -> None:
        live = self.reposts.get(t)
        pushed = () if not live else tuple(sorted(
            (*repost_order(e.reposted_at, p), e) for p, e in live.items() if self._pushed(p, t, e)))
        if pushed:
            self.order[t] = pushed  # type: ignore[assignment]
        else:
            self.order.pop(t, None)

    def _decide(self, t: TweetKey, only: set[str] | None = None) -> Groups:
        """The rows of tweet ``t`` (module docstring) as groups of readers per entry: every reader's,
        or only those of the readers in ``only`` (those whose relations changed)."""
        author = t[0]
        aud = self.aud
        groups: Groups = {}
        aud_a = aud.get(author, _NOBODY)
        excl_a = self.excl.get(author)
        if excl_a:  # sources set aside: the author brings no direct entry to them
            aud_a = aud_a - excl_a
        if only is not None:
            aud_a = only.intersection(aud_a)
        lists_a = self.list_aud.get(author, _NOBODY)
        if only is not None and lists_a:
            lists_a = only.intersection(lists_a)
        cond = self.cond.get(t)
        if cond is not None and cond[1] is not None and aud_a:
            x = cond[1].in_reply_to_author_id
            shown = conditional_readers(aud_a, x, aud.get(x, _NOBODY))  # type: ignore[arg-type]
            if lists_a:  # a list's reader: by the list's policy instead
                shown -= lists_a
                shown.update(r for r in lists_a if self._list_direct(r, author, x))
            if shown:
                groups[cond[1]] = shown
        order = self.order.get(t)
        if order:
            x = order[0][2].in_reply_to_author_id
            taken: set[str] = set()
            hid_a = self.hid.get(author, _NOBODY)
            audience_of = self._audience_of
            for _, reposter, e in order:
                readers = self._reached(reposter)
                readers = (only.intersection(readers) if only is not None else set(readers)) - taken
                if not readers:
                    continue
                taken |= readers
                if hid_a:
                    readers -= hid_a
                listed = readers.intersection(self.list_aud.get(reposter, _NOBODY))
                if listed:  # a list's reader: hidden by its owner's hides, direct by the list's policy
                    readers -= listed
                    readers.update(r for r in listed
                                   if not self._list_hidden(r, author) and not (r in aud_a and self._list_direct(r, author, x)))
                home = readers.intersection(aud_a)
                if listed:
                    home -= listed
                readers -= direct_among(home, author, x, audience_of)
                if readers:
                    groups[e] = readers
        return groups

    def _audience_of(self, user: str) -> set[str] | frozenset[str]:
        """The readers who see ``user``."""
        return self.aud.get(user, _NOBODY)

    def _reaches(self, reposter: str, reader: str) -> bool:
        """Whether ``reposter``'s reposts reach ``reader`` (:meth:`_reached` for one reader)."""
        return (reader in self.aud.get(reposter, _NOBODY) and reader not in self.quiet.get(reposter, _NOBODY)
                and reader not in self.excl.get(reposter, _NOBODY))

    def _reached(self, reposter: str) -> set[str] | frozenset[str]:
        """The readers ``reposter``'s reposts reach: who see it, less who turned its reposts off and
        who set it aside by an exclusive list."""
        readers = self.aud.get(reposter, _NOBODY)
        quiet, excl = self.quiet.get(reposter), self.excl.get(reposter)
        if quiet:
            readers = readers - quiet
        return readers - excl if excl else readers

    def _decide_one(self, t: TweetKey, reader: str) -> Entry | None:
        """``reader``'s row of tweet ``t``, or None."""
        author = t[0]
        if list_of(reader) is not None:
            return self._decide_listed(t, reader)
        sees = _Sees(self.aud, reader)
        source = reader not in self.excl.get(author, _NOBODY)  # the author may bring a direct entry
        cond = self.cond.get(t)
        if cond is not None and cond[1] is not None:
            x = cond[1].in_reply_to_author_id  # a third user: the row is the reader's if direct and not in its inbox
            if source and direct(author, x, reader, sees) and not shown_in_inbox(author, x, reader):
                return cond[1]
        order = self.order.get(t)
        if not order or reader in self.hid.get(author, _NOBODY):
            return None
        if source and direct(author, order[0][2].in_reply_to_author_id, reader, sees):
            return None
        for _, reposter, e in order:
            if self._reaches(reposter, reader):
                return e
        return None

    def _decide_listed(self, t: TweetKey, reader: str) -> Entry | None:
        """A list's ``reader``'s row of tweet ``t``, or None: :meth:`_decide_one` by the list's
        policy and its owner's hides (docs/lists.md#definition)."""
        author = t[0]
        cond = self.cond.get(t)
        if cond is not None and cond[1] is not None and self._list_direct(reader, author, cond[1].in_reply_to_author_id):
            return cond[1]  # a reply to a third user: never in the list's inbox
        order = self.order.get(t)
        if not order or self._list_hidden(reader, author):
            return None
        if self._list_direct(reader, author, order[0][2].in_reply_to_author_id):
            return None
        for _, reposter, e in order:
            if self._reaches(reposter, reader):
                return e
        return None

    # -- outputs -----------------------------------------------------------------------------------

    def _replace(self, t: TweetKey, new: Groups, out: list[ExtrasFanout], ts: int,
                 only: set[str] | None = None) -> None:
        """Make ``new`` the rows of ``t`` (of just the readers in ``only``, when given): compact
        deltas of the difference with what was shown."""
        shown = self.shown.get(t, {})
        old = shown if only is None else {e: r & only for e, r in shown.items() if not r.isdisjoint(only)}
        if old or new:
            old_all = set().union(*old.values()) if old else set()
            new_all = set().union(*new.values()) if new else set()
            old, new_sorted = _in_order(old), _in_order(new)
            for e, readers in old.items():
                gone = readers - new_all
                if gone:
                    out.append(ExtrasFanout("delete", e, tuple(sorted(gone)), ts))
            for e, readers in new_sorted.items():
                came = readers - old_all
                if came:
                    out.append(ExtrasFanout("insert", e, tuple(sorted(came)), ts))
                for o, was in old.items():
                    if o == e:
                        continue
                    moved = readers & was
                    if not moved:
                        continue
                    moved_t = tuple(sorted(moved))
                    if o.at == e.at:
                        out.append(ExtrasFanout("update", e, moved_t, ts))
                    else:
                        out.append(ExtrasFanout("delete", o, moved_t, ts))
                        out.append(ExtrasFanout("insert", e, moved_t, ts))
        if only is None:
            self._store(t, new)
            return
        if not old and not new:
            return
        for e in old:
            shown[e] -= only
            if not shown[e]:
                del shown[e]
        for e, readers in new.items():
            if e in shown:
                shown[e] |= readers
            else:
                shown[e] = readers
        if shown:
            self.shown[t] = shown  # the users ``t`` depends on did not change: only its inputs move them
        else:
            self.shown.pop(t, None)

    def _replace_one(self, t: TweetKey, reader: str, new: Entry | None, out: list[ExtrasFanout], ts: int) -> None:
        groups = self.shown.get(t)
        old = None
        if groups:
            for e, readers in groups.items():
                if reader in readers:
                    old = e
                    break
        if old == new:
            return
        if groups is None:
            groups = {}
        if old is not None:
            groups[old].discard(reader)
            if not groups[old]:
                del groups[old]
        if new is not None:
            groups.setdefault(new, set()).add(reader)
        if old is not None and new is not None and old.at == new.at:
            out.append(ExtrasFanout("update", new, (reader,), ts))
        else:
            if old is not None:
                out.append(ExtrasFanout("delete", old, (reader,), ts))
            if new is not None:
                out.append(ExtrasFanout("insert", new, (reader,), ts))
        if groups:  # the users ``t`` depends on did not change: only its inputs' changes move them
            self.shown[t] = groups
        else:
            self.shown.pop(t, None)

    def _store(self, t: TweetKey, groups: Groups) -> None:
        """Keep ``groups`` as ``t``'s rows and ``t`` in the index of the users it depends on."""
        if groups:
            self.shown[t] = groups
        else:
            self.shown.pop(t, None)
        users = self._users(t)
        old = self.users_of.get(t, _NOBODY)
        if users == old:
            return
        for u in old - users:
            _toggle(self.involved, u, t, False)
        for u in users - old:
            _toggle(self.involved, u, t, True)
        if users:
            self.users_of[t] = users
        else:
            self.users_of.pop(t, None)

    def _users(self, t: TweetKey) -> frozenset[str]:
        """The users whose audience decides ``t``'s rows: none for a tweet with nothing to decide."""
        cond = self.cond.get(t)
        live = self.reposts.get(t)
        if (cond is None or cond[1] is None) and not live:
            return _NOBODY
        users = {t[0]}
        if cond is not None and cond[1] is not None:
            users.add(cond[1].in_reply_to_author_id)  # type: ignore[arg-type]
        if live:
            users.update(live)
            content = self.content.get(t)
            if content is not None and content[1] is not None and content[1].in_reply_to_author_id is not None:
                users.add(content[1].in_reply_to_author_id)
        return frozenset(users)


class _Sees:
    """The users one reader sees, as a container over the stage's audiences (for :func:`~feed_service.core.rules.direct`)."""

    __slots__ = ("aud", "reader")

    def __init__(self, aud: Mapping[str, set[str]], reader: str) -> None:
        self.aud, self.reader = aud, reader

    def __contains__(self, user: object) -> bool:
        return self.reader in self.aud.get(user, _NOBODY)  # type: ignore[arg-type]


def _quiet(rel: tuple) -> bool:
    """Whether a stored relation (:attr:`AudienceStage.rel`) has the user's reposts turned off."""
    return len(rel) > 3 and rel[3]


def _excluded(rel: tuple) -> bool:
    """Whether a stored relation (:attr:`AudienceStage.rel`) has the user set aside by an exclusive list."""
    return len(rel) > 4 and rel[4]


def _toggle(index: dict, owner, member, on: bool) -> None:
    """Add ``member`` to (or remove it from) ``index[owner]``, dropping empty sets."""
    if on:
        index.setdefault(owner, set()).add(member)
        return
    members = index.get(owner)
    if members is not None:
        members.discard(member)
        if not members:
            del index[owner]


def _in_order(groups: Groups) -> Groups:
    """``groups`` in a fixed order of their entries, so that a batch's deltas come out the same on
    any run (a replay, a restored stage) whatever order the groups were built in."""
    return groups if len(groups) < 2 else dict(sorted(groups.items(), key=lambda item: repr(item[0])))


def _pop(index: dict, owner, member) -> None:
    inner = index.get(owner)
    if inner is not None:
        inner.pop(member, None)
        if not inner:
            del index[owner]


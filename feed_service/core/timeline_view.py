"""The model's sink: home-timeline tables as applied from step outputs, and the model's read.

:class:`TimelineView` applies :class:`~feed_service.core.join.StepResult` outputs and the
per-reader stage's rows the way the Cassandra sink does (rows keyed by timeline and tweet,
dimensions by versioned key), models the store's trimming and inactive readers, and reads a home
timeline through the home plan (:mod:`.home_plan`), as the read service does. The driver that feeds
it is :class:`~feed_service.core.view.Materializer`.
"""

from __future__ import annotations

from typing import Any, Iterable

from feed_service.errors import ViewContractError
from feed_service.core.events import REBUILD_LINE, REBUILD_NEED, RefillRequest
from feed_service.core.home_plan import (
    DROPPED_INBOX,
    EXTRAS,
    INBOX,
    PULL_AUTHOR,
    HomePlan,
    HomeStatics,
    home_plan,
    merge_home,
    shows_row,
)
from feed_service.core.rules import push_authors, repost_order
from feed_service.core.join import DEFAULT_INBOX_CAP, StepResult
from feed_service.core.per_reader.messages import ExcludedDelta, ExtrasFanout, HiddenDelta, PullReposterDelta, VisibleDelta
from feed_service.core.list_readers import list_of, list_reader
from feed_service.core.per_reader.list_stage import ListFact
from feed_service.core.per_reader.pull_reposts import ListRule, RepostFacts, shows_extras_row, shows_pulled_row
from feed_service.core.rows import AuthorTimelineDelta, Entry, ProfileRow
from feed_service.core.timeline_merge import merge_newest, timeline_order

RowKey = tuple[int, str, str]
"""(created_at, tweet_id, author_id): a row within one timeline, as a Cassandra clustering key would
be; an edit that moves created_at is therefore a delete and an insert, never an update."""


sort_key = timeline_order
"""Timeline order, applied descending (kept under this name for the reference)."""


def entry_dict(entry: Entry, display_name: str | None) -> dict[str, Any]:
    """Return the public shape of one timeline entry (``feedctl materialize``'s output contract): a
    reply adds its parent, an entry brought by a repost its reposter and repost time."""
    out = {
        "tweet_id": entry.tweet_id,
        "author_id": entry.author_id,
        "version": entry.version,
        "text": entry.text,
        "author_display_name": display_name,
    }
    if entry.in_reply_to_tweet_id is not None:
        out["in_reply_to_tweet_id"] = entry.in_reply_to_tweet_id
        out["in_reply_to_author_id"] = entry.in_reply_to_author_id
    if entry.reposted_by is not None:
        out["reposted_by"] = entry.reposted_by
        out["reposted_at"] = entry.reposted_at
    return out


class TimelineView:
    """Timelines, tweets and profiles as applied from step outputs; reads cap and hydrate.

    Inboxes hold push authors' tweets (at most ``inbox_cap`` per followed author, since each author
    key retains that many); author timelines hold every author's retained tweets; ``pull_follows``
    says which pull authors each user merges in. Reads merge those sources as the server does
    (:func:`~feed_service.core.timeline_merge.merge_newest`) and return the ``inbox_cap`` newest.
    With ``strict`` a delta that contradicts the stored rows raises :class:`ViewContractError`,
    which is how tests catch a wrong delta rather than only a wrong final result.

    ``trim_slack`` (None: never) models the store's trimming (docs/trimming.md): after a step, an
    inbox holding more than ``inbox_cap + trim_slack`` rows keeps its newest ``inbox_cap``. As in
    Cassandra, a later delete of a trimmed row does nothing and an update re-creates it; strict mode
    remembers the trimmed rows so that it tolerates exactly those. A trimmed inbox that removals
    leave short of ``inbox_cap`` rows at or above its cut line asks its push authors to write its
    rows again (:meth:`refill_requests`; :class:`Materializer` runs them after each batch), so
    trimming never changes what a read returns.
    """

    def __init__(self, *, inbox_cap: int = DEFAULT_INBOX_CAP, strict: bool = True,
                 trim_slack: int | None = None) -> None:
        self.inbox_cap = inbox_cap
        self.strict = strict
        self.trim_slack = trim_slack
        self.trimmed: dict[str, set[RowKey]] = {}
        """timeline -> rows cut by a trim and not written since (kept in strict mode only)."""
        self.trims = 0
        self.trimmed_rows = 0
        self.cut: dict[str, RowKey] = {}
        """timeline -> its cut line, the highest oldest row a trim kept: rows at or above it are exactly
        the definition's, rows below it may be missing (docs/trimming.md#refill)."""
        self.shrunk: set[str] = set()
        """trimmed timelines that lost rows since the last :meth:`refill`."""
        self.refills = 0
        """Refills asked for: a short inbox after a batch."""
        self.refilled_rows = 0
        """Rows the refills' answers wrote (present ones again included)."""
        self.dropped: set[str] = set()
        """Readers whose inbox is not kept (inactive): no rows written, reads merge their push
        authors' timelines instead (docs/activity.md)."""
        self.returning: set[str] = set()
        """Readers active again whose inbox the next :meth:`rebuild_requests` asks to be rebuilt:
        until then their inbox holds only what was written since, and reads still merge."""
        self.skipped_rows = 0
        """Inbox row writes left out because their reader's inbox was not kept."""
        self.dropped_rows = 0
        """Inbox rows deleted when their reader became inactive."""
        self.rebuilds = 0
        """Inboxes rebuilt for a returning reader."""
        self.timelines: dict[str, dict[RowKey, Entry]] = {}
        self.tweets: dict[tuple[str, str], Entry | None] = {}
        """(author_id, tweet_id) -> latest content, None once deleted."""
        self.profiles: dict[tuple[str, int], ProfileRow] = {}
        self.author_timelines: dict[str, dict[RowKey, Entry]] = {}
        self.pull_follows: dict[str, set[str]] = {}
        """follower -> the pull authors it follows (merged in at read time)."""
        self.blocks: set[tuple[str, str]] = set()
        """(blocker, blocked) of every block in force (the ``blocks`` table)."""
        self.extras: dict[str, dict[RowKey, Entry]] = {}
        """reader -> the entries the per-reader stage decided (``home_extras``: docs/reposts-and-replies.md)."""
        self.own_reposts: dict[str, dict[RowKey, Entry]] = {}
        """reposter -> its reposts of others' tweets (its own timeline's repost rows)."""
        self.visible: dict[str, set[str]] = {}
        """reader -> the users it sees (what a read filters a pull author's replies with)."""
        self.hidden: dict[str, set[str]] = {}
        self.excluded: dict[str, set[str]] = {}
        """reader -> the users it sees and sets aside as sources of its home (its exclusive lists' members)."""
        self.list_rules: dict[str, ListRule] = {}
        """A live list's reader -> its owner and replies policy (:meth:`apply_list_facts`)."""
        """reader -> the users whose tweets are hidden from it (blocks and mutes in force)."""
        self.pull_reposters: dict[str, set[str]] = {}
        """reader -> the pull reposters whose reposts it merges in at read."""

    def _fail(self, message: str) -> None:
        if self.strict:
            raise ViewContractError(message)

    def apply(self, result: StepResult) -> None:
        """Apply one step's outputs."""
        strict = self.strict
        timelines = self.timelines
        trimmed = self.trimmed
        trimming = self.trim_slack is not None
        grown: set[str] = set()
        dropped, returning = self.dropped, self.returning
        for op, entry, timeline_ids in result.deltas:
            row = (entry.created_at, entry.tweet_id, entry.author_id)
            if dropped:
                kept = [uid for uid in timeline_ids if uid not in dropped]
                self.skipped_rows += len(timeline_ids) - len(kept)
                timeline_ids = kept
            if op == "delete":
                for uid in timeline_ids:
                    rows = timelines.get(uid)
                    if rows is None or rows.pop(row, None) is None:
                        # a trimmed row, or one a returning reader's inbox never got: the delete is a no-op
                        if strict and not _untrim(trimmed, uid, row) and uid not in returning:
                            raise ViewContractError(f"delete of missing row {row} in timeline {uid!r}")
                        continue
                    if uid in self.cut:
                        self.shrunk.add(uid)
                    if not rows:
                        del timelines[uid]
            else:
                for uid in timeline_ids:
                    rows = timelines.setdefault(uid, {})
                    # an update of a trimmed row re-creates it, as a Cassandra upsert does
                    if strict and (row in rows) != (op == "update") and uid not in returning and not (
                            op == "update" and _untrim(trimmed, uid, row)):
                        raise ViewContractError(f"{op} of {'missing' if op == 'update' else 'present'} "
                                                f"row {row} in timeline {uid!r}")
                    if strict and op == "insert" and row in trimmed.get(uid, ()) and uid not in returning:
                        raise ViewContractError(f"insert of trimmed row {row} in timeline {uid!r}")
                    rows[row] = entry
                if trimming:
                    grown.update(timeline_ids)
        if trimming:
            for uid in sorted(grown):
                self._trim(uid)
        for op, entry in result.author_timeline:
            rows = self.author_timelines.setdefault(entry.author_id, {})
            row = (entry.created_at, entry.tweet_id, entry.author_id)
            if op == "delete":
                if rows.pop(row, None) is None:
                    self._fail(f"delete of missing row {row} in the author timeline of {entry.author_id!r}")
            else:
                if (row in rows) != (op == "update"):
                    self._fail(f"{op} of {'missing' if op == 'update' else 'present'} row {row} in the author"
                               f" timeline of {entry.author_id!r}")
                rows[row] = entry
        for op, author_id, follower_ids in result.pull_follows:
            for uid in follower_ids:
                authors = self.pull_follows.setdefault(uid, set())
                if (author_id in authors) != (op == "delete"):
                    self._fail(f"pull-follow {op} of {'missing' if op == 'delete' else 'present'} edge "
                               f"{uid!r} -> {author_id!r}")
                (authors.discard if op == "delete" else authors.add)(author_id)
                if not authors:
                    del self.pull_follows[uid]
        for op, blocker, blocked in result.blocks:
            if ((blocker, blocked) in self.blocks) != (op == "delete"):
                self._fail(f"block {op} of {'missing' if op == 'delete' else 'present'} row {blocker!r} -> {blocked!r}")
            (self.blocks.discard if op == "delete" else self.blocks.add)((blocker, blocked))
        for change in result.tweets:
            self.tweets[(change.author_id, change.tweet_id)] = change.entry
        for prow in result.profiles:
            self.profiles[(prow.user_id, prow.version)] = prow

    def apply_extras(self, deltas: Iterable[ExtrasFanout]) -> None:
        """Apply the per-reader stage's rows of ``home_extras`` (compact: one entry, many readers)."""
        extras, strict = self.extras, self.strict
        for op, entry, readers, _ in deltas:
            row = (entry.at, entry.tweet_id, entry.author_id)
            if op == "delete":
                for reader in readers:
                    rows = extras.get(reader)
                    if rows is None or rows.pop(row, None) is None:
                        self._fail(f"delete of missing extras row {row} of {reader!r}")
                    elif not rows:
                        del extras[reader]
                continue
            insert = op == "insert"
            for reader in readers:
                rows = extras.get(reader)
                if rows is None:
                    if strict and not insert:
                        self._fail(f"update of missing extras row {row} of {reader!r}")
                    extras[reader] = {row: entry}
                    continue
                if strict and (row in rows) == insert:
                    self._fail(f"{op} of {'present' if insert else 'missing'} extras row {row} of {reader!r}")
                rows[row] = entry

    def apply_own_reposts(self, deltas: Iterable[AuthorTimelineDelta]) -> None:
        """Apply the per-reader stage's rows of reposters' own timelines (reposts of others' tweets)."""
        for op, entry in deltas:
            reposter = entry.reposted_by
            rows = self.own_reposts.setdefault(reposter, {})
            row = (entry.at, entry.tweet_id, entry.author_id)
            if op == "delete":
                if rows.pop(row, None) is None:
                    self._fail(f"delete of missing repost row {row} of {reposter!r}")
            else:
                rows[row] = entry
            if not rows:
                del self.own_reposts[reposter]

    def apply_visible(self, deltas: Iterable[VisibleDelta]) -> None:
        """Apply the per-reader stage's changes of the readers' visible sets."""
        for op, reader, user, _ in deltas:
            users = self.visible.setdefault(reader, set())
            (users.discard if op == "delete" else users.add)(user)
            if not users:
                del self.visible[reader]

    def apply_hidden(self, deltas: Iterable[HiddenDelta]) -> None:
        """Apply the per-reader stage's changes of the users hidden from each reader."""
        _apply_sets(self.hidden, ((op, reader, user) for op, reader, user, _ in deltas))

    def apply_excluded(self, deltas: Iterable[ExcludedDelta]) -> None:
        """Apply the per-reader stage's changes of the readers' excluded sources."""
        _apply_sets(self.excluded, ((op, reader, user) for op, reader, user, _ in deltas))

    def apply_list_facts(self, facts: Iterable[ListFact]) -> None:
        """Keep what the reads of a list's reader are decided by: its owner and policy while live."""
        for f in facts:
            reader = list_reader(f.list_id)
            if f.live:
                self.list_rules[reader] = ListRule(f.owner_id, f.replies_policy)  # type: ignore[arg-type]
            else:
                self.list_rules.pop(reader, None)

    def apply_pull_reposters(self, deltas: Iterable[PullReposterDelta]) -> None:
        """Apply the per-reader stage's changes of which readers merge in which pull reposters."""
        for op, reader, reposter, _ in deltas:
            if (reposter in self.pull_reposters.get(reader, ())) != (op == "delete"):
                self._fail(f"pull-reposter {op} of {'missing' if op == 'delete' else 'present'} edge "
                           f"{reader!r} -> {reposter!r}")
        _apply_sets(self.pull_reposters, ((op, reader, reposter) for op, reader, reposter, _ in deltas))

    def _trim(self, uid: str) -> None:
        """Cut ``uid``'s inbox to its newest ``inbox_cap`` rows if it holds more than cap + slack."""
        rows = self.timelines.get(uid)
        if rows is None or self.trim_slack is None or len(rows) <= self.inbox_cap + self.trim_slack:
            return
        cut = sorted(rows, reverse=True)[self.inbox_cap:]
        for row in cut:
            del rows[row]
        if self.strict:
            self.trimmed.setdefault(uid, set()).update(cut)
        oldest_kept = min(rows)
        self.cut[uid] = max(oldest_kept, self.cut.get(uid, oldest_kept))
        self.trims += 1
        self.trimmed_rows += len(cut)

    def inbox_authors(self, uid: str) -> list[str]:
        """The push authors ``uid`` sees: every author it sees but those it merges in at read, each
        of which writes ``uid``'s inbox rows of its tweets (docs/trimming.md#refill)."""
        return push_authors(self.visible.get(uid, ()), self.pull_follows.get(uid, set()), self.excluded.get(uid, ()))

    def set_active(self, uid: str, active: bool) -> None:
        """Keep ``uid``'s inbox or not (docs/activity.md). Going inactive drops the stored rows and
        stops writes; coming back asks for a rebuild (:meth:`rebuild_requests`), and until it is
        answered the inbox takes the writes that come (deletes of rows it never got are no-ops, as
        in Cassandra) while reads go on merging from the author timelines."""
        if not active and uid not in self.dropped:
            self.dropped.add(uid)
            self.returning.discard(uid)
            rows = self.timelines.pop(uid, {})
            self.dropped_rows += len(rows)
            if self.strict:
                self.trimmed.pop(uid, None)
            self.cut.pop(uid, None)
            self.shrunk.discard(uid)
        elif active and uid in self.dropped:
            self.dropped.discard(uid)
            self.returning.add(uid)

    def rebuild_requests(self) -> list[RefillRequest]:
        """For each returning reader, a refill from the top of the inbox by every push author it
        sees, of all its rows of the reader's (what a follow writes: the inbox is then what it would
        be had the reader never left), as the stream's driver asks when a reader comes back; the
        next trim cuts the excess (docs/activity.md)."""
        out = [RefillRequest(uid, author, *REBUILD_LINE, REBUILD_NEED)
               for uid in sorted(self.returning) for author in self.inbox_authors(uid)]
        self.rebuilds += len(self.returning)
        return out

    def rebuilt(self, readers: Iterable[str]) -> None:
        """The rebuilds of ``readers`` are written: their inboxes are read again (docs/activity.md)."""
        self.returning.difference_update(readers)

    def merged_inbox(self, uid: str) -> list[Entry]:
        """What ``uid``'s inbox holds by definition, merged from its push authors' timelines: each
        one's tweets that are no reply, a self-reply or a reply to ``uid`` (a reply to a third
        user is the per-reader stage's, in the extras). The read of a reader whose inbox is not kept
        (the plan's dropped inbox: :func:`~feed_service.core.home_plan.shows_row`)."""
        sources = [[e for e in _newest_first(self.author_timelines.get(author, {}))
                    if shows_row(DROPPED_INBOX, e, uid)] for author in self.inbox_authors(uid)]
        return merge_newest(sources, self.inbox_cap)

    def refill_requests(self) -> list[RefillRequest]:
        """The refill requests of the trimmed inboxes that lost rows since the last call and hold
        fewer than ``inbox_cap`` rows at or above their cut line: one per push author the reader
        sees, for the shortfall below the line (docs/trimming.md#refill), as the stream's driver
        makes them after a batch."""
        out: list[RefillRequest] = []
        for uid in sorted(self.shrunk):
            cut = self.cut.get(uid)
            if uid in self.dropped or uid in self.returning:
                continue
            if cut is None:
                continue
            need = self.inbox_cap - sum(1 for row in self.timelines.get(uid, ()) if row >= cut)
            if need > 0:
                self.refills += 1
                out += [RefillRequest(uid, author, cut[0], cut[1], need) for author in self.inbox_authors(uid)]
        self.shrunk.clear()
        return out

    def display_name(self, author_id: str, profile_version: int) -> str | None:
        """The author's display name at exactly ``profile_version``, or None while unknown."""
        prow = self.profiles.get((author_id, profile_version))
        return None if prow is None else prow.display_name

    def statics(self, user_id: str) -> HomeStatics:
        """What the store's inbox partition says of ``user_id`` before any row is read: its pull
        authors, its pull reposters, and whether its inbox is not kept (a returning reader's is read
        as not kept until its rebuild is written: docs/activity.md)."""
        return HomeStatics(tuple(sorted(self.pull_follows.get(user_id, ()))),
                           tuple(sorted(self.pull_reposters.get(user_id, ()))),
                           user_id in self.dropped or user_id in self.returning, self.list_rules.get(user_id))

    def plan(self, user_id: str) -> HomePlan:
        """``user_id``'s home plan (:func:`~feed_service.core.home_plan.home_plan`)."""
        return home_plan(user_id, self.statics(user_id))

    def entries(self, user_id: str) -> list[Entry]:
        """The ``inbox_cap`` newest entries of ``user_id``'s timeline, newest first: the sources of
        its home plan (inbox or dropped inbox, extras, pull authors, pull reposters) merged as the
        read service merges them. A pull author's reply to a third user is merged in only if the
        reader sees that user; the repost rows of the extras and the pull reposters are decided
        together (docs/reposts-and-replies.md, hybrid fan-out)."""
        plan = self.plan(user_id)
        sees = self.visible.get(user_id, set())
        rule = plan.list_rule
        owner_sees = self.visible.get(rule.owner, set()) if rule is not None else set()
        slices: list[list[Entry]] = []
        for kind, owner in plan.sources:
            if kind == INBOX:
                slices.append(_newest_first(self.timelines.get(user_id, {})))
            elif kind == DROPPED_INBOX:
                slices.append(self.merged_inbox(user_id))
            elif kind == EXTRAS:
                slices.append(_newest_first(self.extras.get(user_id, {})))
            elif kind == PULL_AUTHOR:
                slices.append([e for e in _newest_first(self.author_timelines.get(owner, {}))
                               if shows_row(kind, e, user_id, sees, rule, owner_sees)])
            else:  # a pull reposter's: decided below with the extras' repost rows
                slices.append(_newest_first(self.own_reposts.get(owner, {})))
        if plan.decides_reposts:
            first = len(plan.sources) - len(plan.pull_reposters)
            extras, reposted = slices[1], slices[first:]
            facts = self._repost_facts(user_id, reposted, extras)
            slices[1] = [e for e in extras if shows_extras_row(e, facts)]
            slices[first:] = [[e for e in rows if shows_pulled_row(e, user_id, facts, rule)] for rows in reposted]
        return merge_home(slices, self.inbox_cap)

    def _repost_facts(self, reader: str, reposted: list[list[Entry]], extras: list[Entry]) -> RepostFacts:
        """Everything the stores would answer about ``reader``'s repost rows (lookups by tweet)."""
        pulled: dict[tuple[str, str], list[tuple[int, str]]] = {}
        for rows in reposted:
            for e in rows:
                pulled.setdefault((e.author_id, e.tweet_id), []).append(repost_order(e.reposted_at, e.reposted_by))
        pushed = {(e.author_id, e.tweet_id): repost_order(e.reposted_at, e.reposted_by) for e in extras if e.reposted_by is not None}
        rule = self.list_rules.get(reader)
        if rule is None:
            return RepostFacts(pulled, pushed, self.visible.get(reader, set()), self.hidden.get(reader, set()),
                               excluded=self.excluded.get(reader, set()))
        return RepostFacts(pulled, pushed, self.visible.get(reader, set()), self.hidden.get(rule.owner, set()),
                           self.visible.get(rule.owner, set()))

    def author_entries(self, author_id: str) -> list[Entry]:
        """An author's own timeline: its newest live tweets and its reposts of others' tweets, newest first."""
        return merge_newest([_newest_first(self.author_timelines.get(author_id, {})),
                             _newest_first(self.own_reposts.get(author_id, {}))], self.inbox_cap)

    def read(self, user_id: str) -> list[dict[str, Any]]:
        """``user_id``'s timeline in the public entry shape, display names hydrated."""
        return [entry_dict(e, self.display_name(e.author_id, e.profile_version)) for e in self.entries(user_id)]

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        """Every non-empty home timeline, by user id in sorted order (lists' readers left out:
        :meth:`list_snapshot`)."""
        users = sorted({uid for uid, rows in self.timelines.items() if rows} | set(self.pull_follows) | set(self.extras)
                       | set(self.pull_reposters) | self.dropped | self.returning)
        return {uid: timeline for uid in users if list_of(uid) is None and (timeline := self.read(uid))}

    def list_snapshot(self) -> dict[str, list[dict[str, Any]]]:
        """Every live list's timeline, empty ones too, by list id in sorted order (docs/lists.md)."""
        return {list_of(reader): self.read(reader) for reader in sorted(self.list_rules)}  # type: ignore[misc]


def _apply_sets(sets: dict[str, set[str]], deltas: Iterable[tuple[str, str, str]]) -> None:
    """Apply (op, owner, member) changes to per-owner sets, dropping the empty ones."""
    for op, owner, member in deltas:
        members = sets.setdefault(owner, set())
        (members.discard if op == "delete" else members.add)(member)
        if not members:
            del sets[owner]


def _untrim(trimmed: dict[str, set[RowKey]], uid: str, row: RowKey) -> bool:
    """Whether ``row`` of ``uid`` was trimmed (and forget it: it is written again now)."""
    rows = trimmed.get(uid)
    if rows is None or row not in rows:
        return False
    rows.discard(row)
    if not rows:
        del trimmed[uid]
    return True


def _newest_first(rows: dict[RowKey, Entry]) -> list[Entry]:
    return [rows[k] for k in sorted(rows, reverse=True)]



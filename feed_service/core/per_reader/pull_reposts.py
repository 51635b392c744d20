"""A pull reposter's reposts, decided at read (docs/reposts-and-replies.md, hybrid fan-out).

A pull reposter P fans its reposts out to nobody (:mod:`.audience_stage`); a reader R who sees P
merges P's own timeline of reposts (``user_reposts``) into its home timeline at read, as it merges a
pull author's tweets. The stage decided R's ``home_extras`` entries from the candidates of
push reposters only, so a read settles what the two kinds of reposters decide together. For a tweet
T by A, the entry the definition gives is at the earliest ``(reposted_at, reposter)`` among all
reposters R sees, unless T is direct for R or A is hidden from R. Hence:

- R's ``home_extras`` repost entry of T (the earliest *pushed* repost) shows unless a pull reposter
  R merges in reposted T earlier;
- a row of pull reposter P's reposts of T shows only if it is the earliest of all (pushed entry and
  pull reposters R merges in), T is not direct for R (R does not see A, or T replies to a third user
  R does not see) and A is not hidden from R.

Each decision needs only facts about the row's own tweet and users (:class:`RepostFacts`), which a
read looks up for just the tweets and users of the rows it holds (:func:`lookups`). The same
functions decide the in-memory view (:class:`~feed_service.core.view.TimelineView`) and the read
service, so the property tests' view is the read service's rule.
"""

from __future__ import annotations

from typing import Collection, Iterable, Mapping, NamedTuple, Sequence

from feed_service.core.rows import Entry
from feed_service.core.rules import Repost, direct, is_earliest, precedes, repost_order, shown_in_inbox, shown_in_list


class ListRule(NamedTuple):
    """What a read of a list's reader decides its rows merged at read by: the list's owner (whose
    hides and, for ``followed``, whose follows count) and its replies policy (docs/lists.md)."""

    owner: str
    policy: str


TweetKey = tuple[str, str]
"""(author_id, tweet_id): a tweet's identity."""


class RepostFacts(NamedTuple):
    """What one reader's read looked up to decide its repost rows."""

    pulled: Mapping[TweetKey, Sequence[Repost]]
    """tweet -> its reposts by the pull reposters the reader merges in (those asked for)."""
    pushed: Mapping[TweetKey, Repost]
    """tweet -> the reader's ``home_extras`` repost entry of it, where there is one (those asked for)."""
    sees: Collection[str]
    """Of the users asked for, those the reader sees."""
    hidden: Collection[str]
    """Of the users asked for, those whose tweets are hidden from the reader (a list's reader: from
    its owner)."""
    owner_sees: Collection[str] = ()
    """A list's reader: of the users asked for, those its owner sees (its ``followed`` policy)."""
    excluded: Collection[str] = ()
    """Of the users asked for, those the reader sets aside as sources (its exclusive lists' members)."""


class Lookups(NamedTuple):
    """What a read must look up to decide some rows (:func:`lookups`)."""

    pulled: frozenset[TweetKey]
    pushed: frozenset[TweetKey]
    users: frozenset[str]


def key(entry: Entry) -> TweetKey:
    return entry.author_id, entry.tweet_id


def lookups(reader: str, extras_rows: Iterable[Entry], pulled_rows: Iterable[Entry],
            reposters: Collection[str] = ()) -> Lookups:
    """The facts that decide ``extras_rows`` (the reader's ``home_extras`` rows) and ``pulled_rows``
    (rows of the pull reposters it merges in, ``reposters``) when the reader merges some pull
    reposter in. A pull row's tweet is looked up among the pull reposters' reposts only when another
    of ``reposters`` could have reposted it earlier: its own reposter's repost of it is the row itself
    (one edge per reposter and tweet), so a reader merging one pull reposter in asks for none."""
    pulled = {key(e) for e in extras_rows if e.reposted_by is not None}
    pushed: set[TweetKey] = set()
    users: set[str] = set()
    several = len(reposters) > 1
    for e in pulled_rows:
        if several or (reposters and e.reposted_by not in reposters):
            pulled.add(key(e))
        pushed.add(key(e))
        users.add(e.author_id)
        parent = e.in_reply_to_author_id
        if not shown_in_inbox(e.author_id, parent, reader):  # whether the reader sees the parent decides
            users.add(parent)  # type: ignore[arg-type]
    return Lookups(frozenset(pulled), frozenset(pushed), frozenset(users))


def shows_extras_row(entry: Entry, facts: RepostFacts) -> bool:
    """Whether the reader's ``home_extras`` row ``entry`` shows: a reply always (the stage
    decided it), a repost entry unless a pull reposter the reader merges in reposted it earlier."""
    if entry.reposted_by is None:
        return True
    mine = repost_order(entry.reposted_at, entry.reposted_by)  # type: ignore[arg-type]
    return all(precedes(mine, other) for other in facts.pulled.get(key(entry), ()))


def shows_pulled_row(entry: Entry, reader: str, facts: RepostFacts, rule: ListRule | None = None) -> bool:
    """Whether ``entry``, a row of a pull reposter's reposts that ``reader`` merges in, shows
    (``rule``: the owner and policy of a list's reader, docs/lists.md#in-the-engine)."""
    author = entry.author_id
    if author in facts.hidden:
        return False
    if rule is None:
        shown_direct = author not in facts.excluded and direct(author, entry.in_reply_to_author_id, reader, facts.sees)
    else:
        shown_direct = shown_in_list(author, entry.in_reply_to_author_id, rule.owner, rule.policy, facts.sees,
                                     facts.owner_sees)
    if shown_direct:
        return False  # the tweet shows at its own time (inbox, extras or a pull author)
    mine = repost_order(entry.reposted_at, entry.reposted_by)  # type: ignore[arg-type]
    k = key(entry)
    pushed = facts.pushed.get(k)
    if pushed is not None and precedes(pushed, mine):
        return False
    return is_earliest(mine, facts.pulled.get(k, ()))


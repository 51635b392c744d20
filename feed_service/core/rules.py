"""The rules of the view, each decided here once (docs/how-a-change-becomes-an-entry.md, last table).

Every component that applies a rule calls it from here: the author key's step (:mod:`.join`), the
per-reader stage (:mod:`.per_reader`), the batch reference (:mod:`.reference`), the in-memory view
and the reads, the backfill and the demo. Where Spark SQL must restate a rule as columns
(``spark_jobs/backfill/join.py``), ``tests/unit/test_rules_sql.py`` evaluates both forms on the
same rows.

- **The reply rule** (docs/reposts-and-replies.md, "The chosen design"): a tweet of author A
  replying to X (None: no reply) is *plain* when X is None or A (a thread); else its *reply class*
  is X (:func:`reply_class`). A's key writes it to reader R's inbox when it is plain or X is R
  (:func:`shown_in_inbox`); it is *direct* for R when R sees A and it shows in R's inbox or R sees
  X (:func:`direct`, :func:`direct_among` in set form).
- **The earliest reposter**: a tweet not direct for R shows once, at the earliest
  ``(reposted_at, reposter)`` among the reposters R sees (:func:`repost_order`, :func:`earliest`).
- **The pull tests**: an author with ``pull_threshold`` active followers or more is merged at read
  (:func:`is_pull_author`, docs/fan-out.md), and so is a reposter seen by ``reposter_threshold``
  readers or more (:func:`is_pull_reposter`).
- **Version ranks**: of two changes of one entity the greater rank wins; an edge's tie goes to the
  op the event registry names (``tie_winner`` in :mod:`.event_kinds`), so the ranks below are
  derived from it, not restated (a list's changes: :func:`list_rank`; a membership:
  :func:`member_rank`). A tweet's upserts are ranked by version and payload digest
  (:func:`~feed_service.core.events.content_beats`, next to the digest it needs).
"""

from __future__ import annotations

from typing import AbstractSet, Callable, Collection, Container, Iterable

from feed_service.core.event_kinds import EDGE_KINDS, TYPES
from feed_service.core.events import Profile

# -- the reply rule ----------------------------------------------------------------------------------


def reply_class(author_id: str, in_reply_to_author_id: str | None) -> str | None:
    """The third user a tweet of ``author_id`` replies to, or None for a plain tweet (no reply, or a
    reply to the author itself: a thread). Also the retention class of the tweet: an author keeps
    the newest ``inbox_cap`` tweets of each class (docs/reposts-and-replies.md, retention).

    >>> reply_class("ann", None), reply_class("ann", "ann"), reply_class("ann", "cat")
    (None, None, 'cat')
    """
    return None if in_reply_to_author_id is None or in_reply_to_author_id == author_id else in_reply_to_author_id


def shown_in_inbox(author_id: str, in_reply_to_author_id: str | None, reader: str) -> bool:
    """Whether ``reader``'s inbox holds a tweet of ``author_id`` replying to ``in_reply_to_author_id``
    (None: no reply): no reply, a self-reply or a reply to the reader. A reply to a third user
    reaches the reader through its ``home_extras``, decided by the per-reader stage.

    >>> shown_in_inbox("ann", None, "bob"), shown_in_inbox("ann", "ann", "bob"), shown_in_inbox("ann", "bob", "bob")
    (True, True, True)
    >>> shown_in_inbox("ann", "cat", "bob")
    False
    """
    return in_reply_to_author_id is None or in_reply_to_author_id == author_id or in_reply_to_author_id == reader


def direct(author_id: str, in_reply_to_author_id: str | None, reader: str, sees: Container[str]) -> bool:
    """Whether the tweet shows for ``reader`` at its own time (not through a repost): the reader sees
    the author (``sees``: the users the reader sees), and the tweet is in its inbox
    (:func:`shown_in_inbox`) or replies to a user the reader sees.

    >>> direct("ann", "cat", "bob", {"ann", "cat"}), direct("ann", "cat", "bob", {"ann"})
    (True, False)
    >>> direct("ann", None, "bob", {"cat"})
    False
    """
    if author_id not in sees:
        return False
    return shown_in_inbox(author_id, in_reply_to_author_id, reader) or in_reply_to_author_id in sees


_LIST_KIND = TYPES["list"][0]

REPLIES_POLICIES: tuple[str, ...] = next(f.choices for f in _LIST_KIND.fields if f.name == "replies_policy")
"""A list's reply policies, as the registry declares them (``followed``, ``list``, ``none``: Mastodon's)."""


def shown_in_list(author_id: str, in_reply_to_author_id: str | None, owner: str, policy: str,
                  list_sees: Container[str], owner_sees: Container[str]) -> bool:
    """Whether a tweet of ``author_id`` replying to ``in_reply_to_author_id`` (None: no reply) is
    direct for a list of ``owner`` with reply policy ``policy``: the list sees the author
    (``list_sees``: its members not hidden from the owner), and the tweet is no reply, a self-reply
    or a reply to the owner (:func:`shown_in_inbox`), or ``policy`` admits its parent's author:
    ``followed``, a user the owner sees (``owner_sees``, the owner's home ``Visible``); ``list``, a
    user the list sees; ``none``, nobody more. :func:`direct` with "follows" read as "is a member"
    and the last test per policy (docs/lists.md#definition).

    >>> members, follows = {"ann", "bob"}, {"cat"}
    >>> [shown_in_list("ann", p, "own", "list", members, follows) for p in (None, "ann", "own", "bob", "cat")]
    [True, True, True, True, False]
    >>> [shown_in_list("ann", p, "own", "followed", members, follows) for p in ("bob", "cat")]
    [False, True]
    >>> [shown_in_list("ann", p, "own", "none", members, follows) for p in ("own", "bob", "cat")]
    [True, False, False]
    >>> shown_in_list("dan", None, "own", "list", members, follows)
    False
    """
    return author_id in list_sees and list_admits(author_id, in_reply_to_author_id, owner, policy, list_sees,
                                                  owner_sees)


def list_admits(author_id: str, in_reply_to_author_id: str | None, owner: str, policy: str,
                list_sees: Container[str], owner_sees: Container[str]) -> bool:
    """The reply half of :func:`shown_in_list`, for a tweet whose author the list sees: no reply, a
    self-reply, a reply to the owner, or a parent's author the ``policy`` admits (a read of a
    list's pull author asks it with only the users that decide in ``list_sees`` and ``owner_sees``).

    >>> list_admits("ann", "own", "own", "none", (), ()), list_admits("ann", "cat", "own", "followed", (), {"cat"})
    (True, True)
    """
    if policy not in REPLIES_POLICIES:
        raise ValueError(f"unknown replies policy {policy!r}: one of {', '.join(REPLIES_POLICIES)}")
    if shown_in_inbox(author_id, in_reply_to_author_id, owner):
        return True
    if policy == "followed":
        return in_reply_to_author_id in owner_sees
    return policy == "list" and in_reply_to_author_id in list_sees


def home_source_kept(source: str, excluded: Container[str]) -> bool:
    """Whether ``source`` may bring an entry to a reader's home timeline: it is not a member of one
    of the reader's exclusive lists (``excluded``). A direct entry's source is its author, a repost
    entry's its reposter; a source set aside is set aside before the earliest reposter is chosen,
    so the next reposter takes the entry. Only sources: the reply rule's "the reader sees the
    parent's author" and "the author is not hidden from the reader" ignore exclusivity
    (docs/lists.md#definition).

    >>> home_source_kept("ann", {"bob"}), home_source_kept("bob", {"bob"})
    (True, False)
    """
    return source not in excluded


def direct_among(readers: set[str], author_id: str, in_reply_to_author_id: str | None,
                 audience_of: Callable[[str], Collection[str]]) -> set[str]:
    """:func:`direct` in set form: of ``readers`` (each sees the author), those for whom the tweet is
    direct; ``audience_of(U)``: the readers who see U. ``aud[X] ∪ {X}`` for a reply to a third
    user X, every reader for a plain tweet: ``readers`` itself (not copied), else a new set.

    >>> aud = {"cat": {"bob"}}.get
    >>> sorted(direct_among({"bob", "dan", "cat"}, "ann", "cat", lambda u: aud(u, ())))
    ['bob', 'cat']
    >>> sorted(direct_among({"bob", "dan"}, "ann", "ann", lambda u: aud(u, ())))
    ['bob', 'dan']
    """
    third = reply_class(author_id, in_reply_to_author_id)
    if third is None:
        return readers
    out = readers.intersection(audience_of(third))
    if third in readers:
        out.add(third)
    return out


def conditional_readers(audience_author: Collection[str], third: str,
                        audience_third: Collection[str]) -> set[str]:
    """The ``home_extras`` readers of a reply to a third user ``third``: those who see its author and
    ``third``, less ``third`` itself (whose row is in its own inbox). The set form of
    ``direct and not shown_in_inbox``.

    >>> sorted(conditional_readers({"bob", "cat", "dan"}, "cat", {"bob", "cat", "eve"}))
    ['bob']
    """
    if not isinstance(audience_author, AbstractSet):
        audience_author = set(audience_author)
    out = set(audience_author.intersection(audience_third))  # copies the (small) intersection only
    out.discard(third)
    return out


def push_authors(visible: Iterable[str], pull: Collection[str], excluded: Collection[str] = ()) -> list[str]:
    """The push authors that write a reader's inbox, sorted: the users it sees less the pull authors
    it merges in and the sources it sets aside (its exclusive lists' members, docs/lists.md).

    >>> push_authors(["cat", "ann", "star", "bob"], {"star"}, {"bob"})
    ['ann', 'cat']
    """
    return sorted(a for a in set(visible) if a not in pull and a not in excluded)


# -- the earliest reposter ---------------------------------------------------------------------------

Repost = tuple[int, str]
"""(reposted_at, reposter): what orders the reposts of one tweet (the earliest is the entry's)."""


def repost_order(reposted_at: int, reposter: str) -> Repost:
    """The order of one tweet's reposts: earlier repost time first, then the smaller reposter id."""
    return (reposted_at, reposter)


def earliest(reposts: Iterable[Repost]) -> Repost | None:
    """The repost whose entry a reader gets of a tweet it sees only through reposts, None if none.

    >>> earliest([(5, "cat"), (3, "dan"), (3, "bob")]), earliest([])
    ((3, 'bob'), None)
    """
    return min(reposts, default=None)


def precedes(a: Repost, b: Repost) -> bool:
    """Whether repost ``a`` comes before ``b`` in :func:`repost_order` (strictly: a repost does not
    precede itself).

    >>> precedes((3, "bob"), (3, "cat")), precedes((3, "bob"), (3, "bob"))
    (True, False)
    """
    return a < b


def is_earliest(mine: Repost, others: Iterable[Repost]) -> bool:
    """Whether ``mine`` is before every repost of ``others`` (one reposter reposts a tweet once, so
    an equal pair is ``mine`` itself and does not count against it).

    >>> is_earliest((3, "bob"), [(3, "bob"), (4, "ann")]), is_earliest((3, "bob"), [(3, "ann")])
    (True, False)
    """
    return all(mine <= other for other in others)


# -- the pull tests ------------------------------------------------------------------------------------


def is_pull_author(active_followers: int, pull_threshold: int) -> bool:
    """Whether an author with ``active_followers`` active follow edges is a pull author, its tweets
    merged at read rather than written to its followers' inboxes (docs/fan-out.md). In SQL
    (``spark_jobs/backfill/join.py``): ``count >= pull_threshold``.

    >>> is_pull_author(1_999, 2_000), is_pull_author(2_000, 2_000)
    (False, True)
    """
    return active_followers >= pull_threshold


def is_pull_reposter(audience: int, reposter_threshold: int | None) -> bool:
    """Whether a reposter seen by ``audience`` readers is a pull reposter, its reposts merged at read;
    never when the threshold is None (pull reposters disabled).

    >>> is_pull_reposter(5, 5), is_pull_reposter(4, 5), is_pull_reposter(10**9, None)
    (True, False, False)
    """
    return reposter_threshold is not None and audience >= reposter_threshold


# -- version ranks --------------------------------------------------------------------------------------


def _on_wins_tie(*types: str) -> bool:
    """Whether the "on" op of the edge kinds ``types`` wins a version tie (the registry's ``tie_winner``);
    the kinds that share a rank must agree."""
    winners = {EDGE_KINDS[t].tie_winner == EDGE_KINDS[t].on_op for t in types}
    if len(winners) != 1:
        raise AssertionError(f"edge kinds {types} share a rank but not a tie winner")
    return winners.pop()


_FOLLOW_ON_WINS = _on_wins_tie("follow", "list_follow")
_HIDE_ON_WINS = _on_wins_tie("block", "mute", "exclusion")
_REPOST_ON_WINS = _on_wins_tie("repost")


def edge_rank(version: int, active: bool, show_reposts: bool = True) -> tuple[int, bool, bool]:
    """Total order of follow-edge changes: higher version wins; on a tie the registry's
    ``tie_winner`` (``unfollow``), then, of two follows, the greater payload (``show_reposts`` true
    over false, as every edge's payload breaks its ties: ``spark_jobs/backfill/winners.py``;
    docs/lists.md#per-follow-options). A stored edge (:data:`~feed_service.core.state.Edge`) ranks
    as ``edge_rank(*edge)``.

    >>> edge_rank(5, False) > edge_rank(5, True) > edge_rank(5, True, False) > edge_rank(4, False)
    True
    """
    return (version, active == _FOLLOW_ON_WINS, active and show_reposts)


def follow_edge(version: int, active: bool, show_reposts: bool = True) -> tuple[int, bool] | tuple[int, bool, bool]:
    """A follow change as the engine keeps it: ``(version, active)``, or ``(version, True, False)``
    for an active follow with reposts turned off (an unfollow has no options).

    >>> follow_edge(3, True), follow_edge(3, True, False), follow_edge(3, False, False)
    ((3, True), (3, True, False), (3, False))
    """
    return (version, True, False) if active and not show_reposts else (version, active)


def shows_reposts(edge: tuple[int, bool] | tuple[int, bool, bool] | None) -> bool:
    """Whether a follow edge (:func:`follow_edge`) brings the followee's reposts: it is active and
    its reposts are not turned off.

    >>> shows_reposts((3, True)), shows_reposts((3, True, False)), shows_reposts((3, False)), shows_reposts(None)
    (True, False, False, False)
    """
    return edge is not None and edge[1] and (len(edge) < 3 or edge[2])


def hide_rank(version: int, hiding: bool) -> tuple[int, bool]:
    """Total order of block and mute edge changes (and of the list stage's exclusions, kept beside
    them): higher version wins, and on a tie the registry's ``tie_winner``, the hiding op (``block``,
    ``mute``, ``exclude``): the safer side of a tie.

    >>> hide_rank(5, True) > hide_rank(5, False)
    True
    """
    return (version, hiding == _HIDE_ON_WINS)


def repost_rank(version: int, reposting: bool, author_id: str, created_at: int | None,
                profile_version: int | None) -> tuple[int, bool, str, int, int]:
    """Total order of the changes of one repost edge (reposter, tweet): higher version wins, on a
    tie the registry's ``tie_winner`` (``unrepost``), and two different reposts at one version are
    ordered by their payload (the original's author, then the repost time and profile version).

    >>> repost_rank(5, False, "", None, None) > repost_rank(5, True, "ann", 1, 1)
    True
    """
    return (version, reposting == _REPOST_ON_WINS, author_id, created_at or 0, profile_version or 0)


_LIST_CREATE_WINS = _LIST_KIND.tie_winner == _LIST_KIND.on_op
_MEMBER_ON_WINS = _on_wins_tie("list_member")

ListRank = tuple[int, bool, str, str, bool, str]
"""A list's change as :func:`list_rank` ranks it: ``(version, tie bit, name, replies_policy,
exclusive, owner_id)``."""


def list_rank(version: int, live: bool, name: str | None, replies_policy: str, exclusive: bool,
              owner_id: str) -> ListRank:
    """Total order of the changes of one list: higher version wins; on a tie the registry's
    ``tie_winner`` (``delete``); two creates at one version: the greater ``(name, replies_policy,
    exclusive)``, then the greater ``owner_id``; two deletes: the greater ``owner_id``. As the
    backfill's ``_list_winners`` orders them (``spark_jobs/backfill/winners.py``: a delete's
    options are null there, so they do not count between deletes here either).

    >>> list_rank(5, False, None, "list", False, "o") > list_rank(5, True, "zz", "none", True, "o")
    True
    >>> list_rank(5, True, "a", "none", False, "o") > list_rank(5, True, "a", "list", True, "p")
    True
    >>> list_rank(6, True, "a", "list", False, "o") > list_rank(5, False, None, "list", False, "o")
    True
    """
    if not live:
        return (version, not _LIST_CREATE_WINS, "", "", False, owner_id)
    return (version, _LIST_CREATE_WINS, name or "", replies_policy, exclusive, owner_id)


def member_rank(version: int, active: bool) -> tuple[int, bool]:
    """Total order of the changes of one membership (list, member): higher version wins, and on a
    tie the registry's ``tie_winner`` (``remove``).

    >>> member_rank(5, False) > member_rank(5, True) > member_rank(4, False)
    True
    """
    return (version, active == _MEMBER_ON_WINS)


def profile_rank(profile: Profile) -> tuple[str, tuple[bool, str], tuple[bool, str]]:
    """Total order of profile payloads; of two different payloads at one (user, version) the greater wins.

    Compares display_name, then avatar_url, then bio, with null below every string.

    >>> profile_rank(("Bo", None, None)) < profile_rank(("Bo", "", None))
    True
    """
    name, avatar, bio = profile
    return (name, (avatar is not None, avatar or ""), (bio is not None, bio or ""))


__all__ = [
    "REPLIES_POLICIES", "ListRank", "Repost", "conditional_readers", "direct", "direct_among", "earliest",
    "edge_rank", "follow_edge", "hide_rank", "home_source_kept", "is_earliest", "is_pull_author", "is_pull_reposter",
    "list_admits", "list_rank", "member_rank", "precedes", "profile_rank", "push_authors", "reply_class", "repost_order",
    "repost_rank", "shown_in_inbox", "shown_in_list", "shows_reposts",
]

"""The home plan: which sources a reader's home timeline merges, decided once, and the one merge.

What is known of a reader before any of its rows is read, its statics (the pull authors it
follows, the pull reposters it merges in, whether its inbox is kept: the static columns of its
inbox partition), decides the sources its timeline is made of (docs/view-changes.md#the-home-plan):

- its inbox (``home_timeline``), or, when the inbox is not kept, the **dropped inbox**: its push
  authors' author timelines cut by the inbox rule (docs/activity.md);
- its ``home_extras`` (repost entries and replies shown for their parent, decided by the stream);
- each pull author's author timeline, a reply to a third user only if the reader sees that user;
- each pull reposter's ``user_reposts``, its rows decided together with the extras' repost rows
  (:mod:`feed_service.core.per_reader.pull_reposts`).

:func:`home_plan` is that decision, a pure function of the statics; :func:`merge_home` is the merge
of the sources' slices, in the plan's order; :func:`shows_row` is the one rule a row of a source
decided at read time (a pull author's, a dropped inbox's) is shown by. The model
(:class:`~feed_service.core.timeline_view.TimelineView`), the read service's pages and catch-ups,
its read cache and its pushed watches all ask this module, so they merge the same sources the same way.
"""

from __future__ import annotations

from typing import Container, Iterable, NamedTuple, Sequence

from feed_service.core.rules import list_admits, shown_in_inbox
from feed_service.core.per_reader.pull_reposts import ListRule, RepostFacts, shows_extras_row, shows_pulled_row
from feed_service.core.rows import Entry
from feed_service.core.timeline_merge import merge_newest, merge_oldest

INBOX = "inbox"
"""The reader's kept inbox (``home_timeline``): rows the stream decided for it."""
DROPPED_INBOX = "dropped_inbox"
"""The inbox of a reader whose inbox is not kept: its push authors' rows the inbox would hold."""
EXTRAS = "extras"
"""The reader's ``home_extras``: rows the stream decided for it (repost rows decided again when the
reader merges pull reposters in)."""
PULL_AUTHOR = "pull_author"
"""A pull author's author timeline, merged in at read."""
PULL_REPOSTER = "pull_reposter"
"""A pull reposter's ``user_reposts``, merged in at read."""


class HomeStatics(NamedTuple):
    """What is known of a reader before its rows are read: the static columns of its inbox partition."""

    pull_authors: Sequence[str] = ()
    """Sorted."""
    pull_reposters: Sequence[str] = ()
    """Sorted."""
    dropped: bool = False
    """Its inbox is not kept (``inbox_dropped``)."""
    list_rule: ListRule | None = None
    """A list's reader: the list's owner and replies policy (docs/lists.md#in-the-engine); None: a user."""


class Source(NamedTuple):
    """One source of a home timeline: its kind and whose partition it reads (the reader's own for
    the inbox, the dropped inbox and the extras; the author's or the reposter's otherwise)."""

    kind: str
    owner: str


class HomePlan(NamedTuple):
    """The sources of one reader's home timeline, in merge order: the inbox (or the dropped inbox),
    the extras, the pull authors, the pull reposters."""

    reader: str
    pull_authors: tuple[str, ...]
    pull_reposters: tuple[str, ...]
    dropped: bool
    sources: tuple[Source, ...]
    list_rule: ListRule | None = None
    """A list's reader: what its rows merged at read are decided by (:func:`shows_row`)."""

    @property
    def decides_reposts(self) -> bool:
        """Whether the extras' repost rows and the pull reposters' rows are decided at read, together."""
        return bool(self.pull_reposters)

    @property
    def cacheable(self) -> bool:
        """Whether a cached inbox head serves the plan's page without lookups: the inbox is kept and
        no pull reposter's rows need deciding (docs/api.md#read-cache)."""
        return not self.dropped and not self.pull_reposters


def home_plan(reader: str, statics: HomeStatics) -> HomePlan:
    """The plan of ``reader``'s home timeline from its statics.

    >>> [s.kind for s in home_plan("ann", HomeStatics(("star",), (), True)).sources]
    ['dropped_inbox', 'extras', 'pull_author']
    """
    authors, reposters = tuple(statics.pull_authors), tuple(statics.pull_reposters)
    own = Source(DROPPED_INBOX if statics.dropped else INBOX, reader)
    sources = (own, Source(EXTRAS, reader), *(Source(PULL_AUTHOR, a) for a in authors),
               *(Source(PULL_REPOSTER, p) for p in reposters))
    return HomePlan(reader, authors, reposters, bool(statics.dropped), sources, statics.list_rule)


def merge_home(slices: Iterable[Sequence[Entry]], limit: int, *, oldest_first: bool = False) -> list[Entry]:
    """The one merge of a home timeline: the sources' slices (in the plan's order, newest first for
    a page, oldest first for a watch's catch-up) merged by the timeline order, each tweet once (the
    first source's row where two hold it), cut to ``limit``. A single non-empty slice is returned as
    it is."""
    present = [rows for rows in slices if rows]
    if not present:
        return []
    if len(present) == 1 and len(present[0]) <= limit:
        rows = present[0]
        return rows if isinstance(rows, list) else list(rows)
    return merge_oldest(present, limit) if oldest_first else merge_newest(present, limit)


def deciding_user(entry: Entry, reader: str) -> str | None:
    """The user whose visibility to ``reader`` decides whether a pull author's row is shown: a reply's
    parent author, unless the row is one an inbox would hold (no reply, a thread, a reply to the
    reader: :func:`~feed_service.core.rules.shown_in_inbox`); None: always shown."""
    parent = entry.in_reply_to_author_id
    return None if shown_in_inbox(entry.author_id, parent, reader) else parent


def shows_row(kind: str, entry: Entry, reader: str, sees: Container[str] = (), rule: ListRule | None = None,
              owner_sees: Container[str] = ()) -> bool:
    """Whether a row of a source decided at read is shown to ``reader``: a pull author's unless it
    replies to a third user the reader does not see (``sees``: at least the users that decide; a
    list's reader, ``rule``: unless the list's policy leaves it out, ``owner_sees`` what its owner
    sees of them: :func:`~feed_service.core.rules.list_admits`); a dropped inbox's only if the inbox
    would hold it (its other replies come from the extras). The stream decided the rows of the
    other kinds (the pull reposters': :mod:`.per_reader.pull_reposts`)."""
    if kind == PULL_AUTHOR:
        if rule is not None:
            return list_admits(entry.author_id, entry.in_reply_to_author_id, rule.owner, rule.policy, sees, owner_sees)
        u = deciding_user(entry, reader)
        return u is None or u in sees
    if kind == DROPPED_INBOX:
        return shown_in_inbox(entry.author_id, entry.in_reply_to_author_id, reader)
    return True


def shown_repost(sample: Entry, reader: str, facts: RepostFacts, rule: ListRule | None = None
                 ) -> tuple[str, int, str] | None:
    """Which repost row of ``sample``'s tweet ``reader`` is shown, from the facts of its lookups:
    ``(EXTRAS, reposted_at, reposter)`` its ``home_extras`` entry, ``(PULL_REPOSTER, reposted_at,
    reposter)`` a pull reposter's row, None neither (the tweet is direct for the reader, hidden, or
    not reposted by anyone it merges in). The rule of the read's repost rows
    (:mod:`feed_service.core.per_reader.pull_reposts`), for one tweet at a time (a watch's change)."""
    k = (sample.author_id, sample.tweet_id)
    pushed = facts.pushed.get(k)
    if pushed is not None and shows_extras_row(sample._replace(reposted_at=pushed[0], reposted_by=pushed[1]), facts):
        return (EXTRAS, *pushed)
    shown = None
    for at, p in facts.pulled.get(k, ()):
        if shows_pulled_row(sample._replace(reposted_at=at, reposted_by=p), reader, facts, rule):
            shown = (PULL_REPOSTER, at, p)
    return shown

"""Stage ``winners``: each entity's winning change, with DataFrame operations and the engine's rules.

The rules are those of :mod:`feed_service.core.events`: a tweet's highest version upsert (ties: the
greater :func:`~feed_service.core.events.tweet_payload_digest`), a delete is final; a follow edge's
highest version (``unfollow`` wins a tie); per profile (user, version) the greatest
:func:`~feed_service.core.rules.profile_rank`; a block or mute edge's highest version (the hiding op,
``block`` or ``mute``, wins a tie: :func:`~feed_service.core.rules.hide_rank`); a repost edge's
highest version (``unrepost`` wins a tie; two reposts at one version: the greatest payload, as
:func:`~feed_service.core.rules.repost_rank`); a list's highest version (``delete`` wins a tie; two
creates at one version: the greater (name, replies_policy, exclusive)) and a list membership's
(``remove`` wins a tie), which the list stage joins (:mod:`spark_jobs.backfill.lists`) into the
edges the members' keys fold beside their other winners (:meth:`Winners.with_list_edges`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from feed_service.core.event_kinds import EDGE_KINDS, TYPES, EventKind, FieldSpec

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame

#: A tweet's winning upsert as the winners hold it: its content, a reply's parent included (part of
#: the versioned content, so of the tie-break digest too).
TWEET_COLUMNS = ("author_id", "tweet_id", "version", "created_at", "text", "profile_version", "in_reply_to_tweet_id",
                 "in_reply_to_author_id")


def payload_digest_hex(created_at: "pd.Series", text: "pd.Series", profile_version: "pd.Series",
                       reply_tweet: "pd.Series | None" = None, reply_author: "pd.Series | None" = None) -> "pd.Series":
    """:func:`~feed_service.core.events.tweet_payload_digest` as 16 hex digits (string order = unsigned order);
    a reply's parent (``reply_tweet``, ``reply_author``, null for a non-reply) is part of it.

    >>> import pandas as pd
    >>> from feed_service.core.events import tweet_payload_digest
    >>> payload_digest_hex(pd.Series([5]), pd.Series(["hi"]), pd.Series([2]))[0] == f"{tweet_payload_digest(5, 'hi', 2):016x}"
    True
    >>> got = payload_digest_hex(pd.Series([5]), pd.Series(["hi"]), pd.Series([2]), pd.Series(["t0"]), pd.Series(["bob"]))
    >>> got[0] == f"{tweet_payload_digest(5, 'hi', 2, ('t0', 'bob')):016x}"
    True
    """
    import pandas as pd

    from feed_service.core.events import tweet_payload_digest

    n = len(created_at)
    tweets = reply_tweet.tolist() if reply_tweet is not None else [None] * n
    authors = reply_author.tolist() if reply_author is not None else [None] * n
    out = []
    for c, t, p, rt, ra in zip(created_at, text, profile_version, tweets, authors):
        parent = None if rt is None or pd.isna(rt) else (rt, ra)
        out.append(f"{tweet_payload_digest(int(c), t, int(p), parent):016x}")
    return pd.Series(out, dtype=object)


@dataclass
class Winners:
    """The final source tables, one row per entity (DataFrames; persisted by the job)."""

    live_tweets: "DataFrame"
    """author_id, tweet_id, version, created_at, text, profile_version, in_reply_to_tweet_id,
    in_reply_to_author_id (null for a non-reply): winning upsert, not deleted."""
    deleted_tweets: "DataFrame"
    """author_id, tweet_id, version (highest delete version): deleted for good."""
    edges: "DataFrame"
    """follower_id, followee_id, version, op, show_reposts (true when a follow leaves it out, null for
    an unfollow): the winning change of every edge ever seen."""
    profiles: "DataFrame"
    """user_id, version, display_name, avatar_url, bio: the winning payload per (user, version)."""
    blocks: "DataFrame"
    """blocker_id, blocked_id, version, op: the winning change of every block edge ever seen."""
    mutes: "DataFrame"
    """muter_id, muted_id, version, op: the winning change of every mute edge ever seen."""
    reposts: "DataFrame"
    """reposter_id, tweet_id, version, op, author_id, created_at, profile_version: the winning change
    of every repost edge ever seen (created_at and profile_version null for an unrepost)."""
    lists: "DataFrame"
    """list_id, version, op, name, replies_policy, exclusive, owner_id: the winning change of every
    list ever seen (a create's options with their defaults when it left them out; a delete's name and
    options null)."""
    list_members: "DataFrame"
    """list_id, member_id, version, op: the winning change of every membership edge ever seen."""
    list_follows: "DataFrame | None" = None
    """reader_id, member_id, owner_id, list_id, version, op: the list stage's list follows
    (:class:`~feed_service.core.events.ListFollow`, a list's reader following a member it sees), once
    the stage ran over the lists (:meth:`with_list_edges`); None before."""
    exclusions: "DataFrame | None" = None
    """owner_id, member_id, version, op: the list stage's exclusions
    (:class:`~feed_service.core.events.Exclusion`), as :attr:`list_follows`."""

    def map(self, fn: Callable[["DataFrame"], "DataFrame"]) -> "Winners":
        """The same tables through ``fn`` (e.g. persisted)."""
        return Winners(fn(self.live_tweets), fn(self.deleted_tweets), fn(self.edges), fn(self.profiles),
                       fn(self.blocks), fn(self.mutes), fn(self.reposts), fn(self.lists), fn(self.list_members),
                       None if self.list_follows is None else fn(self.list_follows),
                       None if self.exclusions is None else fn(self.exclusions))

    def with_list_edges(self, list_follows: "DataFrame", exclusions: "DataFrame") -> "Winners":
        """These winners with the list stage's derived edges (:mod:`spark_jobs.backfill.lists`): from
        then on a list follow counts as a follow edge of its list's reader (the inbox join, the pull
        follows, the pull authors' counts) and an exclusion withholds the member from its owner
        (:meth:`withheld_pairs`), as the members' keys fold them (docs/lists.md#in-the-engine)."""
        return replace(self, list_follows=list_follows, exclusions=exclusions)

    def user_follows_in_force(self) -> "DataFrame":
        """The users' follow edges whose winning change is a follow (every column of :attr:`edges`)."""
        from pyspark.sql import functions as F

        return self.edges.where(F.col("op") == "follow")

    def list_follows_in_force(self) -> "DataFrame":
        """``follower_id, followee_id, version``: the list follows in force, as follow edges of the
        lists' readers (none before :meth:`with_list_edges`)."""
        from pyspark.sql import functions as F

        if self.list_follows is None:
            return self.edges.limit(0).select("follower_id", "followee_id", "version")
        return self.list_follows.where(F.col("op") == "follow").select(
            F.col("reader_id").alias("follower_id"), F.col("member_id").alias("followee_id"), "version")

    def active_edges(self) -> "DataFrame":
        """``follower_id, followee_id, version``: the edges whose winning change is a follow, the list
        follows in force among them (a member's key counts its list's reader as a follower)."""
        return (self.user_follows_in_force().select("follower_id", "followee_id", "version")
                .unionByName(self.list_follows_in_force()))

    def blocks_in_force(self) -> "DataFrame":
        """``blocker_id, blocked_id`` of the block edges whose winning change is a block."""
        from pyspark.sql import functions as F

        return self.blocks.where(F.col("op") == "block").select("blocker_id", "blocked_id")

    def mutes_in_force(self) -> "DataFrame":
        """``muter_id, muted_id`` of the mute edges whose winning change is a mute."""
        from pyspark.sql import functions as F

        return self.mutes.where(F.col("op") == "mute").select("muter_id", "muted_id")

    def reposts_in_force(self) -> "DataFrame":
        """The repost edges whose winning change is a repost (every column of :attr:`reposts`)."""
        from pyspark.sql import functions as F

        return self.reposts.where(F.col("op") == "repost")

    def hidden_pairs(self) -> "DataFrame":
        """``reader_id, author_id``: the pairs whose tweets the home timeline leaves out.

        A mute in force hides the muted author from the muter; a block in force hides each side
        from the other (docs/backfill.md). A pair may appear more than once (a mute and a block).
        """
        from pyspark.sql import functions as F

        blocks = self.blocks_in_force()
        muted = self.mutes_in_force().select(F.col("muter_id").alias("reader_id"),
                                             F.col("muted_id").alias("author_id"))
        return (muted
                .unionByName(blocks.select(F.col("blocker_id").alias("reader_id"),
                                           F.col("blocked_id").alias("author_id")))
                .unionByName(blocks.select(F.col("blocked_id").alias("reader_id"),
                                           F.col("blocker_id").alias("author_id"))))

    def exclusions_in_force(self) -> "DataFrame":
        """``owner_id, member_id`` of the list stage's exclusions in force whose owner is not the member
        (one's own tweets are in no home inbox of one's own: the member's key skips such an exclusion);
        none before :meth:`with_list_edges`."""
        from pyspark.sql import functions as F

        if self.exclusions is None:
            return self.blocks.limit(0).select(F.col("blocker_id").alias("owner_id"), F.col("blocked_id").alias("member_id"))
        return (self.exclusions.where((F.col("op") == "exclude") & (F.col("owner_id") != F.col("member_id")))
                .select("owner_id", "member_id"))

    def withheld_pairs(self) -> "DataFrame":
        """``reader_id, author_id``: the pairs whose author's rows stay out of the reader's inbox, the
        SQL form of :func:`feed_service.core.state.withholds`: a hide in force (:meth:`hidden_pairs`)
        or an exclusion in force (the author a member of one of the reader's exclusive lists,
        docs/lists.md#exclusive-lists). A pair may appear more than once."""
        from pyspark.sql import functions as F

        excluded = self.exclusions_in_force().select(F.col("owner_id").alias("reader_id"),
                                                     F.col("member_id").alias("author_id"))
        return self.hidden_pairs().unionByName(excluded)

    def visible_edges(self) -> "DataFrame":
        """``follower_id, followee_id, version``: the active follow edges (a list's reader's among them)
        that nothing withholds (:meth:`withheld_pairs`): what the inbox join and the pull follows use."""
        from pyspark.sql import functions as F

        withheld = self.withheld_pairs().select(F.col("reader_id").alias("follower_id"),
                                                F.col("author_id").alias("followee_id"))
        return self.active_edges().join(withheld, ["follower_id", "followee_id"], "left_anti")

    def count(self) -> dict[str, int]:
        """Entities per kind, for the summary (one Spark job each)."""
        return {
            "tweets_live": self.live_tweets.count(),
            "tweets_deleted": self.deleted_tweets.count(),
            "follow_edges": self.edges.count(),
            "follow_edges_active": self.user_follows_in_force().count(),
            "profile_versions": self.profiles.count(),
            "block_edges": self.blocks.count(),
            "blocks_in_force": self.blocks_in_force().count(),
            "mute_edges": self.mutes.count(),
            "mutes_in_force": self.mutes_in_force().count(),
            "repost_edges": self.reposts.count(),
            "reposts_in_force": self.reposts_in_force().count(),
            "lists": self.lists.count(),
            "list_memberships": self.list_members.count(),
        }


def winning_changes(events: "DataFrame") -> Winners:
    """Fold valid events into each entity's winning change, with the rules of :mod:`feed_service.core.events`."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    tweet = F.col("type") == "tweet"
    ups = events.where(tweet & (F.col("op") == "upsert")).select(*TWEET_COLUMNS)
    dels = (events.where(tweet & (F.col("op") == "delete"))
            .groupBy("author_id", "tweet_id").agg(F.max("version").alias("version")))

    # Highest version; among different payloads at that version, the greatest digest (content_beats).
    by_tweet = Window.partitionBy("author_id", "tweet_id")
    top = (ups.withColumn("top", F.max("version").over(by_tweet)).where(F.col("version") == F.col("top"))
           .drop("top").dropDuplicates([c for c in TWEET_COLUMNS if c != "version"])
           .withColumn("payloads", F.count(F.lit(1)).over(by_tweet)))
    # A scalar pandas UDF (no type hints: they are strings here), evaluated only for ties, which are rare.
    digest = F.pandas_udf(lambda c, t, p, rt, ra: payload_digest_hex(c, t, p, rt, ra), "string")
    tied = (top.where(F.col("payloads") > 1)
            .withColumn("digest", digest("created_at", "text", "profile_version", "in_reply_to_tweet_id",
                                         "in_reply_to_author_id"))
            .withColumn("rank", F.row_number().over(by_tweet.orderBy(F.col("digest").desc())))
            .where(F.col("rank") == 1).drop("digest", "rank"))
    winners = top.where(F.col("payloads") == 1).unionByName(tied).drop("payloads")
    live = winners.join(dels.select("author_id", "tweet_id"), ["author_id", "tweet_id"], "left_anti")

    # Follow edges: highest version, unfollow (inactive) wins a tie (edge_rank); two follows of one
    # version: show_reposts true over false (rules.edge_rank).
    edges = _edge_winners(events, EDGE_KINDS["follow"])

    # Profiles: per (user, version), the greatest profile_rank (null below every string).
    by_profile = Window.partitionBy("user_id", "version").orderBy(
        F.col("display_name").desc(),
        F.col("avatar_url").isNotNull().desc(), F.coalesce("avatar_url", F.lit("")).desc(),
        F.col("bio").isNotNull().desc(), F.coalesce("bio", F.lit("")).desc())
    profiles = (events.where(F.col("type") == "profile")
                .select("user_id", "version", "display_name", "avatar_url", "bio")
                .withColumn("rank", F.row_number().over(by_profile)).where(F.col("rank") == 1).drop("rank"))

    # Block and mute edges: highest version, the hiding op wins a tie (hide_rank). Ranked per edge,
    # not per key: parse_changes gives one row per record (the stream's routed_changes is what copies
    # a block to both keys), and states.winner_events routes each winner itself.
    blocks = _edge_winners(events, EDGE_KINDS["block"])
    mutes = _edge_winners(events, EDGE_KINDS["mute"])
    # Repost edges: highest version, unrepost wins a tie; between reposts of one version, the greatest
    # (author_id, created_at, profile_version), as repost_rank orders them.
    reposts = _edge_winners(events, EDGE_KINDS["repost"])
    # Lists: highest version, delete wins a tie; between creates of one version the greatest
    # (name, replies_policy, exclusive), then owner_id. Memberships: highest version, remove wins a tie.
    lists = _list_winners(events)
    list_members = _edge_winners(events, EDGE_KINDS["list_member"])
    return Winners(live, dels, edges, profiles, blocks, mutes, reposts, lists, list_members)


def _list_winners(events: "DataFrame") -> "DataFrame":
    """Per list the winning change (:attr:`Winners.lists`)."""
    (kind,) = TYPES["list"]
    by_name = {f.name: f for f in kind.fields}
    return _winners(events, kind, ("list_id",), [by_name[n] for n in ("name", "replies_policy", "exclusive",
                                                                       "owner_id")])


def _edge_winners(events: "DataFrame", kind: EventKind) -> "DataFrame":
    """``subject, target, version, op`` and the kind's other fields (a repost's author, time and
    profile version) of an edge kind: per edge the change of greatest rank (highest version, the
    kind's ``tie_winner`` op on a tie, then the other fields in declaration order, greatest first,
    null as 0), one row each."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    assert kind.edge is not None, kind
    subject, target = kind.edge.subject, kind.edge.target
    return _winners(events, kind, (subject, target), [f for f in kind.fields if f.name not in (subject, target, "version")])


def _with_defaults(kind: EventKind) -> list["Column"]:
    """The kind's fields, an absent or null one with a default given it under the ops that carry it
    (a follow's show_reposts: true), as the parsed event holds it."""
    from pyspark.sql import functions as F

    cols = []
    for f in kind.fields:
        col = F.col(f.name)
        if f.default is not None:
            filled = F.coalesce(col, F.lit(f.default))
            col = filled if not f.ops else F.when(F.col("op").isin(*f.ops), filled).otherwise(col)
        cols.append(col.alias(f.name))
    return cols


def _winners(events: "DataFrame", kind: EventKind, entity: tuple[str, ...], others: list[FieldSpec]) -> "DataFrame":
    """Per ``entity`` the change of greatest rank: highest version, the kind's ``tie_winner`` op on a
    tie, then ``others`` in order, greatest first (null as 0 for an integer, last otherwise)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    payload = [(F.coalesce(F.col(f.name), F.lit(0)) if f.rule == "natural" else F.col(f.name)).desc()
               for f in others]
    tie = [(F.col("op") == kind.tie_winner).desc()] if kind.tie_winner is not None else []
    by_entity = Window.partitionBy(*entity).orderBy(F.col("version").desc(), *tie, *payload)
    own = (events.where(F.col("type") == kind.type).select("op", *_with_defaults(kind))
           .select(*entity, "version", "op", *(f.name for f in others)))
    return own.withColumn("rank", F.row_number().over(by_entity)).where(F.col("rank") == 1).drop("rank")

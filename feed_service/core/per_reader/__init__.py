"""The per-reader part of the view: reply rules, reposts, one entry per tweet (docs/reposts-and-replies.md).

The author step (:mod:`feed_service.core.join`) keeps writing the plain rows. What needs the reader
is decided by one more stage, a pure function of its state and its input messages:

- :mod:`~feed_service.core.per_reader.author_side`: after an author key's step, the messages it
  owes the stage (relations, conditional tweets, repost edges, reposted tweets' contents) and the
  inbox deltas less the replies to third users;
- :mod:`~feed_service.core.per_reader.audience_stage`: the stage, a join over audiences decided with
  set operations into the rows of ``home_extras``, reposters' own reposts and the readers' visible
  and hidden sets;
- :mod:`~feed_service.core.per_reader.pull_reposts`: a pull reposter's reposts, decided at read;
- :mod:`~feed_service.core.per_reader.routing`: the stage's one entry point for its drivers.

The rules they apply (the reply rule, "direct", the earliest reposter, the pull reposter test) are
:mod:`feed_service.core.rules`'.

:mod:`~feed_service.core.per_reader.messages` holds the records that travel between them. Every
message is an assignment versioned by its sender's clock, so the stage keeps the newest per
identity and the result does not depend on the order or the batching of the messages.
"""

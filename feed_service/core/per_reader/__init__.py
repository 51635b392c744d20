"""The per-reader part of the view: reply rules, reposts, one entry per tweet (docs/reposts-and-replies.md).

The author step (:mod:`feed_service.core.join`) keeps writing the plain rows. What needs the reader
goes through two more keyed steps, each a pure function of its state and its input messages:

- :mod:`~feed_service.core.per_reader.author_side`: after an author key's step, the messages it
  owes the other steps (relations, audience deltas, conditional replies, joined reposts) and the
  inbox deltas less the conditional replies;
- :mod:`~feed_service.core.per_reader.reposter_step`: a reposter's audience and joined reposts, fanned
  out as repost candidates;
- :mod:`~feed_service.core.per_reader.reader_step`: a reader's relations, conditional replies and
  repost candidates, decided into the rows of the reader's own table (``home_extras``).

:mod:`~feed_service.core.per_reader.messages` holds the records that travel between them. Every
message is an assignment versioned by its sender's clock, so a receiver keeps the newest per
identity and the result does not depend on the order or the batching of the messages.
"""

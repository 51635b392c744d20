"""Join operator: incremental maintenance of ``tweets ⋈ follows ▷ hidden`` for one author key per call.

The view is the join of tweets and follows less the hidden (reader, author) pairs, an antijoin:
a reader does not see an author's tweets while the reader mutes or blocks the author or the author
blocks the reader (docs/blocks-and-mutes.md). Over one micro-batch it changes by the discrete
product rule (docs/design.md), with H the hidden pairs as one more input::

    ΔV = ΔT⋈(F▷H) + T⋈Δ(F▷H) + ΔT⋈Δ(F▷H)      (T, F, H = the key's tables before the batch)

:func:`step` gets it without enumerating the terms: it folds the batch into the key's final
state (per entity, the maximum under that entity's version rank, so the order of ``changes`` does
not matter and duplicates are no-ops), then diffs only what the batch touched. Every pair an author
key's rows depend on is in its state: its follow edges, and per reader the block and mute edges
between that reader and this author (a block is routed to both of its users' keys, a mute to the
muted user's key). Rows (follower, tweet) split by whether the follower *sees* the author (an
active edge, nothing hiding) before/after the batch:

- followers who see it before and after (``stay``): rows differ only for touched tweets (ΔT⋈(F▷H));
- followers who start seeing it (a follow, an unblock, an unmute): every retained tweet after the
  batch (T'⋈Δ(F▷H), which is T⋈Δ(F▷H) + ΔT⋈Δ(F▷H): a tweet and a follow in one batch meet once);
- followers who stop seeing it (an unfollow, a block, a mute): every retained tweet before the batch.

Δ(F▷H) is itself a diff of final against initial state, so a follow and a block of the same pair
in one batch meet once too: the reader never saw the author, before or after, and nothing is
emitted. Diffing final against initial state nets everything within the batch: an insert and a
removal of the same row in one batch cancel. :func:`step`'s docstring has the whole step table.

One module per phase, in the order :func:`step` runs them (docs/join-engine.md):

- :mod:`~feed_service.core.join.horizon`: late changes, rejected beyond the history horizon;
- :mod:`~feed_service.core.join.fold`: each entity's winning change in the batch;
- :mod:`~feed_service.core.join.tweets`: retained, cold and deleted tweets (ΔT);
- :mod:`~feed_service.core.join.follows`: follow edges and active followers (ΔF);
- :mod:`~feed_service.core.join.hides`: block and mute edges, the antijoin (ΔH, who sees the author);
- :mod:`~feed_service.core.join.profiles`: profile versions (rows only);
- :mod:`~feed_service.core.join.audience`: hybrid fan-out, inbox holders and pull follows;
- :mod:`~feed_service.core.join.relations`: the readers whose relation to the author changed;
- :mod:`~feed_service.core.join.deltas`: the output rows;
- :mod:`~feed_service.core.join.replies`: a reply's inbox rows, to the holders the reply rule shows it to;
- :mod:`~feed_service.core.join.refill`: the rows a trimmed inbox asks for again;
- :mod:`~feed_service.core.join.forget`: history older than two horizons leaves the state;
- :mod:`~feed_service.core.join.key_step`: :func:`step` itself, :class:`StepResult`, :func:`needs_edges`;
- :mod:`~feed_service.core.join.readers`: sorted reader tuples and their diffs, shared by the above.
"""

from feed_service.core.join.key_step import (
    DEFAULT_INBOX_CAP,
    DEFAULT_PULL_THRESHOLD,
    StepResult,
    needs_edges,
    step,
)
from feed_service.core.rows import (
    AuthorTimelineDelta,
    BlockDelta,
    DeltaOp,
    Entry,
    ProfileRow,
    PullFollowDelta,
    TimelineDelta,
    TweetChange,
)

__all__ = [
    "DEFAULT_INBOX_CAP",
    "DEFAULT_PULL_THRESHOLD",
    "AuthorTimelineDelta",
    "BlockDelta",
    "DeltaOp",
    "Entry",
    "ProfileRow",
    "PullFollowDelta",
    "StepResult",
    "TimelineDelta",
    "TweetChange",
    "needs_edges",
    "step",
]

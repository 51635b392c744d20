"""Random histories with lists for the property tests of the lists' engine against the reference
(docs/lists.md; tests/unit/test_reference_lists.py runs the reference over them).

The base events are :func:`tests.support.repost_runs.random_event`'s (tweets and replies, reposts,
follows with reposts on or off, blocks, mutes, profiles over :data:`~tests.support.repost_runs.USERS`);
to them :func:`random_list_event` adds list creates and updates (every reply policy, exclusive on and
off, now and then another owner), list deletes, and member adds and removes over the same users (the
owner too), some of a list no event ever creates. :func:`list_runs` shuffles a history, pads it with
duplicates and garbage and cuts it into micro-batches, as :func:`~tests.support.repost_runs.runs` does.
"""

from __future__ import annotations

import random

from hypothesis import strategies as st

from feed_service.core.events import Event, ListChange, ListMemberChange
from feed_service.core.rules import REPLIES_POLICIES
from .repost_runs import GARBAGE, SETTINGS, USERS, Run, batched, random_event

__all__ = ["LIST_GARBAGE", "LIST_IDS", "OWNERS", "SETTINGS", "list_history", "list_runs", "random_list_event"]

#: The lists: each has a usual owner (a create now and then names another: the winner's owner counts).
OWNERS = {"L0": "u0", "L1": "u3"}
#: The lists events name; ``Lx`` only ever gets memberships (a list never created).
LIST_IDS = [*OWNERS, "Lx"]

#: Lines of the list shapes the engine must reject.
LIST_GARBAGE = [
    '{"type": "list", "op": "create", "list_id": "L0", "owner_id": "u0", "version": 1}',
    '{"type": "list", "op": "create", "list_id": "L0", "owner_id": "u0", "version": 1, "name": "a", '
    '"replies_policy": "all"}',
    '{"type": "list", "op": "create", "list_id": "L0", "owner_id": "u0", "version": 1, "name": "a", '
    '"exclusive": "yes"}',
    '{"type": "list", "op": "rename", "list_id": "L0", "owner_id": "u0", "version": 1}',
    '{"type": "list_member", "op": "add", "list_id": "L0", "member_id": "", "version": 1}',
    '{"type": "list_member", "op": "add", "list_id": "L0", "member_id": "u1"}',
]


def random_list_event(rnd: random.Random) -> Event:
    """One list change: a create (a name of two, any reply policy, exclusive 2 times in 5, another
    owner 1 time in 8), a delete, or a membership add or remove of any user (the owner included)."""
    version = rnd.randint(0, 2)
    kind = rnd.choice(["create"] * 3 + ["delete"] + ["add"] * 4 + ["remove"] * 2)
    if kind in ("create", "delete"):
        lid = rnd.choice(list(OWNERS))
        owner = OWNERS[lid] if rnd.random() < 0.875 else rnd.choice(USERS)
        if kind == "delete":
            return ListChange(lid, owner, version, "delete")
        return ListChange(lid, owner, version, "create", rnd.choice(["a", "b"]),
                          rnd.choice(REPLIES_POLICIES), rnd.random() < 0.4)  # type: ignore[arg-type]
    lid = rnd.choice(LIST_IDS) if rnd.random() < 0.2 else rnd.choice(list(OWNERS))
    return ListMemberChange(lid, rnd.choice(USERS), version, "add" if kind == "add" else "remove")


def list_history(rnd: random.Random, size: int) -> list[Event]:
    """``size`` events, about 2 in 5 of them list changes, the rest :func:`random_event`'s."""
    return [random_list_event(rnd) if rnd.random() < 0.4 else random_event(rnd) for _ in range(size)]


@st.composite
def list_runs(draw: st.DrawFn) -> Run:
    """A :class:`~tests.support.repost_runs.Run` of up to 90 events of :func:`list_history`, shuffled
    with duplicates and up to 3 garbage lines (:data:`LIST_GARBAGE` and the reposts' ``GARBAGE``), in
    batches of 1-15 lines."""
    rnd = draw(st.randoms(use_true_random=False))
    return batched(rnd, list_history(rnd, draw(st.integers(0, 90))), LIST_GARBAGE + GARBAGE)

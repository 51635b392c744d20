"""The list stage: lists and memberships joined into the edges the members' keys need (docs/lists.md#in-the-engine).

It keeps each list's winning change (:func:`~feed_service.core.rules.list_rank`) and each
membership's (:func:`~feed_service.core.rules.member_rank`) and derives, as the definition's words
(``feed_service/core/reference.py``) say:

- per membership (L, X) with ``ListSees(L, X)`` (``Member(L, X)``: L live, the membership an add;
  and X not hidden from L's owner): a *list follow* ``list_reader(L) -> X`` naming L's owner
  (:class:`~feed_service.core.events.ListFollow`), so the member's key holds the list's reader as a
  follower that sees it, as a user's follow would be (whether X is hidden from the owner is the
  per-reader stage's relation of the pair, given to :meth:`ListStage.step` as ``hidden``);
- per (owner O, X) with ``Excluded(O, X)`` (X a member of some live exclusive list of O): an
  *exclusion* (:class:`~feed_service.core.events.Exclusion`);
- per live list its *fact* (:class:`ListFact`): owner, name, reply policy, exclusive.

A batch returns the changes of these only (what differs from before it), each versioned by the
stage's clock: the previous clock + 1, advanced only when the batch emits something. A list change
costs its members; a membership change costs O(1) (the owner's exclusive lists holding the member
are an index).

Every input is an assignment per identity, as :class:`~feed_service.core.per_reader.audience_stage.AudienceStage`'s:
``("list", list_id)`` -> the winning :class:`~feed_service.core.events.ListChange`, ``("member",
list_id, member_id)`` -> ``(version, active)`` of the winning membership change, ``("clock",)`` ->
the clock. A change that does not beat the stored winner assigns nothing, so the state, and every
derived edge, is a function of the final tables whatever the order, batching or duplication.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from feed_service.core.events import Exclusion, ListChange, ListFollow, ListMemberChange
from feed_service.core.list_readers import list_reader
from feed_service.core.rules import ListRank, list_rank, member_rank

Identity = tuple[str, ...]
"""One input of the stage: ``("list", list_id)``, ``("member", list_id, member_id)`` or ``("clock",)``."""

EdgeValue = tuple[str, bool]
"""A membership in force as the stage derived it: (the list's owner, the list is exclusive)."""

Hidden = Callable[[str, str], bool]
"""``hidden(owner, member)``: whether the member's tweets are hidden from the owner (a block or mute in force)."""


def _nothing_hidden(owner: str, member: str) -> bool:
    return False


FactValue = tuple[str, str | None, str, bool]
"""A live list as the stage derived it: (owner, name, replies_policy, exclusive)."""


@dataclass(frozen=True, slots=True)
class ListFact:
    """What the reads and the per-reader stage need of a list: its owner and options while it is
    live; ``owner_id`` None (and no name or options) once it is not."""

    list_id: str
    owner_id: str | None
    name: str | None
    replies_policy: str | None
    exclusive: bool
    ts: int
    previous_owner: str | None = None
    """The owner the list had before this fact, when it had one and it differs from ``owner_id``
    (the list deleted, or moved to another owner): whose ``lists`` row the writer deletes."""

    @property
    def live(self) -> bool:
        """Whether the list exists."""
        return self.owner_id is not None


@dataclass(frozen=True, slots=True)
class ListStageResult:
    """What one batch of the list stage derived: the changes only, at clock ``ts``."""

    follows: tuple[ListFollow, ...]
    exclusions: tuple[Exclusion, ...]
    facts: tuple[ListFact, ...]
    ts: int
    inputs: tuple[tuple[Identity, Any, Any], ...] = ()
    """Every input the batch assigned: (identity, value after the batch, value before it); what a
    store of the stage keeps (:meth:`ListStage.restore` rebuilds the stage from the values)."""


def _rank(change: ListChange) -> ListRank:
    return list_rank(change.version, change.live, change.name, change.replies_policy, change.exclusive,
                     change.owner_id)


@dataclass(slots=True)
class ListStage:
    """The stage's inputs, what it derived from them, and its step; see the module docstring."""

    lists: dict[str, ListChange] = field(default_factory=dict)
    """list_id -> the winning change (a create or a delete)."""
    members: dict[tuple[str, str], tuple[int, bool]] = field(default_factory=dict)
    """(list_id, member_id) -> (version, active) of the winning change, whether or not the list is live."""
    added: dict[str, set[str]] = field(default_factory=dict)
    """list_id -> the users whose membership's winning change is an add (the list live or not)."""
    edges: dict[tuple[str, str], EdgeValue] = field(default_factory=dict)
    """(list_id, member_id) -> :data:`EdgeValue` of each membership in force (``Member``)."""
    following: dict[tuple[str, str], str] = field(default_factory=dict)
    """(list_id, member_id) -> the owner named by the list follow in force (``ListSees``)."""
    owned: dict[str, set[str]] = field(default_factory=dict)
    """owner -> its live lists."""
    excluding: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    """(owner, member) -> the owner's live exclusive lists the member is in force in (``Excluded``: non-empty)."""
    facts: dict[str, FactValue] = field(default_factory=dict)
    """list_id -> :data:`FactValue` of each live list."""
    clock: int = 0
    clock_saved: bool = False
    """Whether the clock is among the stored inputs (a new stage's starts unsaved)."""
    written: dict[Identity, tuple[Any, Any]] = field(default_factory=dict)
    """The inputs the current batch assigned: identity -> (value now, value before the batch)."""

    @classmethod
    def restore(cls, values: Iterable[tuple[Identity, Any]], *, clock: int = 0,
                hidden: Hidden = _nothing_hidden) -> "ListStage":
        """The stage whose inputs are ``values`` (as :attr:`ListStageResult.inputs` left them; None
        values are absent), with everything derived from them as the batches that assigned them did."""
        stage = cls(clock=clock)
        for identity, value in values:
            if value is None:
                continue
            kind = identity[0]
            if kind == "list":
                stage.lists[identity[1]] = value
            elif kind == "member":
                stage.members[(identity[1], identity[2])] = value
                if value[1]:
                    stage.added.setdefault(identity[1], set()).add(identity[2])
            elif kind == "clock":
                stage.clock, stage.clock_saved = value, True
            else:
                raise ValueError(f"list stage: unknown input {identity!r}")
        for lid in stage.lists:
            fact = stage._fact(lid)
            if fact is not None:
                stage.facts[lid] = fact
                stage.owned.setdefault(fact[0], set()).add(lid)
        for lid, member in stage.members:
            edge = stage._edge(lid, member)
            if edge is not None:
                stage.edges[(lid, member)] = edge
                if edge[1]:
                    stage.excluding.setdefault((edge[0], member), set()).add(lid)
                if not hidden(edge[0], member):
                    stage.following[(lid, member)] = edge[0]
        return stage

    def _note(self, identity: Identity, value: Any, before: Any) -> None:
        had = self.written.get(identity)
        self.written[identity] = (value, before if had is None else had[1])

    def step(self, changes: Sequence[ListChange | ListMemberChange], hides: Iterable[tuple[str, str]] = (),
             hidden: Hidden = _nothing_hidden) -> ListStageResult:
        """Assign one batch of list and membership changes and return what the derived edges and
        facts became where they changed. ``hides``: the (owner, member) pairs whose ``hidden``
        changed since the last step (the per-reader stage's hidden deltas)."""
        ts = self.clock + 1
        self.written = {}
        lists_changed, memberships = self._assign(changes)
        affected = set(memberships)
        for lid in lists_changed:
            affected.update((lid, member) for member in self.added.get(lid, ()))
        for owner, member in hides:
            affected.update((lid, member) for lid in self.owned.get(owner, ()) if member in self.added.get(lid, ()))
        follows: list[ListFollow] = []
        excluded_before: dict[tuple[str, str], bool] = {}
        for lid, member in sorted(affected):
            self._derive_edge(lid, member, ts, follows, excluded_before, hidden)
        exclusions = [Exclusion(owner, member, ts, "exclude" if (owner, member) in self.excluding else "include")
                      for (owner, member), was in sorted(excluded_before.items())
                      if was != ((owner, member) in self.excluding)]
        facts: list[ListFact] = []
        for lid in sorted(lists_changed):
            new, old = self._fact(lid), self.facts.get(lid)
            if new == old:
                continue
            if old is not None:
                _discard(self.owned, old[0], lid)
            previous = None if old is None or (new is not None and new[0] == old[0]) else old[0]
            if new is None:
                del self.facts[lid]
                facts.append(ListFact(lid, None, None, None, False, ts, previous))
            else:
                self.facts[lid] = new
                self.owned.setdefault(new[0], set()).add(lid)
                facts.append(ListFact(lid, *new, ts, previous))
        if follows or exclusions or facts:
            self._note(("clock",), ts, self.clock if self.clock_saved else None)
            self.clock, self.clock_saved = ts, True
        inputs = tuple([(identity, *pair) for identity, pair in self.written.items()])
        self.written = {}
        return ListStageResult(tuple(follows), tuple(exclusions), tuple(facts), ts, inputs)

    def _assign(self, changes: Sequence[ListChange | ListMemberChange]) -> tuple[set[str], set[tuple[str, str]]]:
        """Keep each winner; return the lists and the memberships whose winner changed."""
        lists_changed: set[str] = set()
        memberships: set[tuple[str, str]] = set()
        for ch in changes:
            if isinstance(ch, ListChange):
                old = self.lists.get(ch.list_id)
                if old is not None and _rank(ch) <= _rank(old):
                    continue
                self.lists[ch.list_id] = ch
                self._note(("list", ch.list_id), ch, old)
                lists_changed.add(ch.list_id)
            elif isinstance(ch, ListMemberChange):
                k = (ch.list_id, ch.member_id)
                old_m = self.members.get(k)
                new_m = (ch.version, ch.active)
                if old_m is not None and member_rank(*new_m) <= member_rank(*old_m):
                    continue
                self.members[k] = new_m
                self._note(("member", *k), new_m, old_m)
                if ch.active:
                    self.added.setdefault(ch.list_id, set()).add(ch.member_id)
                else:
                    _discard(self.added, ch.list_id, ch.member_id)
                memberships.add(k)
            else:
                raise TypeError(f"list stage: not a list or membership change: {ch!r}")
        return lists_changed, memberships

    def _fact(self, lid: str) -> FactValue | None:
        change = self.lists.get(lid)
        if change is None or not change.live:
            return None
        return (change.owner_id, change.name, change.replies_policy, change.exclusive)

    def _edge(self, lid: str, member: str) -> EdgeValue | None:
        """The membership's :data:`EdgeValue` if in force (``Member(L, X)``), else None."""
        change = self.lists.get(lid)
        m = self.members.get((lid, member))
        if change is None or not change.live or m is None or not m[1]:
            return None
        return (change.owner_id, change.exclusive)

    def _derive_edge(self, lid: str, member: str, ts: int, follows: list[ListFollow],
                     excluded_before: dict[tuple[str, str], bool], hidden: Hidden) -> None:
        """Bring the membership's derived edges up to date: its list follow's change, if any, into
        ``follows``; the (owner, member) pairs it moves into ``excluded_before`` with their value
        before the batch."""
        k = (lid, member)
        new, old = self._edge(lid, member), self.edges.get(k)
        seeing = None if new is None or hidden(new[0], member) else new[0]
        was = self.following.get(k)
        if seeing != was:
            if seeing is None:
                del self.following[k]
            else:
                self.following[k] = seeing
            owner, op = (was, "unfollow") if seeing is None else (seeing, "follow")
            follows.append(ListFollow(list_reader(lid), member, owner, lid, ts, op))  # type: ignore[arg-type]
        if new == old:
            return
        if new is None:
            del self.edges[k]
        else:
            self.edges[k] = new
        for value, on in ((old, False), (new, True)):
            if value is None or not value[1]:
                continue
            pair = (value[0], member)
            excluded_before.setdefault(pair, pair in self.excluding)
            if on:
                self.excluding.setdefault(pair, set()).add(lid)
            else:
                _discard(self.excluding, pair, lid)


def _discard(index: dict, owner: Any, member: Any) -> None:
    """Take ``member`` out of ``index[owner]``, dropping an empty set."""
    members = index.get(owner)
    if members is not None:
        members.discard(member)
        if not members:
            del index[owner]

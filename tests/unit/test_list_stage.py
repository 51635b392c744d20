"""The list stage (feed_service/core/per_reader/list_stage.py): list follows, exclusions and list facts
derived from the lists and memberships, as changes at the stage's clock, by example; and over random
list histories (shuffled, duplicated, batched), the edges in force are the definition's ``Member``
and ``Excluded`` of the reference's final tables, whatever the order and batching, and a stage
restored from its inputs steps every batch as the stage that wrote them."""

from __future__ import annotations

import random
from typing import Any, Iterable, Sequence

import pytest
from hypothesis import given

from feed_service.core.events import (
    Event,
    Exclusion,
    InvalidEvent,
    ListChange,
    ListFollow,
    ListMemberChange,
    parse_event,
)
from feed_service.core.list_readers import list_reader
from feed_service.core.per_reader.list_stage import Identity, ListFact, ListStage, ListStageResult
from feed_service.core.reference import reference_tables
from tests.support.list_runs import SETTINGS, list_runs
from tests.support.repost_runs import Run

L1 = list_reader("L1")


def create(owner: str = "ann", version: int = 1, *, exclusive: bool = False, name: str = "n",
           policy: str = "list", lid: str = "L1") -> ListChange:
    return ListChange(lid, owner, version, "create", name, policy, exclusive)  # type: ignore[arg-type]


def delete(version: int, owner: str = "ann", lid: str = "L1") -> ListChange:
    return ListChange(lid, owner, version, "delete")


def add(member: str, version: int = 1, lid: str = "L1") -> ListMemberChange:
    return ListMemberChange(lid, member, version, "add")


def remove(member: str, version: int, lid: str = "L1") -> ListMemberChange:
    return ListMemberChange(lid, member, version, "remove")


# --- list follows --------------------------------------------------------------------------------

def test_a_member_of_a_live_list_is_followed_by_the_lists_reader_naming_the_owner() -> None:
    stage = ListStage()
    done = stage.step([create(), add("bob"), add("cat")])
    assert done.ts == 1 and stage.clock == 1
    assert done.follows == (ListFollow(L1, "bob", "ann", "L1", 1, "follow"),
                            ListFollow(L1, "cat", "ann", "L1", 1, "follow"))
    assert done.exclusions == () and done.facts == (ListFact("L1", "ann", "n", "list", False, 1),)
    removed = stage.step([remove("bob", 2)])
    assert removed.ts == 2 and removed.follows == (ListFollow(L1, "bob", "ann", "L1", 2, "unfollow"),)
    assert removed.facts == ()


def test_a_membership_before_its_list_exists_follows_once_the_list_is_created() -> None:
    stage = ListStage()
    early = stage.step([add("bob")])
    assert (early.follows, early.exclusions, early.facts) == ((), (), ())
    assert early.ts == 1 and stage.clock == 0  # nothing emitted: the clock stays
    assert [identity for identity, _, _ in early.inputs] == [("member", "L1", "bob")]
    assert stage.step([create()]).follows == (ListFollow(L1, "bob", "ann", "L1", 1, "follow"),)


def test_a_deleted_list_unfollows_its_members_and_a_later_create_follows_them_again() -> None:
    stage = ListStage()
    stage.step([create(), add("bob")])
    gone = stage.step([delete(2)])
    assert gone.follows == (ListFollow(L1, "bob", "ann", "L1", 2, "unfollow"),)
    assert gone.facts == (ListFact("L1", None, None, None, False, 2, "ann"),) and not gone.facts[0].live
    back = stage.step([create(version=3, name="again")])
    assert back.follows == (ListFollow(L1, "bob", "ann", "L1", 3, "follow"),)
    assert back.facts == (ListFact("L1", "ann", "again", "list", False, 3),)


def test_a_new_owner_is_told_to_every_member_in_force() -> None:
    stage = ListStage()
    stage.step([create(), add("bob"), add("cat"), remove("dan", 1)])
    moved = stage.step([create("eve", 2)])
    assert moved.follows == (ListFollow(L1, "bob", "eve", "L1", 2, "follow"),
                             ListFollow(L1, "cat", "eve", "L1", 2, "follow"))
    assert moved.facts == (ListFact("L1", "eve", "n", "list", False, 2, "ann"),)  # ann's row goes


def test_only_a_change_of_what_is_derived_is_emitted() -> None:
    """A rename changes the fact, not the follows; a duplicate or a beaten change assigns nothing."""
    stage = ListStage()
    stage.step([create(), add("bob", 5)])
    renamed = stage.step([create(version=2, name="new", policy="none")])
    assert renamed.follows == () and renamed.facts == (ListFact("L1", "ann", "new", "none", False, 2),)
    late = stage.step([create(version=1, name="zzz"), add("bob", 5), remove("bob", 4), add("bob", 3)])
    assert late == ListStageResult((), (), (), 3, ())  # nothing assigned, nothing emitted, the clock stays
    assert stage.clock == 2


def test_ties_are_the_registrys_a_remove_and_a_delete_win() -> None:
    stage = ListStage()
    stage.step([create(version=4), add("bob", 4)])
    tied = stage.step([remove("bob", 4), add("bob", 4)])
    assert tied.follows == (ListFollow(L1, "bob", "ann", "L1", 2, "unfollow"),)
    assert stage.step([create(version=4, name="zzz"), delete(4)]).facts == (
        ListFact("L1", None, None, None, False, 3, "ann"),)


def test_within_a_batch_the_winner_counts_not_the_order() -> None:
    one, other = ListStage(), ListStage()
    changes = [create(), add("bob", 2), remove("bob", 1), create("eve", 3), delete(2)]
    assert one.step(changes).follows == other.step(changes[::-1]).follows == (
        ListFollow(L1, "bob", "eve", "L1", 1, "follow"),)


# --- exclusions ----------------------------------------------------------------------------------

def test_a_member_of_an_exclusive_list_is_excluded_from_its_owners_home() -> None:
    stage = ListStage()
    done = stage.step([create(exclusive=True), add("bob"), add("ann")])  # the owner may be a member
    assert done.exclusions == (Exclusion("ann", "ann", 1, "exclude"), Exclusion("ann", "bob", 1, "exclude"))
    assert stage.step([remove("bob", 2)]).exclusions == (Exclusion("ann", "bob", 2, "include"),)


def test_an_exclusion_holds_while_some_exclusive_list_of_the_owner_holds_the_member() -> None:
    stage = ListStage()
    first = stage.step([create(exclusive=True), add("bob"), create(exclusive=True, lid="L2"), add("bob", lid="L2")])
    assert first.exclusions == (Exclusion("ann", "bob", 1, "exclude"),)
    one_left = stage.step([create(version=2, exclusive=False)])  # L1 no longer exclusive: L2 still holds bob
    assert one_left.exclusions == () and one_left.follows == ()
    assert one_left.facts == (ListFact("L1", "ann", "n", "list", False, 2),)
    none_left = stage.step([remove("bob", 2, lid="L2")])
    assert none_left.exclusions == (Exclusion("ann", "bob", 3, "include"),)
    assert none_left.follows == (ListFollow(list_reader("L2"), "bob", "ann", "L2", 3, "unfollow"),)


def test_a_non_exclusive_list_excludes_nobody_and_becoming_exclusive_excludes_its_members() -> None:
    stage = ListStage()
    assert stage.step([create(), add("bob")]).exclusions == ()
    assert stage.step([create(version=2, exclusive=True)]).exclusions == (Exclusion("ann", "bob", 2, "exclude"),)
    assert stage.step([delete(3)]).exclusions == (Exclusion("ann", "bob", 3, "include"),)


def test_an_owner_change_moves_the_exclusions_to_the_new_owner() -> None:
    stage = ListStage()
    stage.step([create(exclusive=True), add("bob")])
    moved = stage.step([create("eve", 2, exclusive=True)])
    assert moved.exclusions == (Exclusion("ann", "bob", 2, "include"), Exclusion("eve", "bob", 2, "exclude"))
    assert moved.follows == (ListFollow(L1, "bob", "eve", "L1", 2, "follow"),)


# --- the store contract --------------------------------------------------------------------------

def test_the_inputs_are_the_assignments_with_their_values_before() -> None:
    stage = ListStage()
    first = stage.step([create(), add("bob"), add("bob", 2)])
    assert set(first.inputs) == {(("list", "L1"), create(), None), (("member", "L1", "bob"), (2, True), None),
                                 (("clock",), 1, None)}
    second = stage.step([remove("bob", 3)])
    assert set(second.inputs) == {(("member", "L1", "bob"), (3, False), (2, True)), (("clock",), 2, 1)}
    restored = ListStage.restore([(i, v) for r in (first, second) for i, v, _ in r.inputs])
    assert (restored.clock, restored.lists, restored.members) == (2, stage.lists, stage.members)
    assert (restored.edges, restored.facts, restored.excluding) == (stage.edges, stage.facts, stage.excluding)


def test_restore_refuses_an_unknown_input() -> None:
    with pytest.raises(ValueError, match="unknown input"):
        ListStage.restore([(("rel", "a", "b"), (1, True, False))])


def test_a_change_of_another_kind_is_refused() -> None:
    with pytest.raises(TypeError, match="not a list or membership change"):
        ListStage().step([ListFollow(L1, "bob", "ann", "L1", 1, "follow")])  # type: ignore[list-item]


# --- over random histories -----------------------------------------------------------------------

def _list_changes(lines: Iterable[str]) -> list[ListChange | ListMemberChange]:
    out: list[ListChange | ListMemberChange] = []
    for line in lines:
        try:
            ev = parse_event(line)
        except InvalidEvent:
            continue
        if isinstance(ev, (ListChange, ListMemberChange)):
            out.append(ev)
    return out


class InForce:
    """The derived edges as the members' keys will hold them: each emitted change applied in order,
    the last one per key winning (their versions only ever rise)."""

    def __init__(self) -> None:
        self.follows: dict[tuple[str, str], tuple[str, bool, int]] = {}
        self.exclusions: dict[tuple[str, str], tuple[bool, int]] = {}
        self.facts: dict[str, ListFact] = {}

    def apply(self, done: ListStageResult) -> None:
        for f in done.follows:
            old = self.follows.get((f.reader_id, f.member_id))
            assert old is None or old[2] < f.version
            self.follows[(f.reader_id, f.member_id)] = (f.owner_id, f.active, f.version)
        for x in done.exclusions:
            old_x = self.exclusions.get((x.owner_id, x.member_id))
            assert old_x is None or old_x[1] < x.version
            assert old_x is None or old_x[0] != x.excluding  # changes only
            self.exclusions[(x.owner_id, x.member_id)] = (x.excluding, x.version)
        for fact in done.facts:
            self.facts[fact.list_id] = fact

    def follows_in_force(self) -> set[tuple[str, str, str]]:
        return {(reader, member, owner) for (reader, member), (owner, on, _) in self.follows.items() if on}

    def excluded(self) -> set[tuple[str, str]]:
        return {pair for pair, (on, _) in self.exclusions.items() if on}

    def live_lists(self) -> dict[str, tuple[str, str | None, str | None, bool]]:
        return {lid: (f.owner_id, f.name, f.replies_policy, f.exclusive)  # type: ignore[misc]
                for lid, f in self.facts.items() if f.live}


def _expected(history: Sequence[Event]) -> tuple[set[tuple[str, str, str]], set[tuple[str, str]], dict]:
    """``Member`` as list follows, ``Excluded`` and the live lists of the reference's final tables."""
    tables = reference_tables(history)
    live = tables.live_lists()
    follows = {(list_reader(lid), member, live[lid].owner_id)
               for lid, members in tables.list_members().items() for member in members}
    excluded = {(owner, member) for owner, members in tables.excluded().items() for member in members}
    lists = {lid: (c.owner_id, c.name, c.replies_policy, c.exclusive) for lid, c in live.items()}
    return follows, excluded, lists


def _run(batches: Sequence[Sequence[ListChange | ListMemberChange]]) -> tuple[InForce, list[ListStageResult]]:
    """Step every batch on one stage, checking each against a stage restored from the inputs before it."""
    stage, in_force, stored = ListStage(), InForce(), dict[Identity, Any]()
    results = []
    for batch in batches:
        again = ListStage.restore(stored.items())
        done, replayed = stage.step(batch), again.step(batch)
        assert replayed == done  # same edges, same facts, same clock, same inputs
        for identity, value, before in done.inputs:
            assert stored.get(identity) == before
            stored[identity] = value
        in_force.apply(done)
        results.append(done)
    return in_force, results


@SETTINGS
@given(run=list_runs())
def test_the_edges_in_force_are_the_definitions_whatever_the_order_and_batching(run: Run) -> None:
    follows, excluded, lists = _expected(run.history)
    in_force, _ = _run([_list_changes(batch) for batch in run.batches])
    assert in_force.follows_in_force() == follows
    assert in_force.excluded() == excluded
    assert in_force.live_lists() == lists
    # another order and batching of the same history ends in the same edges
    changes = _list_changes(batch for batch in (line for b in run.batches for line in b))
    random.Random(len(changes)).shuffle(changes)
    other, _ = _run([changes[i:i + 4] for i in range(0, len(changes), 4)] + [changes])
    assert (other.follows_in_force(), other.excluded(), other.live_lists()) == (follows, excluded, lists)


def test_a_restored_stage_steps_as_the_stage_that_wrote_its_inputs_on_a_fixed_history() -> None:
    """The worked example's lists (docs/lists.md): the edges of each step, and replay on restore."""
    batches: list[list[Any]] = [[create("own"), add("bob"), add("cat")], [create("own", 2, exclusive=True)],
                                [add("bob", 1, "L2"), create("own", 1, lid="L2", exclusive=True)], [delete(3, "own")]]
    in_force, results = _run(batches)
    assert [r.ts for r in results] == [1, 2, 3, 4]
    assert in_force.follows_in_force() == {(list_reader("L2"), "bob", "own")}
    assert in_force.excluded() == {("own", "bob")}
    assert results[3].exclusions == (Exclusion("own", "cat", 4, "include"),)  # bob stays set aside by L2

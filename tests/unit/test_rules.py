"""The set forms of the reply rule (what the per-reader stage computes over audiences) are the scalar rule
(what the reference and the reads apply reader by reader), on every small case."""

from __future__ import annotations

import random

from feed_service.core import rules

USERS = ("ann", "bob", "cat", "dan", "eve")


def _audiences(rng: random.Random) -> dict[str, set[str]]:
    """user -> the readers who see it (a random follow graph without self-edges)."""
    return {u: {r for r in USERS if r != u and rng.random() < 0.5} for u in USERS}


def _sees(aud: dict[str, set[str]], reader: str) -> set[str]:
    return {u for u, readers in aud.items() if reader in readers}


def test_direct_among_and_conditional_readers_are_the_scalar_rule() -> None:
    rng = random.Random(7)
    for _ in range(200):
        aud = _audiences(rng)
        for author in USERS:
            for parent in (None, *USERS):
                readers = set(aud[author])
                want_direct = {r for r in readers if rules.direct(author, parent, r, _sees(aud, r))}
                assert rules.direct_among(set(readers), author, parent, lambda u: aud.get(u, set())) == want_direct
                third = rules.reply_class(author, parent)
                if third is None:
                    continue
                want_extras = {r for r in USERS if rules.direct(author, parent, r, _sees(aud, r))
                               and not rules.shown_in_inbox(author, parent, r)}
                assert rules.conditional_readers(aud[author], third, aud[third]) == want_extras


def test_the_earliest_repost_is_the_one_no_other_precedes() -> None:
    rng = random.Random(3)
    for _ in range(200):
        reposts = [rules.repost_order(rng.randrange(4), r) for r in rng.sample(USERS, rng.randrange(1, 5))]
        first = rules.earliest(reposts)
        assert first is not None
        assert [r for r in reposts if rules.is_earliest(r, reposts)] == [first]
        assert not any(rules.precedes(r, first) for r in reposts)

"""Profiles: the author's profile versions, a slowly changing dimension joined at read time.

A profile version changes no timeline row (entries carry ``profile_version``; reads join the
display name), so it only adds a row of the profiles table.
"""

from __future__ import annotations

from typing import Mapping

from feed_service.core.events import Profile
from feed_service.core.rules import profile_rank
from feed_service.core.rows import ProfileRow
from feed_service.core.state import AuthorState


def apply_profiles(state: AuthorState, profs: dict[int, Profile]) -> tuple[Mapping[int, Profile], list[ProfileRow]]:
    """The profile versions after the batch and their new rows: one row per (user, version); a
    different payload at the same version wins by rank."""
    before = state.profiles
    after = before
    rows: list[ProfileRow] = []
    for v in sorted(profs):
        p = profs[v]
        old = before.get(v)
        if old is not None and (old == p or profile_rank(p) <= profile_rank(old)):
            continue
        if after is before:
            after = dict(before)
        after[v] = p  # type: ignore[index]
        rows.append(ProfileRow(state.key, v, *p))
    return after, rows

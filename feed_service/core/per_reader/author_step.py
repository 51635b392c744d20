"""An author key's whole step: the join's step, then what it owes the per-reader stage.

:func:`step_with_side` is what every runner of the author key calls (the stream's stateful
operator through :func:`~feed_service.core.stored_step.step_stored`, the in-memory
:class:`~feed_service.core.view.Materializer`), so the per-reader side lives in the key's own state
(``AuthorState.side``) and is read, stepped and written back with it: one state per key, as before.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from feed_service.core.events import Event
from feed_service.core.join import StepResult, step
from feed_service.core.per_reader.author_side import SideResult, author_side, same_side, side_of, side_payload
from feed_service.core.state import AuthorState


def step_with_side(state: AuthorState | None, changes: Sequence[Event], **step_options) -> tuple[StepResult, SideResult]:
    """:func:`~feed_service.core.join.step` then :func:`author_side`: the result's state carries the
    new side. The state is ``state`` itself when neither the step nor the side changed anything (the
    store writes nothing)."""
    result = step(state, changes, **step_options)
    key = result.state.key
    old_side = side_of(state)
    side = author_side(key, state, result, changes, old_side)
    new_state = result.state
    if not same_side(old_side, side.side):
        new_state = replace(new_state, side=side_payload(side.side))
    if new_state is not result.state:
        result = replace(result, state=new_state)
    return result, side

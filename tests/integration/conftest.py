"""The session's streamed world (tests/support/world.py): ``world`` once phase 1 is caught up,
``world_phase2`` once phase 2 is (tests/conftest.py runs every test of the first kind before any of the
second)."""

from __future__ import annotations

from typing import Iterator

import pytest

from feed_service.settings import Settings
from tests.support.world import World, new_world


@pytest.fixture(scope="session")
def world(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """The streamed world, phase 1 caught up; its stream is stopped (exit code 0) at the session's end."""
    streamed = new_world(settings, tmp_path_factory.mktemp("world"))
    try:
        streamed.start()
        yield streamed
    finally:
        streamed.stop()


@pytest.fixture()
def world_phase2(world: World) -> World:
    """The streamed world with phase 2 published and caught up (from the restarted stream)."""
    return world.advance_to_phase2()

"""A pipeline of a test's own: topics with a unique suffix and a keyspace named after it, provisioned,
so that the pipelines of different tests (and of the session's world) never meet."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from feed_service.settings import Settings


def unique_suffix() -> str:
    """A short unique name part (10 hex digits)."""
    return uuid.uuid4().hex[:10]


def isolated(settings: Settings, unique: str | None = None, *, provisioned: bool = True, **changes: Any) -> Settings:
    """``settings`` with topics suffixed ``.<unique>`` and keyspace ``feed_<unique>`` (a fresh suffix
    when ``unique`` is None), other fields replaced by ``changes`` (``inbox_cap=20``...), provisioned
    (topics, keyspace, tables) unless ``provisioned`` is False."""
    from feed_service.ops.provision import provision

    unique = unique or unique_suffix()
    pipeline = replace(settings.with_topic_suffix(f".{unique}"), keyspace=f"feed_{unique}", **changes)
    if provisioned:
        provision(pipeline)
    return pipeline

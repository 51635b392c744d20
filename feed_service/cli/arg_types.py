"""argparse value types shared by the ``feedctl`` commands (one clear message per kind of mistake)."""

from __future__ import annotations

import argparse
from typing import Callable


def number_at_least(minimum: float, kind: type = int) -> Callable[[str], float]:
    """A parser of ``kind`` numbers >= ``minimum``: ``type=number_at_least(1)``."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {'an integer' if kind is int else 'a number'}: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text}")
        return value

    return parse


positive_int = number_at_least(1)
"""An integer >= 1."""


def port(text: str) -> int:
    """A TCP port, 0 included (0 = pick a free one, or off, as the option says)."""
    value = number_at_least(0)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"not a port: {value}")
    return value


def inbox_cap(text: str) -> int:
    """An inbox cap, validated by the same rule as ``Settings.inbox_cap``."""
    from feed_service.errors import ConfigError
    from feed_service.settings import check_inbox_cap

    try:
        return check_inbox_cap(int(text))
    except (ValueError, ConfigError) as exc:
        raise argparse.ArgumentTypeError(str(exc) if isinstance(exc, ConfigError) else f"not an integer: {text!r}") from None


def default_inbox_cap() -> str:
    """The environment's inbox cap (``FEED_INBOX_CAP``, else the view's default) as an argparse
    default: a string, so argparse checks it with :func:`inbox_cap` only when the option is used."""
    import os

    from feed_service.core.join import DEFAULT_INBOX_CAP

    return os.environ.get("FEED_INBOX_CAP", str(DEFAULT_INBOX_CAP))


def pull_threshold(text: str) -> int:
    """A pull threshold, validated by the same rule as ``Settings.pull_threshold``."""
    from feed_service.errors import ConfigError
    from feed_service.settings import check_pull_threshold

    try:
        return check_pull_threshold(int(text))
    except (ValueError, ConfigError) as exc:
        raise argparse.ArgumentTypeError(str(exc) if isinstance(exc, ConfigError) else f"not an integer: {text!r}") from None


def default_pull_threshold() -> str:
    """The environment's pull threshold (``FEED_PULL_THRESHOLD``, else the engine's default), checked
    by argparse with :func:`pull_threshold` only when the option is used."""
    import os

    from feed_service.core.join import DEFAULT_PULL_THRESHOLD

    return os.environ.get("FEED_PULL_THRESHOLD", str(DEFAULT_PULL_THRESHOLD))

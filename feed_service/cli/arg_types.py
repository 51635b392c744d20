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


def share(text: str) -> float:
    """A fraction from 0 to 1 (``0.1``: a tenth)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:  # NaN too
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def port(text: str) -> int:
    """A TCP port, 0 included (0 = pick a free one, or off, as the option says)."""
    value = number_at_least(0)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"not a port: {value}")
    return value


def setting(check: Callable[[int], int]) -> Callable[[str], int]:
    """An argparse type for an integer setting, validated by the same rule as :class:`Settings`
    (``check`` raises :class:`~feed_service.errors.ConfigError`)."""

    def parse(text: str) -> int:
        from feed_service.errors import ConfigError

        try:
            return check(int(text))
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None

    return parse


def _env_default(name: str, default: int) -> str:
    """An argparse default from the environment, as a string: argparse then checks it with the
    option's type only when the option is used (a bad value elsewhere breaks no other command)."""
    import os

    return os.environ.get(name, str(default))


def inbox_cap(text: str) -> int:
    """An inbox cap (``Settings.inbox_cap``'s rule)."""
    from feed_service.settings import check_inbox_cap

    return setting(check_inbox_cap)(text)


def default_inbox_cap() -> str:
    """``FEED_INBOX_CAP``, else the view's default."""
    from feed_service.core.join import DEFAULT_INBOX_CAP

    return _env_default("FEED_INBOX_CAP", DEFAULT_INBOX_CAP)


def pull_threshold(text: str) -> int:
    """A pull threshold (``Settings.pull_threshold``'s rule)."""
    from feed_service.settings import check_pull_threshold

    return setting(check_pull_threshold)(text)


def default_pull_threshold() -> str:
    """``FEED_PULL_THRESHOLD``, else the engine's default."""
    from feed_service.core.join import DEFAULT_PULL_THRESHOLD

    return _env_default("FEED_PULL_THRESHOLD", DEFAULT_PULL_THRESHOLD)


def trim_slack(text: str) -> int:
    """A trim slack (``Settings.trim_slack``'s rule)."""
    from feed_service.settings import check_trim_slack

    return setting(check_trim_slack)(text)


def default_trim_slack() -> str:
    """``FEED_TRIM_SLACK``, else the stream's default."""
    from feed_service.settings import DEFAULT_TRIM_SLACK

    return _env_default("FEED_TRIM_SLACK", DEFAULT_TRIM_SLACK)

"""A one-line progress display on stderr: redrawn on a terminal, a plain line every few seconds on a pipe.

Kept by hand rather than taken from ``tqdm`` or ``rich``: neither writes periodic plain lines when
stderr is not a terminal (``tqdm`` keeps emitting ``\r``-joined updates, one endless line in a CI
log; ``rich`` shows nothing until the end), and the lines here are counters with unknown totals
(stdin, ``--duration``), not bars. Adapting either to that would cost more code than this class.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

TTY_INTERVAL = 0.2
"""Seconds between redraws on a terminal."""

PIPE_INTERVAL = 5.0
"""Seconds between progress lines when stderr is a file or pipe (one line each, no ``\\r``)."""


class ProgressLine:
    """Redraw ``render()`` in place on a terminal (or print it now and then to a pipe).

    ``note`` prints a message above the line, so rejected records can be listed while it runs.
    """

    def __init__(self, render: Callable[[float], str], *, stream: TextIO | None = None,
                 enabled: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self._render = render
        self._stream = stream or sys.stderr
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())
        self._interval = TTY_INTERVAL if self._tty else PIPE_INTERVAL
        self._enabled = enabled
        self._clock = clock
        self._started = clock()
        self._next = self._started + self._interval
        self._width = 0

    def elapsed(self) -> float:
        return self._clock() - self._started

    def tick(self) -> None:
        """Redraw if the interval has passed (cheap enough to call every few hundred records)."""
        if self._enabled and self._clock() >= self._next:
            self._draw()

    def _draw(self, final: bool = False) -> None:
        now = self._clock()
        self._next = now + self._interval
        text = self._render(now - self._started)
        if self._tty:
            self._stream.write("\r" + text.ljust(self._width) + ("\n" if final else ""))
            self._width = 0 if final else len(text)
        else:
            self._stream.write(text + "\n")
        self._stream.flush()

    def note(self, message: str) -> None:
        """Write ``message`` on its own line, above the progress line."""
        if self._tty and self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._width = 0
        self._stream.write(message + "\n")

    def done(self) -> None:
        """Draw the final state and end the line."""
        if self._enabled:
            self._draw(final=True)

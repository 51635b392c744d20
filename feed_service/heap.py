"""The collector's view of a long-lived engine heap (docs/reposts-and-replies.md, "The heap").

An engine process that runs a history through and exits (``feedctl materialize``) keeps millions of
small objects alive for its whole run: tuples, dicts and sets of its state. CPython's cyclic
collector scans the objects of its oldest generation again and again as new ones are made, so a
batch that allocates much (sets of readers, the entries of reposts) pays for the whole heap.
:func:`settle` moves everything alive after a batch out of the collector's generations
(``gc.freeze``): later collections scan only what later batches made, and refcounting still frees
whatever is dropped. The price: a reference cycle that is already garbage when :func:`settle` runs is
never reclaimed; the engine's state is acyclic (plain containers of tuples and strings), but a
process that runs for weeks beside other libraries (the stream's driver, with py4j's proxies) does
not settle: cycles frozen while alive and dropped later would never be collected.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Leave every object alive now out of later collections (module docstring)."""
    gc.freeze()

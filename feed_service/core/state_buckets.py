"""Many author keys' state in one blob: the value a state bucket keeps (docs/state-buckets.md).

The stream groups its changes by a *bucket* of join keys instead of by the key itself, because
Spark's Python stateful operator pays a fixed price per grouping key (state-server round trips and
an output batch), about fifty times the engine's own step. A bucket's state is a map join key ->
core part (:mod:`feed_service.core.state`), stored as one blob: one read and at most one write per
bucket and batch, whatever the number of its keys the batch touches.

The blob is a concatenation of length-prefixed entries; decoding slices it into a dict without
decoding any key's state, so a key the batch does not touch costs a copy of its bytes, not a
decode. Entries are written in key order, so the same map always gives the same bytes (a replayed
batch writes what the first attempt wrote).

>>> blob = encode_bucket({"bob": b"\\x01", "ann": b"\\x02\\x03"})
>>> decode_bucket(blob)
{'ann': b'\\x02\\x03', 'bob': b'\\x01'}
>>> decode_bucket(encode_bucket({}))
{}
"""

from __future__ import annotations

import struct
from typing import Mapping

BUCKET_FORMAT = 1
"""First byte of a bucket blob; a later layout bumps it and keeps reading this one."""

_HEADER = struct.Struct(">BI")  # format, entries
_LENGTHS = struct.Struct(">HI")  # key bytes, core bytes
#: Longest join key in UTF-8 bytes (the lengths' field width); user ids are far shorter.
MAX_KEY_BYTES = 0xFFFF


def encode_bucket(cores: Mapping[str, bytes]) -> bytes:
    """One blob holding ``cores`` (join key -> core part), entries in key order."""
    parts = [_HEADER.pack(BUCKET_FORMAT, len(cores))]
    for key in sorted(cores):
        raw = key.encode("utf-8")
        if len(raw) > MAX_KEY_BYTES:
            raise ValueError(f"join key of {len(raw)} bytes: longer than a bucket can hold ({MAX_KEY_BYTES})")
        core = cores[key]
        parts += (_LENGTHS.pack(len(raw), len(core)), raw, core)
    return b"".join(parts)


def decode_bucket(blob: bytes | memoryview) -> dict[str, bytes]:
    """The join key -> core part map of a bucket blob; :class:`ValueError` on a damaged one."""
    view = memoryview(blob)
    if len(view) < _HEADER.size:
        raise ValueError(f"bucket blob of {len(view)} bytes: shorter than its header")
    fmt, count = _HEADER.unpack_from(view, 0)
    if fmt != BUCKET_FORMAT:
        raise ValueError(f"bucket blob format {fmt}: this release reads format {BUCKET_FORMAT}")
    out: dict[str, bytes] = {}
    at = _HEADER.size
    for _ in range(count):
        if at + _LENGTHS.size > len(view):
            raise ValueError("bucket blob cut short in an entry header")
        key_len, core_len = _LENGTHS.unpack_from(view, at)
        at += _LENGTHS.size
        end = at + key_len + core_len
        if end > len(view):
            raise ValueError("bucket blob cut short in an entry")
        out[str(view[at:at + key_len], "utf-8")] = bytes(view[at + key_len:end])
        at = end
    if at != len(view):
        raise ValueError(f"bucket blob has {len(view) - at} bytes after its {count} entries")
    return out


def entry_sizes(blob: bytes | memoryview) -> list[tuple[str, int]]:
    """(join key, core bytes) of every entry: what ``feedctl state-stats`` reports per key."""
    return [(key, len(core)) for key, core in decode_bucket(blob).items()]

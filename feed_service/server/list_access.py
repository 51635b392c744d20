"""Who may read a list's timeline (docs/api.md#lists): its owner only.

A list L's timeline is the home timeline of its reader ``list_reader(L)``, whose inbox partition
holds the list's owner and replies policy as static columns, null while L does not exist (never
created, or deleted). :func:`owned_rule` is the check every list RPC makes on those statics, when
it starts and, for a watch, as the list's changes arrive.
"""

from __future__ import annotations

import grpc

from feed_service.core.per_reader.pull_reposts import ListRule
from feed_service.server.calls import RpcFailure


def owned_rule(rule: ListRule | None, list_id: str, caller: str) -> ListRule:
    """``rule`` (the list's, from its reader's statics) when ``caller`` owns the list: NOT_FOUND while
    the list does not exist (``rule`` None), PERMISSION_DENIED when another user owns it."""
    if rule is None:
        raise RpcFailure(grpc.StatusCode.NOT_FOUND, f"list {list_id!r} not found")
    if rule.owner != caller:
        raise RpcFailure(grpc.StatusCode.PERMISSION_DENIED, f"list {list_id!r} is not {caller!r}'s")
    return rule

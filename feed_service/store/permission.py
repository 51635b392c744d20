"""A Cassandra grant refusal (the driver's ``Unauthorized``) as :class:`StorePermissionDenied`, naming
the role, the permission and the table, so that an operator knows which grant to give (docs/security.md)."""

from __future__ import annotations

import re

from feed_service.errors import StorePermissionDenied

#: Cassandra's wording: ``User feed_stream has no MODIFY permission on <table ks.tweets> or any of its parents``.
_REFUSAL = re.compile(r"User (?P<role>\S+) has no (?P<permission>[A-Z_]+) permission on <(?:\w+ )?(?P<resource>[^>]+)>")


def permission_denied(refusal: BaseException | str) -> StorePermissionDenied:
    """The deployment error of a Cassandra refusal (an ``Unauthorized`` or its text), on one line.

    >>> print(permission_denied('code=2100 [Unauthorized] message="User feed_stream has no MODIFY permission'
    ...                         ' on <table feed.tweets> or any of its parents"'))  # doctest: +NORMALIZE_WHITESPACE
    cassandra role feed_stream lacks MODIFY on feed.tweets: a deployment error, not retried; grant it
    (feedctl provision applies the grants of docs/security.md)
    """
    text = " ".join(str(refusal).split())
    found = _REFUSAL.search(text)
    if found is None:
        return StorePermissionDenied(f"cassandra refused this role: {text}: a deployment error, not retried;"
                                     f" check the role's grants (docs/security.md)")
    return StorePermissionDenied(f"cassandra role {found['role']} lacks {found['permission']} on {found['resource']}:"
                                 f" a deployment error, not retried; grant it (feedctl provision applies the"
                                 f" grants of docs/security.md)")

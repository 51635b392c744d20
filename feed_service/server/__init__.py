"""The gRPC read service (``feed.v1.TimelineService``, docs/api.md) on ``grpc.aio``.

Small modules, one job each:

- :mod:`.config`     ``ServerConfig`` from defaults < config file < environment < CLI flags
- :mod:`.auth`       bearer tokens: HMAC-SHA256-signed claims (subject, role, expiry), JWT-compatible
- :mod:`.page_token` opaque, tamper-evident timeline cursors
- :mod:`.service`    the servicer: each RPC's steps, wiring the modules below together
- :mod:`.calls`      the ``rpc`` decorator every RPC wears: metrics, access log, authentication,
                     the store and the read budget, errors -> status codes
- :mod:`.paging`     page sizes, where a page starts, the next page's token
- :mod:`.list_access` who may read a list's timeline: its owner (NOT_FOUND, PERMISSION_DENIED)
- :mod:`.timeline_reads` the hybrid fan-out's read: inbox + pull authors merged, via the read cache
- :mod:`.pull_sources` pull authors' heads and lists, cached per process for a TTL
- :mod:`.hydration`  display names of entries, through the profile cache
- :mod:`.watch`      WatchHomeTimeline streams, polled or pushed (:mod:`.watch_hub`, :mod:`.change_feed`);
                     a pushed change encoded once for all its watchers (:mod:`.watch_frames`)
- :mod:`.read_cache` the exact cache of timeline heads the change topic keeps, and their encoded pages
- :mod:`.registration` the service on a ``grpc.aio`` server, with responses that may come encoded
- :mod:`.app`        ``TimelineServer``: lifecycle, health, reflection, metrics endpoint, shutdown
- :mod:`.tls`        TLS / mutual TLS credentials from PEM files; :mod:`.client_channel` the client side
- :mod:`.rate_limit` per-principal rate limits (GCRA) and their RetryInfo status (docs/api.md#limits)
- :mod:`.metrics`    Prometheus collectors; :mod:`.logs` structured JSON logging

Error mapping at the gRPC boundary (every other error is INTERNAL and logged)::

    missing / bad / expired bearer token     UNAUTHENTICATED
    user token reading another's timeline    PERMISSION_DENIED
    a list read by a user not its owner      PERMISSION_DENIED (a list that does not exist: NOT_FOUND)
    a home read of a reserved id (U+001F..)  INVALID_ARGUMENT
    bad id, page_size, page or resume token  INVALID_ARGUMENT
    unknown tweet or profile version         NOT_FOUND
    user token, author blocks that user      NOT_FOUND (GetTweet, GetUserTimeline; as if missing)
    store.StoreUnavailable, not connected    UNAVAILABLE
    store.StorePermissionDenied              INTERNAL (the role's grants: a deployment error, logged)
    store.StoreTimeout / deadline exhausted  DEADLINE_EXCEEDED (UNAVAILABLE if the deadline still runs)
    rate limit, watch cap, size cap          RESOURCE_EXHAUSTED (a rate limit's with a RetryInfo)
    a request that does not decode           INVALID_ARGUMENT
"""

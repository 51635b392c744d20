"""The gRPC read service (``feed.v1.TimelineService``, docs/api.md) on ``grpc.aio``.

Small modules, one job each:

- :mod:`.config`     ``ServerConfig`` from defaults < config file < environment < CLI flags
- :mod:`.auth`       bearer tokens: HMAC-SHA256-signed claims (subject, role, expiry), JWT-compatible
- :mod:`.page_token` opaque, tamper-evident timeline cursors
- :mod:`.service`    the servicer: validation, authorization, hydration, error mapping
- :mod:`.app`        ``TimelineServer``: lifecycle, health, reflection, metrics endpoint, shutdown
- :mod:`.metrics`    Prometheus collectors; :mod:`.logs` structured JSON logging

Error mapping at the gRPC boundary (every other error is INTERNAL and logged)::

    missing / bad / expired bearer token     UNAUTHENTICATED
    user token reading another's timeline    PERMISSION_DENIED
    bad id, page_size, page or resume token  INVALID_ARGUMENT
    unknown tweet or profile version         NOT_FOUND
    user token, author blocks that user      NOT_FOUND (GetTweet, GetUserTimeline; as if missing)
    store.StoreUnavailable, not connected    UNAVAILABLE
    store.StoreTimeout / deadline exhausted  DEADLINE_EXCEEDED (UNAVAILABLE if the deadline still runs)
"""

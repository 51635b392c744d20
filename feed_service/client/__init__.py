"""Client-side helpers of the read service (an adapter over the generated stubs of :mod:`feed_service.api`).

- :mod:`.watch` a ``WatchHomeTimeline`` that reconnects with jittered exponential backoff and resumes
  from the last resume token the server sent (docs/api.md#reconnecting-watches)
"""

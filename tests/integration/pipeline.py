"""The pipeline helpers, kept under their old name for the modules that still import them from here:
they live in :mod:`tests.support.pipeline`."""

from tests.support.pipeline import (  # noqa: F401 - re-exported
    GARBAGE,
    GARBAGE_CODES,
    Delivered,
    StreamProcess,
    consume_all,
    grpc_server,
    high_watermarks,
    publish,
    read_all_home_timelines,
    read_table,
    read_timelines,
    running,
    started,
    stop_cleanly,
    timelines_in,
)

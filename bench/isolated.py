"""Clean-up of a benchmark's isolated keyspace and topics, so runs do not pile up on the stack."""

from __future__ import annotations

from feed_service.kafka.client_config import client_config
from feed_service.security.roles import ADMIN
from feed_service.settings import Settings


def drop(settings: Settings, *, keyspace: bool = True, topics: bool = True) -> None:
    """Best effort: drop ``settings``' keyspace (``keyspace``) and delete its topics (``topics``); a
    failure is printed. Only for settings of the bench's own (a suffix on every topic, a keyspace of
    its own): dropping the stack's own would break its checkpoints."""
    from confluent_kafka.admin import AdminClient

    from feed_service.store.session import connect

    if keyspace:
        try:
            cluster, session = connect(settings)
            try:
                session.execute(f"DROP KEYSPACE IF EXISTS {settings.keyspace}", timeout=180)
            finally:
                cluster.shutdown()
        except Exception as exc:  # noqa: BLE001 - clean-up
            print(f"  (could not drop keyspace {settings.keyspace}: {exc})")
    if not topics:
        return
    admin = AdminClient(client_config(settings, ADMIN) | {"log_level": 4})
    for future in admin.delete_topics([s.name for s in settings.topics.values()]).values():
        try:
            future.result(30)
        except Exception:  # noqa: BLE001 - clean-up
            pass


def exit_on_sigterm() -> None:
    """Turn SIGTERM into :class:`SystemExit`, so a bench that is killed runs its ``finally`` blocks:
    it stops the stream processes it started and drops what it provisioned instead of leaving them."""
    import signal
    import sys

    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

"""``feedctl provision``: create the topics and the Cassandra schema on any cluster (idempotent)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("provision", help="create topics (aligning drifted configs) and the CQL schema")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from feed_service.ops.provision import provision
    from feed_service.settings import Settings

    settings = Settings.from_env().as_role("admin")
    for report in provision(settings):
        print(f"topic {report}")
    print(f"keyspace {settings.keyspace}: schema applied")
    return 0

"""``feedctl topics create|describe``: provision the topics of ``schemas/topics.json`` and report drift.

``create`` is idempotent: it creates missing topics and aligns configs of existing ones; partitions
and replication factor are never changed, so their drift stays (exit 1). ``describe`` changes
nothing and exits 1 when any topic is missing or differs from its spec.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from feed_service.cli.connection import add_connection_args, settings_from_args


def register(sub: Any) -> None:
    """Add the ``topics`` parser to the ``feedctl`` subcommands."""
    parser = sub.add_parser("topics", help="create topics from their specs, or describe them and their drift",
                            description="Create the Kafka topics from their specs, or describe them and their drift.")
    parser.add_argument("action", choices=("create", "describe"))
    add_connection_args(parser)
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``feedctl topics``."""
    from feed_service.kafka.topics import describe_topics, ensure_topics

    settings = settings_from_args(args).as_role("admin")
    specs = list(settings.topics.values())
    try:
        if args.action == "create":
            reports = ensure_topics(settings, specs)
        else:
            reports = describe_topics(settings, specs)
    except Exception as exc:  # noqa: BLE001 - admin errors (unreachable broker, bad config) end the command
        print(f"feedctl topics {args.action}: {exc}", file=sys.stderr)
        return 2
    drift = [r for r in reports if (r.remaining_drift if args.action == "create" else r.drift)]
    if args.json:
        print(json.dumps({"bootstrap": settings.kafka_bootstrap, "topics": [r.as_dict() for r in reports]}))
    else:
        width = max(len(r.name) for r in reports) if reports else 0
        for spec, report in zip(specs, reports):
            layout = (f"partitions {report.partitions} rf {report.replication_factor}"
                      if report.partitions is not None else "-")
            status = str(report)[len(report.name) + 2:]
            print(f"{spec.role:<12} {report.name:<{width}}  {layout:<20} {status}")
        print(f"{len(reports)} topics, {len(drift)} with drift" + (" (left unchanged)" if drift and args.action == "create" else ""),
              file=sys.stderr)
    return 1 if drift else 0

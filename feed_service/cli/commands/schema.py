"""``feedctl schema events``: print the event envelope's JSON Schema, made from the registry of event kinds.

``schemas/events/event.schema.json`` is this output (a unit test holds the two equal); after a change
of ``feed_service/core/event_kinds.py``: ``feedctl schema events > schemas/events/event.schema.json``.
"""

from __future__ import annotations

import argparse
import json

from feed_service.core.event_schema import event_json_schema


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``schema`` parser to the ``feedctl`` subcommands."""
    parser = sub.add_parser("schema", help="print a JSON Schema generated from the code",
                            description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=("events",), help="events: the change event envelope")
    parser.set_defaults(handler=run)


def render() -> str:
    """The schema file's exact text."""
    return json.dumps(event_json_schema(), indent=2, ensure_ascii=False) + "\n"


def run(args: argparse.Namespace) -> int:
    """Handler of ``feedctl schema``."""
    print(render(), end="")
    return 0

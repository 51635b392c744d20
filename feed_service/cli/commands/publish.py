"""``feedctl publish``: send one event given as flags, or a replay file of JSON envelopes.

    feedctl publish tweet --author ann --text "hello" --profile-version 1
    feedctl publish tweet --author bob --text "hi" --profile-version 2 --in-reply-to-tweet-id t1 --in-reply-to-author-id ann
    feedctl publish delete --tweet-id t1 --author ann
    feedctl publish follow --follower bob --followee ann        (also: unfollow; --no-show-reposts)
    feedctl publish block --blocker ann --blocked bob           (also: unblock)
    feedctl publish mute --muter ann --muted bob                (also: unmute)
    feedctl publish repost --reposter bob --tweet t1 --author ann --profile-version 2   (--created-at: default now)
    feedctl publish unrepost --reposter bob --tweet t1 --author ann
    feedctl publish profile --user ann --display-name "Ann"
    feedctl publish --file EVENTS.jsonl                          (``-`` reads stdin)

One event: its envelope is printed on stdout once delivered. A file: a progress line on stderr,
each rejected line as ``line N: <code>: <reason>`` on stderr, and the counts at the end. Exit 0 when
everything valid was delivered (even with rejected lines), 1 if a delivery failed, 2 if the single
event was invalid or the file could not be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from feed_service.cli.connection import add_connection_args, settings_from_args
from feed_service.core.event_kinds import BOOL_RULES, EDGE_KINDS, EventKind
from feed_service.core.events import event_to_json
from feed_service.settings import Settings

EXIT_OK, EXIT_DELIVERY, EXIT_INVALID = 0, 1, 2


def register(sub: Any) -> None:
    """Add the ``publish`` parser to the ``feedctl`` subcommands."""
    parser = sub.add_parser("publish", help="publish one event, or a replay file of events, to Kafka",
                            description="Send one event given as flags, or a replay file of JSON envelopes, to Kafka.")
    add_connection_args(parser)
    parser.add_argument("--file", metavar="EVENTS.jsonl", help="one JSON envelope per line; '-' for stdin")
    parser.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    kinds = parser.add_subparsers(dest="kind", metavar="KIND")
    version_help = "version (default: the producer's version clock)"

    tweet = kinds.add_parser("tweet", help="a new tweet, or an edit with --tweet-id of an existing one")
    tweet.add_argument("--author", required=True)
    tweet.add_argument("--text", required=True)
    tweet.add_argument("--profile-version", type=int, required=True, help="the author's profile version")
    tweet.add_argument("--tweet-id", help="default: a new random id")
    tweet.add_argument("--created-at", type=int, help="ms since the epoch (default now; keep it for an edit)")
    tweet.add_argument("--version", type=int, help=version_help)
    tweet.add_argument("--in-reply-to-tweet-id", help="a reply: the parent tweet (with --in-reply-to-author-id)")
    tweet.add_argument("--in-reply-to-author-id", help="a reply: the parent tweet's author")

    delete = kinds.add_parser("delete", help="delete a tweet for good")
    delete.add_argument("--tweet-id", required=True)
    delete.add_argument("--author", required=True)
    delete.add_argument("--version", type=int, help=version_help)

    # Every op of every edge kind of the registry, with flags named after the fields the op carries
    # (follower_id -> --follower, profile_version -> --profile-version); all required but the version
    # and a created_at, which default to the producer's clock, and the optional fields: a boolean one
    # is a flag pair (--show-reposts / --no-show-reposts), its default the field's.
    for kind in EDGE_KINDS.values():
        for op, help_text in kind.ops.items():
            edge = kinds.add_parser(op, help=help_text)
            _add_field_flags(edge, kind, op)
            edge.add_argument("--version", type=int, help=version_help)
            edge.set_defaults(edge_kind=kind)

    profile = kinds.add_parser("profile", help="a new profile version")
    profile.add_argument("--user", required=True)
    profile.add_argument("--display-name", required=True)
    profile.add_argument("--avatar-url")
    profile.add_argument("--bio")
    profile.add_argument("--version", type=int, help=version_help)
    parser.set_defaults(handler=run, _parser=parser)


def _add_field_flags(parser: argparse.ArgumentParser, kind: EventKind, op: str) -> None:
    """One flag per field ``op`` carries, but the version (see :func:`register`)."""
    for spec in kind.fields_of(op):
        if spec.name == "version":
            continue
        if spec.name == "created_at":
            parser.add_argument(_flag(spec.name), type=int, help="ms since the epoch (default now)")
        elif spec.rule in BOOL_RULES:
            default = "" if spec.default is None else f" (default: {'--' if spec.default else '--no-'}{_flag(spec.name)[2:]})"
            parser.add_argument(_flag(spec.name), action=argparse.BooleanOptionalAction, default=spec.default,
                                required=spec.required, help=(spec.description or spec.name) + default)
        else:
            parser.add_argument(_flag(spec.name), required=spec.required, default=spec.default,
                                choices=spec.choices or None,
                                help=(spec.description or None) if spec.default is None
                                else f"{spec.description} (default: {spec.default})",
                                type=int if spec.rule == "natural" else str)


def _flag(field: str) -> str:
    """``follower_id`` -> ``--follower``."""
    return "--" + field.removesuffix("_id").replace("_", "-")


def _dest(field: str) -> str:
    """The argparse destination of :func:`_flag`'s flag."""
    return field.removesuffix("_id")


def _publish_one(producer: Any, args: argparse.Namespace) -> Any:
    if args.kind == "tweet":
        return producer.publish_tweet(args.author, args.text, tweet_id=args.tweet_id,
                                      profile_version=args.profile_version, created_at=args.created_at,
                                      version=args.version, in_reply_to_tweet_id=args.in_reply_to_tweet_id,
                                      in_reply_to_author_id=args.in_reply_to_author_id)
    if args.kind == "delete":
        return producer.publish_delete(args.tweet_id, args.author, version=args.version)
    kind = getattr(args, "edge_kind", None)
    if kind is not None:
        subject, target = kind.edge.subject, kind.edge.target
        others = {f.name: getattr(args, _dest(f.name)) for f in kind.fields_of(args.kind)
                  if f.name not in (subject, target, "version")}
        return producer.publish_edge(kind.type, args.kind, getattr(args, _dest(subject)),
                                     getattr(args, _dest(target)), version=args.version, **others)
    return producer.publish_profile(args.user, args.display_name, avatar_url=args.avatar_url, bio=args.bio,
                                    version=args.version)


def run(args: argparse.Namespace) -> int:
    """Handler of ``feedctl publish``."""
    from feed_service.kafka.producer import DeliveryFailed, EventProducer, EventRejected

    if (args.file is None) == (args.kind is None):
        edge_ops = ", ".join(op for kind in EDGE_KINDS.values() for op in kind.ops)
        args._parser.error(f"give either an event kind (tweet, delete, {edge_ops}, profile) or --file")
    settings = settings_from_args(args).as_role("producer")
    if args.file is not None:
        return _run_file(args, settings)
    try:
        with EventProducer(settings) as producer:  # closes (flushes) on the way out, raising failures
            event = _publish_one(producer, args)
    except EventRejected as exc:
        print(f"feedctl publish: invalid {args.kind}: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except DeliveryFailed as exc:
        print(f"feedctl publish: delivery failed: {exc}", file=sys.stderr)
        return EXIT_DELIVERY
    print(json.dumps(event_to_json(event), separators=(",", ":")))
    return EXIT_OK


def _run_file(args: argparse.Namespace, settings: Settings) -> int:
    from feed_service.kafka.producer import DeliveryFailed, EventProducer
    from feed_service.cli.progress import ProgressLine
    from feed_service.kafka.replay import ReplayStats, publish_lines

    try:
        stream = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")
    except OSError as exc:
        print(f"feedctl publish: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_INVALID
    current = ReplayStats()

    def render(elapsed: float) -> str:
        rate = current.sent / elapsed if elapsed > 0 else 0.0
        return f"publish: {current.lines:,} lines, {current.sent:,} sent, {current.rejected:,} rejected ({rate:,.0f} ev/s)"

    progress = ProgressLine(render, enabled=not args.no_progress)

    def on_tick(stats: ReplayStats) -> None:
        nonlocal current
        current = stats
        progress.tick()

    def on_reject(line_no: int, code: str, reason: str) -> None:
        progress.note(f"line {line_no}: {code}: {reason}")

    try:
        with stream, EventProducer(settings) as producer:
            stats = publish_lines(producer, stream, on_reject=on_reject, on_tick=on_tick, flush=False)
        current = stats
    except DeliveryFailed as exc:
        progress.done()
        print(f"feedctl publish: delivery failed: {exc}", file=sys.stderr)
        return EXIT_DELIVERY
    except OSError as exc:
        print(f"feedctl publish: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_INVALID
    progress.done()
    stats.elapsed = progress.elapsed()
    print(f"publish: {stats.summary()}", file=sys.stderr)
    return EXIT_OK

"""Who may do what: the service's roles, their login names and the grants each one needs.

Pure data and functions (no I/O): the stack writes credentials by these names, provisioning turns
:func:`kafka_acls` and :func:`cassandra_grants` into ACLs and CQL grants, and the tests check the
refusals against the same tables. Least privilege per role (docs/security.md):

| role | Kafka | Cassandra |
|---|---|---|
| ``admin`` | super user: topics, configs, ACLs | the keyspace's owner: schema, roles, grants |
| ``producer`` | write the changelog topics | none |
| ``stream`` | read the changelogs and the read activity; write the dead-letter and view-change topics | read and write the keyspace |
| ``server`` | read the view-change topic; write the read activity | read the view's tables (not the steps' state) |
| ``backfill`` | read the changelogs; write the dead-letter topic (``--dead-letters``) | read and write the keyspace |
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping, NamedTuple

from feed_service.errors import ConfigError

ADMIN = "admin"
PRODUCER = "producer"
STREAM = "stream"
SERVER = "server"
BACKFILL = "backfill"
ROLES = (ADMIN, PRODUCER, STREAM, SERVER, BACKFILL)

#: Topic roles of ``schemas/topics.json`` that carry source changelogs (producers write them): the
#: topic roles of the registry of event kinds (this layer cannot import it; a unit test holds them equal).
CHANGELOG_TOPICS = ("tweets", "follows", "profiles", "blocks_mutes", "reposts", "lists", "list_members")
#: Topic roles the stream writes for itself and reads back (the registry's internal kinds: refill
#: requests, docs/trimming.md#refill; list follows and exclusions, docs/lists.md#in-the-engine).
STREAM_INTERNAL_TOPICS = ("refills", "list_edges")
#: Topic roles only the stream writes.
STREAM_OUTPUT_TOPICS = ("dead_letter", "timeline_changes")
#: Topic roles the read service writes and the stream's driver reads: which readers read their home
#: timeline, and when (docs/activity.md#read-activity).
READ_ACTIVITY_TOPICS = ("reads",)

#: Tables of the keyspace the read service reads: the view and its dimensions. Granted table by
#: table, so a table added to schemas/cql/feed.cql is readable by the server only once it is named
#: here (a unit test holds every table of the schema here or in :data:`STATE_TABLES`).
SERVER_TABLES = ("home_timeline", "home_extras", "tweets", "profiles", "author_timeline", "user_reposts",
                 "pull_follows", "reader_visible", "blocks", "reader_hidden", "reposts_by_tweet",
                 "home_extras_reposts", "reader_excluded", "lists")
#: Tables only the writers use: the per-reader stage' state, nothing the read service needs, and
#: the follow graph and hidden relations of every user in one place; the driver's record of each
#: reader's last read (docs/activity.md), which the server reports through Kafka, never reads.
STATE_TABLES = ("per_reader_inputs", "reader_activity")

#: Consumer-group name prefixes each role's readers use: Spark's Kafka source and batch relation name
#: their groups ``spark-kafka-source-<uuid>-…`` / ``spark-kafka-relation-<uuid>`` (executors add
#: ``-executor``; Spark 4.2's KafkaSourceProvider); the read service's view-change consumer and the
#: watermark probe use fixed names; the driver's read-activity consumer names its group after its
#: topic (``Settings.read_activity_group``). Spark's groups commit no offsets (Spark assigns
#: partitions and keeps offsets in its checkpoint); the read-activity consumer commits its own, for
#: which ``read`` on the group is what Kafka asks too, so ``read`` is all a group could ever need.
CONSUMER_GROUP_PREFIXES: Mapping[str, tuple[str, ...]] = {
    STREAM: ("spark-kafka-source-", "spark-kafka-relation-", "feed-watermarks", "feed-read-activity"),
    BACKFILL: ("spark-kafka-relation-", "feed-watermarks"),
    SERVER: ("feed-read-service", "feed-watermarks"),
}


def check_role(role: str) -> str:
    """``role`` if it is one of :data:`ROLES`, else :class:`ConfigError`."""
    if role not in ROLES:
        raise ConfigError(f"unknown role {role!r} (one of {', '.join(ROLES)})")
    return role


def kafka_user(role: str) -> str:
    """The SCRAM user name of ``role`` (``feed-stream``...)."""
    return f"feed-{check_role(role)}"


def cassandra_role(role: str) -> str:
    """The Cassandra role name of ``role`` (``feed_stream``...): CQL identifiers take no dash."""
    return f"feed_{check_role(role)}"


def password_file(credentials_dir: str | Path, role: str, system: str) -> Path:
    """Where ``role``'s password for ``system`` (``kafka`` or ``cassandra``) lives: one folder per role, so
    a deployment mounts exactly the folder of the role a process runs as (a Kubernetes Secret each)."""
    if system not in ("kafka", "cassandra"):
        raise ValueError(f"unknown system {system!r}")
    return Path(credentials_dir) / check_role(role) / f"{system}.password"


class KafkaAcl(NamedTuple):
    """One allow rule: ``principal`` may ``operation`` on ``resource_type`` named ``name``
    (``pattern`` ``literal`` or ``prefixed``)."""

    principal: str
    resource_type: str
    """``topic`` or ``group``."""
    name: str
    pattern: str
    operation: str
    """``read``, ``write`` or ``describe``."""


def kafka_acls(topic_names: Mapping[str, str]) -> list[KafkaAcl]:
    """The ACLs of every non-admin role, for the topics named by ``topic_names`` (topic role -> name,
    as :class:`~feed_service.settings.Settings` holds them; topics it lacks are skipped).

    >>> acls = kafka_acls({"tweets": "feed.tweets.v1", "timeline_changes": "feed.timeline-changes.v1"})
    >>> sorted((a.name, a.operation) for a in acls if a.principal == "User:feed-producer")
    [('feed.tweets.v1', 'describe'), ('feed.tweets.v1', 'write')]
    >>> sorted((a.name, a.operation) for a in acls if a.principal == "User:feed-server" and a.resource_type == "topic")
    [('feed.timeline-changes.v1', 'describe'), ('feed.timeline-changes.v1', 'read')]
    >>> reads = kafka_acls({"reads": "feed.reads.v1"})
    >>> sorted((a.principal, a.operation) for a in reads if a.resource_type == "topic")
    [('User:feed-server', 'describe'), ('User:feed-server', 'write'), ('User:feed-stream', 'describe'), ('User:feed-stream', 'read')]
    """
    def topics(roles: Iterable[str]) -> list[str]:
        return [topic_names[r] for r in roles if r in topic_names]

    plan: list[KafkaAcl] = []

    def allow(role: str, names: list[str], *operations: str) -> None:
        for name in names:
            for operation in operations:
                plan.append(KafkaAcl(f"User:{kafka_user(role)}", "topic", name, "literal", operation))

    allow(PRODUCER, topics(CHANGELOG_TOPICS), "write", "describe")
    allow(STREAM, topics(CHANGELOG_TOPICS), "read", "describe")
    allow(STREAM, topics(STREAM_OUTPUT_TOPICS), "write", "describe")
    allow(STREAM, topics(STREAM_INTERNAL_TOPICS), "read", "write", "describe")
    allow(BACKFILL, topics(CHANGELOG_TOPICS), "read", "describe")
    allow(BACKFILL, topics(STREAM_INTERNAL_TOPICS), "describe")  # its snapshot records where the stream continues
    allow(BACKFILL, topics(("dead_letter",)), "write", "describe")  # the backfill's --dead-letters (Spark's sink)
    allow(SERVER, topics(("timeline_changes",)), "read", "describe")
    allow(SERVER, topics(READ_ACTIVITY_TOPICS), "write", "describe")  # its reports of who reads
    allow(STREAM, topics(READ_ACTIVITY_TOPICS), "read", "describe")  # the driver's ReadActivityConsumer
    for role, prefixes in CONSUMER_GROUP_PREFIXES.items():
        for prefix in prefixes:
            plan.append(KafkaAcl(f"User:{kafka_user(role)}", "group", prefix, "prefixed", "read"))
    return plan


def cassandra_grants(keyspace: str) -> list[str]:
    """CQL that gives each non-admin role what it needs on ``keyspace`` (the admin owns it: it created
    it). ``MODIFY`` covers INSERT, UPDATE, DELETE and TRUNCATE; ``SELECT`` reads. The writers get the
    whole keyspace, the server :data:`SERVER_TABLES` one by one.

    >>> cassandra_grants("feed")[0]
    'GRANT SELECT ON KEYSPACE feed TO feed_stream'
    >>> cassandra_grants("feed")[4]
    'GRANT SELECT ON TABLE feed.home_timeline TO feed_server'
    """
    return [
        f"GRANT SELECT ON KEYSPACE {keyspace} TO {cassandra_role(STREAM)}",
        f"GRANT MODIFY ON KEYSPACE {keyspace} TO {cassandra_role(STREAM)}",
        f"GRANT SELECT ON KEYSPACE {keyspace} TO {cassandra_role(BACKFILL)}",
        f"GRANT MODIFY ON KEYSPACE {keyspace} TO {cassandra_role(BACKFILL)}",
        *(f"GRANT SELECT ON TABLE {keyspace}.{table} TO {cassandra_role(SERVER)}" for table in SERVER_TABLES),
    ]


def cassandra_revocations(keyspace: str) -> list[tuple[str, str, str]]:
    """``(permission, resource, role)`` of grants a role held in an earlier release and no longer
    should, to revoke where provisioning finds them held: the server's SELECT on the whole keyspace,
    which reached the steps' state (:data:`STATE_TABLES`). Revoked after :func:`cassandra_grants`
    are applied, so the server never loses a table it reads.

    >>> cassandra_revocations("feed")
    [('SELECT', 'KEYSPACE feed', 'feed_server')]
    """
    return [("SELECT", f"KEYSPACE {keyspace}", cassandra_role(SERVER))]

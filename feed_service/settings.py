"""Where the service finds Kafka, Cassandra and its topics, and the settings that shape the view.

Long (about 480 lines) on purpose: every setting, with its parsing and validation, is in the one
object below, so that an invalid value fails where it is read and nowhere else.

One frozen object, built from the environment and validated on construction: every adapter and
job takes a :class:`Settings` instead of reading the environment itself, so tests hand in the
settings of their private stack, and an invalid value fails once, where it is set, with a
:class:`~feed_service.errors.ConfigError` (never later, inside an executor).

Environment variables (defaults: the local stack of ``feedctl stack up``):

- ``FEED_KAFKA_BOOTSTRAP``   Kafka bootstrap servers (default ``127.0.0.1:<FEED_KAFKA_PORT or 9092>``)
- ``FEED_CASSANDRA_HOSTS``   comma-separated contact points (default ``127.0.0.1``)
- ``FEED_CASSANDRA_PORT``    CQL native port (default 9042)
- ``FEED_KEYSPACE``          Cassandra keyspace (default ``feed``)
- ``FEED_TOPIC_SUFFIX``      appended to every topic name of ``schemas/topics.json`` (default empty),
  to run isolated pipelines on one broker (tests, staging)
- ``FEED_INBOX_CAP``         entries per home timeline (default 800): the stream, the backfill,
  ``materialize`` and the read service must agree on it
- ``FEED_PULL_THRESHOLD``    active followers from which an author's tweets are merged in at read
  time instead of written to inboxes (docs/fan-out.md); the stream, the backfill and ``materialize``
- ``FEED_TRIM_SLACK``        rows a stored home timeline may hold above the inbox cap before it is
  trimmed back to the cap (default 200; docs/trimming.md)
- ``FEED_HISTORY_HORIZON_S`` seconds of event time after which the join forgets dead edges, tombstones
  and cold digests and rejects older changes (default 864000 = 10 days, 0 = keep everything); also
  sets the changelog topics' ``delete.retention.ms`` and the tables' ``gc_grace_seconds``
  (:mod:`feed_service.core.retention`)
- ``FEED_STATE_PARTITIONS``  state partitions of a *new* stream checkpoint (default
  :data:`DEFAULT_STATE_PARTITIONS`); an existing checkpoint keeps its own until ``feedctl reshard``
- ``FEED_VIEW_CHANGES``      1 (default): the stream publishes what each micro-batch changed in the view
  to the ``timeline_changes`` topic once its Cassandra writes succeeded (docs/view-changes.md); 0: it
  publishes nothing (e.g. a benchmark comparing the stream without it). Also ``true``/``false``,
  ``yes``/``no``, ``on``/``off``
- ``FEED_INACTIVE_AFTER_S``  seconds without a home-timeline read (GetHomeTimeline or a Watch) after
  which a reader is inactive and its inbox is no longer kept (default 2592000 = 30 days; 0: nobody is
  ever inactive, every inbox kept; docs/activity.md). With it > 0 the read service reports reads to
  the ``reads`` topic and the stream's driver consumes them
- ``FEED_READ_REPORT_INTERVAL_S``  at most one report per reader and read-service process in this
  many seconds (default 3600); less than ``FEED_INACTIVE_AFTER_S`` when that is > 0

Replication and consistency (docs/cluster.md; the defaults suit the single-node local stack):

- ``FEED_CASSANDRA_REPLICATION``  the keyspace's replication when provisioning creates it:
  ``SimpleStrategy:<rf>`` (default ``SimpleStrategy:1``) or ``NetworkTopologyStrategy:<dc>=<rf>[,<dc>=<rf>]``
- ``FEED_CASSANDRA_LOCAL_DC``     the data centre the driver routes to (default: the contact points')
- ``FEED_CASSANDRA_WRITE_CONSISTENCY`` / ``FEED_CASSANDRA_READ_CONSISTENCY``  consistency levels of
  every write and of the read service's reads (default ``ONE``; a replicated cluster: ``LOCAL_QUORUM``)
- ``FEED_TOPIC_REPLICATION``      replication factor of every topic provisioning creates (default 0:
  ``schemas/topics.json``'s, which is 1)
- ``FEED_TOPIC_MIN_INSYNC_REPLICAS``  ``min.insync.replicas`` of every topic (default 0: the broker's)

Security (docs/security.md; the defaults are the single-node stack's plaintext on loopback, a
``feedctl stack env`` of a secured stack prints the values that point at it):

- ``FEED_KAFKA_SECURITY_PROTOCOL``  ``PLAINTEXT`` (default) or ``SASL_SSL`` (TLS, SCRAM-SHA-512 as the
  process's role)
- ``FEED_CASSANDRA_TLS``           1: client-to-node TLS (default 0)
- ``FEED_CASSANDRA_AUTH``          1: log in as the process's role (PasswordAuthenticator; default 0)
- ``FEED_TLS_CA_FILE``             the CA certificate (PEM) that Kafka brokers and Cassandra nodes are
  verified against (default: the system's trust store)
- ``FEED_CREDENTIALS_DIR``         a folder with one sub-folder per role holding ``kafka.password`` and
  ``cassandra.password`` (:mod:`feed_service.security.roles`); read when a connection opens, never
  put on a command line or in a log
- ``FEED_ROLE``                    the role this process acts as when its command does not imply one
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from typing import Mapping

from feed_service import resources
from feed_service.core.join import DEFAULT_INBOX_CAP, DEFAULT_PULL_THRESHOLD
from feed_service.core.retention import DEFAULT_HISTORY_HORIZON_S, Retention
from feed_service.errors import ConfigError
from feed_service.security.roles import check_role

DEFAULT_TRIM_SLACK = 200
"""Rows above the cap a stored timeline may reach before it is trimmed (docs/trimming.md: a trim reads
cap + slack keys, so each insert pays (cap + slack) / slack key reads; 200 = 5 per insert, 25 % space)."""

DEFAULT_INACTIVE_AFTER_S = 30 * 24 * 3600
"""A reader idle this long is inactive (docs/activity.md#read-activity: a weekly or monthly reader
never flips, while the accounts that never read, most of what inboxes cost, stop costing writes)."""

DEFAULT_READ_REPORT_INTERVAL_S = 3600
"""One read report per reader and process at most this often (docs/activity.md#read-activity: the
topic's volume is at most the distinct readers per interval, and an hour is nothing against 30 days)."""

DEFAULT_STATE_PARTITIONS = 2
"""State partitions of a new stream checkpoint (docs/streaming.md has the measurement behind it)."""

DEFAULT_STATE_BUCKETS = 16
"""Buckets of join keys a new stream checkpoint groups its state by (docs/state-buckets.md: Spark's
cost per grouping key is paid per bucket; 0 keeps one state per join key, the layout before buckets)."""

_KEYSPACE_NAME = re.compile(r"[a-z][a-z0-9_]{0,47}")

CONSISTENCY_LEVELS = frozenset({"ANY", "ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM",
                                "LOCAL_ONE"})
"""Names of cassandra-driver's ``ConsistencyLevel`` members (checked here, without importing the driver)."""

_DATA_CENTRE = re.compile(r"[A-Za-z0-9_.\-]+")


def keyspace_replication(value: str) -> dict[str, str]:
    """The CQL replication map of a ``FEED_CASSANDRA_REPLICATION`` value, or :class:`ConfigError`.

    >>> keyspace_replication("SimpleStrategy:1")
    {'class': 'SimpleStrategy', 'replication_factor': '1'}
    >>> keyspace_replication("NetworkTopologyStrategy:dc1=3,dc2=2")
    {'class': 'NetworkTopologyStrategy', 'dc1': '3', 'dc2': '2'}
    """
    strategy, sep, factors = value.partition(":")
    problem = f"cassandra replication must be SimpleStrategy:<rf> or NetworkTopologyStrategy:<dc>=<rf>[,...], got {value!r}"
    if not sep:
        raise ConfigError(problem)
    if strategy == "SimpleStrategy":
        if not factors.isdigit() or int(factors) < 1:
            raise ConfigError(problem)
        return {"class": strategy, "replication_factor": str(int(factors))}
    if strategy != "NetworkTopologyStrategy":
        raise ConfigError(problem)
    replication = {"class": strategy}
    for pair in factors.split(","):
        dc, eq, rf = (part.strip() for part in pair.partition("="))
        if not eq or not _DATA_CENTRE.fullmatch(dc) or not rf.isdigit() or int(rf) < 1 or dc in replication:
            raise ConfigError(problem)
        replication[dc] = str(int(rf))
    return replication


def check_consistency(value: str, name: str) -> str:
    """``value`` if it names a Cassandra consistency level (``LOCAL_QUORUM``, ``ONE``...)."""
    if value not in CONSISTENCY_LEVELS:
        raise ConfigError(f"{name} must be one of {', '.join(sorted(CONSISTENCY_LEVELS))}, got {value!r}")
    return value


def check_topic_replication(replication: int, min_insync: int) -> None:
    """Replication factor and ``min.insync.replicas`` overrides: integers >= 0 (0: not overridden), and
    ``min.insync.replicas`` at most the replication factor it applies to (else no write could succeed)."""
    for value, what in ((replication, "topic replication"), (min_insync, "topic min.insync.replicas")):
        if type(value) is not int or value < 0:
            raise ConfigError(f"{what} must be an integer >= 0 (0: not overridden), got {value!r}")
    if replication and min_insync > replication:
        raise ConfigError(f"topic min.insync.replicas {min_insync} exceeds the replication factor {replication}: "
                          "no write could be acknowledged")


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A desired topic: name, record key, layout and the configs provisioning enforces."""

    role: str
    name: str
    partitions: int
    replication_factor: int
    config: dict[str, str] = field(default_factory=dict)
    key: str = ""
    """What the record key names (documentation of the compaction contract)."""


def load_topic_specs(raw: Mapping | None = None) -> dict[str, TopicSpec]:
    """Topic specs by role (``tweets``, ``follows``, ``profiles``, ``dead_letter``) from ``schemas/topics.json``."""
    topics = (raw if raw is not None else resources.read_json(resources.TOPICS))["topics"]
    return {
        role: TopicSpec(
            role=role,
            name=spec["name"],
            partitions=int(spec["partitions"]),
            replication_factor=int(spec["replication_factor"]),
            config={k: str(v) for k, v in spec.get("config", {}).items()},
            key=spec.get("key", ""),
        )
        for role, spec in topics.items()
    }


def check_inbox_cap(value: int) -> int:
    """``value`` if it is a usable inbox cap (an integer >= 1), else :class:`ConfigError`."""
    if type(value) is not int or value < 1:
        raise ConfigError(f"inbox cap must be an integer >= 1, got {value!r}")
    return value


def check_pull_threshold(value: int) -> int:
    """``value`` if it is a usable pull threshold (an integer >= 1), else :class:`ConfigError`."""
    if type(value) is not int or value < 1:
        raise ConfigError(f"pull threshold must be an integer >= 1, got {value!r}")
    return value


def check_trim_slack(value: int) -> int:
    """``value`` if it is a usable trim slack (an integer >= 0), else :class:`ConfigError`."""
    if type(value) is not int or value < 0:
        raise ConfigError(f"trim slack must be an integer >= 0, got {value!r}")
    return value


def check_history_horizon(value: int) -> int:
    """``value`` if it is a usable history horizon in seconds (an integer >= 0; 0 keeps everything)."""
    if type(value) is not int or value < 0:
        raise ConfigError(f"history horizon must be an integer number of seconds >= 0, got {value!r}")
    return value


def check_read_activity(inactive_after_s: int, report_interval_s: int) -> None:
    """The inactivity horizon (an integer >= 0; 0: nobody is ever inactive) and the report interval
    (an integer >= 1, below the horizon when it is on: a reader who reads more often than the horizon
    must be reported within it, docs/activity.md#read-activity)."""
    if type(inactive_after_s) is not int or inactive_after_s < 0:
        raise ConfigError("FEED_INACTIVE_AFTER_S must be an integer number of seconds >= 0 (0: nobody is ever "
                          f"inactive), got {inactive_after_s!r}")
    if type(report_interval_s) is not int or report_interval_s < 1:
        raise ConfigError(f"FEED_READ_REPORT_INTERVAL_S must be an integer number of seconds >= 1, got "
                          f"{report_interval_s!r}")
    if inactive_after_s and report_interval_s >= inactive_after_s:
        raise ConfigError(f"FEED_READ_REPORT_INTERVAL_S ({report_interval_s}) must be less than "
                          f"FEED_INACTIVE_AFTER_S ({inactive_after_s}): a reader reported once per interval "
                          "would otherwise turn inactive between two reports")


def check_state_partitions(value: int) -> int:
    """``value`` if it is a usable number of state partitions (an integer from 1 to 4096)."""
    if type(value) is not int or not 1 <= value <= 4096:
        raise ConfigError(f"state partitions must be an integer from 1 to 4096, got {value!r}")
    return value


def check_state_buckets(value: int) -> int:
    """``value`` if it is a usable number of state buckets (an integer from 0 to 1,000,000; 0: per key)."""
    if type(value) is not int or not 0 <= value <= 1_000_000:
        raise ConfigError(f"state buckets must be an integer from 0 (one state per key) to 1000000, got {value!r}")
    return value




_FLAGS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def parse_flag(value: str, name: str) -> bool:
    """An on/off environment value (``1``/``0``, ``true``/``false``, ``yes``/``no``, ``on``/``off``)."""
    try:
        return _FLAGS[value.strip().lower()]
    except KeyError:
        raise ConfigError(f"{name} must be 1 or 0, got {value!r}") from None


KAFKA_SECURITY_PROTOCOLS = ("PLAINTEXT", "SASL_SSL")
"""Client security protocols the service speaks: plaintext (the single-node stack) or TLS with SCRAM."""


def check_kafka_security_protocol(value: str) -> str:
    """``value`` if it is one of :data:`KAFKA_SECURITY_PROTOCOLS`."""
    if value not in KAFKA_SECURITY_PROTOCOLS:
        raise ConfigError(f"kafka security protocol must be one of {', '.join(KAFKA_SECURITY_PROTOCOLS)}, got {value!r}")
    return value


def check_view_changes(value: bool) -> bool:
    """``value`` if it is a boolean (whether the stream publishes the view's changes)."""
    if type(value) is not bool:
        raise ConfigError(f"view_changes must be a boolean, got {value!r}")
    return value


def _with_replication(topics: dict[str, TopicSpec], replication: int, min_insync: int) -> dict[str, TopicSpec]:
    """Topic specs with the replication overrides applied (0 leaves the spec's value)."""
    extra = {"min.insync.replicas": str(min_insync)} if min_insync else {}
    return {role: replace(spec, replication_factor=replication or spec.replication_factor,
                          config={**spec.config, **extra})
            for role, spec in topics.items()}


def _with_retention(topics: dict[str, TopicSpec], retention: Retention) -> dict[str, TopicSpec]:
    """Topic specs with the configs the history horizon sets on every compacted topic."""
    derived = retention.kafka_changelog_config()
    return {role: replace(spec, config={**spec.config, **derived})
            if spec.config.get("cleanup.policy") == "compact" and derived else spec
            for role, spec in topics.items()}


@dataclass(frozen=True, slots=True)
class Settings:
    kafka_bootstrap: str = "127.0.0.1:9092"
    cassandra_hosts: tuple[str, ...] = ("127.0.0.1",)
    cassandra_port: int = 9042
    keyspace: str = "feed"
    topics: dict[str, TopicSpec] = field(default_factory=load_topic_specs)
    inbox_cap: int = DEFAULT_INBOX_CAP
    """Entries per home timeline, and tweets retained per author key."""
    pull_threshold: int = DEFAULT_PULL_THRESHOLD
    """Active followers from which an author is a pull author (docs/fan-out.md)."""
    pull_reposters: bool = True
    """Whether reposters seen by ``pull_threshold`` readers or more are pull reposters: their reposts
    fan out to nobody and readers merge them in at read (docs/reposts-and-replies.md, hybrid fan-out)."""
    trim_slack: int = DEFAULT_TRIM_SLACK
    """Rows above ``inbox_cap`` a stored home timeline may reach before it is trimmed to the cap."""
    history_horizon_s: int = DEFAULT_HISTORY_HORIZON_S
    """Event-time seconds of history the join keeps (0: all); see :attr:`retention`."""
    state_partitions: int = DEFAULT_STATE_PARTITIONS
    """State partitions of a new stream checkpoint."""
    state_buckets: int = DEFAULT_STATE_BUCKETS
    """Buckets of join keys a new stream checkpoint groups its state by (0: one state per key)."""
    view_changes: bool = True
    """Whether the stream publishes the view's changes to the ``timeline_changes`` topic."""
    inactive_after_s: int = DEFAULT_INACTIVE_AFTER_S
    """Seconds without a home-timeline read after which a reader is inactive (0: never; docs/activity.md)."""
    read_report_interval_s: int = DEFAULT_READ_REPORT_INTERVAL_S
    """At most one read report per reader and read-service process in this many seconds."""
    cassandra_replication: str = "SimpleStrategy:1"
    """The keyspace's replication when provisioning creates it (:func:`keyspace_replication`)."""
    cassandra_local_dc: str = ""
    """The data centre the driver routes requests to ("": the one of the contact points)."""
    write_consistency: str = "ONE"
    """Consistency level of every write (stream, backfill, trims, provisioning)."""
    read_consistency: str = "ONE"
    """Consistency level of the read service's and the tools' reads."""
    topic_replication: int = 0
    """Replication factor of every topic (0: the one of ``schemas/topics.json``)."""
    topic_min_insync_replicas: int = 0
    """``min.insync.replicas`` of every topic (0: the broker's default)."""
    kafka_security_protocol: str = "PLAINTEXT"
    """``PLAINTEXT`` or ``SASL_SSL`` (TLS to every broker, SCRAM-SHA-512 login as :attr:`role`)."""
    cassandra_tls: bool = False
    """Whether the driver speaks TLS to Cassandra (verified against :attr:`tls_ca_file`)."""
    cassandra_auth: bool = False
    """Whether the driver logs in to Cassandra as :attr:`role`."""
    tls_ca_file: str = ""
    """CA certificate (PEM) that brokers and Cassandra nodes are verified against ("": the system's)."""
    credentials_dir: str = ""
    """Folder of per-role password files (:func:`feed_service.security.roles.password_file`)."""
    role: str = ""
    """The role this process logs in as (one of :data:`feed_service.security.roles.ROLES`; "": none yet,
    which is an error only once a login is needed)."""

    def __post_init__(self) -> None:
        check_inbox_cap(self.inbox_cap)
        check_pull_threshold(self.pull_threshold)
        check_trim_slack(self.trim_slack)
        check_history_horizon(self.history_horizon_s)
        check_state_partitions(self.state_partitions)
        check_state_buckets(self.state_buckets)
        check_view_changes(self.view_changes)
        if type(self.pull_reposters) is not bool:
            raise ConfigError(f"pull_reposters must be a boolean, got {self.pull_reposters!r}")
        check_read_activity(self.inactive_after_s, self.read_report_interval_s)
        keyspace_replication(self.cassandra_replication)
        check_consistency(self.write_consistency, "write consistency")
        check_consistency(self.read_consistency, "read consistency")
        check_topic_replication(self.topic_replication, self.topic_min_insync_replicas)
        check_kafka_security_protocol(self.kafka_security_protocol)
        if self.role:
            check_role(self.role)
        if self.cassandra_local_dc and not _DATA_CENTRE.fullmatch(self.cassandra_local_dc):
            raise ConfigError(f"invalid Cassandra data centre name {self.cassandra_local_dc!r}")
        object.__setattr__(self, "topics", _with_replication(self.topics, self.topic_replication,
                                                             self.topic_min_insync_replicas))
        # The changelog topics' delete.retention.ms follows the history horizon (one source of truth).
        object.__setattr__(self, "topics", _with_retention(self.topics, self.retention))
        if not _KEYSPACE_NAME.fullmatch(self.keyspace):
            raise ConfigError(f"invalid keyspace name {self.keyspace!r} (lower case letter, then [a-z0-9_])")
        if not self.cassandra_hosts or not all(self.cassandra_hosts):
            raise ConfigError(f"no Cassandra contact points in {self.cassandra_hosts!r}")

    @property
    def reposter_threshold(self) -> int | None:
        """The ``pull_threshold`` the per-reader stage gives reposters: None (every reposter pushes) unless
        :attr:`pull_reposters`."""
        return self.pull_threshold if self.pull_reposters else None

    @property
    def retention(self) -> Retention:
        """The history horizon and the Kafka and Cassandra settings derived from it."""
        return Retention.from_seconds(self.history_horizon_s)

    def topic(self, role: str) -> str:
        return self.topics[role].name

    @property
    def read_activity_group(self) -> str:
        """The consumer group of the driver's read-activity consumer: one per ``reads`` topic name, so
        pipelines isolated by a topic suffix keep their own offsets (prefix granted to the stream role
        in :data:`feed_service.security.roles.CONSUMER_GROUP_PREFIXES`)."""
        return f"feed-read-activity.{self.topic('reads')}"

    @property
    def secured(self) -> bool:
        """Whether any link needs credentials or TLS material (docs/security.md)."""
        return self.kafka_security_protocol != "PLAINTEXT" or self.cassandra_tls or self.cassandra_auth

    def as_role(self, role: str) -> "Settings":
        """These settings for a process acting as ``role`` (a command's own role: the stream, the read
        server...); an explicit ``FEED_ROLE`` is kept, so an operator can run a tool with less."""
        check_role(role)
        return self if self.role else replace(self, role=role)

    def replace(self, **changes: object) -> "Settings":
        """A copy with ``changes`` applied, validated like any new settings."""
        return replace(self, **changes)

    def with_topic_suffix(self, suffix: str) -> "Settings":
        """The same settings with ``suffix`` appended to every topic name."""
        topics = {role: replace(spec, name=spec.name + suffix) for role, spec in self.topics.items()}
        return replace(self, topics=topics)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        env = os.environ if env is None else env
        try:
            settings = cls(
                kafka_bootstrap=env.get("FEED_KAFKA_BOOTSTRAP", f"127.0.0.1:{env.get('FEED_KAFKA_PORT', '9092')}"),
                cassandra_hosts=tuple(h.strip() for h in env.get("FEED_CASSANDRA_HOSTS", "127.0.0.1").split(",")),
                cassandra_port=int(env.get("FEED_CASSANDRA_PORT", "9042")),
                keyspace=env.get("FEED_KEYSPACE", "feed"),
                inbox_cap=int(env.get("FEED_INBOX_CAP", str(DEFAULT_INBOX_CAP))),
                pull_threshold=int(env.get("FEED_PULL_THRESHOLD", str(DEFAULT_PULL_THRESHOLD))),
                pull_reposters=parse_flag(env.get("FEED_PULL_REPOSTERS", "1"), "FEED_PULL_REPOSTERS"),
                trim_slack=int(env.get("FEED_TRIM_SLACK", str(DEFAULT_TRIM_SLACK))),
                history_horizon_s=int(env.get("FEED_HISTORY_HORIZON_S", str(DEFAULT_HISTORY_HORIZON_S))),
                state_partitions=int(env.get("FEED_STATE_PARTITIONS", str(DEFAULT_STATE_PARTITIONS))),
                state_buckets=int(env.get("FEED_STATE_BUCKETS", str(DEFAULT_STATE_BUCKETS))),
                view_changes=parse_flag(env.get("FEED_VIEW_CHANGES", "1"), "FEED_VIEW_CHANGES"),
                inactive_after_s=int(env.get("FEED_INACTIVE_AFTER_S", str(DEFAULT_INACTIVE_AFTER_S))),
                read_report_interval_s=int(env.get("FEED_READ_REPORT_INTERVAL_S",
                                                   str(DEFAULT_READ_REPORT_INTERVAL_S))),
                cassandra_replication=env.get("FEED_CASSANDRA_REPLICATION", "SimpleStrategy:1"),
                cassandra_local_dc=env.get("FEED_CASSANDRA_LOCAL_DC", ""),
                write_consistency=env.get("FEED_CASSANDRA_WRITE_CONSISTENCY", "ONE").upper(),
                read_consistency=env.get("FEED_CASSANDRA_READ_CONSISTENCY", "ONE").upper(),
                topic_replication=int(env.get("FEED_TOPIC_REPLICATION", "0")),
                topic_min_insync_replicas=int(env.get("FEED_TOPIC_MIN_INSYNC_REPLICAS", "0")),
                kafka_security_protocol=env.get("FEED_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT").upper(),
                cassandra_tls=parse_flag(env.get("FEED_CASSANDRA_TLS", "0"), "FEED_CASSANDRA_TLS"),
                cassandra_auth=parse_flag(env.get("FEED_CASSANDRA_AUTH", "0"), "FEED_CASSANDRA_AUTH"),
                tls_ca_file=env.get("FEED_TLS_CA_FILE", ""),
                credentials_dir=env.get("FEED_CREDENTIALS_DIR", ""),
                role=env.get("FEED_ROLE", ""),
            )
        except ValueError as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(f"invalid FEED_* environment value: {exc}") from None
        suffix = env.get("FEED_TOPIC_SUFFIX", "")
        return settings.with_topic_suffix(suffix) if suffix else settings

    def to_env(self) -> dict[str, str]:
        """Environment variables that make :meth:`from_env` in a child process return these settings
        (topic names must come from ``schemas/topics.json`` plus one common suffix)."""
        base = load_topic_specs()
        suffixes = {spec.name[len(base[role].name):] for role, spec in self.topics.items()}
        if len(suffixes) != 1 or any(not self.topics[r].name.startswith(base[r].name) for r in base):
            raise ConfigError("to_env: topic names must be the spec names plus one common suffix")
        return {
            "FEED_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
            "FEED_CASSANDRA_HOSTS": ",".join(self.cassandra_hosts),
            "FEED_CASSANDRA_PORT": str(self.cassandra_port),
            "FEED_KEYSPACE": self.keyspace,
            "FEED_TOPIC_SUFFIX": suffixes.pop(),
            "FEED_INBOX_CAP": str(self.inbox_cap),
            "FEED_PULL_THRESHOLD": str(self.pull_threshold),
            "FEED_PULL_REPOSTERS": "1" if self.pull_reposters else "0",
            "FEED_TRIM_SLACK": str(self.trim_slack),
            "FEED_HISTORY_HORIZON_S": str(self.history_horizon_s),
            "FEED_STATE_PARTITIONS": str(self.state_partitions),
            "FEED_STATE_BUCKETS": str(self.state_buckets),
            "FEED_VIEW_CHANGES": "1" if self.view_changes else "0",
            "FEED_INACTIVE_AFTER_S": str(self.inactive_after_s),
            "FEED_READ_REPORT_INTERVAL_S": str(self.read_report_interval_s),
            "FEED_CASSANDRA_REPLICATION": self.cassandra_replication,
            "FEED_CASSANDRA_LOCAL_DC": self.cassandra_local_dc,
            "FEED_CASSANDRA_WRITE_CONSISTENCY": self.write_consistency,
            "FEED_CASSANDRA_READ_CONSISTENCY": self.read_consistency,
            "FEED_TOPIC_REPLICATION": str(self.topic_replication),
            "FEED_TOPIC_MIN_INSYNC_REPLICAS": str(self.topic_min_insync_replicas),
            "FEED_KAFKA_SECURITY_PROTOCOL": self.kafka_security_protocol,
            "FEED_CASSANDRA_TLS": "1" if self.cassandra_tls else "0",
            "FEED_CASSANDRA_AUTH": "1" if self.cassandra_auth else "0",
            "FEED_TLS_CA_FILE": self.tls_ca_file,
            "FEED_CREDENTIALS_DIR": self.credentials_dir,
            "FEED_ROLE": self.role,
        }

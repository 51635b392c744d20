"""The one place where the versions of the local stack's components are pinned.

The pyspark wheel is pinned in ``pyproject.toml`` to :data:`SPARK_VERSION` (a unit test keeps the two
equal): the Kafka connector must match the installed Spark exactly.
"""

from __future__ import annotations

#: Scala binary version of the pyspark wheel and of the Kafka broker jars.
SCALA_BINARY = "2.13"

#: Apache Kafka broker, KRaft mode (jars from Maven Central).
KAFKA_VERSION = "4.1.1"

#: Apache Cassandra node (``cassandra-all`` + dependencies from Maven Central).
CASSANDRA_VERSION = "5.0.6"

#: Apache Spark; the newest release whose ``spark-sql-kafka-0-10`` is on the reachable registry.
SPARK_VERSION = "4.2.0"

#: ``spark-token-provider-kafka-0-10`` of SPARK_VERSION is absent from the registry; 4.0.0 has the same API.
SPARK_TOKEN_PROVIDER_VERSION = "4.0.0"

#: Logging binding for the Kafka broker (Kafka ships log4j2 but no SLF4J binding as a dependency).
LOG4J_VERSION = "2.24.3"


def maven_properties() -> dict[str, str]:
    """Properties substituted into the poms of ``feed_service/stack/maven/``."""
    return {
        "scala.binary": SCALA_BINARY,
        "kafka.version": KAFKA_VERSION,
        "cassandra.version": CASSANDRA_VERSION,
        "spark.version": SPARK_VERSION,
        "spark.token.provider.version": SPARK_TOKEN_PROVIDER_VERSION,
        "log4j.version": LOG4J_VERSION,
    }

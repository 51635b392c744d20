"""Home-timeline materialization: the view ``tweets JOIN follows`` kept incrementally.

Layout: ``core`` is the pure join engine (no I/O); ``stack`` runs the local Kafka,
Cassandra and Spark; the other modules are thin adapters around the core.
"""

__version__ = "0.1.0"

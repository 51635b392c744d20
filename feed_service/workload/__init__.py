"""The seeded power-law workload: a pure generator and its sinks (Kafka, replay files)."""

"""Cassandra adapter: schema, sessions and the timeline store."""

"""Kafka adapter: topic provisioning, the event producer, record keys, versions and replay files."""

"""Shared test support: harnesses and fakes the unit tests reuse (tests/support/model.py: the model harness)."""

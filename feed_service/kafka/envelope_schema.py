"""The event envelope's JSON Schema as a check: ``is_valid`` and a human ``explain``.

The schema (``schemas/events/event.schema.json``) is the published contract for anyone writing to
the changelog topics without this package (kcat, other languages). The producer itself validates
with :func:`~feed_service.core.events.parse_event`, the rules the engine and the stream apply; the
unit tests hold the two to the same verdicts on generated envelopes, except for the two rules the
schema cannot express (see its description). This check is for callers that want the contract
itself, and for those tests.

The schema is compiled once by ``fastjsonschema`` into Python code (no interpretation per call).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable, Mapping

import fastjsonschema
from fastjsonschema import JsonSchemaValueException

from feed_service import resources

Validate = Callable[[Any], Any]
"""A compiled validator: returns its argument, raises ``JsonSchemaValueException`` if invalid."""


def _compile(schema: Mapping[str, Any]) -> Validate:
    # use_default=False: a check must never fill ``default`` values into the caller's envelope.
    return fastjsonschema.compile(dict(schema), use_default=False, use_formats=False)


class EnvelopeCheck:
    """A compiled envelope schema.

    ``explain`` spells out each ``oneOf`` branch's complaint when the root ``oneOf`` fails, since
    "valid exactly by one definition (0 matches found)" alone does not say what to fix. The per-branch
    validators are compiled on the first such call: only rejections pay for them.
    """

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = schema
        self._validate = _compile(schema)
        self._branches: list[tuple[str, Validate]] | None = None

    def is_valid(self, envelope: Any) -> bool:
        """Whether ``envelope`` matches the schema."""
        try:
            self._validate(envelope)
        except JsonSchemaValueException:
            return False
        return True

    def explain(self, envelope: Any) -> str | None:
        """Why ``envelope`` does not match the schema, or ``None`` if it does."""
        try:
            self._validate(envelope)
        except JsonSchemaValueException as exc:
            if exc.rule != "oneOf" or exc.path != ["data"]:
                return exc.message
            complaints = [f"{label}: {error}" for label, validate in self._oneof_branches()
                          if (error := _error(validate, envelope)) is not None]
            return f"{exc.message}: " + "; ".join(complaints) if complaints else exc.message
        return None

    def _oneof_branches(self) -> list[tuple[str, Validate]]:
        if self._branches is None:
            root = {key: value for key, value in self.schema.items() if key != "oneOf"}
            self._branches = [(_label(branch, i), _compile({**root, **branch}))
                              for i, branch in enumerate(self.schema.get("oneOf", ()))]
        return self._branches


def _label(branch: Mapping[str, Any], index: int) -> str:
    """A short name for a ``oneOf`` branch: its title, the last part of its ``$ref``, or its index."""
    if "title" in branch:
        return str(branch["title"])
    if isinstance(branch.get("$ref"), str):
        return branch["$ref"].rsplit("/", 1)[-1]
    return f"branch {index}"


def _error(validate: Validate, instance: Any) -> str | None:
    try:
        validate(instance)
    except JsonSchemaValueException as exc:
        return exc.message
    return None


@lru_cache(maxsize=1)
def load_envelope_check() -> EnvelopeCheck:
    """The packaged envelope schema, compiled (once per process)."""
    return EnvelopeCheck(resources.read_json(resources.EVENT_SCHEMA))

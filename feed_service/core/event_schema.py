"""The JSON Schema of the event envelope (draft 2020-12), made from the registry of event kinds.

``schemas/events/event.schema.json`` is :func:`event_json_schema` written out (``feedctl schema
events``); the kinds themselves are :mod:`feed_service.core.event_kinds`'.
"""

from __future__ import annotations

import re
from typing import Any

from feed_service.core.event_kinds import EDGE_KINDS, EVENT_KINDS, MAX_INT64, EventKind, FieldSpec

SCHEMA_ID = "https://feed-service.invalid/schemas/events/event.schema.json"


def _schema_of_field(spec: FieldSpec) -> dict[str, Any]:
    if spec.rule == "id":
        return {"$ref": "#/$defs/id", **({"description": spec.description} if spec.description else {})}
    if spec.rule == "natural":
        if spec.name == "version":
            return {"$ref": "#/$defs/version"}
        out: dict[str, Any] = {"type": "integer", "minimum": 0, "maximum": MAX_INT64}
    elif spec.rule == "text":
        out = {"type": "string"}
    elif spec.rule == "optional_id":
        out = {"type": ["string", "null"], "minLength": 1}  # minLength binds strings only
    elif spec.rule == "bool":
        out = {"type": "boolean"}
    elif spec.rule == "optional_bool":
        out = {"type": ["boolean", "null"]}
    elif spec.rule == "choice":
        out = {"enum": list(spec.choices)}
    elif spec.rule == "optional_choice":
        out = {"enum": [*spec.choices, None]}
    else:
        out = {"type": ["string", "null"]}
    if spec.default is not None:
        out["default"] = spec.default
    if spec.description:
        out["description"] = spec.description
    return out


def _definition_name(kind: EventKind) -> str:
    """``TweetUpsert`` -> ``tweet_upsert``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind.cls.__name__).lower()


def _op_schema(ops: tuple[str, ...]) -> dict[str, Any]:
    return {"const": ops[0]} if len(ops) == 1 else {"enum": list(ops)}


def _conditions(kind: EventKind) -> list[dict[str, Any]]:
    """``if``/``then`` rules of a kind: the fields only some ops carry, and the fields that go together."""
    out: list[dict[str, Any]] = []
    for ops in dict.fromkeys(f.ops for f in kind.fields if f.ops):
        specs = [f for f in kind.fields if f.ops == ops]
        out.append({"if": {"properties": {"op": _op_schema(ops)}},
                    "then": {"required": [f.name for f in specs if f.required],
                             "properties": {f.name: _schema_of_field(f) for f in specs}}})
    for group in kind.together:  # one given (a string, not null): every other one given too
        for name in group.names:
            others = [n for n in group.names if n != name]
            out.append({"if": {"required": [name], "properties": {name: {"type": "string"}}},
                        "then": {"required": others, "properties": {n: {"type": "string"} for n in others}}})
    return out


def event_json_schema() -> dict[str, Any]:
    """The JSON Schema of the envelope (draft 2020-12), made from the registry.

    ``schemas/events/event.schema.json`` is this, written out (``feedctl schema events``): the
    published contract for producers that do not use this package.
    """
    defs: dict[str, Any] = {
        "id": {"type": "string", "minLength": 1},
        "version": {"type": "integer", "minimum": 0, "maximum": MAX_INT64,
                    "description": "Per-entity version; the highest wins."},
    }
    for kind in EVENT_KINDS:
        properties: dict[str, Any] = {"type": {"const": kind.type}}
        if kind.ops:
            properties["op"] = _op_schema(tuple(kind.ops))
        every_op = [f for f in kind.fields if not f.ops]
        properties.update((f.name, _schema_of_field(f)) for f in every_op)
        required = ["type", *(["op"] if kind.ops else []), *(f.name for f in every_op if f.required)]
        definition = {"title": kind.title, "description": kind.description, "type": "object",
                      "required": required, "properties": properties}
        if conditions := _conditions(kind):
            definition["allOf"] = conditions
        defs[_definition_name(kind)] = definition
    self_rules = " and ".join(f"{k.edge.subject} != {k.edge.target}" for k in EDGE_KINDS.values()
                              if k.edge and k.edge.self_code)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "Change event envelope",
        "description": (
            "One change of the tweets, follows, profiles, blocks, mutes or reposts table (docs/design.md): one "
            "JSON object per Kafka record or replay-file line. Unknown extra properties are allowed and ignored "
            "(so are the fields an op does not carry, e.g. created_at on an unrepost). Versions "
            "increase per entity (tweet, follow edge, user profile, repost edge). Two rules are enforced by "
            "feed_service.core.events.parse_event but not expressible here: " + self_rules + ", and integers "
            "must be written without a fraction or exponent (1.0 is rejected). Generated from "
            "feed_service/core/event_kinds.py (feedctl schema events)."
        ),
        "oneOf": [{"$ref": f"#/$defs/{_definition_name(kind)}"} for kind in EVENT_KINDS],
        "$defs": defs,
    }

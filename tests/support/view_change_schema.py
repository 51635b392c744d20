"""Whether a view change's JSON matches the change topic's JSON Schema
(schemas/view-changes/view-change.schema.json), compiled once."""

from __future__ import annotations

import functools
from typing import Any

import fastjsonschema

from feed_service import resources

SCHEMA_NAME = "schemas/view-changes/view-change.schema.json"


@functools.cache
def _validator() -> Any:
    return fastjsonschema.compile(resources.read_json(SCHEMA_NAME), use_formats=False)


def matches_schema(obj: Any) -> bool:
    """Whether ``obj`` (a change's JSON, decoded) is valid under the schema."""
    try:
        _validator()(obj)
    except fastjsonschema.JsonSchemaException:
        return False
    return True

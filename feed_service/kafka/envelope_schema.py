"""Check event envelopes against the JSON Schemas in ``schemas/events/``, fast enough for the producer.

The schema files are the contract; the ``jsonschema`` package is the reference implementation of
their meaning. It costs about 80-190 µs per envelope here, which alone would cap a producer at
~10,000 events/s, so :func:`load_envelope_check` compiles the schema once into plain closures for
the keywords the event schemas use (``type``, ``const``, ``enum``, ``required``, ``properties``,
``minLength``, ``minimum``, ``maximum``, ``oneOf``, local ``$ref``), with ``jsonschema``'s semantics (an integer is
an ``int`` that is not a ``bool``, or an integral ``float``; ``1 == 1.0`` but ``True != 1``). A schema
using any other keyword is not compiled: the check then falls back to ``jsonschema`` itself, slower
but still right. A unit test compares both on generated envelopes.

The reason for a rejection is always produced by ``jsonschema`` (only rejections pay for it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping, TypeAlias

from feed_service import resources

"""The envelope schema: ``oneOf`` tweet upsert, tweet delete, follow change, profile version."""

Predicate: TypeAlias = Callable[[Any], bool]
"""A compiled schema: ``True`` iff the instance is valid."""

#: Keywords that only annotate; they never make an instance invalid.
_ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "$defs", "title", "description", "examples", "default"})


class UnsupportedSchema(Exception):
    """The schema uses a keyword the compiler does not implement; use ``jsonschema`` instead."""


def _is_integer(x: Any) -> bool:
    t = type(x)
    return t is int or (t is float and x.is_integer())


def _is_number(x: Any) -> bool:
    t = type(x)
    return t is int or t is float


_TYPE_TESTS: dict[str, Predicate] = {
    "string": lambda x: type(x) is str,
    "integer": _is_integer,
    "number": _is_number,
    "boolean": lambda x: type(x) is bool,
    "null": lambda x: x is None,
    "object": lambda x: type(x) is dict or isinstance(x, Mapping),
    "array": lambda x: isinstance(x, list),
}


def _always(x: Any) -> bool:
    return True


def _never(x: Any) -> bool:
    return False


def _is_object(x: Any) -> bool:
    return type(x) is dict or isinstance(x, Mapping)


def _any_of(tests: tuple[Predicate, ...]) -> Predicate:
    def check(x: Any) -> bool:
        for test in tests:
            if test(x):
                return True
        return False
    return check


def _all_of(checks: tuple[Predicate, ...]) -> Predicate:
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]

    def check(x: Any) -> bool:
        for c in checks:
            if not c(x):
                return False
        return True
    return check


def _const(value: Any) -> Predicate:
    if type(value) is str:
        return lambda x: type(x) is str and x == value
    return lambda x: json_equal(x, value)


def _enum(values: tuple[Any, ...]) -> Predicate:
    if all(type(v) is str for v in values):
        strings = frozenset(values)
        return lambda x: type(x) is str and x in strings
    return lambda x: any(json_equal(x, v) for v in values)


def _required(names: tuple[str, ...]) -> Predicate:
    def check(x: Any) -> bool:
        if not _is_object(x):
            return True
        for name in names:
            if name not in x:
                return False
        return True
    return check


def _properties(props: tuple[tuple[str, Predicate], ...]) -> Predicate:
    def check(x: Any) -> bool:
        if not _is_object(x):
            return True
        for name, test in props:
            if name in x and not test(x[name]):
                return False
        return True
    return check


def _one_of(branches: tuple[tuple[tuple[tuple[str, str], ...], Predicate], ...]) -> Predicate:
    def check(x: Any) -> bool:
        is_object = _is_object(x)
        matched = 0
        for discriminators, test in branches:
            if is_object and discriminators:
                skip = False
                for key, want in discriminators:
                    have = x.get(key)
                    if type(have) is not str or have != want:
                        skip = True
                        break
                if skip:
                    continue
            if test(x):
                matched += 1
                if matched > 1:
                    return False
        return matched == 1
    return check


_MISSING = object()


def _specialized(node: Mapping[str, Any], build: Callable[[Any], Predicate],
                 resolve: Callable[[str], Predicate]) -> Predicate | None:
    """One closure for the shapes the event schemas are made of (same result as the generic path).

    - ``{"type": "string", "minLength": n}``, ``{"type": "integer", "minimum": n[, "maximum": m]}``;
    - ``{"type": "object", "required": [...], "properties": {...}}``.
    Anything else returns ``None`` and is compiled keyword by keyword.
    """
    keys = set(node) - _ANNOTATIONS
    kind = node.get("type")
    if keys == {"type", "minLength"} and kind == "string" and type(node["minLength"]) is int:
        n = node["minLength"]
        return lambda x: type(x) is str and len(x) >= n
    if keys == {"type", "minimum"} and kind == "integer" and _is_number(node["minimum"]):
        m = node["minimum"]
        return lambda x: (type(x) is int or (type(x) is float and x.is_integer())) and x >= m
    if keys == {"type", "minimum", "maximum"} and kind == "integer" and _is_number(node["minimum"]) \
            and _is_number(node["maximum"]):
        lo, hi = node["minimum"], node["maximum"]
        return lambda x: (type(x) is int or (type(x) is float and x.is_integer())) and lo <= x <= hi
    if keys <= {"type", "required", "properties"} and kind == "object":
        required = tuple(node.get("required", ()))
        props = tuple((name, build(sub)) for name, sub in node.get("properties", {}).items())

        def check(x: Any) -> bool:
            if type(x) is not dict and not isinstance(x, Mapping):
                return False
            for name in required:
                if name not in x:
                    return False
            for name, test in props:
                value = x.get(name, _MISSING)
                if value is not _MISSING and not test(value):
                    return False
            return True
        return check
    return None


def json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON Schema defines it: numbers by value, booleans apart from numbers."""
    if type(a) is bool or type(b) is bool:
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if _is_number(a) and _is_number(b):
        return a == b
    return type(a) is type(b) and a == b


def compile_schema(schema: Any, root: Mapping[str, Any] | None = None) -> Predicate:
    """Compile ``schema`` (a node of ``root``) into a predicate; raise :class:`UnsupportedSchema`.

    >>> check = compile_schema({"type": "object", "required": ["id"], "properties": {"id": {"minLength": 1}}})
    >>> check({"id": "a"}), check({"id": ""}), check({})
    (True, False, False)
    """
    root = schema if root is None else root
    refs: dict[str, Predicate] = {}

    def resolve(ref: str) -> Predicate:
        if not ref.startswith("#/"):
            raise UnsupportedSchema(f"non-local $ref {ref!r}")
        if ref not in refs:
            node: Any = root
            for part in ref[2:].split("/"):
                node = node[part.replace("~1", "/").replace("~0", "~")]
            refs[ref] = lambda x: False  # placeholder against cycles; replaced below
            compiled = build(node)
            refs[ref] = compiled
        return refs[ref]

    def build(node: Any) -> Predicate:
        if node is True:
            return _always
        if node is False:
            return _never
        if not isinstance(node, Mapping):
            raise UnsupportedSchema(f"schema node {node!r}")
        fast = _specialized(node, build, resolve)
        if fast is not None:
            return fast
        checks: list[Predicate] = []
        for keyword, value in node.items():
            if keyword in _ANNOTATIONS:
                continue
            if keyword == "$ref":
                checks.append(resolve(value))
            elif keyword == "type":
                names = [value] if isinstance(value, str) else list(value)
                tests = tuple(_TYPE_TESTS[n] for n in names)
                checks.append(tests[0] if len(tests) == 1 else _any_of(tests))
            elif keyword == "const":
                checks.append(_const(value))
            elif keyword == "enum":
                checks.append(_enum(tuple(value)))
            elif keyword == "required":
                checks.append(_required(tuple(value)))
            elif keyword == "properties":
                checks.append(_properties(tuple((name, build(sub)) for name, sub in value.items())))
            elif keyword == "minLength":
                checks.append(lambda x, n=value: type(x) is not str or len(x) >= n)
            elif keyword == "minimum":
                checks.append(lambda x, n=value: not _is_number(x) or x >= n)
            elif keyword == "maximum":
                checks.append(lambda x, n=value: not _is_number(x) or x <= n)
            elif keyword == "oneOf":
                branches = tuple((_discriminators(sub), build(sub)) for sub in value)
                checks.append(_one_of(branches))
            else:
                raise UnsupportedSchema(f"keyword {keyword!r}")
        return _all_of(tuple(checks))

    def _discriminators(node: Any) -> tuple[tuple[str, str], ...]:
        """(key, string) pairs a valid object must carry: required keys whose property is a string const.

        Only used when the branch also requires ``type: object``, so a non-matching object can be
        rejected without running the branch (the result is the same, only cheaper).
        """
        while isinstance(node, Mapping) and set(node) - _ANNOTATIONS == {"$ref"}:
            ref = node["$ref"]
            if not ref.startswith("#/"):
                return ()
            node = root
            for part in ref[2:].split("/"):
                node = node[part.replace("~1", "/").replace("~0", "~")]
        if not isinstance(node, Mapping) or node.get("type") != "object":
            return ()
        props = node.get("properties", {})
        return tuple(
            (key, props[key]["const"]) for key in node.get("required", ())
            if isinstance(props.get(key), Mapping) and type(props[key].get("const")) is str
        )

    return build(schema)


@dataclass(frozen=True, slots=True)
class EnvelopeCheck:
    """A loaded envelope schema: ``is_valid`` (fast) and ``explain`` (the reason, from ``jsonschema``)."""

    path: Path
    is_valid: Predicate
    compiled: bool
    """Whether ``is_valid`` is the compiled form (``False``: the ``jsonschema`` fallback)."""
    _validator: Any

    def explain(self, instance: Any) -> str | None:
        """Return why ``instance`` is invalid (``None`` if it is valid), as ``jsonschema`` says it."""
        from jsonschema.exceptions import best_match

        error = best_match(self._validator.iter_errors(instance))
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path)
        return f"{where}: {error.message}" if where else error.message


@lru_cache(maxsize=8)
def load_envelope_check() -> EnvelopeCheck:
    """Load and compile the packaged envelope schema."""
    from jsonschema.validators import validator_for

    path = resources.EVENT_SCHEMA
    schema = resources.read_json(path)
    cls = validator_for(schema)
    cls.check_schema(schema)
    validator = cls(schema)
    try:
        return EnvelopeCheck(path, compile_schema(schema), True, validator)
    except UnsupportedSchema:
        return EnvelopeCheck(path, validator.is_valid, False, validator)

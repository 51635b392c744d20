"""Parse and validate the JSON event envelope with Spark's native expressions (no Python UDF).

Kafka values are parsed once into a VARIANT (``try_parse_json``); every field is then checked by
its JSON type (``schema_of_variant``), so the stream accepts exactly what the engine's
:func:`feed_service.core.events.parse_event` accepts: ``true`` is not an integer, ``5.0`` is not an
integer, ``"5"`` is not an integer, a number is not a string, integers stop at signed 64 bits.
``tests/integration/test_envelope_parity.py`` holds the two parsers together on a generated corpus.

Two gaps of Spark's JSON parser are closed here: it accepts bytes that are not UTF-8 inside strings
(``is_valid_utf8`` rejects them), and it ignores anything after the first JSON value. For the
latter the value is parsed inside an array followed by a sentinel, the SHA-256 of the record
itself: ``[<record>,"<sha>"]`` parses to exactly two elements, the second the sentinel, only when
the record is one JSON value with nothing after it (a record cannot contain its own hash).

:func:`parse_changes` returns one row per Kafka record with the typed event columns, the join key
and ``reject_code``/``reject_reason`` (null for a valid event). The stream splits on that column:
valid rows go to the stateful join, the others to the dead-letter topic (:func:`dead_letters`). A
valid block belongs to two join keys (blocker and blocked); :func:`routed_changes` gives it one row
per key (docs/streaming.md, "Blocks and mutes").
"""

from __future__ import annotations

import operator
from functools import reduce
from typing import TYPE_CHECKING

from feed_service.core.event_kinds import (
    BOOL_RULES,
    ENVELOPE_COLUMNS,
    OPTIONAL_RULES,
    TYPES,
    EventKind,
    FieldSpec,
    Together,
    type_join_keys,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

INT_TYPE = "BIGINT"
STRING_TYPE = "STRING"
BOOLEAN_TYPE = "BOOLEAN"

#: Typed event columns handed to the stateful operator (null where a type has no such field): every
#: field of the registry of event kinds, once, in its order.
EVENT_COLUMNS: tuple[tuple[str, str], ...] = ENVELOPE_COLUMNS


def _kind(field: str) -> "Column":
    """The JSON type of ``field``: NULL when absent, 'VOID' for JSON null, 'BIGINT', 'STRING', ...
    (a column of :func:`_field_views`)."""
    from pyspark.sql import functions as F

    return F.col(f"_kind_{field}")


def _string(field: str) -> "Column":
    """``field`` as a string, NULL when it is not one (a column of :func:`_field_views`)."""
    from pyspark.sql import functions as F

    return F.col(f"_str_{field}")


def _field_views(fields: list[str]) -> list["Column"]:
    """Each field's JSON type and string value, computed once per record in their own projection.

    The checks refer to them dozens of times; written inline, every reference is a copy of the
    variant lookup, and the stream's planner (which copies the plan's expressions per rule) ran out of
    the driver's heap once the registry grew past six event types. As columns referenced more than
    once they stay one expression each (the optimizer does not inline a costly expression into
    several uses)."""
    from pyspark.sql import functions as F

    views = []
    for field in fields:
        views.append(F.expr(f"schema_of_variant(variant_get(v, '$.{field}'))").alias(f"_kind_{field}"))
        views.append(F.expr(f"try_variant_get(v, '$.{field}', 'string')").alias(f"_str_{field}"))
    return views


def _field_fault(spec: FieldSpec) -> "Column":
    """(code, reason) struct when ``spec``'s field breaks its rule, else null; mirrors parse_event."""
    from pyspark.sql import functions as F

    field, kind = spec.name, spec.rule
    t = _kind(field)
    fault = lambda code, reason: F.struct(F.lit(code).alias("code"), reason.alias("reason"))  # noqa: E731
    json_type = BOOLEAN_TYPE if kind in BOOL_RULES else STRING_TYPE
    a_type = "an integer" if kind == "natural" else "a boolean" if kind in BOOL_RULES else "a string"
    wrong = fault("wrong_type", F.concat(F.lit(f"field '{field}' must be {a_type}, got "), F.lower(t)))
    unknown = fault("unknown_value", F.lit(f"field '{field}' must be one of {spec.choices_text()}"))
    if kind in OPTIONAL_RULES:
        rule = F.when(~t.isin("VOID", json_type),
                      fault("wrong_type", F.concat(F.lit(f"field '{field}' must be {a_type} or null, got "),
                                                   F.lower(t))))
        if kind == "optional_id":
            rule = rule.when(_string(field) == "", fault("empty_id", F.lit(f"field '{field}' must not be empty")))
        if kind == "optional_choice":
            rule = rule.when((t == STRING_TYPE) & ~_string(field).isin(*spec.choices), unknown)
        return rule
    rule = F.when(t.isNull(), fault("missing_field", F.lit(f"missing field '{field}'")))
    if kind == "bool":
        return rule.when(t != BOOLEAN_TYPE, wrong)
    if kind == "natural":
        value = F.expr(f"try_variant_get(v, '$.{field}', 'bigint')")
        return rule.when(t != INT_TYPE, wrong).when(
            value < 0, fault("negative_value", F.concat(F.lit(f"field '{field}' must be non-negative, got "),
                                                        value.cast("string"))))
    rule = rule.when(t != STRING_TYPE, wrong)
    if kind == "id":
        rule = rule.when(_string(field) == "", fault("empty_id", F.lit(f"field '{field}' must not be empty")))
    if kind == "choice":
        rule = rule.when(~_string(field).isin(*spec.choices), unknown)
    return rule


def _given(field: str) -> "Column":
    """Whether an optional field is given: present and not JSON null (false, never null)."""
    t = _kind(field)
    return t.isNotNull() & (t != "VOID")


def _together_fault(group: Together) -> "Column":
    """(code, reason) when some of ``group``'s fields are given but not all, else null; mirrors
    parse_event: the reason names the first field given and the first one missing."""
    from pyspark.sql import functions as F

    names = group.names
    rule = None
    for i, given in enumerate(names):
        for j, missing in enumerate(names):
            if i == j:
                continue
            cond = reduce(operator.and_, [_given(given), ~_given(missing), *(~_given(n) for n in names[:i]),
                                          *(_given(n) for n in names[:j])])
            value = F.struct(F.lit(group.code).alias("code"), F.lit(group.reason(given, missing)).alias("reason"))
            rule = F.when(cond, value) if rule is None else rule.when(cond, value)
    assert rule is not None
    return rule


def _first_fault(checks: list["Column"]) -> "Column":
    from pyspark.sql import functions as F

    return F.coalesce(*checks) if len(checks) > 1 else checks[0]


def parse_changes(kafka_df: "DataFrame") -> "DataFrame":
    """Kafka rows -> typed event rows with ``key`` (join key) and ``reject_code``/``reject_reason``.

    One row per record, so counts per source partition stay counts of records (the backfill's read
    stage); a block's ``key`` is its blocker's, the blocked user's copy comes from :func:`routed_changes`.
    """
    from pyspark.sql import functions as F

    fault = lambda code, reason: F.struct(F.lit(code).alias("code"), reason.alias("reason"))  # noqa: E731
    # Event time = the Kafka record timestamp (docs/retention.md); absent in hand-made test frames.
    event_time = (F.expr("unix_millis(timestamp)") if "timestamp" in kafka_df.columns
                  else F.lit(None).cast("bigint"))
    parsed = kafka_df.select(
        F.col("topic"), F.col("partition"), F.col("offset"), event_time.alias("event_time"),
        F.col("value").cast("string").alias("raw"), F.sha2(F.col("value"), 256).alias("sentinel"),
    ).withColumn("wrapped", F.expr("try_parse_json(concat('[', raw, ',\"', sentinel, '\"]'))")).withColumn(
        "v", F.when(F.expr("try_variant_get(wrapped, '$[1]', 'string') = sentinel AND variant_get(wrapped, '$[2]')"
                           " IS NULL"), F.expr("variant_get(wrapped, '$[0]')")))
    fields = list(dict.fromkeys(["type", "op", *(name for name, _ in EVENT_COLUMNS)]))
    parsed = parsed.select("*", *_field_views(fields))

    type_kind, op_kind = _kind("type"), _kind("op")
    type_s, op_s = _string("type"), _string("op")
    is_type = lambda name: (type_kind == STRING_TYPE) & (type_s == name)  # noqa: E731
    is_op = lambda name: (op_kind == STRING_TYPE) & (op_s == name)  # noqa: E731
    op_name = F.coalesce(F.expr("to_json(variant_get(v, '$.op'))"), F.lit("null"))
    type_name = F.coalesce(F.expr("to_json(variant_get(v, '$.type'))"), F.lit("null"))

    def kind_faults(kind: EventKind) -> "Column":
        """The first fault of a record of ``kind``: its fields in declaration order (those only
        some ops carry, under those ops), the fields that go together, then the self-edge rule, as
        ``parse_event`` checks them."""
        rules = [_field_fault(f) if not f.ops
                 else F.when(reduce(operator.or_, (is_op(op) for op in f.ops)), _field_fault(f))
                 for f in kind.fields]
        rules += [_together_fault(group) for group in kind.together]
        if kind.edge is not None and kind.edge.self_code is not None:
            subject, target = kind.edge.subject, kind.edge.target
            rules.append(F.when(_string(subject) == _string(target),
                                fault(kind.edge.self_code,
                                      F.concat(F.lit(f"self-{kind.type} of '"), _string(subject), F.lit("'")))))
        return _first_fault(rules)

    fault_col = (
        F.when(F.col("raw").isNull(), fault("bad_json", F.lit("bad JSON: empty record")))
        .when(~F.expr("is_valid_utf8(raw)"), fault("bad_json", F.lit("bad JSON: not UTF-8")))
        .when(F.col("v").isNull(), fault("bad_json", F.lit("bad JSON")))
        .when(~F.expr("schema_of_variant(v)").startswith("OBJECT"),
              fault("not_object", F.concat(F.lit("event must be a JSON object, got "),
                                           F.lower(F.expr("schema_of_variant(v)")))))
        .when(type_kind.isNull(), fault("missing_field", F.lit("missing field 'type'")))
    )
    for type_, kinds in TYPES.items():
        if not kinds[0].ops:  # a type without ops has one kind
            fault_col = fault_col.when(is_type(type_), kind_faults(kinds[0]))
            continue
        fault_col = fault_col.when(is_type(type_) & op_kind.isNull(), fault("missing_field", F.lit("missing field 'op'")))
        for kind in kinds:
            fault_col = fault_col.when(is_type(type_) & reduce(operator.or_, (is_op(op) for op in kind.ops)),
                                       kind_faults(kind))
        fault_col = fault_col.when(is_type(type_), fault("unknown_op", F.concat(F.lit(f"unknown {type_} op "), op_name)))
    fault_col = fault_col.otherwise(fault("unknown_type", F.concat(F.lit("unknown event type "), type_name)))

    def typed_column(name: str, sql_type: str) -> "Column":
        """The field's value, or null in a row whose op does not carry it (an unrepost's created_at)."""
        value = F.expr(f"try_variant_get(v, '$.{name}', '{sql_type}')")
        for kind in (k for kinds in TYPES.values() for k in kinds):
            for f in kind.fields:
                if f.name == name and f.ops:
                    value = F.when(is_type(kind.type) & ~reduce(operator.or_, (is_op(op) for op in f.ops)),
                                   F.lit(None).cast(sql_type)).otherwise(value)
        return value.alias(name)

    typed = [typed_column(name, sql_type) for name, sql_type in EVENT_COLUMNS]
    out = parsed.select("topic", "partition", "offset", "event_time", "raw", fault_col.alias("fault"), *typed)
    # The first join key of the row's type; a block's second (the blocked user's) comes from routed_changes.
    key = None
    for type_ in TYPES:
        rule = (F.col("type") == type_, F.col(type_join_keys(type_)[0]))
        key = F.when(*rule) if key is None else key.when(*rule)
    return out.select(
        "topic", "partition", "offset", "event_time", "raw",
        F.col("fault.code").alias("reject_code"), F.col("fault.reason").alias("reject_reason"),
        key.alias("key"), *(name for name, _ in EVENT_COLUMNS),
    )


#: ``route`` of a row headed for the join (grouped by its join key) or for the dead-letter topic.
ROUTE_JOIN = "join"
ROUTE_DEAD_LETTER = "dead_letter"


def routed_changes(parsed: "DataFrame") -> "DataFrame":
    """Every row, valid or not, for one stateful query: ``route``, ``key``, event columns,
    ``event_time`` (Kafka timestamp, ms), ``dl_key`` (the source record's topic/partition/offset: a
    valid change may still become a dead letter, ``beyond_horizon``) and for rejected rows the
    dead-letter value (``dl_value``) built here in the JVM.

    Rejected rows are grouped under one key per source topic so they cost one call per batch, and
    the sink publishes them; one query reads the topics once (a second query for dead letters would
    double the per-batch fixed cost on a small machine).

    A valid block leaves as two rows, one for the blocker's key and one for the blocked user's (each
    key's step needs it: :func:`feed_service.core.events.join_keys`), one row per distinct key (any
    kind of two join keys); every other row stays one row, a rejected block included, so its dead
    letter is published once. The split is an ``explode`` of
    the row's keys in the same projection: no second pass over the source, and for an ordinary row a
    one-element array.
    """
    from pyspark.sql import functions as F

    rejected = F.col("reject_code").isNotNull()
    letter_key, letter_value = dead_letter_columns()
    keys = F.when(rejected, F.array(F.col("topic")))
    for type_ in TYPES:  # the types whose changes belong to two keys (a block, a repost), each key once
        if len(type_join_keys(type_)) > 1:
            keys = keys.when(F.col("type") == type_,
                             F.array_distinct(F.array(*(F.col(name) for name in type_join_keys(type_)))))
    keys = keys.otherwise(F.array(F.col("key")))
    return parsed.select(
        F.when(rejected, F.lit(ROUTE_DEAD_LETTER)).otherwise(F.lit(ROUTE_JOIN)).alias("route"),
        F.explode(keys).alias("key"),
        *(name for name, _ in EVENT_COLUMNS),
        F.col("event_time"),
        letter_key.alias("dl_key"),
        F.when(rejected, letter_value).alias("dl_value"),
    )


def dead_letter_columns() -> tuple["Column", "Column"]:
    """(key, value) of a rejected row's dead-letter record: key = source topic/partition/offset,
    value = JSON with the reason, the source coordinates and the raw record."""
    from pyspark.sql import functions as F

    key = F.concat_ws("/", "topic", F.col("partition").cast("string"), F.col("offset").cast("string"))
    value = F.to_json(F.struct(
        F.col("reject_code").alias("reason_code"),
        F.col("reject_reason").alias("reason"),
        F.col("topic").alias("source_topic"),
        F.col("partition").alias("source_partition"),
        F.col("offset").alias("source_offset"),
        F.col("raw").alias("value"),
    ))
    return key, value


def dead_letters(parsed: "DataFrame") -> "DataFrame":
    """Rejected rows as Kafka records (``key``, ``value``) for the dead-letter topic."""
    from pyspark.sql import functions as F

    key, value = dead_letter_columns()
    return parsed.where(F.col("reject_code").isNotNull()).select(key.alias("key"), value.alias("value"))

"""The Grafana dashboard (k8s/monitoring/grafana-dashboard.json) as the tests see it: its PromQL
expressions and the metric names they use, and the series names a Prometheus text page exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

DASHBOARD = Path(__file__).resolve().parents[1] / "k8s" / "monitoring" / "grafana-dashboard.json"

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_VARIABLES = re.compile(r"\$\{?\w+\}?")
_IDENTIFIER = re.compile(r"(?<![\w.:])([a-zA-Z_:][\w:]*)(\s*\()?")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
             "group_right", "inf", "nan", "atan2"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (not functions, labels, keywords or variables).

    >>> sorted(metric_names('histogram_quantile(0.99, sum by (le, method) (rate(a_bucket{code="OK"}[5m])))'
    ...                     ' / on (method) b_total[$__rate_interval] + time() - max(c)'))
    ['a_bucket', 'b_total', 'c']
    """
    text = _STRINGS.sub('""', expr)
    text = _VARIABLES.sub("", text)
    while True:  # nested braces and brackets do not occur, but subqueries may repeat
        stripped = _RANGES.sub("", _MATCHERS.sub("", text))
        if stripped == text:
            break
        text = stripped
    text = _GROUPING.sub("", text)
    return {m.group(1) for m in _IDENTIFIER.finditer(text)
            if not m.group(2) and m.group(1).lower() not in _KEYWORDS}


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels") or [])  # a collapsed row holds its panels


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def expressions(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expression) of every query of every panel."""
    return [(panel.get("title", ""), target["expr"]) for panel in _panels(dashboard.get("panels") or [])
            for target in panel.get("targets") or [] if target.get("expr")]


def dashboard_metric_names(dashboard: dict[str, Any] | None = None) -> set[str]:
    """Every metric name the dashboard's queries use."""
    return {name for _, expr in expressions(dashboard or load()) for name in metric_names(expr)}


def exported_names(text: str) -> dict[str, float]:
    """Series names of a Prometheus text page (``x_total``, ``x_bucket``, plain gauges), each with the
    sum of its samples' values."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out

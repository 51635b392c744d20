"""FEED_INACTIVE_AFTER_S and FEED_READ_REPORT_INTERVAL_S: parsed, validated, carried to child
processes and set in the Kubernetes config map (docs/activity.md#read-activity)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from feed_service.errors import ConfigError
from feed_service.settings import (
    DEFAULT_INACTIVE_AFTER_S,
    DEFAULT_READ_REPORT_INTERVAL_S,
    Settings,
)

K8S = Path(__file__).resolve().parents[2] / "k8s"


def test_defaults_are_thirty_days_and_an_hour() -> None:
    for settings in (Settings(), Settings.from_env({})):
        assert settings.inactive_after_s == DEFAULT_INACTIVE_AFTER_S == 2_592_000
        assert settings.read_report_interval_s == DEFAULT_READ_REPORT_INTERVAL_S == 3600


def test_values_from_the_environment_and_back() -> None:
    settings = Settings.from_env({"FEED_INACTIVE_AFTER_S": "86400", "FEED_READ_REPORT_INTERVAL_S": "600"})
    assert (settings.inactive_after_s, settings.read_report_interval_s) == (86400, 600)
    assert Settings.from_env(settings.to_env()) == settings


def test_zero_turns_inactivity_off_and_any_interval_goes() -> None:
    settings = Settings.from_env({"FEED_INACTIVE_AFTER_S": "0", "FEED_READ_REPORT_INTERVAL_S": "999999999"})
    assert settings.inactive_after_s == 0


@pytest.mark.parametrize("env, message", [
    ({"FEED_INACTIVE_AFTER_S": "3600"}, "must be less than FEED_INACTIVE_AFTER_S"),
    ({"FEED_INACTIVE_AFTER_S": "100", "FEED_READ_REPORT_INTERVAL_S": "100"}, "must be less than"),
    ({"FEED_READ_REPORT_INTERVAL_S": "0"}, "FEED_READ_REPORT_INTERVAL_S must be an integer number of seconds >= 1"),
    ({"FEED_INACTIVE_AFTER_S": "-1"}, "FEED_INACTIVE_AFTER_S must be an integer number of seconds >= 0"),
    ({"FEED_INACTIVE_AFTER_S": "soon"}, "invalid FEED_"),
    ({"FEED_READ_REPORT_INTERVAL_S": "1.5"}, "invalid FEED_"),
])
def test_invalid_values_fail_with_a_clear_error(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.from_env(env)


def test_replace_validates_too() -> None:
    with pytest.raises(ConfigError, match="must be less than"):
        Settings().replace(read_report_interval_s=DEFAULT_INACTIVE_AFTER_S)
    with pytest.raises(ConfigError):
        Settings().replace(inactive_after_s=True)


def test_the_group_follows_the_topic_name() -> None:
    assert Settings().read_activity_group == "feed-read-activity.feed.reads.v1"
    assert Settings().with_topic_suffix(".t1").read_activity_group == "feed-read-activity.feed.reads.v1.t1"


def test_the_config_map_sets_both() -> None:
    data = next(doc for doc in yaml.safe_load_all((K8S / "configmap.yaml").read_text())
                if doc and doc.get("kind") == "ConfigMap")["data"]
    settings = Settings.from_env(data)
    assert (settings.inactive_after_s, settings.read_report_interval_s) == (2_592_000, 3600)

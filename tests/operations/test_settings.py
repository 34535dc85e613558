"""Settings from the environment: defaults, and a bad value stops the start naming itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gql_presence.settings import Settings, SettingsError


def test_defaults_are_those_of_the_contract() -> None:
    settings = Settings.from_env({"HOME": "/home/x"})
    assert settings.redis_url is None
    assert settings.window_ms == 600_000
    assert settings.retention_ms == 35 * 86_400_000
    assert settings.revoke_ms == settings.window_ms
    assert settings.stats_timezone == "UTC"
    assert settings.analytics_ms == 400 * 86_400_000
    assert settings.hourly_ms == 14 * 86_400_000


def test_values_are_read() -> None:
    settings = Settings.from_env(
        {
            "REDIS_URL": "redis://cache:6379/2",
            "PRESENCE_WINDOW_SECONDS": "90",
            "PRESENCE_RETENTION_DAYS": "7",
            "PRESENCE_REVOKE_SECONDS": "0",
            "PRESENCE_STATS_TIMEZONE": "Europe/Berlin",
            "PRESENCE_DATA_DIR": "/srv/presence",
            "PRESENCE_ANALYTICS_DAYS": "90",
            "PRESENCE_HOURLY_DAYS": "3",
        }
    )
    assert settings.analytics_ms == 90 * 86_400_000
    assert settings.hourly_ms == 3 * 86_400_000
    assert settings.redis_url == "redis://cache:6379/2"
    assert (settings.window_ms, settings.retention_ms, settings.revoke_ms) == (
        90_000,
        7 * 86_400_000,
        0,
    )
    assert settings.stats_timezone == "Europe/Berlin"
    assert settings.data_dir == Path("/srv/presence")


def test_the_bounds_of_friend_sets_and_sessions_are_read() -> None:
    defaults = Settings.from_env({})
    assert (defaults.max_friends, defaults.max_sessions) == (5000, 100)
    settings = Settings.from_env({"PRESENCE_MAX_FRIENDS": "200", "PRESENCE_MAX_SESSIONS": "8"})
    assert (settings.max_friends, settings.max_sessions) == (200, 8)


def test_revocation_follows_the_window_by_default() -> None:
    assert Settings.from_env({"PRESENCE_WINDOW_SECONDS": "30"}).revoke_ms == 30_000


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PRESENCE_WINDOW_SECONDS", "ten"),
        ("PRESENCE_WINDOW_SECONDS", "0"),
        ("PRESENCE_WINDOW_SECONDS", "-5"),
        ("PRESENCE_WINDOW_SECONDS", "nan"),
        ("PRESENCE_RETENTION_DAYS", "0"),
        ("PRESENCE_RETENTION_DAYS", "0.000001"),
        ("PRESENCE_ANALYTICS_DAYS", "0"),
        ("PRESENCE_ANALYTICS_DAYS", "a year"),
        ("PRESENCE_HOURLY_DAYS", "0"),
        ("PRESENCE_REVOKE_SECONDS", "-1"),
        ("PRESENCE_STATS_TIMEZONE", "Mars/Olympus"),
        ("PRESENCE_STATS_TIMEZONE", "../../etc/passwd"),
        ("PRESENCE_SUBSCRIBER_BUFFER", "0"),
        ("PRESENCE_SUBSCRIBER_BUFFER", "many"),
        ("PRESENCE_MAX_FRIENDS", "0"),
        ("PRESENCE_MAX_FRIENDS", "lots"),
        ("PRESENCE_MAX_FRIENDS", "10001"),
        ("PRESENCE_MAX_SESSIONS", "0"),
        ("PRESENCE_MAX_SESSIONS", "-3"),
        ("REDIS_URL", "localhost:6379"),
        ("REDIS_URL", "http://example"),
        ("PRESENCE_GRAPHIQL", "maybe"),
        ("PRESENCE_ALLOW_OPEN", "yes please"),
        ("PRESENCE_REQUEST_TIMEOUT_SECONDS", "0"),
        ("PRESENCE_USER_RATE_LIMIT", "-1"),
        ("PRESENCE_BACKEND_RATE_LIMIT", "fast"),
        ("PRESENCE_BACKEND_TOKENS", "no-colon-here-and-long-enough-to-be-a-token"),
        ("PRESENCE_SHARDS", "0"),
        ("PRESENCE_SHARDS", "three"),
        ("PRESENCE_SHARDS", "1025"),
        ("REDIS_CLUSTER_NODES", "redis-1"),
        ("REDIS_CLUSTER_NODES", "redis-1:6379,redis-2:port"),
        ("REDIS_CLUSTER_NODES", "redis-1:70000"),
    ],
)
def test_a_bad_value_is_refused_naming_the_setting(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        Settings.from_env({name: value})


def test_shards_and_cluster_nodes_are_read() -> None:
    assert (Settings.from_env({}).shards, Settings.from_env({}).redis_cluster_nodes) == (1, ())
    settings = Settings.from_env(
        {"PRESENCE_SHARDS": "12", "REDIS_CLUSTER_NODES": "redis-1:6379, 10.0.0.2:7000,[::1]:7001"}
    )
    assert settings.shards == 12
    assert settings.redis_cluster_nodes == (("redis-1", 6379), ("10.0.0.2", 7000), ("::1", 7001))
    assert settings.redis_url is None


def test_the_clusters_user_and_password_are_read_and_kept_out_of_the_repr() -> None:
    settings = Settings.from_env(
        {
            "REDIS_CLUSTER_NODES": "redis-1:6379",
            "REDIS_CLUSTER_USERNAME": "presence",
            "REDIS_CLUSTER_PASSWORD": "s3cret-password",
        }
    )
    assert (settings.redis_cluster_username, settings.redis_cluster_password) == (
        "presence",
        "s3cret-password",
    )
    assert "s3cret-password" not in repr(settings)


def test_the_cursor_secret_is_read_checked_for_length_and_kept_out_of_the_repr() -> None:
    chosen = "a-cursor-chosen-of-forty-characters-long"
    settings = Settings.from_env({"PRESENCE_CURSOR_SECRET": chosen})
    assert settings.cursor_secret == chosen
    assert chosen not in repr(settings)
    assert Settings.from_env({}).cursor_secret is None
    with pytest.raises(SettingsError, match="PRESENCE_CURSOR_SECRET is too short: use at least 32"):
        Settings.from_env({"PRESENCE_CURSOR_SECRET": "short-secret"})


def test_a_password_in_redis_url_stays_out_of_the_repr_and_of_errors() -> None:
    settings = Settings.from_env({"REDIS_URL": "redis://:pw-secret@cache:6379/0"})
    assert settings.redis_url == "redis://:pw-secret@cache:6379/0"
    assert "pw-secret" not in repr(settings)
    with pytest.raises(SettingsError, match=r"'http://user:\*\*\*@cache:6379/0'") as refused:
        Settings.from_env({"REDIS_URL": "http://user:pw-secret@cache:6379/0"})
    assert "pw-secret" not in str(refused.value)


@pytest.mark.parametrize("name", ["REDIS_CLUSTER_USERNAME", "REDIS_CLUSTER_PASSWORD"])
def test_a_cluster_credential_without_a_cluster_is_refused(name: str) -> None:
    with pytest.raises(SettingsError, match=r"redis://user:password@"):
        Settings.from_env({name: "x", "REDIS_URL": "redis://cache:6379/0"})


def test_a_redis_and_a_cluster_are_not_both_given() -> None:
    with pytest.raises(SettingsError, match="REDIS_URL or REDIS_CLUSTER_NODES"):
        Settings.from_env({"REDIS_URL": "redis://cache:6379/0", "REDIS_CLUSTER_NODES": "a:1"})


def test_production_switches_and_rate_limits_are_read() -> None:
    settings = Settings.from_env(
        {
            "PRESENCE_GRAPHIQL": "false",
            "PRESENCE_INTROSPECTION": "off",
            "PRESENCE_QUERIES_OVER_GET": "true",
            "PRESENCE_REQUEST_TIMEOUT_SECONDS": "2.5",
            "PRESENCE_USER_RATE_LIMIT": "0.5",
            "PRESENCE_BACKEND_RATE_LIMIT": "2000",
            "PRESENCE_BACKEND_RATE_BURST": "500",
        }
    )
    assert (settings.graphiql, settings.introspection, settings.queries_over_get) == (
        False,
        False,
        True,
    )
    assert settings.request_timeout_ms == 2500
    assert (settings.user_rate, settings.user_burst) == (0.5, 1)  # at least one at once
    assert (settings.backend_rate, settings.backend_burst) == (2000, 500)
    assert not settings.secured


def test_workers_are_one_per_core_unless_set() -> None:
    assert Settings.from_env({}).workers == (os.cpu_count() or 1)
    assert Settings.from_env({"PRESENCE_WORKERS": "3"}).workers == 3
    for bad in ("0", "two"):
        with pytest.raises(SettingsError, match="PRESENCE_WORKERS"):
            Settings.from_env({"PRESENCE_WORKERS": bad})


@pytest.mark.parametrize(
    ("name", "value", "allowed"),
    [
        ("PRESENCE_WINDOW_SECONDS", "0", "use a positive number, e.g. 600."),
        ("PRESENCE_RETENTION_DAYS", "soon", "use a positive number, e.g. 35."),
        ("PRESENCE_REVOKE_SECONDS", "-1", "use 0 or more, e.g. 600."),
    ],
)
def test_a_bad_duration_is_told_what_is_allowed(name: str, value: str, allowed: str) -> None:
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({name: value})
    assert str(refused.value) == f"{name}={value!r} is not valid: {allowed}"


def test_webhooks_reach_no_special_network_and_wait_five_seconds_by_default() -> None:
    settings = Settings.from_env({})
    assert settings.webhook_allowed_networks == ()
    assert settings.webhook_timeout_ms == 5000
    assert settings.webhook_disable_after_ms == 86_400_000
    assert settings.webhook_retry_ms == (1000, 5000, 30_000, 120_000, 600_000, 1_800_000, 3_600_000)
    assert (settings.webhook_lease_ms, settings.webhook_poll_ms) == (10_000, 250)
    assert settings.webhook_batch_wait_ms == 1000


def test_webhook_settings_are_read() -> None:
    settings = Settings.from_env(
        {
            "PRESENCE_WEBHOOK_ALLOWED_NETWORKS": "10.0.0.0/8, fd00::/8 127.0.0.1",
            "PRESENCE_WEBHOOK_TIMEOUT_SECONDS": "2.5",
            "PRESENCE_WEBHOOK_DISABLE_AFTER_SECONDS": "600",
            "PRESENCE_WEBHOOK_RETRY_SECONDS": "0.5, 2,10",
            "PRESENCE_WEBHOOK_LEASE_SECONDS": "3",
            "PRESENCE_WEBHOOK_POLL_SECONDS": "0.1",
            "PRESENCE_WEBHOOK_BATCH_WAIT_SECONDS": "0",
        }
    )
    assert settings.webhook_batch_wait_ms == 0
    assert settings.webhook_disable_after_ms == 600_000
    assert settings.webhook_retry_ms == (500, 2000, 10_000)
    assert (settings.webhook_lease_ms, settings.webhook_poll_ms) == (3000, 100)
    assert [str(n) for n in settings.webhook_allowed_networks] == [
        "10.0.0.0/8",
        "fd00::/8",
        "127.0.0.1/32",
    ]
    assert settings.webhook_timeout_ms == 2500


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("PRESENCE_WEBHOOK_ALLOWED_NETWORKS", "10.0.0.0/33", "'10.0.0.0/33' is not a network"),
        ("PRESENCE_WEBHOOK_ALLOWED_NETWORKS", "intranet", "'intranet' is not a network"),
        ("PRESENCE_WEBHOOK_TIMEOUT_SECONDS", "0", "PRESENCE_WEBHOOK_TIMEOUT_SECONDS='0'"),
        ("PRESENCE_WEBHOOK_RETRY_SECONDS", "1,soon", "positive numbers separated by commas"),
        ("PRESENCE_WEBHOOK_RETRY_SECONDS", ",", "positive numbers separated by commas"),
        ("PRESENCE_WEBHOOK_LEASE_SECONDS", "-1", "PRESENCE_WEBHOOK_LEASE_SECONDS='-1'"),
        ("PRESENCE_WEBHOOK_BATCH_WAIT_SECONDS", "soon", "use 0 or more, e.g. 1"),
    ],
)
def test_a_bad_webhook_setting_stops_the_start_naming_itself(
    name: str, value: str, said: str
) -> None:
    with pytest.raises(SettingsError, match=said):
        Settings.from_env({name: value})

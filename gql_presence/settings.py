"""Settings, read once from the environment at start-up.

Every setting is checked before anything starts: a bad value stops the service with a
message that names the variable, so it never runs on a half-understood configuration.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_MS_PER_SECOND = 1000
_MS_PER_DAY = 86_400_000
_REDIS_SCHEMES = ("redis", "rediss", "unix")


class SettingsError(ValueError):
    """A setting has a value the service cannot run with."""


@dataclass(frozen=True)
class Settings:
    # The Redis to use; None starts the embedded Redis that keeps its data in data_dir.
    redis_url: str | None = None
    # A session is live while its last activity is at most this old.
    window_ms: int = 600 * _MS_PER_SECOND
    # How long last-seen times and daily activity are kept.
    retention_ms: int = 35 * _MS_PER_DAY
    # How long a kicked session id is refused.
    revoke_ms: int = 600 * _MS_PER_SECOND
    # Where a day starts and ends, for weeklyStats.
    stats_timezone: str = "UTC"
    # Where the embedded Redis keeps its append-only file.
    data_dir: Path = Path.home() / ".local" / "share" / "gql-presence"
    # How often each API process runs the bounded sweep of expired presence, ms.
    sweep_interval_ms: int = 1000
    # How many events may wait for one subscriber before it is dropped as too slow.
    subscriber_buffer: int = 1000
    # "text" for people, "json" for log collectors: one JSON object per line.
    log_format: str = "text"
    # Worker processes of `gql-presence serve`, sharing one port; 1 serves in one process.
    workers: int = 1

    @property
    def stats_zone(self) -> ZoneInfo:
        return ZoneInfo(self.stats_timezone)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        window_ms = _duration_ms(env, "PRESENCE_WINDOW_SECONDS", 600, _MS_PER_SECOND)
        retention_ms = _duration_ms(env, "PRESENCE_RETENTION_DAYS", 35, _MS_PER_DAY)
        if retention_ms < window_ms:
            raise SettingsError(
                "PRESENCE_RETENTION_DAYS must be at least the presence window "
                f"(PRESENCE_WINDOW_SECONDS={window_ms / _MS_PER_SECOND:g})."
            )
        revoke_ms = _duration_ms(
            env,
            "PRESENCE_REVOKE_SECONDS",
            window_ms / _MS_PER_SECOND,
            _MS_PER_SECOND,
            allow_zero=True,
        )
        return cls(
            redis_url=_redis_url(env),
            window_ms=window_ms,
            retention_ms=retention_ms,
            revoke_ms=revoke_ms,
            stats_timezone=_timezone(env),
            data_dir=_data_dir(env),
            subscriber_buffer=_count(env, "PRESENCE_SUBSCRIBER_BUFFER", 1000),
            log_format=_choice(env, "PRESENCE_LOG_FORMAT", ("text", "json")),
            workers=_count(env, "PRESENCE_WORKERS", os.cpu_count() or 1),
        )


def _duration_ms(
    env: Mapping[str, str], name: str, default: float, unit_ms: int, *, allow_zero: bool = False
) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return round(default * unit_ms)
    lowest = "0" if allow_zero else "a positive number"
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise SettingsError(f"{name}={raw!r} is not valid: use {lowest} or more, e.g. {default:g}.")
    ms = round(value * unit_ms)
    if ms == 0 and not allow_zero:
        raise SettingsError(f"{name}={raw!r} is shorter than one millisecond.")
    return ms


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise SettingsError(
            f"{name}={raw!r} is not valid: use a whole number of 1 or more, e.g. {default}."
        )
    return int(raw)


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    raw = env.get(name, "").strip() or choices[0]
    if raw not in choices:
        raise SettingsError(f"{name}={raw!r} is not valid: use one of {', '.join(choices)}.")
    return raw


def _redis_url(env: Mapping[str, str]) -> str | None:
    raw = env.get("REDIS_URL", "").strip()
    if not raw:
        return None
    parts = urlsplit(raw)
    if parts.scheme not in _REDIS_SCHEMES or not (parts.hostname or parts.path):
        raise SettingsError(
            f"REDIS_URL={raw!r} is not a Redis URL: use redis://host:port/db, "
            "rediss://host:port/db or unix:///path/to/redis.sock, or leave it unset "
            "for the embedded Redis."
        )
    return raw


def _timezone(env: Mapping[str, str]) -> str:
    raw = env.get("PRESENCE_STATS_TIMEZONE", "").strip() or "UTC"
    try:
        ZoneInfo(raw)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise SettingsError(
            f"PRESENCE_STATS_TIMEZONE={raw!r} is not an IANA time zone name "
            "(for example UTC, Europe/Berlin, America/New_York)."
        ) from error
    return raw


def _data_dir(env: Mapping[str, str]) -> Path:
    raw = env.get("PRESENCE_DATA_DIR", "").strip()
    if raw:
        return Path(raw).expanduser()
    xdg = env.get("XDG_DATA_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "gql-presence"

"""User-facing errors: the CLI prints their message on one line and exits non-zero."""

from __future__ import annotations


class HarnessError(Exception):
    """Bad input or an unusable environment, described in words a user can act on."""


class ConfigError(HarnessError, ValueError):
    """A configuration value is missing, unknown or out of range; the message names the key, and
    ``key`` holds it where one key is at fault (None otherwise)."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class DataError(HarnessError):
    """A data file is missing or malformed; the message names the file and, where known, the line."""


def require(cond: bool, key: str, rule: str, value: object) -> None:
    """Refuse a config value: ``ConfigError("{key} must be {rule}, got {value!r}")`` unless ``cond``.

    >>> require(0.5 <= 1.0, "curriculum.delta", "in (0, 1]", 0.5)
    >>> require(1.5 <= 1.0, "curriculum.delta", "in (0, 1]", 1.5)
    Traceback (most recent call last):
    ...
    harness.errors.ConfigError: curriculum.delta must be in (0, 1], got 1.5
    """
    if not cond:
        raise ConfigError(f"{key} must be {rule}, got {value!r}", key=key)

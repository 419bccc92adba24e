"""User-facing errors: the CLI prints their message on one line and exits non-zero."""

from __future__ import annotations


class HarnessError(Exception):
    """Bad input or an unusable environment, described in words a user can act on."""


class ConfigError(HarnessError, ValueError):
    """A configuration value is missing, unknown or out of range; the message names the key."""


class DataError(HarnessError):
    """A data file is missing or malformed; the message names the file and, where known, the line."""

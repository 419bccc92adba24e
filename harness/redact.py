"""What a message may show of a secret: credentials in a URI (``https://user:pw@host``,
``postgresql://user:pw@db``) become ``***``; the names that mark a setting as secret.

One helper for every layer that prints or records a URI: the CLI's error line, the driver's
progress lines, validate's plan, ``harness submit``'s summary, MLflow params.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

__all__ = ["SECRET_MARKERS", "redact_text", "redact_uri", "strip_credentials", "uri_has_credentials"]

# Substrings of a key (an env var, an MLflow param) that mark its value as secret.
SECRET_MARKERS = ("token", "password", "secret", "credential", "auth")

# scheme://userinfo@ : the userinfo of any URI inside a longer text (up to the first "@" with no
# "/" or whitespace before it).
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s@]+)@")


def redact_uri(uri: str) -> str:
    """``https://user:pw@host/x`` -> ``https://***@host/x``; other strings unchanged.

    >>> redact_uri("https://alice:s3cret@mlflow.example/api")
    'https://***@mlflow.example/api'
    >>> redact_uri("sqlite:////tmp/mlflow.db")
    'sqlite:////tmp/mlflow.db'
    """
    try:
        parts = urlsplit(uri)
        if parts.username is None and parts.password is None:
            return uri
    except ValueError:  # a malformed URI (an unclosed "[", a port out of range): redact its text
        return redact_text(uri)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))


def redact_text(text: str) -> str:
    """``text`` with the credentials of every URI in it replaced by ``***``.

    >>> redact_text("tracking URI http://bob:pw@10.0.0.5:5000 is not reachable")
    'tracking URI http://***@10.0.0.5:5000 is not reachable'
    """
    return _USERINFO.sub(lambda m: f"{m['scheme']}***@", text)


def uri_has_credentials(uri: str) -> bool:
    return "://" in uri and redact_text(uri) != uri


def strip_credentials(uri: str) -> str:
    """``uri`` without its userinfo: what a probe that needs no login sends."""
    return _USERINFO.sub(lambda m: m["scheme"], uri)

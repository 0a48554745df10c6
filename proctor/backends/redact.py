"""Keep credentials out of what proctor prints and records: URLs' passwords, API keys, bearer tokens."""

from __future__ import annotations

import re
import urllib.parse
from typing import Iterable, Optional

_BEARER = re.compile(r"(?i)\b(bearer\s+)[^\s\"',;}\]]+")
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]*):[^/\s@]*@")


def url_password(url: str) -> Optional[str]:
    """Return the password in the URL's user info (None when it has none or does not parse)."""
    try:
        return urllib.parse.urlsplit(url).password
    except ValueError:
        return None


def redact_url(url: str) -> str:
    """`url` with the password of its user info (if any) replaced by ***."""
    return _URL_PASSWORD.sub(r"\1:***@", url)


def strip_credentials(url: str) -> str:
    """`url` without any user info: what identifies the server, not who logs in."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return redact_url(url)
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=host))


def redact(text: str, secrets: Iterable[Optional[str]] = ()) -> str:
    """`text` with every given secret, bearer token and URL password replaced by ***."""
    for secret in secrets:
        if secret and len(secret) >= 4:  # shorter "secrets" would blank out ordinary words
            text = text.replace(secret, "***")
    return redact_url(_BEARER.sub(r"\1***", text))

"""Keep credentials out of what proctor prints and records: URLs' user info, API keys, bearer and basic tokens.

A URL's user info is what precedes the LAST `@` of its authority (RFC 3986: the authority
ends at the first `/`, `?` or `#`), so `http://user:p4ss@word@host/v1` is user `user`,
password `p4ss@word`. Shown, a URL keeps its user name and loses its password
(`http://user:***@host/v1`); a user name without a password is taken for a token and
goes too (`http://***@host/v1`), as pip does.

`Secrets` blanks every form in which a text can hold a credential: raw, percent-encoded
(either case of hex digit, `+` or `%20` for a space), base64 (standard or URL-safe, with
or without padding: a `Basic` header is base64 of `user:password`), JSON- or
repr-escaped, and any prefix of those of at least `MIN_PREFIX` characters (what a server
that cuts its own echo leaves). Redact before cutting a text: a cut can leave a prefix
too short to recognise.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from typing import Iterable, Optional

MIN_SECRET = 4   # shorter "secrets" would blank out ordinary words
MIN_PREFIX = 6   # a prefix of a secret's form this long (or the whole form) is blanked wherever it appears
_BEARER = re.compile(r"(?i)\b(bearer\s+)[^\s\"',;}\]]+")
_BASIC = re.compile(r"(?i)\b(basic\s+)([A-Za-z0-9+/_-]{4,}=*)")
_USER_INFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^\s/?#]*)@")  # greedy: to the authority's last @


def split_user_info(url: str) -> tuple[str, Optional[str], Optional[str]]:
    """Return `url` without its user info, and the user name and password (percent-decoded) it held.

    The user info ends at the last `@` of the authority (RFC 3986); (url, None, None) without one.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url, None, None
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    user_info, at, host = rest[:end].rpartition("@")
    if not at:
        return url, None, None
    user, colon, password = user_info.partition(":")
    return (f"{scheme}://{host}{rest[end:]}", urllib.parse.unquote(user),
            urllib.parse.unquote(password) if colon else None)


def url_password(url: str) -> Optional[str]:
    """Return the (percent-decoded) password in the URL's user info, None when it has none."""
    return split_user_info(url)[2]


def _shown_user_info(match: re.Match) -> str:
    user, colon, _ = match.group(2).partition(":")
    return f"{match.group(1)}{user}:***@" if colon else f"{match.group(1)}***@"


def redact_url(url: str) -> str:
    """`url` (or any text) with every URL's password replaced by *** (a user name alone too: a token)."""
    return _USER_INFO.sub(_shown_user_info, url)


def strip_credentials(url: str) -> str:
    """`url` without any user info: what identifies the server, not who logs in."""
    return split_user_info(url)[0]


def _shown_basic(match: re.Match) -> str:
    """Return a `Basic <token>` as *** where the token is base64 with a `:` in it (a user:password, not a word)."""
    token = match.group(2)
    try:
        decoded = base64.b64decode(token[: len(token) // 4 * 4].replace("-", "+").replace("_", "/"))
    except ValueError:
        return match.group()
    return match.group(1) + "***" if b":" in decoded else match.group()


def _lower_hex(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), text)


def _base64(secret: str) -> set[str]:
    found: set[str] = set()
    for encoded in (base64.b64encode(secret.encode()), base64.urlsafe_b64encode(secret.encode())):
        found |= {encoded.decode(), encoded.decode().rstrip("=")}
    return found


def forms(secret: str) -> set[str]:
    """Every spelling of `secret` a text may hold: raw, percent-encoded, base64, JSON- or repr-escaped."""
    found = {secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote(secret),
             urllib.parse.quote_plus(secret), json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1],
             repr(secret)[1:-1]}
    found |= {_lower_hex(f) for f in found}
    return {f for f in found | _base64(secret) if len(f) >= MIN_SECRET}


class Secrets:
    """The credentials of a connection, and `redact` to blank each in every form (see the module doc).

    `basic` is a Basic header's `user:password`: only its base64 forms are its own (its other
    forms hold the password's, and blanking the user name would blank ordinary words).
    """

    def __init__(self, secrets: Iterable[Optional[str]] = (), *, basic: Optional[str] = None):
        found = {f for s in secrets if s and len(s) >= MIN_SECRET for f in forms(s)}
        found |= _base64(basic) if basic else set()
        self._forms = sorted(found, key=len, reverse=True)

    @classmethod
    def of(cls, api_key: Optional[str], user: Optional[str], password: Optional[str]) -> "Secrets":
        """Return the secrets of an API key, a password (a user name without one: a token) and their Basic header."""
        basic = None if user is None and password is None else f"{user or ''}:{password or ''}"
        return cls([api_key, password if password is not None else user], basic=basic)

    def redact(self, text: str) -> str:
        """`text` with each secret (in any form, or a long prefix of one), token and URL password as ***."""
        spans = []
        for form in self._forms:
            head = form[:MIN_PREFIX]
            start = text.find(head)
            while start >= 0:
                end = start + len(head)
                while end - start < len(form) and end < len(text) and text[end] == form[end - start]:
                    end += 1
                spans.append((start, end))
                start = text.find(head, start + 1)
        out, at = [], 0
        for start, end in sorted(spans):
            if end <= at:
                continue
            out.append(text[at:start] + "***" if start >= at else "")
            at = end
        text = "".join(out) + text[at:]
        return redact_url(_BASIC.sub(_shown_basic, _BEARER.sub(r"\1***", text)))


    def blank_whole(self, text: str) -> str:
        """Return `text` with each whole form of a secret of at least 8 characters as ***.

        For a model's text: a prefix or a short secret there is more likely the model's own words than an echo.
        """
        for form in self._forms:
            if len(form) >= 8:
                text = text.replace(form, "***")
        return text


def redact(text: str, secrets: Iterable[Optional[str]] = ()) -> str:
    """`text` with every given secret (in any form), bearer or basic token and URL password replaced by ***."""
    return Secrets(secrets).redact(text)

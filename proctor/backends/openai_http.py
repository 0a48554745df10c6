"""POST JSON to an OpenAI-compatible server: bounded concurrency, retries, one-line errors.

Retried (exponential backoff with jitter, or the server's Retry-After when it sends
one): HTTP 429 and 5xx, refused or dropped connections, and timeouts. Not retried: any
other 4xx (the request itself is wrong; its message is shown) and a reply that is not
JSON. Every failure that outlasts the retries is a `UserError` naming the server and
what happened.

Credentials: the API key, when given, is sent as `Authorization: Bearer <key>`; else the
base URL's user info (split at the last `@` before the host, percent-decoded) as HTTP Basic
auth. With both, only the key is sent (the user info is not: one Authorization header).
Requests go to the base URL without its user info. No credential is put in a message, a
log line or a repr in any form (see `proctor.backends.redact`): a server's text is
redacted before it is cut to length, and a URL is shown with its password as ***.
"""

from __future__ import annotations

import email.utils
import json
import random
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence, TypeVar

import httpx

from proctor.backends.redact import Secrets, redact_url, split_user_info
from proctor.errors import UserError

T = TypeVar("T")
COMPLETIONS = "/completions"
CHAT_COMPLETIONS = "/chat/completions"
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_MAX_RETRY_AFTER = 60.0   # seconds; a larger Retry-After is capped, not obeyed
_SHOWN_CHARS = 200        # of a server's error message or malformed reply


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to wait before retrying a transient failure (exponential backoff with jitter)."""

    retries: int = 5            # retries after the first try
    base_delay: float = 0.5     # seconds before the first retry; doubles each time
    max_delay: float = 30.0

    def delay(self, attempt: int, retry_after: Optional[float]) -> float:
        """Seconds to wait before retry `attempt` (0-based): Retry-After if given, else backoff."""
        if retry_after is not None:
            return min(retry_after, _MAX_RETRY_AFTER)
        ceiling = min(self.max_delay, self.base_delay * 2**attempt)
        return random.uniform(ceiling / 2, ceiling)  # jitter: concurrent clients spread out


class CompletionsClient:
    """Posts JSON bodies to `{base_url}{path}` with at most `concurrency` in flight.

    The path is `/completions` unless a post names another, e.g. `/chat/completions`.
    """

    def __init__(
        self, base_url: str, *, api_key: Optional[str] = None, timeout: float = 600.0,
        concurrency: int = 8, retry: RetryPolicy = RetryPolicy(),
    ):
        target, user, password = split_user_info(base_url.rstrip("/"))
        self.base_url = target.rstrip("/")                       # where requests go: no user info
        self.shown_base_url = redact_url(base_url.rstrip("/"))   # what messages name: no password
        self.secrets = Secrets.of(api_key, user, password)
        _check_url(self.base_url, self.secrets)
        self.shown_url = self.shown_of(COMPLETIONS)
        self.retry = retry
        self.concurrency = concurrency
        has_user_info = user is not None or password is not None
        self._both = bool(api_key) and has_user_info
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        auth = httpx.BasicAuth(user or "", password or "") if has_user_info and not api_key else None
        self._http = httpx.Client(headers=headers, auth=auth, timeout=timeout,
                                  limits=httpx.Limits(max_connections=concurrency))
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="proctor-openai")

    def __repr__(self) -> str:
        return f"CompletionsClient({self.shown_url!r})"

    def url_of(self, path: str) -> str:
        """Return the URL a post to `path` goes to (without the base URL's user info: it is sent as auth)."""
        return self.base_url + path

    def shown_of(self, path: str) -> str:
        """Return the URL a post to `path` goes to, as messages name it (user name kept, password as ***)."""
        return self.shown_base_url + path

    def redact(self, text: str) -> str:
        """`text` without this connection's credentials in any form (see `proctor.backends.redact`)."""
        return self.secrets.redact(text)

    def close(self) -> None:
        """Cancel queued calls without waiting for running ones, and close the HTTP connections."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._http.close()

    def map(self, fn: Callable[[T], Any], items: Sequence[T]) -> Iterator[tuple[int, Any]]:
        """Yield (index, fn(item)) as each finishes, up to `concurrency` at a time, on this thread.

        On the first failure the calls not yet started are cancelled and, once those already
        running have ended, it is raised; the results yielded before it are the caller's to keep.
        """
        failed = threading.Event()

        def call(item: T) -> Any:
            if failed.is_set():  # set by a worker as it fails, so no queued call starts after it
                raise _Skipped
            try:
                return fn(item)
            except BaseException:
                failed.set()
                raise

        futures = {self._pool.submit(call, item): i for i, item in enumerate(items)}
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in sorted(done, key=futures.__getitem__):
                    if future.exception() is None:
                        yield futures[future], future.result()
                errors = [f.exception() for f in done if not isinstance(f.exception(), (type(None), _Skipped))]
                if errors:
                    raise errors[0]  # type: ignore[misc]
        finally:  # on failure: nothing queued starts, and nothing is in flight once we return
            for future in pending:
                future.cancel()
            wait(pending)

    def post(self, body: dict, *, path: str = COMPLETIONS, retries: Optional[int] = None) -> dict:
        """Return the server's JSON reply to one request to `{base_url}{path}`, retrying transient failures.

        It retries `retries` times, the policy's by default. No message it raises holds the
        API key or the URL's password, even where the server echoes them back.
        """
        try:
            return self._post(path, body, self.retry.retries if retries is None else retries)
        except ServerRejected as e:
            raise ServerRejected(e.status, self.redact(str(e))) from None
        except UserError as e:
            raise UserError(self.redact(str(e))) from None

    def _post(self, path: str, body: dict, retries: int) -> dict:
        url, redact = self.shown_of(path), self.redact   # messages name `url`, never the one posted to
        for attempt in range(retries + 1):
            try:
                response = self._http.post(self.url_of(path), json=body)
            except httpx.TimeoutException:
                failure = (f"the server at {url} did not answer within {self._http.timeout.read}s "
                           f"({attempt + 1} tries); raise the timeout or check the server")
                retry_after = None
            except httpx.TransportError as e:
                failure = (f"cannot reach the server at {url} ({redact(_first_line(e))}, {attempt + 1} tries); "
                           "is it running, and is the base URL right?")
                retry_after = None
            except httpx.HTTPError as e:  # not transient (e.g. a body that does not decode)
                raise UserError(f"the server at {url} sent a reply that cannot be read ({redact(_first_line(e))})"
                                ) from None
            else:
                if response.status_code not in _RETRY_STATUS:
                    if response.status_code >= 400:
                        raise ServerRejected(response.status_code, f"the server at {url} rejected the request "
                                             f"(HTTP {response.status_code}): {_server_message(response, redact)}"
                                             + self._auth_hint(response.status_code))
                    return _json(response, url, redact)
                failure = (f"the server at {url} kept answering HTTP {response.status_code} ({attempt + 1} tries): "
                           f"{_server_message(response, redact)}; lower the concurrency or retry later")
                retry_after = _retry_after(response)
            if attempt == retries:
                raise UserError(failure)
            time.sleep(self.retry.delay(attempt, retry_after))
        raise AssertionError("unreachable")


    def _auth_hint(self, status: int) -> str:
        if status not in (401, 403) or not self._both:
            return ""
        return ("; only the API key was sent, not the base URL's user info (with both, the key is what is sent): "
                "drop the key ($OPENAI_API_KEY, api_key=) to log in with the user info instead")


def _check_url(url: str, secrets: Secrets) -> None:
    """Refuse a base URL httpx cannot use, or with an `@` after its host, without showing its credentials."""
    rest = url.partition("://")[2]
    if "@" in rest:
        raise UserError("the base URL has an '@' after its host: a '/', '?' or '#' in its user name or password "
                        "must be percent-encoded (%2F, %3F, %23)")
    try:
        httpx.URL(url)
    except httpx.InvalidURL as e:
        raise UserError(f"the base URL {redact_url(url)} is not a valid URL ({secrets.redact(_first_line(e))})"
                        ) from None


class _Skipped(Exception):
    """A call not made because an earlier one failed (never seen: the failure is raised first)."""


class ServerRejected(UserError):
    """An HTTP 4xx other than 429: the request is wrong for this server."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _json(response: httpx.Response, url: str, redact: Callable[[str], str]) -> dict:
    try:
        data = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        data = None
    if not isinstance(data, dict):
        raise UserError(f"the server at {url} returned malformed JSON: {_shown(response.text, redact)!r}; "
                        "is the base URL an OpenAI-compatible API (it usually ends in /v1)?")
    return data


def _server_message(response: httpx.Response, redact: Callable[[str], str]) -> str:
    """Return the error text a server put in its reply: OpenAI's error.message, FastAPI's detail, or the body.

    Credentials in it are redacted before it is cut to length.
    """
    try:
        data = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _shown(response.text, redact) or response.reason_phrase
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return _shown(str(error["message"]), redact)
        for key in ("message", "detail", "error"):
            if data.get(key):
                value = data[key]
                return _shown(value if isinstance(value, str) else json.dumps(_redacted(value, redact)), redact)
    return _shown(json.dumps(_redacted(data, redact)), redact)


def _redacted(data: Any, redact: Callable[[str], str]) -> Any:
    """Return `data` (decoded JSON) with each of its strings redacted: before json.dumps escapes them."""
    if isinstance(data, str):
        return redact(data)
    if isinstance(data, list):
        return [_redacted(x, redact) for x in data]
    if isinstance(data, dict):
        return {redact(str(k)): _redacted(v, redact) for k, v in data.items()}
    return data


def _retry_after(response: httpx.Response) -> Optional[float]:
    """Retry-After in seconds (delta-seconds or an HTTP date), None when absent or unreadable."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def _shown(text: str, redact: Callable[[str], str]) -> str:
    """`text` redacted, on one line, then cut to `_SHOWN_CHARS` (redacted first: a cut can leave a prefix)."""
    flat = redact(" ".join(redact(text).split()))
    return flat if len(flat) <= _SHOWN_CHARS else flat[:_SHOWN_CHARS] + "..."


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]

"""No credential of `--backend openai` leaks, in any form (issue 36).

A fake OpenAI-compatible server (test_backend_openai's, on loopback, in a thread) echoes
every header and the body it receives, and what it decodes from them (the bearer token,
the Basic credentials, percent-encoded and base64 forms), in every status path: a good
200 (in an extra field and in the generated text), a 200 that is not JSON, 400, 401, 404,
429, 500 and a dropped connection; once whole and once padded so that a secret straddles
the 200-character cut of a server's message. `proctor run` goes at it with an API key, a
URL whose password holds an `@`, and one whose password needs percent-encoding; no form
of any secret (raw, percent-encoded, base64 of the key, of the password or of
user:password, or the first 8 characters of any of these) may reach stdout, stderr,
`metrics.json` or any file proctor wrote (run directory and cache).
"""

from __future__ import annotations

import base64
import json
import re
import sys
import urllib.parse
from pathlib import Path

import pytest

from proctor.backends.openai_api import load_openai_backend
from proctor.backends.openai_http import CompletionsClient, RetryPolicy
from proctor.backends.redact import Secrets, redact_url, strip_credentials
from proctor.cli import main
from proctor.errors import UserError
from tests.serving import serving
from test_backend_openai import FakeCompletions, FakeServer
from tinylm import build_tokenizer

KEY = "sk-PLANTEDkey0123456789abcdefXYZ"
USER = "alice"
AT_PASSWORD = "p4ss@word"                  # httpx accepts it raw in a URL
ODD_PASSWORD = "p@ss w/rd?#%:&+\u00e9x"    # must be percent-encoded in a URL
PAD = 185                                  # the cut (200) then leaves 14 characters of what follows
TASKS = ["mmlu_astronomy:mc::olmes", "gsm8k::olmes"]
STATUSES = ["ok", "malformed", 400, 401, 404, 429, 500, "drop"]


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def quote(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def forms(secret: str) -> set[str]:
    """What must never be seen of `secret`: every encoding, and the first 8 characters of each."""
    whole = {secret, quote(secret), urllib.parse.quote(secret), urllib.parse.quote_plus(secret), b64(secret),
             base64.urlsafe_b64encode(secret.encode()).decode(), json.dumps(secret)[1:-1]}
    return whole | {f[:8] for f in whole}


class Echoing(FakeCompletions):
    """Answers as `server.status` says, with every header and the body it received, and what it decoded."""

    def do_POST(self):
        server = self.server
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        headers = dict(self.headers)
        with server.lock:
            server.seen.append((json.loads(raw), headers))
        echo = echo_of(headers, raw.decode())
        if server.cut:
            echo = "x" * PAD + " " + decoded_credentials(headers) + " " + echo
        status = server.status
        if status == "drop":
            self.close_connection = True   # no reply at all: the client sees the connection drop
            return
        if status == "ok":
            body = json.loads(raw)
            reply = server.complete(body)
            if not body.get("logprobs"):   # a generation: the echo is the generated text
                reply["choices"][0]["text"] = " 4. " + echo
            return self._send(200, {**reply, "echo": echo, "headers": headers})
        if status == "malformed":
            return self._send(200, "<html>" + echo)
        if status == 400:                  # a detail that is not text: shown as JSON
            return self._send(400, {"detail": {"echo": echo, "headers": headers}})
        if status == 404:                  # not JSON: shown as text
            return self._send(404, echo)
        if status == 429:
            return self._send(429, {"message": echo}, (("Retry-After", "0"),))
        return self._send(status, {"error": {"message": echo, "headers": headers}})


def decoded_credentials(headers: dict) -> str:
    """The bearer token, or the user:password of a Basic header (what a server might say back)."""
    scheme, _, token = headers.get("Authorization", "").partition(" ")
    return base64.b64decode(token).decode() if scheme == "Basic" else token


def echo_of(headers: dict, body: str) -> str:
    """The Authorization header, what it decodes to in every encoding, every other header, the body."""
    said = [f"Authorization: {headers.get('Authorization')}"]
    secret = decoded_credentials(headers)
    for part in [secret, *secret.split(":", 1)] if ":" in secret else [secret]:
        said += [part, quote(part), urllib.parse.quote_plus(part), b64(part), json.dumps(part)]
    said += [f"{name}: {value}" for name, value in headers.items()]
    return " | ".join(said + [body])


class EchoServer(FakeServer):
    def __init__(self, tokenizer, status, cut=False):
        super().__init__(tokenizer)
        self.RequestHandlerClass = Echoing
        self.status, self.cut = status, cut


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def tokenizer_dir(tokenizer, tmp_path_factory):
    path = tmp_path_factory.mktemp("tok")
    tokenizer.save_pretrained(str(path))
    return path


@pytest.fixture
def serve(tokenizer):
    with serving() as start:
        yield lambda status, cut=False: start(EchoServer(tokenizer, status, cut))


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    monkeypatch.setattr(RetryPolicy, "delay", lambda self, attempt, retry_after: 0.0)


def with_user_info(url: str, password: str, *, encode: bool) -> str:
    return url.replace("http://", f"http://{USER}:{quote(password) if encode else password}@")


CREDENTIALS = {   # name: (API key, password, percent-encode the password in the URL)
    "key": (KEY, None, False),
    "key+at-password": (KEY, AT_PASSWORD, False),
    "at-password": (None, AT_PASSWORD, False),
    "odd-password": (None, ODD_PASSWORD, True),
}


def secrets_of(key, password) -> set[str]:
    """Every form of the key and the password, and of the user:password of a Basic header.

    Of user:password, only the base64 forms' prefixes count: the first 8 characters of
    the others are the user name (shown) and two characters of the password.
    """
    found = set()
    for secret in filter(None, (key, password)):
        found |= forms(secret)
    if password:
        basic = f"{USER}:{password}"
        encoded = {b64(basic), base64.urlsafe_b64encode(basic.encode()).decode()}
        found |= {basic, quote(basic), urllib.parse.quote_plus(basic)} | encoded | {e[:8] for e in encoded}
    return found


def leaks(text: str, secrets: set[str]) -> list[str]:
    return sorted(s for s in secrets if s in text)


def written(root: Path) -> str:
    """Every file under `root`, as text (bytes that are not UTF-8 kept as escapes)."""
    return "\n".join(p.read_bytes().decode("utf-8", "backslashreplace") for p in sorted(root.rglob("*"))
                     if p.is_file())


def run_cli(argv: list[str], monkeypatch, capsys) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["proctor", *argv])
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize("cut", [False, True], ids=["whole", "cut"])
@pytest.mark.parametrize("status", STATUSES)
@pytest.mark.parametrize("credentials", list(CREDENTIALS))
def test_no_form_of_a_secret_leaks_from_any_reply(serve, tokenizer_dir, data_dir, tmp_path, monkeypatch, capsys,
                                                  credentials, status, cut):
    if cut and status in ("ok", "drop"):
        pytest.skip("no server message to cut")
    key, password, encode = CREDENTIALS[credentials]
    server = serve(status, cut)
    url = with_user_info(server.url, password, encode=encode) if password else server.url
    monkeypatch.setenv("PROCTOR_CACHE_DIR", str(tmp_path / "cache"))
    if key:
        monkeypatch.setenv("OPENAI_API_KEY", key)
    else:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    argv = ["run", "--model", "fake", "--backend", "openai", "--base-url", url, "--tokenizer", str(tokenizer_dir),
            "--tasks", *TASKS, "--limit", "1", "--data-dir", str(data_dir), "--output", str(tmp_path / "run"),
            "--no-progress", "--max-length", "8192"]
    code, shown = run_cli(argv, monkeypatch, capsys)
    secrets = secrets_of(key, password)
    assert server.seen, "the server was never asked"
    assert code == (0 if status == "ok" else 2), shown
    assert not leaks(shown, secrets), shown
    assert not leaks(written(tmp_path), secrets)
    shown_url = f"http://{USER}:***@127.0.0.1:{server.server_address[1]}/v1" if password else server.url
    if status == "ok":
        metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
        assert metrics["command"][metrics["command"].index("--base-url") + 1] == shown_url
        assert f'"base_url": "{shown_url}"' in json.dumps(metrics)
    else:
        assert len(shown.strip().splitlines()) == 1 and shown.startswith("proctor: error: "), shown
        assert shown_url in shown   # the server is named, without its password


@pytest.mark.parametrize("credentials, sent", [
    ("key", f"Bearer {KEY}"),
    ("key+at-password", f"Bearer {KEY}"),      # both: the key, as a bearer token
    ("at-password", f"Basic {b64(f'{USER}:{AT_PASSWORD}')}"),
    ("odd-password", f"Basic {b64(f'{USER}:{ODD_PASSWORD}')}"),   # percent-decoded, as RFC 3986 says
])
def test_the_request_carries_the_credentials_the_user_meant(serve, tokenizer_dir, credentials, sent):
    key, password, encode = CREDENTIALS[credentials]
    server = serve("ok")
    url = with_user_info(server.url, password, encode=encode) if password else server.url
    backend = load_openai_backend(url, "fake", tokenizer=str(tokenizer_dir), api_key=key, prompt_format="ids")
    backend.client.post({"model": "fake", "prompt": [5], "max_tokens": 1})
    [(_, headers)] = server.seen
    assert headers["Authorization"] == sent


def test_a_401_with_both_a_key_and_user_info_says_which_was_sent(serve, tokenizer_dir):
    server = serve(401)
    url = with_user_info(server.url, AT_PASSWORD, encode=False)
    backend = load_openai_backend(url, "fake", tokenizer=str(tokenizer_dir), api_key=KEY, prompt_format="ids",
                                  retry=RetryPolicy(retries=0))
    with pytest.raises(UserError, match=r"HTTP 401\).*; only the API key was sent, not the base URL's user info "
                                        r"\(with both, the key is what is sent\): drop the key") as e:
        backend.client.post({"model": "fake", "prompt": [5], "max_tokens": 1})
    assert not leaks(str(e.value), secrets_of(KEY, AT_PASSWORD))


def test_user_info_is_split_at_the_last_at_before_the_host():
    url = "http://alice:p4ss@word@127.0.0.1:9/v1"
    assert redact_url(url) == "http://alice:***@127.0.0.1:9/v1"
    assert redact_url(f"see {url}/completions, then retry") == "see http://alice:***@127.0.0.1:9/v1/completions, then retry"
    assert strip_credentials(url) == "http://127.0.0.1:9/v1"
    assert redact_url("http://sk-token@host/v1") == "http://***@host/v1"   # a user name alone is a token
    client = CompletionsClient(url)
    assert "p4ss" not in repr(client) and "word" not in repr(client)
    client.close()


def test_a_key_just_before_the_cut_of_a_servers_message_is_not_left_as_a_prefix(serve, tokenizer_dir):
    server = serve("ok")
    server.script = [("status", 400, {"error": {"message": "x" * 181 + " " + KEY}}, ())]
    server.RequestHandlerClass = FakeCompletions   # scripted, not echoing
    backend = load_openai_backend(server.url, "fake", tokenizer=str(tokenizer_dir), api_key=KEY, prompt_format="ids")
    with pytest.raises(UserError, match=r"HTTP 400") as e:
        backend.client.post({"model": "fake", "prompt": [5], "max_tokens": 1})
    assert not leaks(str(e.value), forms(KEY)), str(e.value)


@pytest.mark.parametrize("url", ["htp://alice:hunter22secret@127.0.0.1:9/v1", "alice:hunter22secret@127.0.0.1:9/v1",
                                 "http://alice:hunter/22secret@127.0.0.1:9/v1"])
def test_a_base_url_refused_is_not_shown_with_its_password(url, tokenizer_dir):
    with pytest.raises(UserError) as e:
        load_openai_backend(url, "fake", tokenizer=str(tokenizer_dir))
    assert "hunter" not in str(e.value) and "22secret" not in str(e.value), str(e.value)


@pytest.mark.parametrize("secret", [KEY, AT_PASSWORD, ODD_PASSWORD])
def test_redaction_covers_every_encoding_and_every_long_prefix(secret):
    secrets = Secrets.of(KEY, USER, secret)
    lower_hex = re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), quote(secret))
    for form in forms(secret) | {lower_hex, repr(secret)[1:-1]}:
        for text in (form, f"said: {form}.", f"Authorization: Basic {form}", f"{form[:-1]}...", f"({form[:6]})"):
            assert form[:6] not in secrets.redact(text), (form, text, secrets.redact(text))
    basic = b64(f"{USER}:{secret}")
    for text in (f"Authorization: Basic {basic}", f"{basic[:-2]}...", f"({basic[:6]})", f"{basic}"):
        assert basic[:6] not in secrets.redact(text), (text, secrets.redact(text))
    assert secrets.redact("alice: a basic password") == "alice: a basic password"
    assert secrets.redact(f"http://{USER}:{quote(secret)}@h/v1") == f"http://{USER}:***@h/v1"

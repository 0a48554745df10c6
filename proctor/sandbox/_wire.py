"""Plain data over a pipe.

It is the only thing that crosses between a sandboxed candidate and the trusted process
that tests it. Standard library only (the runner imports it).

A value is encoded to a JSON tree in which every non-JSON-native value is a tagged pair:
`["i", hex]` for ints too big for a JSON number, `["f", float.hex()]` (exact, with inf,
nan and -0.0), `["b", hex]` bytes, `["ba", hex]` bytearray, `["l", [...]]` list,
`["t", [...]]` tuple, `["s", [...]]` set, `["fs", [...]]` frozenset, `["d", [[k, v],
...]]` dict, `["c", "<real hex> <imag hex>"]` complex; null, true, false, strings and ints below 2**63 are themselves. Subclasses
of these types are sent as their base type (so an `__eq__` override never crosses);
anything else, a tree deeper than `MAX_DEPTH` or a message over `MAX_MESSAGE` bytes is a
`WireError`. Decoding builds fresh objects of exactly these types, whatever it is given.

Messages are a 4-byte big-endian length and a JSON object.
"""

import json
import os
import struct
from typing import Any

MAX_MESSAGE = 4 << 20
MAX_DEPTH = 100
_SMALL_INT = 1 << 63
_SEQUENCES = {"l": list, "t": tuple, "s": set, "fs": frozenset}


class WireError(Exception):
    """A value or message outside what the wire carries."""


def to_plain(value: Any, depth: int = 0) -> object:
    """Encode `value` as a JSON-encodable tree (see the module docstring)."""
    if depth > MAX_DEPTH:
        raise WireError(f"value nested deeper than {MAX_DEPTH}")
    if value is None or value is True or value is False:
        return value
    # By the real type (an object can fake `__class__`, not `type()`); subclasses go as
    # their base type, read with the base type's own methods so no override runs here.
    kind = type(value)
    if issubclass(kind, (str, bytes, bytearray, list, tuple, set, frozenset, dict)) and len(value) > MAX_MESSAGE // 2:
        raise WireError(f"a {kind.__name__!s:.80} of {len(value)} items is over the message limit")
    if issubclass(kind, int):
        n = int.__index__(value)
        return n if -_SMALL_INT < n < _SMALL_INT else ["i", int.__format__(n, "x")]
    if issubclass(kind, float):
        return ["f", float.hex(float.__float__(value))]
    if issubclass(kind, complex):
        parts = (complex.real.__get__(value), complex.imag.__get__(value))
        return ["c", " ".join(map(float.hex, parts))]
    if issubclass(kind, str):
        return str.__str__(value)
    if issubclass(kind, bytes):
        return ["b", bytes.hex(value)]
    if issubclass(kind, bytearray):
        return ["ba", bytearray.hex(value)]
    if issubclass(kind, dict):
        return ["d", [[to_plain(k, depth + 1), to_plain(v, depth + 1)] for k, v in dict.items(value)]]
    for tag, base in (("l", list), ("t", tuple), ("s", set), ("fs", frozenset)):
        if issubclass(kind, base):
            return [tag, [to_plain(v, depth + 1) for v in base.__iter__(value)]]
    raise WireError(f"cannot send a value of type {type(value).__name__!s:.80}")


def from_plain(tree: Any, depth: int = 0) -> Any:
    """Build fresh plain objects from a tree made by `to_plain` (or by anyone: it is checked)."""
    if depth > MAX_DEPTH:
        raise WireError(f"value nested deeper than {MAX_DEPTH}")
    if tree is None or tree is True or tree is False:
        return tree
    kind = type(tree)
    if kind is int or kind is str:
        return tree
    if kind is not list or len(tree) != 2 or type(tree[0]) is not str:
        raise WireError(f"not a value: {type(tree).__name__}")
    tag, payload = tree
    try:
        if tag in _SEQUENCES and type(payload) is list:
            return _SEQUENCES[tag](from_plain(v, depth + 1) for v in payload)
        if tag == "d" and type(payload) is list:
            out = {}
            for pair in payload:
                if type(pair) is not list or len(pair) != 2:
                    raise WireError("bad dict item")
                out[from_plain(pair[0], depth + 1)] = from_plain(pair[1], depth + 1)
            return out
        if type(payload) is not str:
            raise WireError(f"bad payload for {tag!r:.20}")
        if tag == "i":
            return int(payload, 16)
        if tag == "f":
            return float.fromhex(payload)
        if tag == "c":
            real, imag = payload.split(" ")
            return complex(float.fromhex(real), float.fromhex(imag))
        if tag == "b":
            return bytes.fromhex(payload)
        if tag == "ba":
            return bytearray.fromhex(payload)
    except WireError:
        raise
    except (TypeError, ValueError, OverflowError, RecursionError, MemoryError) as e:
        raise WireError(f"bad {tag!r:.20} value: {type(e).__name__}") from None
    raise WireError(f"unknown tag {tag!r:.20}")


def dumps(message: dict) -> bytes:
    try:
        body = json.dumps(message, ensure_ascii=True, allow_nan=False).encode("ascii")
    except (TypeError, ValueError, RecursionError) as e:
        raise WireError(f"cannot encode the message: {type(e).__name__}") from None
    if len(body) > MAX_MESSAGE:
        raise WireError(f"a message of {len(body)} bytes, over the {MAX_MESSAGE}-byte limit")
    return body


def loads(body: bytes) -> dict:
    try:
        message = json.loads(body)
    except (ValueError, RecursionError, MemoryError) as e:
        raise WireError(f"unreadable message: {type(e).__name__}") from None
    if type(message) is not dict:
        raise WireError("a message must be an object")
    return message


def frame(message: dict) -> bytes:
    """Encode `message` as it travels: its length, then its JSON."""
    body = dumps(message)
    return struct.pack(">I", len(body)) + body


def send(fd: int, message: dict) -> None:
    view = memoryview(frame(message))
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the channel")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv(fd: int) -> dict:
    """Read the next message; EOFError when the peer is gone, WireError when it is malformed."""
    (length,) = struct.unpack(">I", _read_exact(fd, 4))
    if length > MAX_MESSAGE:
        raise WireError(f"a message of {length} bytes, over the {MAX_MESSAGE}-byte limit")
    return loads(_read_exact(fd, length))

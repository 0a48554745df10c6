"""A GGUF file is hashed once per version of it: the memo in the cache dir, and when it is not trusted."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from proctor.backends import sources
from proctor.backends.sources import remembered_sha256


@pytest.fixture
def hashed(monkeypatch, tmp_path):
    """Count the real hashings; the cache dir is the test's own."""
    monkeypatch.setenv("PROCTOR_CACHE_DIR", str(tmp_path / "cache"))
    calls = []
    real = sources.file_sha256

    def counting(path):
        calls.append(path)
        return real(path)

    monkeypatch.setattr(sources, "file_sha256", counting)
    return calls


def test_a_file_is_hashed_once_and_again_when_it_changes(hashed, tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"weights" * 1000)
    want = hashlib.sha256(model.read_bytes()).hexdigest()
    assert remembered_sha256(model) == want
    assert remembered_sha256(model) == want
    assert len(hashed) == 1
    model.write_bytes(b"other weights" * 1000)  # rewritten: another size and time
    assert remembered_sha256(model) == hashlib.sha256(model.read_bytes()).hexdigest()
    stat = model.stat()
    model.write_bytes(b"OTHER weights" * 1000)  # same size, time set back: a new inode is not promised,
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # so the time must differ
    assert remembered_sha256(model) == hashlib.sha256(model.read_bytes()).hexdigest()
    assert len(hashed) == 3


@pytest.mark.parametrize("memo", ["not json", "[]", '{"%s": {"version": 1}}', '{"%s": "x"}',
                                  '{"%s": {"version": "V", "sha256": "../../etc"}}'])
def test_a_damaged_memo_is_rebuilt(hashed, tmp_path, memo):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"weights")
    info = model.stat()
    version = f"{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}"
    path = tmp_path / "cache" / "file-sha256.json"
    path.parent.mkdir(parents=True)
    path.write_text(memo.replace("%s", str(model.resolve())).replace('"V"', json.dumps(version)))
    assert remembered_sha256(model) == hashlib.sha256(b"weights").hexdigest()
    assert len(hashed) == 1
    assert json.loads(path.read_text())[str(model.resolve())]["sha256"] == hashlib.sha256(b"weights").hexdigest()


def test_a_read_only_cache_still_answers(hashed, tmp_path, monkeypatch):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"weights")

    def refuse(*args, **kwargs):
        raise PermissionError("read-only")

    monkeypatch.setattr("proctor.outputs.atomic.atomic_write_text", refuse)
    assert remembered_sha256(model) == remembered_sha256(model) == hashlib.sha256(b"weights").hexdigest()
    assert len(hashed) == 2

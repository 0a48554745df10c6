"""lm-eval's task index, read from its ~14,000 YAML files once and kept in proctor's cache.

lm-eval's `TaskManager` parses every YAML file it ships (and those of `--include`d
directories) on every construction: about 13 s of every run here, longer than scoring a
hundred MMLU documents. The index it builds (each name's kind, file and raw config) depends
only on those files, so proctor keeps it as JSON under `$PROCTOR_CACHE_DIR/lm_eval/`, one
file per set of directories, with a fingerprint of every YAML file under them (path, size,
modification time) and lm-eval's version. A changed, added or removed file, or another
lm-eval, rebuilds it; an unreadable or damaged cache file is rebuilt, never trusted, and
a cache directory that cannot be written costs only the speed.
"""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from proctor.cache_dir import cache_root
from proctor.harness.library import lm_eval_version

FORMAT = 1


def fingerprint(roots: Iterable[Path]) -> str:
    """Return the digest of lm-eval's version and every YAML file under `roots` (path, size, mtime)."""
    digest = hashlib.sha256(f"{FORMAT}\0{lm_eval_version()}\n".encode())
    for root in roots:
        digest.update(f"root\0{root}\n".encode())
        for directory, subdirs, files in os.walk(root):
            subdirs.sort()
            for name in sorted(files):
                if name.endswith(".yaml"):
                    path = os.path.join(directory, name)
                    try:
                        stat = os.stat(path)
                    except OSError:
                        continue
                    digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _to_json(index: dict[str, Any]) -> Optional[str]:
    entries = [{"name": e.name, "kind": e.kind.name, "yaml_path": None if e.yaml_path is None else str(e.yaml_path),
                "cfg": e.cfg, "tags": sorted(e.tags)} for e in index.values()]
    try:
        return json.dumps(entries)
    except (TypeError, ValueError):  # a config value JSON cannot hold: keep no cache
        return None


def _from_json(entries: list) -> dict[str, Any]:
    from lm_eval.tasks._index import Entry, Kind

    return {e["name"]: Entry(name=e["name"], kind=Kind[e["kind"]],
                             yaml_path=None if e["yaml_path"] is None else Path(e["yaml_path"]),
                             cfg=e["cfg"], tags=set(e["tags"])) for e in entries}


def _read(file: Path, expected: str) -> Optional[dict[str, Any]]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("fingerprint") != expected:
            return None
        return _from_json(data["entries"])
    except Exception:  # missing, damaged or from another layout: rebuild
        return None


def _write(file: Path, fingerprint_: str, entries: str) -> None:
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        tmp = file.with_name(f".{file.name}.{os.getpid()}.tmp")
        tmp.write_text(f'{{"fingerprint": "{fingerprint_}", "entries": {entries}}}', encoding="utf-8")
        os.replace(tmp, file)
    except OSError:  # a read-only cache directory: the index is simply rebuilt next time
        pass


def cached_build(build: Any, paths: list[Path], resolve_includes: bool) -> dict[str, Any]:
    """Return lm-eval's index of `paths`, from the cache when every YAML file under them is unchanged."""
    roots = [Path(p).resolve() for p in paths]
    key = hashlib.sha256(json.dumps([str(r) for r in roots] + [resolve_includes]).encode()).hexdigest()[:16]
    file = cache_root() / "lm_eval" / f"task-index-{key}.json"
    current = fingerprint(roots)
    index = _read(file, current)
    if index is None:
        index = build(paths, resolve_includes=resolve_includes)
        entries = _to_json(index)
        if entries is not None:
            _write(file, current, entries)
    return index


@contextmanager
def cached_index() -> Iterator[None]:
    """Let the `TaskManager`s built inside read lm-eval's task index from proctor's cache."""
    from lm_eval.tasks import manager

    original = manager.TaskIndex

    class CachedIndex(original):  # type: ignore[misc, valid-type]
        @staticmethod
        def build(paths: Iterable[Path], *, resolve_includes: bool = True) -> dict[str, Any]:
            return cached_build(original.build, list(paths), resolve_includes)

    manager.TaskIndex = CachedIndex
    try:
        yield
    finally:
        manager.TaskIndex = original

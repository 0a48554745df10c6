"""Documents of the language-modelling corpora (C4 English, Paloma): a deterministic prefix.

Each reader returns the first `num_samples` documents of one corpus split, in the corpus'
own order, from a local directory or streamed from the Hugging Face hub (never the whole
corpus: streaming stops after `num_samples` rows). Empty documents are kept here and count
toward `num_samples`; the chunking (proctor.inloop.lm) skips them.

Local layouts (`data_dir` resolved as `proctor.data.sources.resolve_data_dir`):

- C4 (allenai/c4 "en" validation), the first existing of
  1. `<data_dir>/c4/en/c4-validation.*.json.gz`: the hub repo's own files (a partial
     mirror of allenai/c4), read in name order, i.e. the hub's order;
  2. `<data_dir>/c4/derived/`: every `*.jsonl`, `*.jsonl.gz`, `*.json.gz` or `*.parquet`,
     in name order (shared/data ships c4_validation_2k.jsonl.gz there: 2,000 documents,
     the same rows as c4/yxanul_validation/c4_validation_2k.parquet).
  `c4_documents(..., path=FILE_OR_DIR)` reads an explicit file or directory instead.
  Rows need a string `text`; `url` becomes the native id when present.
- Paloma (allenai/paloma): the hub repo's layout `<source>/<split>/*.jsonl[.gz]` under
  `<data_dir>/paloma/` (a clone or `huggingface-cli download` of the repo), else under
  `<data_dir>/paloma/ppl-test-data/` (OLMo's name for the same tree). Rows need `text`;
  `id` becomes the native id.

The streamed prefix is kept under `$PROCTOR_CACHE_DIR/corpora/` (default
`~/.cache/proctor`), so later builds of the same or a shorter prefix read it from disk.

Paloma is gated. Hub access authenticates with an explicit `token` argument when given
(it is passed to the hub call only, never stored or logged), else huggingface_hub's own
HF_TOKEN / saved login.
"""

from __future__ import annotations

import gzip
import itertools
import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional, Union

from proctor.data.readers import parse_json
from proctor.data.sources import resolve_data_dir
from proctor.errors import UserError, check_positive_int

PathLike = Union[str, Path]

C4_HUB = ("allenai/c4", "en", "validation")
PALOMA_HUB = "allenai/paloma"
# The 16 sources (hub configs) of allenai/paloma, in the dataset card's order (alphabetical).
PALOMA_SOURCES: tuple[str, ...] = (
    "4chan_meta_sep",
    "c4_100_domains",
    "c4_en",
    "dolma-v1_5",
    "dolma_100_programing_languages",
    "dolma_100_subreddits",
    "falcon-refinedweb",
    "gab",
    "m2d2_s2orc_unsplit",
    "m2d2_wikipedia_unsplit",
    "manosphere_meta_sep",
    "mc4",
    "ptb",
    "redpajama",
    "twitterAAE_HELM_fixed",
    "wikitext_103",
)
PALOMA_SPLITS = ("val", "test")
DATA_SUFFIXES = (".jsonl", ".jsonl.gz", ".json.gz", ".parquet")
PALOMA_ACCESS = ("accept the terms at https://huggingface.co/datasets/allenai/paloma, then run "
                 "`huggingface-cli login` or set HF_TOKEN")


@dataclass(frozen=True)
class Document:
    """One document of a corpus; `text` is scored exactly as stored."""

    text: str
    native_id: str  # the C4 url, Paloma's id, else the document's index in the split
    source: str     # "c4_en", or the Paloma source name


# ---- local files ---------------------------------------------------------------------------

def _is_data_file(path: Path) -> bool:
    return path.is_file() and path.name.endswith(DATA_SUFFIXES)


def _json_rows(path: Path) -> Iterator[tuple[str, dict]]:
    """(where, row) of each non-blank line of a JSON-lines file, optionally gzipped."""
    opener = gzip.open if path.name.endswith(".gz") else open
    lineno = 0
    try:
        # "utf-8-sig": a leading byte-order mark is dropped; text mode splits lines at
        # "\n" / "\r" only (not at U+2028 or U+0085, as str.splitlines would)
        with opener(path, "rt", encoding="utf-8-sig") as f:
            for lineno, line in enumerate(f, start=1):
                if line.strip():
                    yield f"{path}:{lineno}", parse_json(line, path, lineno)
    except UnicodeDecodeError:
        raise UserError(f"{path}:{lineno + 1}: not valid UTF-8 text; re-save the file as UTF-8") from None
    except (OSError, EOFError, zlib.error) as e:  # unreadable, or a truncated / not-really-gzip file
        raise UserError(f"cannot read {path} ({e}); replace it with a complete copy") from None


def _parquet_rows(path: Path) -> Iterator[tuple[str, dict]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError(f"reading {path} needs pyarrow (`pip install pyarrow`), or convert it "
                        "to .jsonl.gz") from None
    try:
        pf = pq.ParquetFile(path)
        if "text" not in pf.schema_arrow.names:
            raise UserError(f"{path}: no 'text' column (columns: {', '.join(pf.schema_arrow.names)})")
        index = 0
        for batch in pf.iter_batches(batch_size=256):
            for row in batch.to_pylist():
                yield f"{path} row {index}", row
                index += 1
    except UserError:
        raise
    except Exception as e:  # pyarrow's errors for corrupt or non-parquet files
        raise UserError(f"cannot read {path} as parquet ({e}); replace it with a complete copy") from None


def _file_rows(path: Path) -> Iterator[tuple[str, dict]]:
    return _parquet_rows(path) if path.name.endswith(".parquet") else _json_rows(path)


def _documents(rows: Iterable[tuple[str, dict]], id_field: str, source: str,
               num_samples: int, origin: object) -> list[Document]:
    """Return the first `num_samples` rows as documents.

    Every row needs a string `text`, and `origin` (the files or hub split read) must hold at least one.
    """
    out: list[Document] = []
    for where, row in itertools.islice(rows, num_samples):
        if not isinstance(row, dict):
            raise UserError(f"{where}: expected a JSON object with a 'text' field, "
                            f"found {type(row).__name__}")
        text = row.get("text")
        if not isinstance(text, str):
            raise UserError(f"{where}: expected a string field 'text', found "
                            f"{'no such field' if text is None else type(text).__name__}")
        native = row.get(id_field)
        out.append(Document(text=text, native_id=str(native) if native is not None else str(len(out)),
                            source=source))
    if not out:
        raise UserError(f"{origin}: no documents (the files hold no rows); replace them with "
                        "complete copies")
    return out



def _data_files(directory: Path, pattern: str = "*") -> list[Path]:
    return sorted(p for p in directory.glob(pattern) if _is_data_file(p))


def read_local_documents(path: PathLike, num_samples: int, *, source: str,
                         id_field: str = "id") -> list[Document]:
    """Return the first `num_samples` documents of a data file, or of a directory's data files.

    A directory's files are read in name order (`*.jsonl`, `*.jsonl.gz`, `*.json.gz`, `*.parquet`).
    """
    check_positive_int("num_samples", num_samples)
    path = Path(path).expanduser()
    if path.is_dir():
        files = _data_files(path)
        if not files:
            raise UserError(f"{path} holds no {', '.join(DATA_SUFFIXES)} files with documents")
    elif path.is_file():
        if not path.name.endswith(DATA_SUFFIXES):
            raise UserError(f"{path}: unsupported file type; use one of {', '.join(DATA_SUFFIXES)}")
        files = [path]
    else:
        raise UserError(f"document file or directory not found: {path}")
    rows = itertools.chain.from_iterable(_file_rows(f) for f in files)
    return _documents(rows, id_field, source, num_samples, path)


# ---- the hub -------------------------------------------------------------------------------

def _scrub(message: str, token: Optional[str]) -> str:
    return message.replace(token, "***") if token else message


def hub_documents(dataset: str, name: Optional[str], split: str, num_samples: int, *,
                  source: str, id_field: str, token: Optional[str] = None,
                  access_hint: str = "") -> list[Document]:
    """Return the first `num_samples` rows of a hub split, streamed (nothing else is downloaded) or cached."""
    where = f"{dataset} ({name}) split {split!r}" if name else f"{dataset} split {split!r}"
    fix = access_hint or ("make the Hugging Face hub reachable, or point --data-dir (or "
                          "PROCTOR_DATA_DIR) at a local copy")
    cache = _prefix_cache(dataset, name, split)
    cached = _read_prefix(cache, num_samples)
    if cached is not None:  # read before importing `datasets`: a cached prefix needs no hub
        return _documents([(f"{cache} row {i}", row) for i, row in enumerate(cached)], id_field, source,
                          num_samples, cache)
    try:
        import datasets
    except ImportError:
        raise UserError(f"streaming {where} needs the `datasets` package (`pip install datasets`), "
                        "or point --data-dir (or PROCTOR_DATA_DIR) at a local copy") from None
    from huggingface_hub.utils import logging as hub_logging

    hub_logging.set_verbosity_error()  # its per-retry warnings would bury the one error line
    kwargs = {"split": split, "streaming": True}
    if token is not None:  # else huggingface_hub uses HF_TOKEN or the saved login itself
        kwargs["token"] = token
    try:
        stream = datasets.load_dataset(dataset, name, **kwargs)
        rows = [(f"{where} row {i}", row) for i, row in enumerate(itertools.islice(stream, num_samples))]
    except UserError:
        raise
    except Exception as e:  # network, gated access, unknown config or split: all user-fixable
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(_scrub(f"could not stream {where} from the Hugging Face hub ({reason}); {fix}",
                               token)) from None
    _write_prefix(cache, [{"text": row.get("text"), id_field: row.get(id_field)} for _, row in rows])
    return _documents(rows, id_field, source, num_samples, where)


def _prefix_cache(dataset: str, name: Optional[str], split: str) -> Path:
    """Where the streamed prefix of a hub split is kept, so later builds read it locally."""
    from proctor.cache_dir import cache_root

    return cache_root() / "corpora" / f"{dataset.replace('/', '--')}--{name or 'default'}--{split}.jsonl.gz"


def _read_prefix(path: Path, num_samples: int) -> Optional[list[dict]]:
    """Return the first `num_samples` cached rows, or None when the cache holds fewer.

    None too when it holds none or is damaged: the prefix is then streamed again and rewritten.
    """
    if not path.is_file():
        return None
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            rows = [json.loads(line) for line in itertools.islice(f, num_samples)]
    except (OSError, EOFError, zlib.error, ValueError, RecursionError):
        return None
    return rows if len(rows) == num_samples else None


def _write_prefix(path: Path, rows: list[dict]) -> None:
    """Keep the longest prefix streamed so far (written atomically)."""
    from proctor.outputs.atomic import atomic_write_bytes

    if path.is_file() and _read_prefix(path, len(rows) + 1) is not None:
        return  # a longer prefix is already cached
    data = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, gzip.compress(data, mtime=0))


# ---- the corpora ---------------------------------------------------------------------------

def c4_local_files(root: Path) -> list[Path]:
    """Return the local C4 validation files under a data directory (see the module docstring)."""
    mirror = root / "c4" / "en"
    if mirror.is_dir():
        files = _data_files(mirror, "c4-validation.*.json.gz")
        if files:
            return files
    derived = root / "c4" / "derived"
    if derived.is_dir() and _data_files(derived):
        return _data_files(derived)
    raise UserError(f"no local C4 validation files under {root}: expected "
                    f"{mirror}/c4-validation.*.json.gz (the allenai/c4 repo's files) or .jsonl[.gz]/"
                    f".parquet files with a 'text' field in {derived}; add them, pass path=FILE, or "
                    "omit the data directory (and PROCTOR_DATA_DIR) to stream from the hub")


def c4_documents(data_dir: Optional[PathLike], num_samples: int = 1000, *,
                 path: Optional[PathLike] = None) -> list[Document]:
    """Return the first `num_samples` documents of C4 English validation (allenai/c4 "en").

    `path` (a file or directory of documents) wins; else the local data directory; else
    the hub, streamed.
    """
    check_positive_int("num_samples", num_samples)
    if path is not None:
        return read_local_documents(path, num_samples, source="c4_en", id_field="url")
    root = resolve_data_dir(data_dir)
    if root is None:
        dataset, name, split = C4_HUB
        return hub_documents(dataset, name, split, num_samples, source="c4_en", id_field="url")
    files = c4_local_files(root)
    rows = itertools.chain.from_iterable(_file_rows(f) for f in files)
    return _documents(rows, "url", "c4_en", num_samples, ", ".join(map(str, files)))


def paloma_local_dir(root: Path, source: str, split: str) -> Path:
    """`<root>/paloma[/ppl-test-data]/<source>/<split>/`: the first that holds data files."""
    candidates = [root / "paloma" / source / split, root / "paloma" / "ppl-test-data" / source / split]
    for candidate in candidates:
        if candidate.is_dir() and _data_files(candidate):
            return candidate
    raise UserError(
        f"no local Paloma files for source {source!r} split {split!r}: looked in "
        f"{' and '.join(str(c) for c in candidates)} for *.jsonl[.gz] files; download them with "
        f"`huggingface-cli download allenai/paloma --repo-type dataset --include '{source}/{split}/*' "
        f"--local-dir {root / 'paloma'}`, or omit the data directory (and PROCTOR_DATA_DIR) to "
        "stream from the hub")


def check_paloma_source(source: str, split: str) -> None:
    """Raise a UserError unless `source` is one of Paloma's 16 sources and `split` is "val" or "test"."""
    if source not in PALOMA_SOURCES:
        raise UserError(f"unknown Paloma source {source!r}; choose from {', '.join(PALOMA_SOURCES)}")
    if split not in PALOMA_SPLITS:
        raise UserError(f"unknown Paloma split {split!r}; choose 'val' or 'test'")


def paloma_documents(source: str, split: str = "val", num_samples: int = 1000,
                     data_dir: Optional[PathLike] = None, token: Optional[str] = None) -> list[Document]:
    """Return the first `num_samples` documents of one Paloma source's split ("val" or "test")."""
    check_paloma_source(source, split)
    check_positive_int("num_samples", num_samples)
    root = resolve_data_dir(data_dir)
    if root is None:
        return hub_documents(PALOMA_HUB, source, split, num_samples, source=source, id_field="id",
                             token=token, access_hint=f"Paloma is gated: {PALOMA_ACCESS}")
    directory = paloma_local_dir(root, source, split)
    rows = itertools.chain.from_iterable(_file_rows(f) for f in _data_files(directory))
    return _documents(rows, "id", source, num_samples, directory)

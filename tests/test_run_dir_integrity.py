"""Every reader of a run directory (`proctor report`, `compare`, `export bergson`,
`attribution join`, `proctor.read_run`) checks each file against the run's manifest.

A file changed after proctor wrote it (emptied, a line duplicated, garbage, cut short), a
manifest that is garbage or gone, a file that is a FIFO or a device, and a run directory
that is a symlink loop each end in one line naming the file and the fix, exit 2, no
traceback and no hang; `--allow-edited` (`allow_edited=True`) reads an edited file as it is.
Also two messages that misled: a CLI user whose `--output` a concurrent run took is told
`--overwrite`, and a full disk under the result cache is called a full disk, with what is kept.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest

import proctor
from proctor.cli import main
from proctor.errors import UserError
from proctor.export.bergson import export_bergson, read_manifest
from tinylm import build_tiny_model

MC = "arc_easy:mc::olmes"
PREDICTIONS = "arc_easy-mc-olmes/predictions.jsonl"
REQUESTS = "arc_easy-mc-olmes/requests.jsonl"
MANIFEST = ".proctor-manifest.json"
READERS = ("report", "compare", "export", "join", "read_run")


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail instead of hanging (a FIFO without a writer blocks open() forever)."""
    def expired(signum, frame):
        raise TimeoutError(f"the reader still ran after {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="module")
def root(tmp_path_factory, data_dir) -> Path:
    """A tiny model's real run (`pristine`), its copy `run` the cases damage, an export of `run`
    and Bergson-style scores of that export (what `attribution join` reads)."""
    from test_export_bergson import fake_bergson

    root = tmp_path_factory.mktemp("integrity")
    build_tiny_model(root / "tiny")
    proctor.evaluate(str(root / "tiny"), tasks=[MC], limit=3, data_dir=data_dir, output=root / "pristine",
                     save_requests=True, progress=False, cache=False)
    shutil.copytree(root / "pristine", root / "run")
    export_bergson(root / "run", root / "export")
    rows = read_manifest(root / "export").rows
    fake_bergson(root / "export", root / "bergson", np.arange(2 * rows, dtype=np.float32).reshape(2, rows))
    return root


@pytest.fixture
def run(root) -> Path:
    """`root / "run"`, restored from the pristine run before each test."""
    path = root / "run"
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
    shutil.copytree(root / "pristine", path)
    return path


def read(reader: str, root: Path, out: Path, *flags: str) -> int:
    """Run one reader on `root / "run"` as its command does (read_run: as main() would report it)."""
    run = root / "run"
    if reader == "read_run":
        try:
            proctor.read_run(run, allow_edited=bool(flags))
        except UserError as e:
            print(f"proctor: error: {e}", file=sys.stderr)
            return 2
        return 0
    argv = {
        "report": ["report", str(run), "--output", str(out / "report.html")],
        "compare": ["compare", str(run), str(root / "pristine")],
        "export": ["export", "bergson", str(run), "--output", str(out / "export")],
        "join": ["attribution", "join", str(root / "export"), str(root / "bergson" / "scores"),
                 "--output", str(out / "attribution.parquet")],
    }[reader]
    return main([*argv, *flags])


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def _symlink_loop(run: Path) -> None:
    shutil.rmtree(run)
    run.symlink_to(run)


TAMPERINGS: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    # name: (how, what the one line must name)
    "empty predictions": (lambda run: (run / PREDICTIONS).write_text(""), ("predictions.jsonl", "--allow-edited")),
    "duplicated line": (lambda run: (run / PREDICTIONS).write_text(
        (run / PREDICTIONS).read_text() + (run / PREDICTIONS).read_text().splitlines(keepends=True)[0]),
        ("predictions.jsonl", "--allow-edited")),
    "garbage parquet": (lambda run: (run / "query_metadata.parquet").write_bytes(b"PAR1 not a parquet file"),
                        ("query_metadata.parquet", "--allow-edited")),
    "truncated sidecar jsonl": (lambda run: _truncate(run / "query_metadata.jsonl"),
                                ("query_metadata.jsonl", "--allow-edited")),
    "truncated requests": (lambda run: _truncate(run / REQUESTS), ("requests.jsonl", "--allow-edited")),
    "garbage manifest": (lambda run: (run / MANIFEST).write_text("{garbage"), (MANIFEST, "--allow-edited")),
    "no manifest": (lambda run: (run / MANIFEST).unlink(), (MANIFEST, "--allow-edited")),
    "predictions -> /dev/zero": (lambda run: ((run / PREDICTIONS).unlink(), (run / PREDICTIONS).symlink_to("/dev/zero")),
                                 ("predictions.jsonl", "not a regular file")),
    "predictions a FIFO": (lambda run: ((run / PREDICTIONS).unlink(), os.mkfifo(run / PREDICTIONS)),
                           ("predictions.jsonl", "not a regular file")),
    "run dir a symlink loop": (_symlink_loop, ("run", "symbolic links", "real path")),
}


def _one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("proctor: error: "), err
    return lines[0]


@pytest.mark.parametrize("tampering", list(TAMPERINGS))
@pytest.mark.parametrize("reader", READERS)
def test_a_damaged_run_directory_is_one_line_exit_2(root, run, tmp_path, capsys, reader, tampering):
    how, named = TAMPERINGS[tampering]
    how(run)
    with deadline(10):
        code = read(reader, root, tmp_path)
    line = _one_line(capsys.readouterr().err)
    assert code == 2, line
    for words in named:  # the API names the flag as its keyword
        assert (words if reader != "read_run" else words.replace("--allow-edited", "allow_edited=True")) in line, line
    assert not (tmp_path / "export").exists() and not (tmp_path / "report.html").exists()
    assert not (tmp_path / "attribution.parquet").exists()


def _respaced(path: Path) -> None:
    """The same rows, written with other spacing: valid, but not the bytes proctor wrote."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(r, indent=None, separators=(", ", " : ")) + "\n" for r in rows))


@pytest.mark.parametrize("reader", READERS)
def test_an_edited_file_is_refused_once_then_read_with_allow_edited(root, run, tmp_path, capsys, reader):
    _respaced(run / PREDICTIONS)
    assert read(reader, root, tmp_path) == 2
    line = _one_line(capsys.readouterr().err)
    flag = "allow_edited=True" if reader == "read_run" else "--allow-edited"
    assert "predictions.jsonl" in line and "changed after proctor wrote it" in line and flag in line
    assert read(reader, root, tmp_path, "--allow-edited") == 0
    assert "Traceback" not in capsys.readouterr().err


def test_read_run_with_allow_edited_reads_the_edit_and_without_the_manifest(root, run):
    _respaced(run / PREDICTIONS)
    with pytest.raises(UserError, match=r"allow_edited=True"):
        proctor.read_run(run)
    assert proctor.read_run(run, allow_edited=True) == proctor.read_run(root / "pristine")
    (run / MANIFEST).unlink()
    with pytest.raises(UserError, match=r"no manifest"):
        proctor.read_run(run)
    assert proctor.read_run(run, allow_edited=True).tasks[MC].records == proctor.read_run(root / "pristine").tasks[
        MC].records
    with pytest.raises(UserError, match="allow_edited must be True or False"):
        proctor.read_run(run, allow_edited="yes")  # type: ignore[arg-type]


def test_a_file_larger_than_proctor_wrote_is_refused_before_it_is_read(run):
    with open(run / PREDICTIONS, "ab") as f:
        f.truncate(1 << 40)  # 1 TiB, sparse: hashing it whole would take hours
    with deadline(20), pytest.raises(UserError, match=r"predictions\.jsonl .*larger than"):
        proctor.read_run(run)
    os.mkfifo(run / "fifo")
    with deadline(20), pytest.raises(UserError, match=r"predictions\.jsonl .*not a regular file"):
        (run / PREDICTIONS).unlink()
        (run / PREDICTIONS).symlink_to(run / "fifo")
        proctor.read_run(run, allow_edited=True)  # the flag reads edited files, never a FIFO


# ---- two messages that misled ----------------------------------------------------------------


def test_a_cli_output_a_concurrent_run_took_names_the_flag(root, tmp_path, capsys, monkeypatch, data_dir):
    import proctor.outputs.run_dir as run_dir

    write_sidecar = run_dir.write_sidecar

    def concurrent_run_finishes_first(directory, rows):
        shutil.copytree(root / "pristine", taken, dirs_exist_ok=True)
        write_sidecar(directory, rows)

    monkeypatch.setattr(run_dir, "write_sidecar", concurrent_run_finishes_first)
    taken = tmp_path / "cli"
    assert main(["run", "--model", str(root / "tiny"), "--tasks", MC, "--limit", "1", "--data-dir", str(data_dir),
                 "--output", str(taken), "--no-cache", "--no-progress"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--overwrite" in line and "overwrite=True" not in line and f"--output {taken}" in line
    taken = tmp_path / "api"
    with pytest.raises(UserError, match="pass overwrite=True"):
        proctor.evaluate(str(root / "tiny"), tasks=[MC], limit=1, data_dir=data_dir, output=taken, cache=False,
                         progress=False)


def _tmpfs_works() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "--mount", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True
    ).returncode == 0


FULL_DISK = """
    import os, sys
    from proctor.engine.cache import ResultCache
    from proctor.errors import UserError
    from proctor.requests import LoglikelihoodResult
    path, filler = sys.argv[1] + "/results.sqlite", sys.argv[1] + "/filler"
    with open(filler, "wb") as f:  # most of the disk taken by other files
        f.write(b"x" * 140 * 1024)
    cache = ResultCache(path)
    try:
        for batch in range(10000):
            cache.put_many("fp", {f"b{batch}-{i}-{'x' * 200}": LoglikelihoodResult(-1.0, 1, True) for i in range(50)})
    except UserError as e:
        print("STORE", e)
    cache.close()
    os.remove(filler)  # space freed, as the message says: a rerun finds what was kept
    with ResultCache(path) as again:
        print("FOUND", again.count("fp"))
    try:
        with open(filler, "wb") as f:  # now nothing is left, not even for the WAL
            while True:
                f.write(b"x" * 4096)
                f.flush()
    except OSError:
        pass
    try:
        ResultCache(path)
    except UserError as e:
        print("OPEN", e)
"""


@pytest.mark.skipif(not _tmpfs_works(), reason="needs a mount namespace to mount a small tmpfs")
def test_a_full_disk_under_the_cache_says_so_and_how_much_is_kept(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    (tmp_path / "full.py").write_text(textwrap.dedent(FULL_DISK))
    done = subprocess.run(["unshare", "--mount", "sh", "-c", f"mount -t tmpfs -o size=256k tmpfs {disk} && "
                           f"{sys.executable} {tmp_path / 'full.py'} {disk}"],
                          capture_output=True, text=True, timeout=120)
    out = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in done.stdout.splitlines()}
    assert set(out) == {"STORE", "FOUND", "OPEN"}, done.stdout + done.stderr
    found = int(out["FOUND"])
    assert "disk is full" in out["STORE"] and str(disk) in out["STORE"], out
    assert f"the {found} results this run stored are kept" in out["STORE"], (found, out)
    assert "disk is full" in out["OPEN"] and str(disk) in out["OPEN"] and "move it aside" not in out["OPEN"], out

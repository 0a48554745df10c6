"""proctor never deletes or replaces what it did not write (issue 13, class 1 and 8)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from proctor.errors import UserError
from proctor.outputs.atomic import atomic_write_text, make_stage, remove_dead_stages
from proctor.outputs.owned import (MANIFEST, check_output_dir, check_output_file, foreign_entry, staged_directory,
                                   write_owned_file)


def snapshot(root: Path) -> dict[str, bytes]:
    """Every entry under `root`: files by content, directories and links by kind."""
    found = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        found[rel] = (b"link:" + os.readlink(p).encode()) if p.is_symlink() else p.read_bytes() if p.is_file() else b"dir"
    return found


def users_directory(root: Path) -> Path:
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "thesis.tex").write_text("\\chapter{Results}\n")
    (root / "notes").mkdir()
    (root / "notes" / "a.md").write_text("keep me")
    return root


def write(out: Path, text: str, overwrite: bool = False) -> None:
    with staged_directory(out, overwrite=overwrite) as stage:
        atomic_write_text(stage / "metrics.json", text)
        atomic_write_text(stage / "task" / "predictions.jsonl", "{}\n")


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_directory_proctor_did_not_make_is_refused_and_left_byte_for_byte(tmp_path, overwrite):
    home = users_directory(tmp_path / "home")
    before = snapshot(tmp_path)
    with pytest.raises(UserError, match="proctor did not write"):
        write(home, "{}", overwrite=overwrite)
    assert snapshot(tmp_path) == before


def test_the_current_directory_is_never_replaced(tmp_path, monkeypatch):
    users_directory(tmp_path / "cwd")
    monkeypatch.chdir(tmp_path / "cwd")
    before = snapshot(tmp_path)
    for target in (Path("."), Path(".."), tmp_path / "cwd"):
        with pytest.raises(UserError):
            check_output_dir(target, overwrite=True)
    assert snapshot(tmp_path) == before


def test_an_existing_file_or_link_is_refused(tmp_path):
    (tmp_path / "file").write_text("data")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    before = snapshot(tmp_path)
    for target in ("file", "link"):
        with pytest.raises(UserError, match="not a directory"):
            write(tmp_path / target, "{}", overwrite=True)
    assert snapshot(tmp_path) == before


def test_an_earlier_run_is_replaced_only_with_overwrite(tmp_path):
    out = tmp_path / "run"
    write(out, '{"first": 1}')
    with pytest.raises(UserError, match="--overwrite"):
        write(out, '{"second": 2}')
    assert json.loads((out / "metrics.json").read_text()) == {"first": 1}
    write(out, '{"second": 2}', overwrite=True)
    assert json.loads((out / "metrics.json").read_text()) == {"second": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


@pytest.mark.parametrize("change", ["add", "edit", "delete-manifest", "garble-manifest", "subdir"])
def test_an_earlier_run_someone_changed_is_not_replaced_even_with_overwrite(tmp_path, change):
    out = tmp_path / "run"
    write(out, "{}")
    if change == "add":
        (out / "my-analysis.ipynb").write_text("{}")
    elif change == "edit":
        (out / "task" / "predictions.jsonl").write_text('{"edited": true}\n')
    elif change == "delete-manifest":
        (out / MANIFEST).unlink()
    elif change == "garble-manifest":
        (out / MANIFEST).write_text("[")
    else:
        (out / "plots").mkdir()
    before = snapshot(tmp_path)
    with pytest.raises(UserError, match="proctor did not write"):
        write(out, "{}", overwrite=True)
    assert snapshot(tmp_path) == before


def test_an_empty_directory_is_filled(tmp_path):
    (tmp_path / "run").mkdir()
    write(tmp_path / "run", "{}")
    assert (tmp_path / "run" / "metrics.json").is_file()


def test_an_unwritable_destination_is_refused_before_any_work(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="not a directory"):
        check_output_dir(tmp_path / "file" / "run", overwrite=False)
    with pytest.raises(UserError, match="cannot write"):
        check_output_dir(Path("/proc/proctor-run"), overwrite=False)


def test_single_files_replace_only_their_own_unchanged_versions(tmp_path):
    mine = tmp_path / "out.json"
    write_owned_file(mine, b"1")
    write_owned_file(mine, b"2")  # proctor's own, unchanged: replaced
    assert mine.read_bytes() == b"2"
    mine.write_bytes(b"edited by hand")
    with pytest.raises(UserError, match="did not write"):
        write_owned_file(mine, b"3")
    assert mine.read_bytes() == b"edited by hand"
    theirs = tmp_path / "theirs.json"
    theirs.write_text("precious")
    with pytest.raises(UserError, match="did not write"):
        check_output_file(theirs)
    assert theirs.read_text() == "precious"


def test_foreign_entry_names_the_first_unvouched_file(tmp_path):
    write(tmp_path / "run", "{}")
    assert foreign_entry(tmp_path / "run") is None
    (tmp_path / "run" / "extra.txt").write_text("x")
    assert foreign_entry(tmp_path / "run") == "extra.txt"


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_staging_left_by_a_dead_run_is_removed_by_the_next(tmp_path):
    stage = make_stage(tmp_path, "run", "partial")
    dead = stage.with_name(stage.name.replace(f"-{os.getpid()}-", f"-{_dead_pid()}-"))
    stage.rename(dead)
    (dead / "big.bin").write_bytes(b"x" * 1000)
    lookalike = tmp_path / dead.name.replace("partial", "old")
    lookalike.mkdir()
    (lookalike / "user.txt").write_text("not a stage: no mark")  # left alone
    live = make_stage(tmp_path, "run", "partial")  # this process's: alive, kept
    remove_dead_stages(tmp_path, "run")
    assert not dead.exists() and live.exists() and (lookalike / "user.txt").exists()


def test_a_killed_run_leaves_nothing_and_the_next_cleans_up(tmp_path):
    """SIGKILL inside the staged directory: no output, and the stage goes on the next write."""
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from proctor.outputs.atomic import atomic_write_text
        from proctor.outputs.owned import staged_directory
        with staged_directory(Path({str(tmp_path / 'run')!r})) as stage:
            atomic_write_text(stage / "metrics.json", "{{}}")
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", script])
    assert done.returncode == -signal.SIGKILL
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and ".run.partial-" in left[0]  # the dead run's stage
    write(tmp_path / "run", "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]

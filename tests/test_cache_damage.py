"""A damaged, foreign or unwritable resume cache: one line saying what to do, never a traceback,
and every result committed before the failure kept (issue 13, class 4)."""

import resource
import shutil
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from proctor.engine.cache import ResultCache
from proctor.errors import UserError
from proctor.requests import GenerateResult, Generation, LoglikelihoodResult

RESULTS = {f"k{i}": LoglikelihoodResult(-0.5 * i, i % 3 + 1, i % 2 == 0) for i in range(50)}


def filled(path):
    with ResultCache(path) as cache:
        cache.put_many("fp", RESULTS)
        cache.put_generations("fp", {"g": GenerateResult((Generation("42", 3, "stop"),))})
    return path


def test_a_cache_round_trips(tmp_path):
    with ResultCache(filled(tmp_path / "r.sqlite")) as cache:
        assert cache.get_many("fp", RESULTS) == RESULTS
        assert cache.get_generations("fp", ["g"])["g"].samples[0].text == "42"
        assert cache.tampered == 0


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty-header", "zeroed-pages"])
def test_a_corrupt_cache_file_is_one_line_naming_the_fix(tmp_path, damage):
    path = filled(tmp_path / "r.sqlite")
    data = path.read_bytes()
    for side in ("-wal", "-shm"):
        (tmp_path / f"r.sqlite{side}").unlink(missing_ok=True)
    if damage == "garbage":
        path.write_bytes(b"this is not sqlite" * 500)
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 3])
    elif damage == "empty-header":
        path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    else:
        path.write_bytes(data[:4096] + b"\x00" * (len(data) - 4096))
    with pytest.raises(UserError, match=r"mv .*r\.sqlite .*\.bad|PROCTOR_CACHE_DIR") as err:
        with ResultCache(path) as cache:
            cache.get_many("fp", RESULTS)
            cache.put_many("fp", {"new": LoglikelihoodResult(-1.0, 1, True)})
    assert "\n" not in str(err.value)


def test_a_cache_with_another_layout_or_of_another_program_is_refused(tmp_path):
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE thesis (chapter TEXT)")
    with pytest.raises(UserError, match="another program"):
        ResultCache(other)
    wrong = tmp_path / "wrong.sqlite"
    with sqlite3.connect(wrong) as db:
        db.execute("CREATE TABLE loglikelihood (fingerprint TEXT, key TEXT, value BLOB)")
    with pytest.raises(UserError, match="unknown layout"):
        ResultCache(wrong)


def test_a_cache_of_the_previous_layout_is_upgraded_with_its_results(tmp_path):
    old = tmp_path / "old.sqlite"
    with sqlite3.connect(old) as db:
        db.execute("CREATE TABLE loglikelihood (fingerprint TEXT NOT NULL, key TEXT NOT NULL, sum_logits REAL "
                   "NOT NULL, num_tokens INTEGER NOT NULL, is_greedy INTEGER NOT NULL, PRIMARY KEY "
                   "(fingerprint, key)) WITHOUT ROWID")
        db.execute("INSERT INTO loglikelihood VALUES ('fp', 'k', -2.5, 2, 1)")
    with ResultCache(old) as cache:
        assert cache.get_many("fp", ["k"]) == {"k": LoglikelihoodResult(-2.5, 2, True)}


def test_a_value_changed_outside_proctor_is_dropped_and_recomputed(tmp_path):
    path = filled(tmp_path / "r.sqlite")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE loglikelihood SET sum_logits = 0.0 WHERE key = 'k7'")
        db.execute("UPDATE generation SET samples = '[[\"forged\", 1, \"stop\"]]'")
    with ResultCache(path) as cache:
        got = cache.get_many("fp", RESULTS)
        assert "k7" not in got and len(got) == len(RESULTS) - 1
        assert cache.get_generations("fp", ["g"]) == {}
        assert cache.tampered == 2 and "failed their checksum" in cache.tampered_warning()[0]
        cache.put_many("fp", {"k7": RESULTS["k7"]})  # the recomputed value takes its place
        assert cache.get_many("fp", ["k7"]) == {"k7": RESULTS["k7"]}


def test_a_cache_dir_that_is_a_file_or_names_a_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="PROCTOR_CACHE_DIR"):
        ResultCache(tmp_path / "file" / "results.sqlite")
    (tmp_path / "dir.sqlite").mkdir()
    with pytest.raises(UserError, match="not a file"):
        ResultCache(tmp_path / "dir.sqlite")


def _read_only_mount_works() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", "--mount", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _read_only_mount_works(), reason="needs a mount namespace to make a read-only directory")
def test_a_read_only_cache_directory(tmp_path):
    (tmp_path / "ro").mkdir()
    script = textwrap.dedent(f"""
        from proctor.engine.cache import ResultCache
        from proctor.errors import UserError
        try:
            ResultCache({str(tmp_path / 'ro' / 'results.sqlite')!r})
        except UserError as e:
            print("USERERROR", e)
    """)
    (tmp_path / "open.py").write_text(script)
    done = subprocess.run(["unshare", "--mount", "sh", "-c",
                           f"mount --bind {tmp_path / 'ro'} {tmp_path / 'ro'} && "
                           f"mount -o remount,bind,ro {tmp_path / 'ro'} && {sys.executable} {tmp_path / 'open.py'}"],
                          capture_output=True, text=True)
    assert "USERERROR" in done.stdout and "writable" in done.stdout, done.stdout + done.stderr


def _store_until_full(path: str, limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # `ulimit -f`: the disk is "full"
    cache = ResultCache(path)
    for batch in range(1000):
        cache.put_many("fp", {f"b{batch}-{i}-{'x' * 200}": LoglikelihoodResult(-1.0, 1, True) for i in range(50)})


def test_a_full_disk_mid_run_is_one_line_and_keeps_what_was_stored(tmp_path):
    path = str(tmp_path / "r.sqlite")
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent)!r})
        from test_cache_damage import _store_until_full
        from proctor.errors import UserError
        try:
            _store_until_full({path!r}, 256 * 1024)
        except UserError as e:
            print("USERERROR", e)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "USERERROR" in done.stdout and "disk is full" in done.stdout, done.stdout + done.stderr
    assert "kept" in done.stdout and "Traceback" not in done.stderr
    with ResultCache(path) as cache:  # what was committed before is intact
        (stored,) = cache._db.execute("SELECT COUNT(*) FROM loglikelihood").fetchone()
        assert stored > 0 and stored % 50 == 0  # whole batches only
        assert cache.tampered == 0

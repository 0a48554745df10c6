"""The seed's count verification on the real data."""

from proctor.tasks.reasoning_types import REASONING_TYPES
from proctor.verify import SUBJECT_COUNTS, VerifyReport, format_report, verify


def test_verify_real_data(data_dir):
    report = verify(data_dir)
    assert report.ok, report.errors
    checks = {c.name: c for c in report.checks}
    assert checks["socialiqa:mc::xlarge items"].actual == 10000
    assert checks["mmlu_stem:mc::olmes items"].actual == 3018
    assert checks["mmlu_social_sciences:mc::olmes items"].actual == 3077
    assert checks["socialiqa:mc::xlarge duplicate native ids"].actual == 167
    # GSM8K is registered now: its count, query ids and benchmark are real checks
    assert checks["gsm8k::olmo3:n8:v2 items"].actual == 1319
    assert checks["gsm8k::olmo3:n8:v2 unique query_ids"].actual == 1319
    assert checks["gsm8k::olmo3:n8:v2 benchmark"].actual == "gsm8k"
    assert checks["mmlu_social_sciences:mc::olmes benchmark"].actual == "mmlu_social_science"
    assert checks["data_attribution::olmo3 members"].ok
    assert not any("not registered" in w for w in report.warnings)
    assert all(f"mmlu {s} items" in checks for s in SUBJECT_COUNTS)
    assert any("167 duplicate native ids" in w for w in report.warnings)
    assert set(report.reasoning_types) == set(REASONING_TYPES)
    assert all(n > 0 for n in report.reasoning_types.values())
    assert sum(report.reasoning_types.values()) >= 9900


def test_format_report_and_errors():
    report = VerifyReport()
    report.check("x items", 10, 10)
    report.check("y items", 3, 4)
    report.warnings.append("something odd")
    text = format_report(report)
    assert "ok   x items: 10" in text
    assert "FAIL y items: 4 (expected 3)" in text
    assert "error: y items: expected 3, found 4" in text
    assert "warning: something odd" in text
    assert text.endswith("2 checks, 1 errors, 1 warnings")
    assert not report.ok


def test_cli_verify_exit_codes(data_dir, tmp_path, capsys):
    from proctor.cli import main

    assert main(["verify", "--data-dir", str(data_dir)]) == 0
    # The same data with one MMLU subject missing a row: a count mismatch, exit 1.
    copy = tmp_path / "data"
    copy.mkdir()
    for entry in data_dir.iterdir():
        if entry.name != "mmlu":
            (copy / entry.name).symlink_to(entry)
    for split_dir in (data_dir / "mmlu").iterdir():
        if split_dir.is_dir():
            (copy / "mmlu" / split_dir.name).mkdir(parents=True)
            for f in split_dir.iterdir():
                (copy / "mmlu" / split_dir.name / f.name).symlink_to(f)
    astronomy = copy / "mmlu" / "test" / "astronomy_test.csv"
    lines = astronomy.read_text().splitlines(keepends=True)
    astronomy.unlink()
    astronomy.write_text("".join(lines[:-1]))
    capsys.readouterr()
    assert main(["verify", "--data-dir", str(copy)]) == 1
    out = capsys.readouterr().out
    assert "FAIL mmlu astronomy items: 151 (expected 152)" in out


def test_gsm8k_count_mismatch_is_an_error(data_dir, tmp_path):
    # GSM8K's test split with its last row missing: the seed's 1,319 is checked, not assumed
    copy = tmp_path / "data"
    copy.mkdir()
    for entry in data_dir.iterdir():
        if entry.name != "gsm8k":
            (copy / entry.name).symlink_to(entry)
    for f in (data_dir / "gsm8k").rglob("*"):
        target = copy / "gsm8k" / f.relative_to(data_dir / "gsm8k")
        if f.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if "test" in f.name and f.suffix == ".jsonl":
            target.write_text("".join(f.read_text().splitlines(keepends=True)[:-1]))
        else:
            target.symlink_to(f)
    report = verify(copy)
    assert "gsm8k::olmo3:n8:v2 items: expected 1319, found 1318" in report.errors

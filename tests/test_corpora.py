"""proctor.data.corpora: local C4/Paloma files, hub streaming (faked), first-N prefixes, errors."""

import gzip
import json
import re
from pathlib import Path

import pytest

from proctor.data.corpora import (PALOMA_SOURCES, Document, c4_documents, paloma_documents,
                                  read_local_documents)
from proctor.errors import UserError

FIXTURE_SOURCE = "c4_100_domains"


def write_jsonl(path: Path, rows: list, gz: bool = False) -> Path:
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.fixture
def no_env(monkeypatch, tmp_path):
    monkeypatch.delenv("PROCTOR_DATA_DIR", raising=False)
    monkeypatch.setenv("PROCTOR_CACHE_DIR", str(tmp_path / "cache"))  # streamed prefixes land here


class FakeHub:
    """Stands in for `datasets.load_dataset(..., streaming=True)`: an endless row stream."""

    def __init__(self, fail: Exception | None = None, fail_on_iter: Exception | None = None):
        self.calls: list[dict] = []
        self.consumed = 0
        self.fail, self.fail_on_iter = fail, fail_on_iter

    def __call__(self, path, name=None, **kwargs):
        self.calls.append({"path": path, "name": name, **kwargs})
        if self.fail:
            raise self.fail
        return self._rows(path, name)

    def _rows(self, path, name):
        if self.fail_on_iter:
            raise self.fail_on_iter
        i = 0
        while True:  # endless: reading past the first N would never stop
            self.consumed += 1
            yield {"text": f"{name} document {i}", "url": f"https://example.com/{i}", "id": f"{name}-{i}"}
            i += 1


@pytest.fixture
def fake_hub(monkeypatch, no_env):
    import datasets

    hub = FakeHub()
    monkeypatch.setattr(datasets, "load_dataset", hub)
    return hub


# ---- C4, local --------------------------------------------------------------------------------

def test_c4_local_default_layout_is_the_derived_jsonl(data_dir):
    docs = c4_documents(data_dir, 5)
    assert len(docs) == 5 and all(isinstance(d, Document) and d.source == "c4_en" for d in docs)
    assert docs[0].native_id == "https://www.opentable.com/boneyard-bistro?Ref=8101"
    first = json.loads(gzip.open(data_dir / "c4/derived/c4_validation_2k.jsonl.gz", "rt").readline())
    assert docs[0].text == first["text"]


def test_c4_jsonl_gz_and_parquet_hold_the_same_documents(data_dir):
    from_jsonl = c4_documents(data_dir, 2000)
    from_parquet = c4_documents(None, 2000, path=data_dir / "c4/yxanul_validation/c4_validation_2k.parquet")
    assert len(from_jsonl) == len(from_parquet) == 2000
    assert from_jsonl == from_parquet
    assert len({d.native_id for d in from_jsonl}) == 2000


def test_c4_first_n_is_a_deterministic_prefix(data_dir):
    ten = c4_documents(data_dir, 10)
    assert ten == c4_documents(data_dir, 10)
    assert ten == c4_documents(data_dir, 300)[:10]
    assert c4_documents(data_dir, 5000) == c4_documents(data_dir, 2000)  # fewer available: all of them


def test_c4_data_dir_from_environment(data_dir, monkeypatch):
    monkeypatch.setenv("PROCTOR_DATA_DIR", str(data_dir))
    assert c4_documents(None, 3) == c4_documents(data_dir, 3)


def test_c4_explicit_files_of_each_format(tmp_path, no_env):
    rows = [{"text": f"doc {i} ünï", "url": f"u{i}"} for i in range(5)]
    for name, write in [("a.jsonl", lambda p: write_jsonl(p, rows)),
                        ("a.jsonl.gz", lambda p: write_jsonl(p, rows, gz=True)),
                        ("a.json.gz", lambda p: write_jsonl(p, rows, gz=True)),
                        ("a.parquet", lambda p: write_parquet(p, rows))]:
        docs = c4_documents(None, 3, path=write(tmp_path / name))
        assert docs == [Document(f"doc {i} ünï", f"u{i}", "c4_en") for i in range(3)], name


def test_c4_directory_reads_files_in_name_order_across_boundaries(tmp_path, no_env):
    write_jsonl(tmp_path / "b.jsonl", [{"text": "b0"}, {"text": "b1"}])
    write_parquet(tmp_path / "a.parquet", [{"text": "a0"}, {"text": "a1"}])
    write_jsonl(tmp_path / "c.jsonl.gz", [{"text": "c0"}], gz=True)
    (tmp_path / "notes.txt").write_text("ignored")
    docs = c4_documents(None, 4, path=tmp_path)
    assert [d.text for d in docs] == ["a0", "a1", "b0", "b1"]
    assert [d.native_id for d in docs] == ["0", "1", "2", "3"]  # no url: the index
    assert [d.text for d in c4_documents(None, 100, path=tmp_path)] == ["a0", "a1", "b0", "b1", "c0"]


def test_c4_hub_mirror_layout_wins_and_keeps_shard_order(tmp_path, no_env):
    write_jsonl(tmp_path / "c4/en/c4-validation.00001-of-00008.json.gz", [{"text": "second"}], gz=True)
    write_jsonl(tmp_path / "c4/en/c4-validation.00000-of-00008.json.gz", [{"text": "first"}], gz=True)
    write_jsonl(tmp_path / "c4/en/c4-train.00000-of-01024.json.gz", [{"text": "train"}], gz=True)
    write_jsonl(tmp_path / "c4/derived/x.jsonl", [{"text": "derived"}])
    assert [d.text for d in c4_documents(tmp_path, 10)] == ["first", "second"]


def test_empty_documents_are_kept_and_count_toward_n(tmp_path, no_env):
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": ""}, {"text": "x"}, {"text": ""}, {"text": "y"}])
    assert [d.text for d in c4_documents(None, 3, path=path)] == ["", "x", ""]


# ---- C4, hub (faked) --------------------------------------------------------------------------

def test_c4_hub_streams_the_english_validation_split_and_takes_only_n(fake_hub):
    docs = c4_documents(None, 7)
    assert fake_hub.calls == [{"path": "allenai/c4", "name": "en", "split": "validation", "streaming": True}]
    assert [d.text for d in docs] == [f"en document {i}" for i in range(7)]
    assert docs[0].native_id == "https://example.com/0"
    assert fake_hub.consumed <= 8  # stopped after the first N rows


def test_streamed_prefix_is_cached_and_reused(fake_hub, monkeypatch):
    import datasets

    first = c4_documents(None, 7)
    assert c4_documents(None, 5) == first[:5] and c4_documents(None, 7) == first  # from the cache
    assert len(fake_hub.calls) == 1
    monkeypatch.setattr(datasets, "load_dataset", FakeHub(fail=ConnectionError("offline")))
    assert c4_documents(None, 6) == first[:6]  # no network needed for a cached prefix
    with pytest.raises(UserError, match="offline"):
        c4_documents(None, 8)  # longer than the cached prefix: streams again
    monkeypatch.setattr(datasets, "load_dataset", fake_hub)
    assert c4_documents(None, 9)[:7] == first and len(fake_hub.calls) == 2
    assert c4_documents(None, 3) == first[:3] and len(fake_hub.calls) == 2  # the longer prefix kept


def test_c4_hub_failure_is_one_user_error(monkeypatch, no_env):
    import datasets

    monkeypatch.setattr(datasets, "load_dataset", FakeHub(fail=ConnectionError("no route to host\ntrace")))
    with pytest.raises(UserError, match=r"allenai/c4 \(en\) split 'validation'.*no route to host.*PROCTOR_DATA_DIR"):
        c4_documents(None, 3)


# ---- Paloma -----------------------------------------------------------------------------------

def test_paloma_sources_are_the_16_hub_configs():
    assert len(PALOMA_SOURCES) == len(set(PALOMA_SOURCES)) == 16
    assert PALOMA_SOURCES == tuple(sorted(PALOMA_SOURCES))
    assert {"4chan_meta_sep", "c4_en", "ptb", "wikitext_103", "twitterAAE_HELM_fixed",
            "dolma_100_programing_languages", "m2d2_s2orc_unsplit"} <= set(PALOMA_SOURCES)


def test_paloma_local_fixture(data_dir):
    path = data_dir / "paloma/ppl-test-data/c4_100_domains/val"
    rows = [json.loads(line) for line in gzip.open(next(path.glob("*.jsonl.gz")), "rt")]
    docs = paloma_documents(FIXTURE_SOURCE, "val", 1000, data_dir)
    assert len(docs) == 10
    assert [(d.text, d.native_id, d.source) for d in docs] == [(r["text"], r["id"], FIXTURE_SOURCE) for r in rows]
    assert paloma_documents(FIXTURE_SOURCE, "val", 3, data_dir) == docs[:3]


def test_paloma_local_hub_repo_layout(tmp_path, no_env):
    write_jsonl(tmp_path / "paloma/ptb/test/test_ptb.jsonl.gz", [{"text": "t0", "id": "a"}, {"text": "t1", "id": "b"}], gz=True)
    write_jsonl(tmp_path / "paloma/ptb/val/val_ptb.jsonl.gz", [{"text": "v0", "id": "c"}], gz=True)
    assert paloma_documents("ptb", "test", 5, tmp_path) == [Document("t0", "a", "ptb"), Document("t1", "b", "ptb")]
    assert paloma_documents("ptb", "val", 5, tmp_path) == [Document("v0", "c", "ptb")]


def test_paloma_missing_local_source_names_the_download(data_dir):
    with pytest.raises(UserError, match=r"no local Paloma files for source 'ptb' split 'val'.*"
                                        r"huggingface-cli download allenai/paloma"):
        paloma_documents("ptb", "val", 5, data_dir)


def test_paloma_hub_passes_an_explicit_token_only_to_the_hub_call(fake_hub):
    docs = paloma_documents("ptb", "test", 4, token="hf_SECRET_abc")
    assert fake_hub.calls == [{"path": "allenai/paloma", "name": "ptb", "split": "test",
                               "streaming": True, "token": "hf_SECRET_abc"}]
    assert [d.native_id for d in docs] == ["ptb-0", "ptb-1", "ptb-2", "ptb-3"]
    assert all("hf_SECRET" not in repr(d) for d in docs)


def test_paloma_hub_without_token_leaves_auth_to_huggingface_hub(fake_hub):
    paloma_documents("wikitext_103", "val", 2)
    assert "token" not in fake_hub.calls[0]  # huggingface_hub then uses HF_TOKEN / the saved login


@pytest.mark.parametrize("where", ["load", "iterate"])
def test_paloma_gated_access_is_one_clear_error_without_the_token(monkeypatch, no_env, where):
    import datasets

    error = PermissionError("Dataset 'allenai/paloma' is a gated dataset on the Hub (token hf_SECRET_abc refused)")
    hub = FakeHub(fail=error) if where == "load" else FakeHub(fail_on_iter=error)
    monkeypatch.setattr(datasets, "load_dataset", hub)
    with pytest.raises(UserError) as info:
        paloma_documents("c4_en", "val", 3, token="hf_SECRET_abc")
    message = str(info.value)
    assert "gated" in message and "hf_SECRET_abc" not in message
    for hint in ["huggingface.co/datasets/allenai/paloma", "huggingface-cli login", "HF_TOKEN"]:
        assert hint in message
    assert "\n" not in message


def test_paloma_rejects_unknown_sources_and_splits(no_env):
    with pytest.raises(UserError, match="unknown Paloma source 'c4'.*4chan_meta_sep"):
        paloma_documents("c4", "val", 3)
    with pytest.raises(UserError, match="unknown Paloma split 'validation'"):
        paloma_documents("ptb", "validation", 3)


# ---- errors in local files --------------------------------------------------------------------

@pytest.mark.parametrize("lines, message", [
    (['{"text": "ok"}', '{"text": "broken'], r"bad\.jsonl:2: invalid JSON"),
    (['{"text": "ok"}', '{"body": "no text"}'], r"bad\.jsonl:2: expected a string field 'text', found no such field"),
    (['{"text": 5}'], r"bad\.jsonl:1: expected a string field 'text', found int"),
    (['["a list"]'], r"bad\.jsonl:1: expected a JSON object"),
])
def test_malformed_json_lines_name_file_and_line(tmp_path, no_env, lines, message):
    path = write_jsonl(tmp_path / "bad.jsonl", lines)
    with pytest.raises(UserError, match=message):
        c4_documents(None, 10, path=path)


def test_bad_files_are_user_errors(tmp_path, no_env):
    truncated = tmp_path / "cut.jsonl.gz"
    truncated.write_bytes(gzip.compress(b'{"text": "a"}\n' * 1000)[:60])
    with pytest.raises(UserError, match=r"cannot read .*cut\.jsonl\.gz"):
        c4_documents(None, 1000, path=truncated)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes('{"text": "caf\xe9"}\n'.encode("latin-1"))
    with pytest.raises(UserError, match=r"latin\.jsonl:1: not valid UTF-8"):
        c4_documents(None, 5, path=latin)
    no_text = write_parquet(tmp_path / "p.parquet", [{"body": "x"}])
    with pytest.raises(UserError, match=r"p\.parquet: no 'text' column \(columns: body\)"):
        c4_documents(None, 5, path=no_text)
    not_parquet = tmp_path / "junk.parquet"
    not_parquet.write_text("not parquet")
    with pytest.raises(UserError, match=r"cannot read .*junk\.parquet as parquet"):
        c4_documents(None, 5, path=not_parquet)


def test_missing_or_unusable_paths_are_user_errors(tmp_path, no_env):
    with pytest.raises(UserError, match=r"not found: .*nowhere\.jsonl"):
        c4_documents(None, 5, path=tmp_path / "nowhere.jsonl")
    (tmp_path / "x.csv").write_text("text\nhi\n")
    with pytest.raises(UserError, match=r"x\.csv: unsupported file type"):
        c4_documents(None, 5, path=tmp_path / "x.csv")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match=r"empty holds no .*files"):
        read_local_documents(empty, 5, source="c4_en")
    with pytest.raises(UserError, match=re.escape(f"no local C4 validation files under {empty.resolve()}")):
        c4_documents(empty, 5)
    with pytest.raises(UserError, match="data directory .* does not exist"):
        c4_documents(tmp_path / "missing_dir", 5)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(UserError, match="num_samples must be a positive integer"):
            c4_documents(None, bad, path=tmp_path)

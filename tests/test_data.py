"""Data sources: local layouts, resolution order, and one-line errors naming file and line."""

import bz2
import gzip
import json
from pathlib import Path

import pytest

from proctor.data import DATA_DIR_ENV, load_fewshot, load_split, resolve_data_dir
from proctor.data import hub
from proctor.errors import UserError
from proctor.tasks.registry import resolve


def test_local_mmlu_rows(data_dir):
    rows = load_split("cais/mmlu", "abstract_algebra", "test", data_dir)
    assert len(rows) == 100
    assert rows[0] == {"question": "Find the degree for the given field extension Q(sqrt(2), sqrt(3), sqrt(18)) over Q.",
                       "subject": "abstract_algebra", "choices": ["0", "4", "2", "6"], "answer": 1}
    assert len(load_split("cais/mmlu", "professional_law", "test", data_dir)) == 1534  # .csv.gz
    assert len(load_split("cais/mmlu", "abstract_algebra", "dev", data_dir)) == 5


def test_local_socialiqa_arc_hellaswag(data_dir):
    dev = load_split("allenai/social_i_qa", None, "validation", data_dir)
    assert len(dev) == 1954 and dev[0]["label"] == "3"
    assert dev[0]["question"] == "What does Tracy need to do before this?"
    assert len(load_split("allenai/social_i_qa", None, "train", data_dir)) == 33410
    arc = load_split("allenai/ai2_arc", "ARC-Challenge", "validation", data_dir)
    assert len(arc) == 299 and set(arc[0]) == {"id", "question", "choices", "answerKey"}
    hs = load_split("Rowan/hellaswag", None, "validation", data_dir)
    assert len(hs) == 10042 and hs[0]["activity_label"] == "Roof shingle removal"


def test_deterministic_and_not_shared(data_dir):
    a = load_split("allenai/social_i_qa", None, "validation", data_dir)
    a[0]["context"] = "mutated"
    b = load_split("allenai/social_i_qa", None, "validation", data_dir)
    assert b[0]["context"] != "mutated"
    assert resolve("arc_easy:mc::olmes")[0].docs(data_dir) == resolve("arc_easy:mc::olmes")[0].docs(data_dir)


def test_fewshot(data_dir):
    shots = load_fewshot("OLMES:social_i_qa", 5, data_dir)
    assert len(shots) == 5 and shots[0]["context"].startswith("Cameron decided to have a barbecue")
    with pytest.raises(UserError, match="has 8 examples, the spec needs 9"):
        load_fewshot("OLMES:social_i_qa", 9, data_dir)


def test_env_var_resolution(monkeypatch, data_dir, tmp_path):
    monkeypatch.setenv(DATA_DIR_ENV, str(data_dir))
    assert resolve_data_dir(None) == data_dir
    assert resolve_data_dir(tmp_path) == tmp_path.resolve()  # explicit wins
    monkeypatch.delenv(DATA_DIR_ENV)
    assert resolve_data_dir(None) is None


def test_missing_data_dir(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(UserError) as e:
        load_split("cais/mmlu", "anatomy", "test", missing)
    msg = str(e.value)
    assert str(missing) in msg and "--data-dir" in msg and "PROCTOR_DATA_DIR" in msg
    assert "\n" not in msg


def test_data_dir_without_benchmark(tmp_path):
    with pytest.raises(UserError, match=r"data file not found; looked for: .*mmlu/test/anatomy_test.csv"):
        load_split("cais/mmlu", "anatomy", "test", tmp_path)


def test_no_data_dir_and_hub_unreachable(monkeypatch):
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)

    class FakeDatasets:
        @staticmethod
        def load_dataset(*args, **kwargs):
            raise ConnectionError("Couldn't reach 'cais/mmlu' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setitem(__import__("sys").modules, "datasets", FakeDatasets)
    with pytest.raises(UserError) as e:
        load_split("cais/mmlu", "anatomy", "test", None)
    msg = str(e.value)
    assert "cais/mmlu (anatomy) split 'test'" in msg and "Hugging Face hub" in msg
    assert "pass --data-dir DIR or set PROCTOR_DATA_DIR" in msg


def test_hub_rows_are_used_without_data_dir(monkeypatch):
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    seen = {}

    class FakeDatasets:
        @staticmethod
        def load_dataset(path, name, split):
            seen["args"] = (path, name, split)
            return [{"question": "q", "subject": name, "choices": ["a", "b", "c", "d"], "answer": 2}]

    monkeypatch.setitem(__import__("sys").modules, "datasets", FakeDatasets)
    rows = hub.load_hub_split("cais/mmlu", "anatomy", "test")
    assert seen["args"] == ("cais/mmlu", "anatomy", "test") and rows[0]["answer"] == 2
    inst = resolve("mmlu_anatomy:mc::olmes", num_shots=0)[0].instances(None)[0]
    assert inst.prompt.endswith("Question: q\n A. a\n B. b\n C. c\n D. d\nAnswer:") and inst.label == 2


def test_fewshot_needs_data_dir(monkeypatch):
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    with pytest.raises(UserError, match="pass --data-dir DIR or set PROCTOR_DATA_DIR"):
        load_fewshot("OLMES:social_i_qa", 5, None)


def write(path: Path, text: str, raw: bytes = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw if raw is not None else text.encode("utf-8"))
    return path


def test_malformed_csv_names_file_and_line(tmp_path):
    p = write(tmp_path / "mmlu" / "test" / "anatomy_test.csv",
              'q1,a,b,c,d,A\n"q2, with comma",a,b,c,d,B\nq3,a,b,c,D\n')
    with pytest.raises(UserError) as e:
        load_split("cais/mmlu", "anatomy", "test", tmp_path)
    assert str(e.value) == f"{p}:3: expected 6 CSV columns, found 5"


def test_bad_answer_letter(tmp_path):
    p = write(tmp_path / "mmlu" / "test" / "anatomy_test.csv", "q1,a,b,c,d,A\nq2,a,b,c,d,F\n")
    with pytest.raises(UserError, match=rf"^{p}:2: answer must be A, B, C or D, found 'F'$"):
        load_split("cais/mmlu", "anatomy", "test", tmp_path)


def test_gzipped_csv(tmp_path):
    p = tmp_path / "mmlu" / "test" / "anatomy_test.csv.gz"
    p.parent.mkdir(parents=True)
    p.write_bytes(gzip.compress(b"q1,a,b,c,d,C\n"))
    assert load_split("cais/mmlu", "anatomy", "test", tmp_path)[0]["answer"] == 2


def siqa_dir(tmp_path, rows_text: str, labels: str) -> Path:
    base = tmp_path / "social_i_qa" / "socialiqa-train-dev"
    write(base / "dev.jsonl", rows_text)
    write(base / "dev-labels.lst", labels)
    return base


ROW = json.dumps({"context": "c", "question": "q", "answerA": "a", "answerB": "b", "answerC": "x"})


def test_malformed_jsonl_names_file_and_line(tmp_path):
    base = siqa_dir(tmp_path, ROW + "\n" + ROW + "\n{not json\n", "1\n2\n3\n")
    with pytest.raises(UserError, match=rf"^{base / 'dev.jsonl'}:3: invalid JSON"):
        load_split("allenai/social_i_qa", None, "validation", tmp_path)


def test_label_file_length_mismatch(tmp_path):
    base = siqa_dir(tmp_path, ROW + "\n" + ROW + "\n", "1\n")
    with pytest.raises(UserError) as e:
        load_split("allenai/social_i_qa", None, "validation", tmp_path)
    assert str(base / "dev-labels.lst") in str(e.value) and "1 labels" in str(e.value)
    assert "line 2" in str(e.value)


def test_bad_label_value(tmp_path):
    base = siqa_dir(tmp_path, ROW + "\n", "4\n")
    with pytest.raises(UserError, match=rf"^{base / 'dev-labels.lst'}:1: label must be 1, 2 or 3"):
        load_split("allenai/social_i_qa", None, "validation", tmp_path)


def test_non_utf8_file(tmp_path):
    p = write(tmp_path / "mmlu" / "test" / "anatomy_test.csv", "", raw=b"q1,a,b,c,d,A\nq\xe9,a,b,c,d,B\n")
    with pytest.raises(UserError) as e:
        load_split("cais/mmlu", "anatomy", "test", tmp_path)
    assert str(e.value).startswith(f"{p}:2: not valid UTF-8")


def test_malformed_arc_and_hellaswag(tmp_path, without_bundled_data):
    p = write(tmp_path / "ai2_arc" / "ARC-Easy" / "ARC-Easy-Test.jsonl", '{"id": "x"}\n')
    with pytest.raises(UserError, match=rf"^{p}:1: not an ARC row"):
        load_split("allenai/ai2_arc", "ARC-Easy", "test", tmp_path)
    h = tmp_path / "hellaswag" / "hellaswag_val_full.txt.bz2"
    h.parent.mkdir(parents=True)
    h.write_bytes(bz2.compress(b"Act: ctx\n7\ne1\ne2\ne3\ne4\n"))
    with pytest.raises(UserError, match=rf"^{h}:2: gold label must be 0-3"):
        load_split("Rowan/hellaswag", None, "validation", tmp_path)
    h.write_bytes(bz2.compress(b"Act: ctx\n1\ne1\n"))
    with pytest.raises(UserError, match="not a multiple of 6"):
        load_split("Rowan/hellaswag", None, "validation", tmp_path)


def test_hellaswag_train_missing_message(data_dir):
    with pytest.raises(UserError) as e:
        load_split("Rowan/hellaswag", None, "train", data_dir)
    assert "only has validation" in str(e.value) and "hellaswag:rc::xlarge" in str(e.value)


def test_a_few_shot_list_the_data_directory_lacks_comes_from_the_copy_proctor_ships(tmp_path, monkeypatch):
    from proctor.data import sources

    shipped = tmp_path / "shipped"
    (shipped / "fewshot").mkdir(parents=True)
    (shipped / "fewshot" / "OLMES_x.json").write_text(json.dumps({"examples": [{"a": 1}, {"a": 2}]}))
    monkeypatch.setattr(sources, "SHIPPED", shipped)
    here = tmp_path / "data"
    (here / "fewshot").mkdir(parents=True)
    assert sources.load_fewshot("OLMES:x", 2, here) == [{"a": 1}, {"a": 2}]
    assert sources.load_fewshot("OLMES:x", 1, None) == [{"a": 1}]  # no data directory at all
    (here / "fewshot" / "OLMES_x.json").write_text(json.dumps({"examples": [{"a": 3}]}))
    assert sources.load_fewshot("OLMES:x", 1, here) == [{"a": 3}]  # the data directory's own wins
    with pytest.raises(UserError, match="few-shot list not found"):
        sources.load_fewshot("OLMES:y", 1, here)


def test_a_saved_dataset_in_the_data_directory_wins_over_its_files(tmp_path):
    import datasets

    rows = [{"question": "q", "answer": "1"}]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "gsm8k" / "main" / "test"))
    assert load_split("openai/gsm8k", "main", "test", tmp_path) == rows


def test_a_saved_split_reads_as_its_rows_would_iterate(tmp_path):
    import datasets

    from proctor.data.saved import load_saved_split

    features = datasets.Features({
        "id": datasets.Value("int32"), "text": datasets.Value("string"),
        "endings": datasets.Sequence(datasets.Value("string")),
        "answers": datasets.Sequence({"text": datasets.Value("string"), "start": datasets.Value("int64")}),
        "label": datasets.ClassLabel(names=["no", "yes"]), "score": datasets.Value("float32"),
    })
    rows = {"id": [1, 2], "text": ["a", None], "endings": [["x", "y"], []],
            "answers": [{"text": ["t"], "start": [3]}, {"text": [], "start": []}],
            "label": [1, 0], "score": [0.5, float("nan")]}
    saved = datasets.Dataset.from_dict(rows, features=features)
    saved.save_to_disk(str(tmp_path / "plain"))
    got = load_saved_split(tmp_path / "plain")
    want = [dict(row) for row in saved]
    assert got[0] == want[0] and got[1]["answers"] == want[1]["answers"] == {"text": [], "start": []}
    assert got[1]["score"] != got[1]["score"] and {k: v for k, v in got[1].items() if k != "score"} == {
        k: v for k, v in want[1].items() if k != "score"}

    # a feature that decodes per row (an image) is read row by row, decoded
    PIL = pytest.importorskip("PIL.Image")
    images = datasets.Dataset.from_dict({"image": [PIL.new("RGB", (2, 2))]},
                                        features=datasets.Features({"image": datasets.Image()}))
    images.save_to_disk(str(tmp_path / "images"))
    (row,) = load_saved_split(tmp_path / "images")
    assert isinstance(row["image"], PIL.Image) and row["image"].size == (2, 2)

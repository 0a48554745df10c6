"""Corpus perplexity tasks (`c4_en::bpb`, `paloma_<source>::bpb`): docs, scoring, CLI end to end."""

import json
import math

import pytest

from proctor.cli import main
from proctor.data import corpora
from proctor.data.corpora import Document
from proctor.metrics import MeanStat, RatioStat, suite_scores
from proctor.requests import LoglikelihoodResult, RollingLoglikelihood
from proctor.tasks import perplexity
from proctor.tasks.registry import all_specs, all_suites, leaf_specs, resolve, task_rows

from test_rolling import hand_score
from tinylm import build_tiny_model

LN2 = math.log(2)


def c4_task():
    (task,) = resolve("c4_en::bpb")
    return task


def test_specs_are_registered_without_a_paloma_suite():
    specs = all_specs()
    assert "c4_en::bpb" in specs
    paloma = [perplexity.paloma_spec(s) for s in corpora.PALOMA_SOURCES]
    assert len(paloma) == 16 and set(paloma) <= set(specs)
    for suite in all_suites():
        assert not {"c4_en::bpb", *paloma} & set(leaf_specs(suite.name)), suite.name
    config = c4_task().config
    assert (config.primary_metric, config.split, config.sample_limit, config.num_shots) == ("bpb", "validation", 1000, 0)


def test_c4_docs_are_the_corpus_prefix(data_dir):
    task = c4_task()
    corpus = corpora.c4_documents(data_dir, 1000)
    docs = task.docs(data_dir)
    assert len(docs) == 1000 and all(d["text"] for d in docs)  # no empty document in this prefix
    instances = task.instances(data_dir, limit=20)
    assert [i.doc_id for i in instances] == list(range(20))
    assert [i.text for i in instances] == [d.text for d in corpus[:20]]
    assert instances[0].native_id == corpus[0].native_id
    assert instances[0].query_id == f"c4_en::bpb#{corpus[0].native_id}"
    assert instances[0].requests == (RollingLoglikelihood(corpus[0].text),) and instances[0].uncond_requests == ()
    assert len(task.instances(data_dir)) == 1000


def test_empty_documents_are_left_out_and_limit_counts_corpus_documents(monkeypatch):
    corpus = [Document("first", "a", "c4_en"), Document("", "b", "c4_en"),
              Document("third", "c", "c4_en"), Document("fourth", "d", "c4_en")]
    monkeypatch.setattr(corpora, "c4_documents", lambda data_dir, num_samples: corpus[:num_samples])
    task = c4_task()
    assert [(i.doc_id, i.native_id) for i in task.instances(None)] == [(0, "a"), (1, "c"), (2, "d")]
    # --limit 3 = the first 3 corpus documents (as the in-loop num_samples=3), the empty one dropped
    assert [i.native_id for i in task.instances(None, limit=3)] == ["a", "c"]


def test_ratio_stat_is_a_corpus_ratio_with_a_delta_method_stderr():
    pairs = [(10.0, 4.0), (3.0, 2.0), (8.0, 5.0)]
    stat = RatioStat.of(pairs)
    r = 21.0 / 11.0
    assert stat.mean == pytest.approx(r) and stat.count == 3
    residuals = sum((y - r * x) ** 2 for y, x in pairs)
    assert stat.stderr == pytest.approx(math.sqrt(residuals / (3 * 2)) / (11.0 / 3))
    assert RatioStat.of(pairs[:1]).merge(RatioStat.of(pairs[1:])) == stat
    assert math.isnan(RatioStat.of(pairs[:1]).stderr) and math.isnan(RatioStat().mean)
    with pytest.raises(ValueError, match="RatioStat"):
        suite_scores([MeanStat.of([1.0]), stat])


def test_scores_are_corpus_totals(monkeypatch):
    texts = ["héllo wörld", "plain text here", "x"]
    corpus = [Document(t, str(i), "c4_en") for i, t in enumerate(texts)]
    monkeypatch.setattr(corpora, "c4_documents", lambda data_dir, num_samples: corpus)
    task = c4_task()
    instances = task.instances(None)
    fake = {RollingLoglikelihood(texts[0]).key: LoglikelihoodResult(-12.0, 4, False),
            RollingLoglikelihood(texts[1]).key: LoglikelihoodResult(-9.0, 3, True),
            RollingLoglikelihood(texts[2]).key: LoglikelihoodResult(0.0, 0, True)}  # no tokens
    scored = task.score_docs(instances, fake)
    n_bytes = len(texts[0].encode()) + len(texts[1].encode())
    assert len(texts[0].encode()) == 13  # UTF-8 bytes, not characters
    assert scored.metrics["bpb"].mean == pytest.approx(21.0 / LN2 / n_bytes)
    assert scored.metrics["ce_loss"].mean == pytest.approx(21.0 / 7)
    assert task.config.primary_metric == "bpb" and scored.metrics["bpb"].count == 2
    first = scored.records[0].to_dict()["metrics"]
    assert first == {"nll": 12.0, "sum_logits": -12.0, "num_tokens": 4, "num_bytes": 13,
                     "bits_per_byte": pytest.approx(12.0 / LN2 / 13)}
    assert scored.records[2].metrics.bits_per_byte is None
    # one sidecar row per document, with nothing to be right or wrong about
    assert [(r.query_id, r.is_correct, r.predicted_answer, r.correct_answer) for r in scored.sidecar] == [
        (i.query_id, None, None, None) for i in instances]
    assert (scored.perplexity.nll, scored.perplexity.num_tokens, scored.perplexity.num_bytes,
            scored.perplexity.num_docs_scored) == (21.0, 7, n_bytes, 2)
    assert set(scored.metrics) == {"bpb", "ce_loss"}


def test_proctor_tasks_lists_them(data_dir):
    # the corpus specs, not OLMES's gold-answer BPB ones (`minerva_math_algebra::bpb`, `arc_easy:rc:bpb::olmes`)
    rows = {r.spec: r for r in task_rows("::bpb", data_dir) if r.primary_metric == "bpb"}
    assert len(rows) == 17
    c4 = rows["c4_en::bpb"]
    assert (c4.primary_metric, c4.items, c4.items_source) == ("bpb", 1000, "data")
    assert rows["paloma_c4_100_domains::bpb"].items == 10  # the local 10-document fixture
    assert rows["paloma_ptb::bpb"].items is None           # not stored locally, no official size


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


def run_cli(tiny, data_dir, out, cache, monkeypatch):
    monkeypatch.setenv("PROCTOR_CACHE_DIR", str(cache))
    return main(["run", "--model", str(tiny), "--tasks", "c4_en::bpb", "--limit", "3",
                 "--max-length", "64", "--batch-size", "4", "--data-dir", str(data_dir),
                 "--output", str(out), "--no-progress", "--save-requests"])


def test_cli_end_to_end_on_real_c4_documents(tiny, data_dir, tmp_path, monkeypatch):
    from proctor.backends import load_backend

    out, cache = tmp_path / "run", tmp_path / "cache"
    assert run_cli(tiny, data_dir, out, cache, monkeypatch) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    task = metrics["tasks"]["c4_en::bpb"]
    assert task["num_instances"] == 3 and task["primary_metric"] == "bpb"
    assert set(task["metrics"]) == {"bpb", "ce_loss"}
    preds = [json.loads(line) for line in (out / "c4_en-bpb" / "predictions.jsonl").open()]
    assert [p["doc_id"] for p in preds] == [0, 1, 2]

    # every document against an unbatched forward over its chunks, by hand
    docs = corpora.c4_documents(data_dir, 3)
    backend = load_backend(str(tiny), device="cpu", max_length=64)
    nll = tokens = n_bytes = 0.0
    for doc, pred in zip(docs, preds):
        expected, count = hand_score(backend.model, backend.tokenizer, doc.text, 64)
        assert count > 3 * 64  # several chunks each
        assert pred["metrics"]["num_tokens"] == count
        assert pred["metrics"]["sum_logits"] == pytest.approx(expected, rel=1e-5)
        assert pred["metrics"]["num_bytes"] == len(doc.text.encode("utf-8"))
        nll, tokens, n_bytes = nll - expected, tokens + count, n_bytes + len(doc.text.encode("utf-8"))
    assert task["metrics"]["bpb"]["mean"] == pytest.approx(nll / LN2 / n_bytes, rel=1e-6)
    assert task["metrics"]["ce_loss"]["mean"] == pytest.approx(nll / tokens, rel=1e-6)
    assert metrics["primary_scores"]["c4_en::bpb"]["score"] == task["metrics"]["bpb"]["mean"]
    assert task["perplexity"]["num_tokens"] == tokens and task["perplexity"]["num_bytes"] == n_bytes

    requests = [json.loads(line) for line in (out / "c4_en-bpb" / "requests.jsonl").open()]
    assert {r["request_type"] for r in requests} == {"loglikelihood_rolling"}
    assert requests[0]["request"] == {"text": docs[0].text}
    sidecar = [json.loads(line) for line in (out / "query_metadata.jsonl").open()]
    assert [(r["query_id"], r["benchmark"], r["is_correct"]) for r in sidecar] == [
        (p["query_id"], "c4_en", None) for p in preds]  # one row per document, no answer to judge
    import pyarrow.parquet as pq
    assert pq.read_table(out / "query_metadata.parquet").to_pylist() == sidecar

    # the same command again: everything from the cache, the same scores
    again = tmp_path / "again"
    assert run_cli(tiny, data_dir, again, cache, monkeypatch) == 0
    second = json.loads((again / "metrics.json").read_text())
    assert second["engine"]["batches_run"] == 0 and second["engine"]["cached"] == second["engine"]["unique"]
    assert second["tasks"]["c4_en::bpb"]["metrics"] == task["metrics"]


def test_missing_c4_data_is_one_user_error(tiny, tmp_path, capsys):
    empty = tmp_path / "data"
    empty.mkdir()
    out = tmp_path / "run"
    code = main(["run", "--model", str(tiny), "--tasks", "c4_en::bpb",
                 "--data-dir", str(empty), "--output", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("proctor: error: no local C4 validation files under") and str(empty) in err
    assert not out.exists()


@pytest.mark.slow  # heavy: subprocesses, over 3 s (SIGKILL and rerun)
def test_sigkill_then_rerun_rescores_no_stored_chunk(tiny, data_dir, tmp_path, monkeypatch):
    from killed_runs import finish, kill_when_stored, outputs, start_run

    def args(out):
        return ["--model", str(tiny), "--tasks", "c4_en::bpb", "--limit", "3", "--max-length", "128",
                "--batch-size", "1", "--data-dir", str(data_dir), "--output", str(out), "--no-progress"]

    out, cache = tmp_path / "run", tmp_path / "cache"
    stored = kill_when_stored(start_run(args(out), cache), cache, "loglikelihood", 20)
    assert stored >= 20 and not out.exists()
    resumed_run = start_run(args(out), cache)   # resumes while an uninterrupted run goes on here
    fresh = tmp_path / "fresh"
    monkeypatch.setenv("PROCTOR_CACHE_DIR", str(tmp_path / "fresh-cache"))
    assert main(["run", *args(fresh)]) == 0
    finish(resumed_run)
    assert outputs(out) == outputs(fresh)
    resumed, full = (json.loads((d / "metrics.json").read_text())["engine"] for d in (out, fresh))
    assert full["batches_run"] == full["batches"] == full["rolling_chunks"]
    # batch size 1: one batch per chunk; every chunk stored before the kill is not scored again
    assert resumed["batches_run"] <= full["batches"] - (stored - resumed["cached"])

"""The runtime's two ways in besides `evaluate`: `session` (benchmarks) and `open_tokenizer` (the export)."""

import pytest

from proctor.engine import ResultCache
from proctor.errors import UserError
from proctor.requests import Loglikelihood
from proctor.runtime import open_tokenizer, session

from tinylm import build_tiny_model

REQUESTS = [Loglikelihood("The fox jumps over the", c) for c in (" dog", " cat", " moon")]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(autouse=True)
def own_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PROCTOR_CACHE_DIR", str(tmp_path / "cache"))


def test_a_session_scores_with_the_options_given_and_closes_its_cache(tiny_dir, tmp_path):
    cache = ResultCache(tmp_path / "own.sqlite")
    with session(str(tiny_dir), device="cpu", batch_size=2, progress=False, result_cache=cache) as runtime:
        assert runtime.options.batch_size == 2 and runtime.cache is cache
        first = [r.sum_logits for r in runtime.engine.run(REQUESTS)]
    assert not (tmp_path / "cache" / "results.sqlite").exists()  # the caller's cache, not the user's
    with session(str(tiny_dir), device="cpu", progress=False,
                 result_cache=ResultCache(tmp_path / "own.sqlite")) as again:
        assert [r.sum_logits for r in again.engine.run(REQUESTS)] == first
        assert again.engine.stats.cached == len(REQUESTS)


def test_a_session_on_a_loaded_backend_compares_settings_without_reloading(tiny_dir):
    with session(str(tiny_dir), device="cpu", cache=False, progress=False) as loaded:
        with session(loaded.backend, batch_size=1, cache=False, progress=False, deterministic=True) as other:
            assert other.backend is loaded.backend and other.engine is not loaded.engine
            assert other.options.deterministic and other.cache is None
            assert len(other.engine.run(REQUESTS)) == len(REQUESTS)


def test_a_session_refuses_bad_options_and_unknown_keywords(tiny_dir):
    with pytest.raises(UserError, match="batch_size"):
        with session(str(tiny_dir), batch_size=0):
            pass
    with pytest.raises(TypeError, match="batchsize"):
        with session(str(tiny_dir), batchsize=4):
            pass
    with pytest.raises(UserError, match="does not exist"):
        with session("./no/such/model"):
            pass


def test_open_tokenizer_loads_a_model_directory_or_its_source(tiny_dir):
    by_path = open_tokenizer(str(tiny_dir))
    by_source = open_tokenizer(by_path.source)
    assert by_path.source.kind == "dir"
    assert by_path.source.tokenizer_identity == by_source.source.tokenizer_identity
    assert by_path.tokenizer("The fox").input_ids == by_source.tokenizer("The fox").input_ids
    with pytest.raises(UserError, match="does not exist"):
        open_tokenizer("./no/such/tokenizer")

"""Hidden states as an engine request: validation, planning over the whole set, the results API."""

import numpy as np
import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from proctor.backends.hf import HFBackend
from proctor.engine import Engine, ResultCache
from proctor.engine.hidden import plan_hidden
from proctor.requests import HiddenStates, HiddenStatesResult, Loglikelihood
from tinylm import build_tiny_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    directory = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
    model = AutoModelForCausalLM.from_pretrained(str(directory)).eval()
    return HFBackend(model, AutoTokenizer.from_pretrained(str(directory)), identity="tiny")


def prompts(n: int) -> list[str]:
    return [f"Question {i}: is Paris the capital of France?" + " Yes." * (i % 3) for i in range(n)]


def test_requests_check_their_fields():
    for bad, match in [(dict(layers=()), "non-empty tuple"), (dict(layers=[1]), "non-empty tuple"),
                       (dict(layers=(-1,)), "block indices"), (dict(layers=(1,), position="first"), "'last'"),
                       (dict(layers=(1,), dtype="int8"), "dtype"), (dict(layers=(1,), max_prompt_tokens=0),
                                                                      "max_prompt_tokens")]:
        with pytest.raises((TypeError, ValueError), match=match):
            HiddenStates("x", **bad)
    a, b = HiddenStates("x", (1,)), HiddenStates("x", (1,), dtype="float32")
    assert a.key != b.key and a.key == HiddenStates("x", (1,)).key


def test_a_resumed_run_plans_the_batches_of_the_whole_set(backend, tmp_path):
    requests = [HiddenStates(p, (0, 1)) for p in prompts(10)]
    engine = Engine(backend, batch_size=3, cache=ResultCache(tmp_path / "c.sqlite"), progress=False)
    unique = {r.key: r for r in requests}
    plan = plan_hidden(engine, unique)
    assert [len(b.rows) for _, b in plan] == [3, 3, 3, 1]
    lengths = [len(r.row.tokens) for _, b in plan for r in b.rows]
    assert lengths == sorted(lengths, reverse=True)
    first = engine.hidden_states(requests[:4])    # some of them stored (planned as a set of 4)
    again = Engine(backend, batch_size=3, cache=ResultCache(tmp_path / "c.sqlite"), progress=False)
    whole = again.hidden_states(requests)
    alone = Engine(backend, batch_size=3, progress=False).hidden_states(requests)
    # the rest ran in the batches of the whole set, as in a run that never stopped
    assert all(np.array_equal(a.states, b.states) for a, b in zip(whole[4:], alone[4:]))
    assert all(np.array_equal(a.states, b.states) for a, b in zip(first, whole[:4]))
    assert whole[0].states.shape == (2, backend.decoder_shape()[1]) and whole[0].states.dtype == np.float16


def test_results_of_a_mixed_list_include_the_states(backend):
    engine = Engine(backend, progress=False)
    hidden = HiddenStates("Paris is", (1,), dtype="float32")
    scored = Loglikelihood("Paris is", " the capital")
    out = engine.results([scored, hidden])
    assert isinstance(out[hidden.key], HiddenStatesResult) and out[hidden.key].states.dtype == np.float32
    assert out[scored.key].num_tokens >= 1

"""ProctorLM's contract with lm-eval's evaluator (proctor/harness/lm.py), on a tiny random model.

lm-eval's own runs on ProctorLM against HFLM (ARC-Easy, GSM8K greedy, chat), the command line
and the missing-lm-eval line are in tests/test_harness_bridge.py.
"""

import pytest

from proctor.errors import UserError

pytestmark = pytest.mark.slow  # every test here imports lm-eval


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from tinylm import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny")))


def instance(kind, arguments, repeats=1):
    from lm_eval.api.instance import Instance

    return Instance(request_type=kind, doc={}, arguments=arguments, idx=0, metadata=("t", 0, repeats))


class Recorder:
    """Stands in for lm-eval's CacheHook (what CachingLM would store)."""

    def __init__(self):
        self.partials = []

    def add_partial(self, attr, req, res):
        self.partials.append((attr, req, res))


SAMPLED = {"until": ["\n"], "do_sample": True, "temperature": 1.0, "max_gen_toks": 8}


def test_the_copies_of_a_sampled_generation_get_different_samples(tiny):
    """lm-eval's evaluator hands a request over once per repeat and wants one sample each (HFLM draws each)."""
    from proctor.harness.lm import ProctorLM, lm_requests

    sampled = instance("generate_until", ("The quick", SAMPLED), repeats=3)
    with ProctorLM(tiny, cache=False, progress=False) as lm:
        hook = Recorder()
        lm.set_cache_hook(hook)
        texts = lm.generate_until([sampled] * 3)
        assert len(set(texts)) == 3
        assert lm.generate_until([sampled] * 3) == texts  # proctor's samples are seeded: the same again
        assert hook.partials[:3] == [("generate_until", ("The quick", SAMPLED), t) for t in texts]
        greedy = instance("generate_until", ("The quick", {"until": ["\n"], "max_gen_toks": 8}), repeats=2)
        assert len(set(lm.generate_until([greedy] * 2))) == 1
    (request,) = set(lm_requests([sampled] * 3, "generate_until"))
    assert request.repeats == 3  # the bridge's request for this instance: they share the result cache


def test_one_calls_duplicates_are_computed_once_and_answered_each(tiny):
    from proctor.harness.lm import ProctorLM

    ll = instance("loglikelihood", ("Paris is", " the capital"))
    bare = instance("generate_until", ("Paris", {"until": ["\n"], "max_gen_toks": 4}), repeats=None)  # no metadata
    with ProctorLM(tiny, cache=False, progress=False) as lm:
        (one, again) = lm.loglikelihood([ll, ll])
        assert one == again and isinstance(one[0], float) and isinstance(one[1], bool)
        rolled = lm.loglikelihood_rolling([instance("loglikelihood_rolling", ("Paris is the capital of France.",))])
        assert isinstance(rolled[0], float) and rolled[0] < 0
        (text, same) = lm.generate_until([bare, bare])
        assert text == same


def test_lm_evals_own_batch_size_and_device_count_where_they_are_not_its_defaults():
    from proctor.harness.lm import lm_eval_settings

    assert lm_eval_settings(None) == {}
    # what `lm-eval run` passes without --batch_size / --device, and `auto`: the engine's batches
    assert lm_eval_settings({"batch_size": 1, "max_batch_size": None, "device": "cuda:0"}) == {}
    assert lm_eval_settings({"batch_size": "auto:4", "device": None}) == {}
    assert lm_eval_settings({"batch_size": "8", "device": "cpu", "max_batch_size": 64}) == {
        "batch_size": 8, "device": "cpu"}


def test_model_args_come_before_lm_evals_own_settings(tiny):
    from proctor.harness.lm import ProctorLM

    with ProctorLM.create_from_arg_string(f"model={tiny},batch_size=2,cache=False",
                                          {"batch_size": "8", "device": "cpu"}) as lm:
        assert lm._runtime.options.batch_size == 2
    with ProctorLM.create_from_arg_string(f"model={tiny},cache=False", {"batch_size": 8, "device": "cpu"}) as lm:
        assert lm._runtime.options.batch_size == 8


def test_model_args_as_a_dict_keep_their_objects(tiny):
    """lm-eval's `model_args` as a dict: a loaded model object is handed over as it is, not as its repr."""
    from transformers import AutoModelForCausalLM

    from proctor.harness.lm import ProctorLM

    loaded = AutoModelForCausalLM.from_pretrained(tiny)
    with ProctorLM.create_from_arg_obj({"model": loaded, "cache": False, "progress": False}) as lm:
        assert lm._runtime.model.loaded is loaded
        assert lm.loglikelihood([instance("loglikelihood", ("Paris is", " the capital"))])[0][0] < 0


def test_run_options_lm_eval_sets_are_refused_in_one_line():
    from proctor.harness.lm import ProctorLM

    with pytest.raises(UserError) as refused:
        ProctorLM.create_from_arg_string("model=smollm2-135m,num_fewshot=5")
    message = str(refused.value)
    assert "\n" not in message and message.startswith("ProctorLM does not take num_fewshot; it takes proctor's model")
    assert "batch_size" in message and "dtype" in message and "limit" not in message


def test_lm_eval_records_proctors_model_and_tokenizer(tiny, data_dir):
    import lm_eval

    from proctor.harness.lm import ProctorLM
    from proctor.harness.offline import local_datasets

    with ProctorLM(tiny, cache=False, progress=False, max_length=512) as lm, local_datasets(data_dir):
        out = lm_eval.simple_evaluate(model=lm, tasks=["arc_easy"], limit=2, bootstrap_iters=0)
    assert out["config"]["proctor_backend"] == "hf" and out["config"]["proctor_model"] == tiny
    assert out["tokenizer_eos_token"][0] == "<|endoftext|>" and out["max_length"] == 512
    assert 0 <= out["results"]["arc_easy"]["acc,none"] <= 1

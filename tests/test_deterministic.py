"""`deterministic=True`: scores bitwise identical for batch sizes 1, 7, 64 and any request order."""

import random

import pytest

from proctor.engine import Engine
from proctor.requests import Loglikelihood

from tinylm import build_tiny_model

SHOTS = "".join(
    f"Question: Which planet is number {i} from the sun?\nAnswer: {name}\n\n"
    for i, name in enumerate(["Mercury", "Venus", "Earth", "Mars", "Jupiter"], start=1)
)


def requests() -> list[Loglikelihood]:
    """A shared few-shot block (prefix sharing applies), single- and multi-token continuations."""
    out = []
    for i, q in enumerate(["Which planet is red?", "Which planet is closest to the sun?", "Paris is where?"]):
        prompt = SHOTS + "The fox. " * i + "Question: " + q + "\nAnswer:"
        out += [Loglikelihood(prompt, c) for c in (" A", " B", " Mercury", " the lazy dog")]
    out += [Loglikelihood("Answer:", c) for c in (" Mercury", " the lazy dog")]
    return out


def scores_by_batch_and_order(backend, reqs) -> list[dict]:
    runs = []
    for batch_size, seed in ((1, 0), (7, 1), (64, 2), (64, 3)):
        shuffled = list(reqs)
        random.Random(seed).shuffle(shuffled)
        engine = Engine(backend, batch_size=batch_size, progress=False, deterministic=True)
        runs.append(dict(zip(shuffled, engine.run(shuffled))))
    return runs


@pytest.mark.parametrize("builder", ["llama", "gpt2"])
def test_tiny_models_are_bitwise_batch_invariant(builder, tmp_path):
    import tinylm
    from proctor.backends import load_backend

    build = build_tiny_model if builder == "llama" else tinylm.build_tiny_gpt2
    backend = load_backend(str(build(tmp_path / builder)), device="cpu")
    runs = scores_by_batch_and_order(backend, requests())
    assert all(run == runs[0] for run in runs[1:])


@pytest.mark.slow  # the real SmolLM2
def test_real_model_is_bitwise_batch_invariant(data_dir):
    from proctor.backends import load_backend
    from proctor.tasks.registry import resolve

    backend = load_backend("smollm2-135m", device="cpu")
    instances = resolve("mmlu_astronomy:mc::olmes")[0].instances(data_dir, 4)
    reqs = [r for inst in instances for r in inst.requests]
    runs = scores_by_batch_and_order(backend, reqs)
    assert all(run == runs[0] for run in runs[1:])


def test_deterministic_results_are_cached_apart(tmp_path):
    from proctor.backends import load_backend

    backend = load_backend(str(build_tiny_model(tmp_path / "tiny")), device="cpu")
    plain = Engine(backend, progress=False)
    fixed = Engine(backend, progress=False, deterministic=True)
    assert plain.fingerprint != fixed.fingerprint

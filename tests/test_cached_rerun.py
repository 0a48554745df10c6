"""A rerun answered wholly by the result cache says so, instead of a throughput of 0 tokens/s."""

import proctor
from proctor.report.analysis import provenance_rows

from tinylm import build_tiny_model


def test_a_cached_rerun_says_its_results_came_from_the_cache(tmp_path, data_dir, monkeypatch):
    monkeypatch.setenv("PROCTOR_CACHE_DIR", str(tmp_path / "cache"))
    model = build_tiny_model(tmp_path / "model")
    runs = [proctor.evaluate(str(model), tasks=["arc_easy:rc::olmes"], limit=2, data_dir=data_dir, progress=False)
            for _ in range(2)]
    first, again = (dict(provenance_rows(run, "run"))["throughput"] for run in runs)
    assert first.endswith(" tokens/s") and first != "0 tokens/s"
    assert again == "— (every result came from the result cache)"

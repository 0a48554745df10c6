"""Official split sizes, for item counts when no data is at hand (`proctor tasks`)."""

from __future__ import annotations

from typing import Optional

from proctor.tasks.base import TaskConfig

MMLU_TEST: dict[str, int] = {
    "abstract_algebra": 100, "anatomy": 135, "astronomy": 152, "business_ethics": 100,
    "clinical_knowledge": 265, "college_biology": 144, "college_chemistry": 100,
    "college_computer_science": 100, "college_mathematics": 100, "college_medicine": 173,
    "college_physics": 102, "computer_security": 100, "conceptual_physics": 235,
    "econometrics": 114, "electrical_engineering": 145, "elementary_mathematics": 378,
    "formal_logic": 126, "global_facts": 100, "high_school_biology": 310,
    "high_school_chemistry": 203, "high_school_computer_science": 100,
    "high_school_european_history": 165, "high_school_geography": 198,
    "high_school_government_and_politics": 193, "high_school_macroeconomics": 390,
    "high_school_mathematics": 270, "high_school_microeconomics": 238,
    "high_school_physics": 151, "high_school_psychology": 545, "high_school_statistics": 216,
    "high_school_us_history": 204, "high_school_world_history": 237, "human_aging": 223,
    "human_sexuality": 131, "international_law": 121, "jurisprudence": 108,
    "logical_fallacies": 163, "machine_learning": 112, "management": 103, "marketing": 234,
    "medical_genetics": 100, "miscellaneous": 783, "moral_disputes": 346,
    "moral_scenarios": 895, "nutrition": 306, "philosophy": 311, "prehistory": 324,
    "professional_accounting": 282, "professional_law": 1534, "professional_medicine": 272,
    "professional_psychology": 612, "public_relations": 110, "security_studies": 245,
    "sociology": 201, "us_foreign_policy": 100, "virology": 166, "world_religions": 171,
}

# (dataset, config) -> split -> rows
SPLIT_SIZES: dict[tuple[str, Optional[str]], dict[str, int]] = {
    ("allenai/social_i_qa", None): {"validation": 1954, "train": 33410},
    ("allenai/ai2_arc", "ARC-Challenge"): {"test": 1172, "validation": 299, "train": 1119},
    ("allenai/ai2_arc", "ARC-Easy"): {"test": 2376, "validation": 570, "train": 2251},
    ("Rowan/hellaswag", None): {"validation": 10042, "train": 39905},
    **{("cais/mmlu", s): {"test": n} for s, n in MMLU_TEST.items()},
}


def official_item_count(config: TaskConfig) -> Optional[int]:
    """Docs in the spec's own list (after its sampling limit), from the official sizes."""
    sizes = SPLIT_SIZES.get((config.dataset_path, config.dataset_name))
    if sizes is None:
        return None
    total = sum(sizes.values()) if config.split == "all" else sizes.get(config.split)
    if total is None:
        return None
    return total if config.limit is None else min(total, int(config.limit))

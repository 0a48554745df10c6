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

# BIG-Bench-Hard (Suzgun et al. release), 27 tasks, 6,511 docs
BBH_TEST: dict[str, int] = {
    "boolean_expressions": 250, "causal_judgement": 187, "date_understanding": 250,
    "disambiguation_qa": 250, "dyck_languages": 250, "formal_fallacies": 250,
    "geometric_shapes": 250, "hyperbaton": 250, "logical_deduction_five_objects": 250,
    "logical_deduction_seven_objects": 250, "logical_deduction_three_objects": 250,
    "movie_recommendation": 250, "multistep_arithmetic_two": 250, "navigate": 250,
    "object_counting": 250, "penguins_in_a_table": 146,
    "reasoning_about_colored_objects": 250, "ruin_names": 250,
    "salient_translation_error_detection": 250, "snarks": 178, "sports_understanding": 250,
    "temporal_sequences": 250, "tracking_shuffled_objects_five_objects": 250,
    "tracking_shuffled_objects_seven_objects": 250,
    "tracking_shuffled_objects_three_objects": 250, "web_of_lies": 250, "word_sorting": 250,
}

# BIG-bench multiple-choice tasks (hails/bigbench `<task>_zero_shot`, split "default")
BIGBENCH_DEFAULT: dict[str, int] = {
    "date_understanding": 369, "strategyqa": 2290, "conceptual_combinations": 103,
    "logical_deduction": 1500, "misconceptions": 219, "movie_recommendation": 500,
    "novel_concepts": 32, "strange_stories": 174, "understanding_fables": 189,
}

# (dataset, config) -> split -> rows
SPLIT_SIZES: dict[tuple[str, Optional[str]], dict[str, int]] = {
    ("allenai/social_i_qa", None): {"validation": 1954, "train": 33410},
    ("allenai/ai2_arc", "ARC-Challenge"): {"test": 1172, "validation": 299, "train": 1119},
    ("allenai/ai2_arc", "ARC-Easy"): {"test": 2376, "validation": 570, "train": 2251},
    ("Rowan/hellaswag", None): {"validation": 10042, "train": 39905},
    ("aps/super_glue", "boolq"): {"validation": 3270, "train": 9427},
    ("tau/commonsense_qa", None): {"validation": 1221, "train": 9741},   # its test split has no answers
    ("allenai/openbookqa", "main"): {"test": 500, "validation": 500, "train": 4957},
    ("ybisk/piqa", "plain_text"): {"validation": 1838, "train": 16113},
    ("allenai/winogrande", "winogrande_xl"): {"validation": 1267, "train": 40398},
    **{("cais/mmlu", s): {"test": n} for s, n in MMLU_TEST.items()},
    ("truthfulqa/truthful_qa", "multiple_choice"): {"validation": 817},
    **{("hails/bigbench", f"{t}_zero_shot"): {"default": n} for t, n in BIGBENCH_DEFAULT.items()},
    ("openai/gsm8k", "main"): {"test": 1319, "train": 7473},
    **{("SaylorTwift/bbh", t): {"test": n} for t, n in BBH_TEST.items()},
    ("openai/openai_humaneval", None): {"test": 164},
    ("allenai/c4", "en"): {"validation": 364608, "train": 364868892},
}


def official_item_count(config: TaskConfig) -> Optional[int]:
    """Docs in the spec's own list (after its sampling limit), from the official sizes."""
    sizes = SPLIT_SIZES.get((config.dataset_path, config.dataset_name))
    if sizes is None:
        return None
    total = sum(sizes.values()) if config.split == "all" else sizes.get(config.split)
    if total is None:
        return None
    return total if config.sample_limit is None else min(total, int(config.sample_limit))

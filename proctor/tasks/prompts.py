"""OLMES prompt building blocks (exact bytes; see spec/olmes.md "Common machinery")."""

from __future__ import annotations

import re
from typing import Optional, Sequence

from proctor.requests import Chat, Context, Message
from proctor.tasks.config import ChatFormat

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"  # OLMES letters as many options as a question has (basic skills: 10)
UNCOND_CONTEXT = "Answer:"


def make_mcq_prompt(question: str, choices: Sequence[str], question_prefix: str = "Question: ") -> str:
    """'Question: q' then ' A. choice' lines (leading space before each letter), then 'Answer:'.

    `question_prefix` replaces "Question: " (OLMES's PIQA: "Goal: ", WinoGrande: "Fill in the blank: ").
    """
    if len(choices) > len(LETTERS):
        raise ValueError(f"at most {len(LETTERS)} choices are supported, got {len(choices)}")
    lines = "\n".join(f" {LETTERS[i]}. {text}" for i, text in enumerate(choices))
    return f"{question_prefix}{question}\n{lines}\nAnswer:"


def make_cloze_prompt(question: str, question_prefix: str = "Question: ") -> str:
    """Return 'Question: q', then 'Answer:' on the next line (RC and generation prompts)."""
    return f"{question_prefix}{question}\nAnswer:"


def choice_prompt(question: str, options: Sequence[str], is_mc: bool) -> str:
    """Return OLMES's prompt of a question with options: lettered after it (MC), or the question alone (RC)."""
    return make_mcq_prompt(question, options) if is_mc else make_cloze_prompt(question)


def shot_block(text: str, target: str) -> str:
    """One few-shot example: its prompt text followed by `" " + gold`."""
    return f"{text} {target}"


def fewshot_prefix(description: str, shots: Sequence[str]) -> str:
    """Everything before the doc's own text; shared by every doc of a task."""
    if not shots:
        return description
    return description + "\n\n".join(shots) + "\n\n"


def assemble_prompt(description: str, shots: Sequence[str], doc_text: str) -> str:
    """Return the few-shot prefix followed by the doc's own text."""
    return fewshot_prefix(description, shots) + doc_text


def hellaswag_preprocess(text: str) -> str:
    """OLMES HellaSwag cleanup: '[title]' becomes a sentence break, other markup goes."""
    text = text.strip()
    text = re.sub("\\.? \\[title\\]", ". ", text)
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def concat_with_space(first: str, second: str) -> str:
    """OLMES's `concat_with_space`: both stripped, joined by a space when both are non-empty."""
    first, second = first.strip(), second.strip()
    return f"{first} {second}" if first and second else first or second


def olmes_context(description: str, shots: Sequence[tuple[str, str]], doc_text: str,
                  chat: Optional[ChatFormat] = None, system_prompt: Optional[str] = None) -> Context:
    """Build a doc's context as OLMES's `fewshot_context` does from (text, target) shots.

    The plain prompt, or with `chat` its use_chat_format messages (`olmes_chat`).
    """
    if chat is None:
        return fewshot_prefix(description, [text + target for text, target in shots]) + doc_text
    return olmes_chat(description, shots, doc_text, chat, system_prompt)


def olmes_chat(description: str, shots: Sequence[tuple[str, str]], doc_text: str, chat: ChatFormat,
               system_prompt: Optional[str] = None) -> Chat:
    """Build a doc's chat as OLMES's `fewshot_context` does with `use_chat_format`.

    Source: allenai/olmes oe_eval/tasks/base_task.py. Shots are (text, target) pairs, the target
    as the plain prompt appends it (" A", " <cot>").

    0-shot: one user turn, description + doc text. Multiturn: per shot a user turn (the
    description before the first only) and an assistant turn `concat_with_space(prefix, target)`;
    then the doc's user turn. Otherwise the whole plain prompt as one user turn. A trailing
    assistant prefix is cut from every user turn of the few-shot forms, and follows the
    rendered template as text (`Chat.suffix`).
    """
    prefix = chat.assistant_prefix

    def cut(text: str) -> str:
        return re.sub("\\s*" + re.escape(prefix) + "\\s*$", "", text) if prefix else text

    messages = [Message("system", system_prompt)] if system_prompt else []
    if not shots:
        messages.append(Message("user", description + doc_text))
    elif chat.fewshot_as_multiturn:
        for i, (text, target) in enumerate(shots):
            messages.append(Message("user", cut((description if i == 0 else "") + text)))
            messages.append(Message("assistant", concat_with_space(prefix, target)))
        messages.append(Message("user", cut(doc_text)))
    else:
        joined = "\n\n".join(text + target for text, target in shots) + "\n\n"
        messages.append(Message("user", cut(description + joined + doc_text)))
    return Chat(tuple(messages), suffix=prefix)

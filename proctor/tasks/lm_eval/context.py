"""lm-eval 0.4.13's prompt layout: plain text, or chat messages for `--apply_chat_template`.

This is `ConfigurableTask.fewshot_context` with `build_qa_turn` and
`multiturn_to_singleturn` (lm_eval/api/task.py, lm_eval/api/utils.py), for a task whose
few-shot examples are (question, answer) texts:

- system: `system_instruction` and the description, joined by the few-shot delimiter
  unless either has whitespace at the join (`maybe_delimit`); omitted when both are empty;
- each shot: a user turn (the question; in plain text followed by the target delimiter)
  and an assistant turn (the answer, after `gen_prefix` when there is one; in plain text
  followed by the few-shot delimiter);
- the eval doc: a user turn, then an assistant turn holding `gen_prefix` when there is one.

Plain text concatenates every turn with its delimiter. In chat format the delimiters go:
multiturn keeps the turns; otherwise every turn after the system message becomes one user
message (the assistant `gen_prefix` turn kept after it). The chat is rendered with the
generation prompt unless a `gen_prefix` turn is to be continued (`Chat.continue_final`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Union

from proctor.requests import Chat, Message
from proctor.tasks.config import ChatFormat


def maybe_delimit(prefix: Optional[str], suffix: Optional[str], delimiter: str = " ") -> str:
    """`prefix + delimiter + suffix` unless either has whitespace at the join (lm-eval's)."""
    if not prefix:
        return suffix or ""
    if not suffix:
        return prefix
    if prefix[-1].isspace() or suffix[0].isspace():
        return prefix + suffix
    return prefix + delimiter + suffix


def requires_delimiter(prefix: str, suffix: str) -> bool:
    """Tell whether lm-eval puts a delimiter between the two: a non-empty prefix, no whitespace at the join."""
    return prefix != "" and not (prefix[-1].isspace() or suffix[0].isspace())


@dataclass(frozen=True)
class _Turn:
    role: str
    content: str
    delimiter: str = ""   # what follows the turn in plain text


def _qa_turn(question: str, answer: Optional[str], gen_prefix: Optional[str],
             target_delimiter: str, fewshot_delimiter: str) -> list[_Turn]:
    """lm-eval's `build_qa_turn`."""
    has_answer = answer is not None and answer != ""
    if has_answer and not gen_prefix:
        user_delimiter = target_delimiter
    elif gen_prefix and requires_delimiter(question, gen_prefix):
        user_delimiter = target_delimiter
    else:
        user_delimiter = ""
    turns = [_Turn("user", question, user_delimiter)]
    if has_answer:
        turns.append(_Turn("assistant", maybe_delimit(gen_prefix, answer, " "), fewshot_delimiter))
    elif gen_prefix:
        turns.append(_Turn("assistant", gen_prefix))
    return turns


def _single_turn(turns: list[_Turn]) -> list[Message]:
    """Merge the turns as lm-eval's `multiturn_to_singleturn` does.

    The system message, one user message of all the other turns as plain text (the last one's
    delimiter dropped), and a final assistant turn.
    """
    system = turns[0] if turns[0].role == "system" else None
    rest = turns[1:] if system else turns
    final = rest[-1] if rest[-1].role == "assistant" else None
    joined = rest[:-1] if final else rest
    text = "".join(t.content + t.delimiter for t in joined[:-1]) + joined[-1].content
    out = [Message("user", text)]
    if final:
        out.append(Message("assistant", final.content))
    return ([Message("system", system.content)] if system else []) + out


def fewshot_context(
    description: str,
    shots: Sequence[tuple[str, str]],
    question: str,
    *,
    target_delimiter: str = " ",
    fewshot_delimiter: str = "\n\n",
    gen_prefix: Optional[str] = None,
    system_instruction: Optional[str] = None,
    chat: Optional[ChatFormat] = None,
) -> Union[str, Chat]:
    """Build the eval doc's context: a string, or a `Chat` when `chat` is given."""
    turns: list[_Turn] = []
    system = maybe_delimit(system_instruction, description, fewshot_delimiter)
    if system:
        turns.append(_Turn("system", system))
    for q, a in shots:
        turns += _qa_turn(q, a, gen_prefix, target_delimiter, fewshot_delimiter)
    turns += _qa_turn(question, None, gen_prefix, target_delimiter, "")
    if chat is None:
        return "".join(t.content + t.delimiter for t in turns)
    if chat.fewshot_as_multiturn:
        messages = [Message(t.role, t.content) for t in turns]
    else:
        messages = _single_turn(turns)
    return Chat(tuple(messages), continue_final=bool(gen_prefix))


def choice_delimiter(target_delimiter: str, gen_prefix: Optional[str], chat: Optional[ChatFormat]) -> str:
    """Return what precedes each answer choice in a multiple-choice continuation.

    In chat format nothing, unless a gen_prefix that does not end in whitespace precedes it
    (lm-eval's `construct_requests`).
    """
    if chat is None:
        return target_delimiter
    if gen_prefix and not gen_prefix[-1].isspace():
        return target_delimiter
    return ""

"""SocialIQA reasoning type: the ATOMIC relation a question probes, from its wording.

SocialIQA questions were written from ATOMIC templates (Sap et al. 2019). The
predicate gives the relation family (feel → React, want / do next → Want, happen →
Effect, need ... before → Need, why → Intent, describe → Attr). Need, Intent and Attr
exist only for the agent (x). For React/Want/Effect the subject decides x vs o: the
agent (the first person named in the context, or a pronoun) → x; "others", a group,
someone's friends, or a different named person → o.
"""

from __future__ import annotations

import re
from typing import Optional

REASONING_TYPES = ("xReact", "xWant", "xNeed", "xEffect", "oReact", "oWant", "oEffect",
                   "xIntent", "xAttr")

_ATTR = re.compile(r"\b(describe[sd]?|description|kind of (?:a )?person|type of person|"
                   r"sort of person|be seen|seen as|think of|thought of|personality|character)\b", re.I)
_INTENT = re.compile(r"^(?:\w+\s+)?why\b|\b(?:reason|motivation|intent|intention|purpose)\b", re.I)
_NEED_BEFORE = re.compile(r"\b(?:before|beforehand|prior|first|previously|in order to)\b", re.I)
_NEED = re.compile(r"\b(?:need|needs|needed|have to|had to|has to|required?|prepare)\b", re.I)
_REACT = re.compile(r"\b(?:feel|feels|felt|feeling|emotion|emotions|react|reaction|"
                    r"reacts?|reacted)\b", re.I)
_REACT_NO_VERB = re.compile(r"^how (?:would|will|did|does) [\w' ]+? (?:afterwards?|after|as a result)\W*$",
                            re.I)  # "How would Riley  afterwards?" (the verb got lost)
_WANT = re.compile(r"\b(?:want|wants|wanted|wanting)\b", re.I)
_EFFECT = re.compile(r"\b(?:happen|happens|happened|happening|occur|occurs|result in|effect|"
                     r"become|experience)\b", re.I)
_NEXT_ACTION = re.compile(r"\b(?:do next|do after|do afterwards?|going to do|do now|do later|"
                          r"will\s+\w+\s+do|likely to (?:do|say)|plan|plans|try to|next|"
                          r"in the future|course of action)\b", re.I)

_OTHERS = {"others", "other", "everyone", "everybody", "people", "someone", "somebody",
           "anyone", "friends", "friend", "family", "parents", "parent", "mom", "mother",
           "dad", "father", "kids", "kid", "children", "child", "son", "daughter", "team",
           "class", "students", "student", "teacher", "boss", "wife", "husband", "sister",
           "brother", "girlfriend", "boyfriend", "baby", "man", "woman", "group", "crowd",
           "audience", "police", "doctor", "patient", "neighbors", "coworkers", "customers",
           "customer", "classmates", "players", "guests", "partner", "dog", "cat"}
_PRONOUNS = {"he", "she", "they", "i", "you", "we", "him", "her", "them", "me", "us",
             "himself", "herself", "themselves", "themself", "it"}
# Words that can open a context sentence without being the agent's name.
_NOT_NAMES = {"a", "an", "the", "after", "when", "while", "because", "since", "as", "on",
              "in", "at", "during", "before", "once", "one", "last", "every", "today",
              "yesterday", "it", "this", "that", "there", "their", "his", "her", "my", "our",
              "with", "for", "if", "although", "despite", "even", "though", "upon", "then",
              "so", "but", "and", "being", "having", "according", "given", "without", "all",
              "some", "two", "three", "several", "many", "most", "no", "nobody", "everyone",
              "whenever", "until", "by", "from", "to", "of", "over", "under", "out", "up",
              "tonight", "tomorrow", "recently", "finally", "later", "she", "he", "they", "i",
              "we", "you", "friday", "monday", "tuesday", "wednesday", "thursday", "saturday",
              "sunday", "christmas", "halloween", "instead", "now", "here"}


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z]+(?:'[A-Za-z]+)?", text)


def agent_name(context: str) -> Optional[str]:
    """Return the first person named in the context (lower-cased), e.g. 'cameron'."""
    for i, w in enumerate(_words(context)):
        base = re.sub(r"'s$", "", w)
        if base.lower() in _NOT_NAMES:
            continue
        if i == 0 or base[:1].isupper():
            return base.lower()
    return None


def _is_other(question: str, context: str) -> bool:
    words = _words(question)
    lowered = [w.lower() for w in words]
    if any(re.sub(r"'s$", "", w) in _OTHERS for w in lowered):
        return True
    if any(w.endswith("'s") and w[:1].isupper() for w in words[1:]):
        return True  # "Kai's friends", "Jan's mom"
    names = [w for w in words[1:] if w[:1].isupper() and w.lower() not in _PRONOUNS]
    if names:
        agent = agent_name(context)
        return agent is not None and all(n.lower() != agent for n in names)
    return False


def reasoning_type(question: str, context: str = "") -> Optional[str]:
    """Return the ATOMIC relation probed by a SocialIQA question, or None if the wording has none."""
    q = question.strip()
    if _ATTR.search(q):
        return "xAttr"
    if _INTENT.search(q):
        return "xIntent"
    if _REACT.search(q) or _REACT_NO_VERB.search(q):
        return "oReact" if _is_other(q, context) else "xReact"
    if _NEED.search(q) and (_NEED_BEFORE.search(q) or not (_WANT.search(q) or _NEXT_ACTION.search(q))):
        return "xNeed"
    if _NEED_BEFORE.search(q) and re.search(r"\b(?:did|do|does)\b", q, re.I):
        return "xNeed"  # "What did Kai do before this?"
    if _WANT.search(q):
        return "oWant" if _is_other(q, context) else "xWant"
    if _EFFECT.search(q):
        return "oEffect" if _is_other(q, context) else "xEffect"
    if _NEXT_ACTION.search(q) or _NEED.search(q):
        return "oWant" if _is_other(q, context) else "xWant"
    return None

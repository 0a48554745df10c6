"""Prompt-lookup drafts: what followed the final n-gram's last earlier occurrence."""

from proctor.backends.lookup_drafts import NgramIndex


def test_the_draft_is_what_followed_the_last_earlier_occurrence():
    index = NgramIndex([1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 0, 1, 2], lengths=(3,))
    assert index.draft(4) == []            # (0, 1, 2) never occurred before
    index.append(3)                         # ends with (1, 2, 3): last followed by 7, 8, 0
    assert index.draft(2) == [7, 8]
    assert index.draft(9) == [7, 8, 0, 1, 2, 3, 7, 8, 0]   # on past the end, as a repeat would
    assert index.draft(0) == []


def test_a_loop_drafts_its_own_continuation():
    index = NgramIndex([5, 6], lengths=(2,))
    for token in [7, 5, 6, 7, 5, 6]:
        index.append(token)
    assert index.draft(7) == [7, 5, 6, 7, 5, 6, 7]


def test_short_sequences_draft_nothing():
    index = NgramIndex([1], lengths=(3,))
    assert index.draft(3) == []
    index.append(1)
    index.append(1)
    assert index.draft(3) == []            # (1, 1, 1) has no earlier occurrence with a follower
    index.append(1)
    assert index.draft(3) == [1, 1, 1]


def test_the_longest_context_seen_before_decides():
    period = [1, 5, 6, 2, 3, 5, 6, 4]         # (5, 6) is followed by 2, then by 4, in one period
    sequence = period * 2 + [1, 5, 6]
    assert NgramIndex(sequence, lengths=(2,)).draft(2) == [4, 1]       # the last (5, 6): wrong here
    assert NgramIndex(sequence, lengths=(3, 2)).draft(2) == [2, 3]     # (1, 5, 6) tells them apart

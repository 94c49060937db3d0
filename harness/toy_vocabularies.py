"""A second toy tokenizer for the exact harness: the vocabulary-5 target's tokens spelled as strings, and a
vocabulary-6 draft's that shares four of them under other ids, lacks one (spelled by two of its own) and has
two the target lacks (never drafted)."""

from __future__ import annotations

from proposers.cross_vocab import VocabularyMap

TARGET_SPELLINGS = ("a", "b", "ab", "c", "d")
DRAFT_SPELLINGS = ("c", "b", "a", "ca", "d", "x")


def longest_match(text: str, spellings=DRAFT_SPELLINGS) -> list[int]:
    """The draft's tokens for `text`: the longest spelling first, left to right."""
    out, start = [], 0
    while start < len(text):
        match = max((s for s in spellings if text.startswith(s, start)), key=len)
        out.append(spellings.index(match))
        start += len(match)
    return out


def toy_vocabulary() -> VocabularyMap:
    return VocabularyMap.from_spellings(TARGET_SPELLINGS, DRAFT_SPELLINGS, longest_match)


def toy_vocabulary_back() -> VocabularyMap:
    """The other direction: the draft's tokens spelled in the target's ("x", which it cannot spell, as token 0)."""
    return VocabularyMap.from_spellings(DRAFT_SPELLINGS, TARGET_SPELLINGS,
                                        lambda text: longest_match(text, TARGET_SPELLINGS) if "x" not in text else [])

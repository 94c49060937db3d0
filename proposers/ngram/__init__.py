"""Draft-free proposers from n-grams of the text itself: prompt lookup and lookahead (Jacobi)."""

from proposers.ngram.lookahead import LookaheadProposer
from proposers.ngram.prompt_lookup import PromptLookupProposer

__all__ = ["LookaheadProposer", "PromptLookupProposer"]

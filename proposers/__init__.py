"""Proposers: one module per method; each returns a CandidateTree whose kind tells how it chose."""

from proposers.draft_model import DraftModelProposer
from proposers.eagle import EagleProposer
from proposers.eagle_head import EagleHead
from proposers.lookahead import LookaheadProposer
from proposers.medusa import MedusaProposer
from proposers.medusa_heads import MedusaHeads
from proposers.mix import MixProposer
from proposers.prompt_lookup import PromptLookupProposer
from proposers.rest import RestProposer

__all__ = [
    "DraftModelProposer", "EagleProposer", "EagleHead", "MedusaProposer", "MedusaHeads", "LookaheadProposer",
    "PromptLookupProposer", "MixProposer", "RestProposer",
]

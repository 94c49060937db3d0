"""Proposers: a package per family (medusa, eagle, mtp, ngram, rest, suffix, self_spec, parallel; search and common
beside them), the draft model, the grammar's forced tokens and the mix as modules; each returns a CandidateTree whose
kind tells how it chose."""

from proposers.cross_vocab import CrossVocabularyProposer, VocabularyMap
from proposers.draft_model import DraftModelProposer
from proposers.eagle.head import EagleHead
from proposers.eagle.parallel import ParallelEagleProposer
from proposers.eagle.proposer import EagleProposer
from proposers.grammar import GrammarProposer
from proposers.heads import load_head
from proposers.medusa.heads import MedusaHeads
from proposers.medusa.proposer import MedusaProposer
from proposers.mix import MixProposer
from proposers.mtp.proposer import MtpProposer
from proposers.ngram.lookahead import LookaheadProposer
from proposers.ngram.prompt_lookup import PromptLookupProposer
from proposers.parallel.dflash_proposer import DFlashProposer
from proposers.parallel.pard import ParallelDraftProposer
from proposers.rest.proposer import RestProposer
from proposers.self_spec import EarlyExitProposer, LayerSkipProposer
from proposers.string_match import StringMatchProposer
from proposers.suffix import SuffixCache, SuffixProposer

__all__ = [
    "DraftModelProposer", "EagleProposer", "EagleHead", "MedusaProposer", "MedusaHeads", "LookaheadProposer",
    "PromptLookupProposer", "MixProposer", "RestProposer", "load_head", "DFlashProposer", "ParallelDraftProposer",
    "ParallelEagleProposer", "GrammarProposer", "CrossVocabularyProposer", "VocabularyMap",
    "StringMatchProposer", "MtpProposer", "SuffixProposer", "SuffixCache", "EarlyExitProposer", "LayerSkipProposer",
]

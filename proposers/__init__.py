"""Proposers: one module per method; each returns a CandidateTree whose kind tells how it chose."""

from proposers.draft_model import DraftModelProposer

__all__ = ["DraftModelProposer"]

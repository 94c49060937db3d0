"""EAGLE-1/2/3: a one-layer head drafts autoregressively on the target's features."""

from proposers.eagle.head import EagleHead
from proposers.eagle.proposer import EagleProposer

__all__ = ["EagleHead", "EagleProposer"]

"""Medusa: extra heads on the target's last hidden state draft a static tree in one step."""

from proposers.medusa.heads import MedusaHeads
from proposers.medusa.proposer import MedusaProposer

__all__ = ["MedusaHeads", "MedusaProposer"]

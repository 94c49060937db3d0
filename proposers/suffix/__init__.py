from proposers.suffix.cache import SuffixCache
from proposers.suffix.proposer import SuffixProposer

__all__ = ["SuffixCache", "SuffixProposer"]

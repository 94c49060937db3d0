"""MTP: the multi-token-prediction modules model families ship (head.py), read from their published layouts
(layouts.py) and drafting through the feature-level drafter EAGLE heads use (proposer.py)."""

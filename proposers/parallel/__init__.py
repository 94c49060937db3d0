"""Drafters that draft several depths in one forward: DFlash (dflash.py, dflash_proposer.py) and PARD
(pard.py); P-EAGLE is a mode of the EAGLE proposer (proposers/eagle/parallel.py). training.py trains all three."""

"""The training recipes of `python -m experiments.train training=<name>`, one per drafter family (draft, eagle,
layerskip, medusa, mtp, parallel): conf/training/*.yaml name their run() (and builders) by dotted path in `job:`.
Above measurement (they run its tree search), below the apps: they never import experiments (tests/test_layers.py).
"""

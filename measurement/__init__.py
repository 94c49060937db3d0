"""The measurement library of the apps in experiments/: compare's grid, records, timed cells and reports, workloads,
methods' runners, throughput curves, first-token tables, expected acceptance, a head's tree search, config helpers,
and the bridge to peer engines (peers/). Above the harness, below the recipes and the apps: it never imports them
(tests/test_layers.py)."""

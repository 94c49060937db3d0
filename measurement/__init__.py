"""The measurement library of the apps in experiments/: compare's grid, records, timed cells and reports, workloads,
methods' runners, throughput curves, first-token tables, expected acceptance, config helpers, and the bridge to
peer engines (peers/). Above the harness, below the apps: it never imports experiments (tests/test_layers.py)."""

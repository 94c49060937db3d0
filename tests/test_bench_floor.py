"""experiments.bench_floor on the tiny random-weight models: every (method, mode) timed against plain decoding round
by round, and the idle mode really plain."""

from hydra import compose, initialize_config_dir

from experiments.bench_floor import measure, table
from measurement.common import CONF


def test_every_method_and_mode_against_plain_round_by_round():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="bench_floor", overrides=["models=tiny", "methods=[prompt_lookup,draft]",
                                                            "prompt_tokens=[8,12]", "max_new_tokens=6", "rounds=2"])
    result = measure(cfg)
    rows = {(r["method"], r["mode"]): r for r in result["rows"]}
    assert set(rows) == {("plain", "-")} | {(m, mode) for m in ("prompt_lookup", "draft")
                                            for mode in ("idle", "goodput")}
    assert rows["plain", "-"]["speedup"] == 1.0
    for r in rows.values():
        assert r["lowest"] <= r["speedup"] <= r["highest"] and r["target_ms"] > 0
    assert rows["draft", "idle"]["steps"] == rows["plain", "-"]["steps"]  # idle: one token a step, as plain
    assert "| draft | idle |" in table(result) and "median of 2 rounds" in table(result)

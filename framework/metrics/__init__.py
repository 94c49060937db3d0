"""The figures a comparison reports, each defined once on decoding traces (framework.metrics.trace)."""

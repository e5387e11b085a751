"""Speed and memory benchmarks, each printing ratios measured side by side in one run: ``python -m benchmarks.NAME``."""

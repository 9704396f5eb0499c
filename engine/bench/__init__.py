"""Benchmarks mounted under `swarmscope bench NAME`; each reports ratios measured in one run."""

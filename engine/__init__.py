"""swarmscope's decode engine: model, paged KV, ragged batches, speculation, swarm, telemetry.

Never imports Qt (tests/test_layering.py enforces it)."""
import os

# oneDNN caches its CPU kernels, 1024 by default: two a prepacked linear (engine/linear.py), per
# row count and thread count. The load's warm-up (every row count to 128 for each weight shape)
# evicted its own first counts, the ones decode steps use, and a step meeting an evicted count (a
# lane's drafts, a short prefill chunk) built its kernels again, 2-10 ms at 16 lanes: a swarm of 8
# agents for 560 steps (`bench memory --duration 60`) built 398 linears' kernels again, 365 ms of
# building, against 24 and 11 ms with room for a warm-up per thread count the tuner tries. Read at
# oneDNN's first kernel.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "16384")

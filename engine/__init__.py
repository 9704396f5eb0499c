"""swarmscope's decode engine: model, paged KV, ragged batches, speculation, swarm, telemetry.

Never imports Qt (tests/test_layering.py enforces it)."""
import os

# oneDNN caches its CPU kernels, 1024 by default: two a prepacked linear (engine/linear.py), per
# row count and thread count. The load's warm-up (every row count to 128 for each weight shape)
# evicted its own first counts, the ones decode steps use, so a step meeting a rare count (a
# lane's drafts) built its kernels again, +2-10 ms at 16 lanes, and rebuilt kernels grew the
# process (SmolLM2-135M: 956 MB after load, 2013 after four more warm-ups; 989 with room for
# them). Room for a warm-up per thread count the tuner tries; read at oneDNN's first kernel.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "16384")

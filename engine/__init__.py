"""swarmscope's decode engine: model, paged KV, ragged batches, speculation, swarm, telemetry.

Never imports Qt (tests/test_layering.py enforces it)."""

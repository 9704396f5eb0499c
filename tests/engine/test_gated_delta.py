"""The gated delta rule by chunks and token by token (engine/gated_delta.py): the same outputs
and state, and a position with no decay and no write leaves the state as it was."""
import torch

from engine.gated_delta import _chunked, _stepwise, delta_rule


def _inputs(batch=2, length=37, heads=3, key=8, value=5, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    q, k = rand(batch, length, heads, key), rand(batch, length, heads, key)
    k = k / k.norm(dim=-1, keepdim=True)
    g = -torch.rand(batch, length, heads, generator=gen, dtype=torch.float64)
    beta = torch.rand(batch, length, heads, generator=gen, dtype=torch.float64)
    return q, k, rand(batch, length, heads, value), g, beta, rand(batch, heads, key, value)


def test_chunks_give_what_token_by_token_gives_across_chunk_edges():
    q, k, v, g, beta, state = _inputs()
    for size in (4, 16, 64):  # 37 positions: chunks cut mid-way, padded past the last
        out, last = _chunked(q, k, v, g, beta, state, size=size)
        expected, expected_last = _stepwise(q, k, v, g, beta, state.clone())
        torch.testing.assert_close(out, expected, atol=1e-10, rtol=1e-10)
        torch.testing.assert_close(last, expected_last, atol=1e-10, rtol=1e-10)


def test_positions_without_decay_or_write_leave_the_state_as_it_was():
    q, k, v, g, beta, state = _inputs(length=20)
    kept = torch.rand(2, 20, 1, dtype=torch.float64) < 0.5
    masked = delta_rule(q, k, v, g * kept, beta * kept, state)[1]
    picked = [delta_rule(q[i:i + 1, kept[i, :, 0]], k[i:i + 1, kept[i, :, 0]],
                         v[i:i + 1, kept[i, :, 0]], g[i:i + 1, kept[i, :, 0]],
                         beta[i:i + 1, kept[i, :, 0]], state[i:i + 1])[1] for i in range(2)]
    torch.testing.assert_close(masked, torch.cat(picked), atol=1e-10, rtol=1e-10)
    assert delta_rule(q[:, :0], k[:, :0], v[:, :0], g[:, :0], beta[:, :0], state)[1] is state


def test_the_state_is_written_over_only_where_asked():
    for length in (1, 5):
        q, k, v, g, beta, state = _inputs(length=length)
        before = state.clone()
        out, after = delta_rule(q, k, v, g, beta, state)
        torch.testing.assert_close(state, before, atol=0, rtol=0)
        updated_out, updated = delta_rule(q, k, v, g, beta, state, update=True)
        assert updated is state
        torch.testing.assert_close((updated_out, updated), (out, after), atol=1e-12, rtol=0)

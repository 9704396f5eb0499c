"""Gated DeltaNet, the linear attention of Qwen3.5's layers that do not attend: in_proj gives each
token a row of q, k and v (each through a depthwise causal convolution over the last
`conv_kernel` positions, then SiLU), a gate z, and per value head a write strength
beta = sigmoid(b) and a decay g = -exp(A_log) softplus(a + dt_bias). Each value head keeps a
state S [key_dim, value_dim]; per token S <- exp(g) S, then S <- S + k (beta (v - S^T k))^T (the
delta rule: what S already recalls for k is replaced, not added to), and reads out S^T q (q and
k L2-normed, q scaled by key_dim^-0.5), RMS-normed, gated by SiLU(z), projected by out_proj.

The state sums a sequence's whole past, so it cannot be cut back by position as keys are:
engine/recurrent_state.py keeps each sequence's state as of its last certain token and a ring
of its newest rows, and a pass first folds in the rows it had only guessed before (the drafts
its lane has since accepted), then its own certain rows (the state kept), then its guesses from
there (their outputs alone). The recurrence runs in fp32, as transformers runs it."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.config import ModelConfig
from engine.linear import linear
from engine.recurrent_state import RecurrentPlan

# Runs of more than one position go by chunks: the chunked form reads and writes each state
# once a chunk, the token-by-token form several times a token, and a state is 64 KB a head
# (Qwen3.5-0.8B, 8 lanes, one layer: a pass of 5 positions took 6 ms by chunks, 30-45 by tokens;
# of 1, 11-12 ms either way; of 2-3 at one lane, 0.1 ms less by tokens)
CHUNK = 64  # most positions a chunk spans


class GatedDeltaNet(nn.Module):
    LINEARS = ("in_proj", "out_proj")  # the weights `linear` multiplies by (LlamaModel.prepack)

    def __init__(self, config: ModelConfig, dtype: torch.dtype, device) -> None:
        super().__init__()
        c, kw = config, {"dtype": dtype, "device": device}
        self.key_heads, self.value_heads = c.delta_key_heads, c.delta_value_heads
        self.key_dim, self.value_dim = c.delta_key_dim, c.delta_value_dim
        self.conv_width = 2 * self.key_heads * self.key_dim + self.value_heads * self.value_dim
        self.row_width = row_width(c)  # q, k, v before the convolution, b, a: the ring's rows
        value_size = self.value_heads * self.value_dim
        self.eps = c.rms_norm_eps
        # in_proj_qkv, in_proj_b, in_proj_a and in_proj_z fused, in that order
        self.in_proj = nn.Parameter(torch.empty(self.row_width + value_size, c.hidden_size, **kw))
        # [conv_width, 1, L], as Qwen3.5's checkpoints hold it (a depthwise Conv1d's weight)
        self.kernel = nn.Parameter(torch.empty(self.conv_width, 1, c.conv_kernel, **kw))
        # the decay's parameters in fp32, as transformers computes the decay
        self.a_log = nn.Parameter(torch.empty(self.value_heads, dtype=torch.float32,
                                              device=device))
        self.dt_bias = nn.Parameter(torch.empty(self.value_heads, dtype=torch.float32,
                                                device=device))
        self.norm = nn.Parameter(torch.empty(self.value_dim, **kw))  # weight itself, not 1 + it
        self.out_proj = nn.Parameter(torch.empty(c.hidden_size, value_size, **kw))

    def forward(self, h: Tensor, states: Tensor, ring: Tensor, plan: RecurrentPlan) -> Tensor:
        """h: [n, hidden]; states: this layer's [slots, value_heads, key_dim, value_dim] fp32;
        ring: its [slots x ring + 1, row_width] rows (the last one zero)."""
        n = h.shape[0]
        raw, z = linear(h, self.in_proj).split(
            (self.row_width, self.value_heads * self.value_dim), dim=-1)
        # each lane's rows: its ring's (the context the convolution reads, then the rows to fold
        # in), left-padded with the zero row so that its pass's rows follow at one column
        lanes = torch.cat((ring[plan.before], F.pad(raw, (0, 0, 0, 1))[plan.rows]), dim=1)
        ring.index_copy_(0, plan.ring_to, raw[plan.ring_from])  # after reading the ring
        span = self.kernel.shape[-1]
        mixed = F.conv1d(lanes[..., :self.conv_width].float().transpose(1, 2),
                         self.kernel.float(), groups=self.conv_width)
        q, k, v = F.silu(mixed).transpose(1, 2).split(
            (self.key_heads * self.key_dim,) * 2 + (self.value_heads * self.value_dim,), dim=-1)
        b, a = lanes[:, span - 1:, self.conv_width:].float().chunk(2, dim=-1)  # [L, T, hv]
        beta, g = b.sigmoid(), -self.a_log.exp() * F.softplus(a + self.dt_bias)
        q, k, v = self._heads(q), self._heads(k), v.unflatten(-1, (self.value_heads,
                                                                   self.value_dim))
        q, k = _l2_normed(q) * self.key_dim ** -0.5, _l2_normed(k)
        # certain rows (those folded in, then the pass's own) from the state kept; it is kept
        # after them
        reach = plan.certain_mask.shape[1]
        mask = plan.certain_mask
        # the lanes' states, in slot order as the plan lists them, written over in place
        out, state = delta_rule(q[:, :reach], k[:, :reach], v[:, :reach],
                                g[:, :reach] * mask[..., None], beta[:, :reach] * mask[..., None],
                                states[:plan.lanes], update=True)
        start = plan.before.shape[1] - (span - 1)  # the pass's first column
        out = out[:, start:]
        if plan.guess_mask is not None:  # the guesses, from there: their outputs alone
            guess = plan.guess_mask[..., None]
            guessed, _ = delta_rule(q[:, start:], k[:, start:], v[:, start:], g[:, start:] * guess,
                                    beta[:, start:] * guess, state)
            out = torch.where(plan.guess_mask[..., None, None], guessed,
                              F.pad(out, (0, 0, 0, 0, 0, guessed.shape[1] - out.shape[1])))
        o = out[plan.out_lane, plan.out_row]                              # [n, hv, dv]
        o = F.rms_norm(o, (self.value_dim,), eps=self.eps) * self.norm.float()
        o = o * F.silu(z.float().view(n, self.value_heads, self.value_dim))
        return linear(o.reshape(n, -1).to(h.dtype), self.out_proj)

    def _heads(self, x: Tensor) -> Tensor:
        """[lanes, T, key_heads x key_dim] -> [lanes, T, value_heads, key_dim]: each key head
        serves value_heads / key_heads consecutive value heads."""
        x = x.unflatten(-1, (self.key_heads, self.key_dim))
        groups = self.value_heads // self.key_heads
        return x if groups == 1 else x.repeat_interleave(groups, dim=2)


def _l2_normed(x: Tensor) -> Tensor:
    """x scaled to unit length over its last dimension, with FLA's eps inside the root (as
    transformers has it; F.normalize's floor on the norm differs for the short vectors of
    small weights)."""
    return x * torch.rsqrt(x.square().sum(-1, keepdim=True) + 1e-6)


def row_width(config: ModelConfig) -> int:
    """A gated DeltaNet layer's row a position keeps (recurrent_state.py): q, k and v before
    the convolution, then b and a."""
    c = config
    return 2 * c.delta_key_heads * c.delta_key_dim + c.delta_value_heads * (c.delta_value_dim + 2)


def delta_rule(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor,
               update: bool = False) -> tuple[Tensor, Tensor]:
    """The gated delta rule over T positions of B sequences from `state`: q, k [B, T, H, Dk]
    (L2-normed, q scaled), v [B, T, H, Dv], g (log decay) and beta [B, T, H], state
    [B, H, Dk, Dv] (contiguous), all fp32. A position with g = beta = 0 leaves the state as it
    was. Returns (outputs [B, T, H, Dv], the state after the last position), which is `state`
    itself, written over, where `update`."""
    if not q.shape[1]:  # none certain: a pass of guesses alone
        return v[:, :0], state
    if q.shape[1] == 1:
        return _stepwise(q, k, v, g, beta, state if update else state.clone())
    out, last = _chunked(q, k, v, g, beta, state, size=min(q.shape[1], CHUNK))
    return out, state.copy_(last) if update else last


def _stepwise(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor
              ) -> tuple[Tensor, Tensor]:
    """Token by token, as the rule reads (a decode step's one position), writing over `state`:
    S^T k and S^T q read in one pass over it, the decay and the write in two more (a state is
    64 KB a head, and the passes over it are most of the step's time in these layers)."""
    batch, _, heads, key = k.shape
    outs = []
    for t in range(q.shape[1]):
        decay = g[:, t].exp()[..., None]                                  # [B, H, 1]
        read = torch.stack((k[:, t], q[:, t]), dim=2) @ state             # [B, H, 2, Dv]
        delta = (v[:, t] - read[:, :, 0] * decay) * beta[:, t, :, None]   # [B, H, Dv]
        # o = S'^T q, S' = decay S + k delta^T
        outs.append(read[:, :, 1] * decay + (k[:, t] * q[:, t]).sum(-1, keepdim=True) * delta)
        state.mul_(decay[..., None]).view(batch * heads, key, -1).baddbmm_(
            k[:, t].reshape(batch * heads, key, 1), delta.reshape(batch * heads, 1, -1))
    return torch.stack(outs, dim=1), state


def _chunked(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, state: Tensor,
             size: int = CHUNK) -> tuple[Tensor, Tensor]:
    """By chunks of `size` positions, each in a few matmuls (a prompt's, a pass's drafts).
    Within a chunk from
    state S0, with G_t the decay from its start to t (inclusive): the values written,
    u_t = beta_t (v_t - G_t S0^T k_t - sum_{j<t} (G_t / G_j) (k_t . k_j) u_j), are a unit lower
    triangular system; then o_t = G_t S0^T q_t + sum_{j<=t} (G_t / G_j) (q_t . k_j) u_j, and the
    state after it G_C S0 + sum_j (G_C / G_j) k_j u_j^T. Padding positions take g = beta = 0."""
    batch, length, heads = q.shape[:3]
    pad = -length % size

    def chunks(x: Tensor) -> Tensor:  # [B, T, H, ...] -> [B, H, N, size, ...]
        x = F.pad(x, (0, 0) * (x.dim() - 3) + (0, 0, 0, pad))
        return x.transpose(1, 2).unflatten(2, (-1, size))

    q, k, v, g, beta = (chunks(x) for x in (q, k, v, g, beta))
    log_decay = g.cumsum(-1)                                              # [B, H, N, C]
    lower = torch.ones(size, size, dtype=torch.bool, device=q.device).tril()
    pairwise = (log_decay[..., :, None] - log_decay[..., None, :]).masked_fill(~lower, -torch.inf
                                                                             ).exp()
    k_beta = k * beta[..., None]
    # I + the strictly lower part: solve_triangular reads the lower triangle, its diagonal as ones
    system = (k_beta @ k.transpose(-1, -2)) * pairwise
    written = torch.linalg.solve_triangular(system, v * beta[..., None], upper=False,
                                            unitriangular=True)
    recalled = torch.linalg.solve_triangular(system, k_beta * log_decay.exp()[..., None],
                                             upper=False, unitriangular=True)
    attend = (q @ k.transpose(-1, -2)) * pairwise
    q_decayed = q * log_decay.exp()[..., None]
    k_decayed = k * (log_decay[..., -1:] - log_decay).exp()[..., None]
    chunk_decay = log_decay[..., -1].exp()[..., None, None]
    outs = []
    for i in range(q.shape[2]):
        u = written[:, :, i] - recalled[:, :, i] @ state
        outs.append(q_decayed[:, :, i] @ state + attend[:, :, i] @ u)
        state = state * chunk_decay[:, :, i] + k_decayed[:, :, i].transpose(-1, -2) @ u
    out = torch.stack(outs, dim=2).flatten(2, 3)[:, :, :length]           # [B, H, T, Dv]
    return out.transpose(1, 2), state

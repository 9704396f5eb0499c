"""RoPE's rotation frequencies: plain, and the scaled variants Hugging Face configs name.

Each variant only changes the frequencies (and, for YaRN, scales cos and sin), independently of
the context length, so a paged KV cache written at one step stays right at every later one. That
is why `dynamic` NTK scaling, whose frequencies change with the sequence's length, is refused.
The formulas are those of transformers' `modeling_rope_utils` (the logits are checked against
it in tests/engine/loading/test_hf_folder.py):
- linear: every frequency divided by `factor` (position interpolation);
- llama3 (Llama 3.1-3.3): wavelengths longer than original_max_position / low_freq_factor
  divided by `factor`, shorter than original_max_position / high_freq_factor kept, a smooth blend
  between;
- yarn (Qwen2.5 long context, among others): interpolated and extrapolated frequencies blended
  over the dimensions between beta_fast and beta_slow rotations of the original context, and cos
  and sin scaled by the attention factor (0.1 ln(factor) + 1 unless given);
- longrope (Phi-3.5, Phi-4-mini): each frequency divided by its own short factor, and cos and sin
  scaled by sqrt(1 + ln(factor) / ln(original context)) unless given. Past the original context
  transformers switches every position to the long factors, a change with the sequence's length
  as dynamic's: the context is capped there instead (loading/hf_folder.py);
- proportional (LFM3's full layers): the whole head's frequencies, the first `rotated_share` of
  them kept (divided by `factor`) and the rest 0, so that those dimensions turn not at all: unlike
  partial rotary, the turned pairs are a whole head's (j, j + head_dim / 2)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

KINDS = ("linear", "llama3", "yarn", "longrope", "proportional")


@dataclass(frozen=True, slots=True)
class RopeScaling:
    kind: str                        # one of KINDS
    factor: float
    original_max_position: int = 0   # llama3, yarn: the context the model was pretrained at
    low_freq_factor: float = 1.0     # llama3
    high_freq_factor: float = 4.0    # llama3
    beta_fast: float = 32.0          # yarn: rotations where extrapolation ends
    beta_slow: float = 1.0           # yarn: rotations where interpolation starts
    attention_factor: float | None = None  # yarn: cos/sin scale; None: from factor
    truncate: bool = True            # yarn: round the blend's dimension range outwards
    short_factors: tuple[float, ...] = ()  # longrope: each frequency's divisor
    rotated_share: float = 1.0       # proportional: the share of the frequencies kept

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(_unsupported(self.kind))
        if not self.factor > 0:
            raise ValueError(f"RoPE scaling factor must be positive, got {self.factor}")
        if self.kind not in ("linear", "proportional") and self.original_max_position <= 0:
            raise ValueError(f"RoPE scaling {self.kind!r} needs original_max_position_embeddings")
        if self.kind == "longrope" and not (self.short_factors
                                            and all(f > 0 for f in self.short_factors)):
            raise ValueError("longrope RoPE scaling needs short_factor, a list of positive "
                             "numbers")
        if self.kind == "proportional" and not 0 < self.rotated_share <= 1:
            raise ValueError(f"proportional RoPE's partial_rotary_factor must be in (0, 1], got "
                             f"{self.rotated_share}")
        if self.kind == "llama3" and not self.high_freq_factor > self.low_freq_factor > 0:
            raise ValueError("llama3 RoPE scaling needs high_freq_factor > low_freq_factor > 0, "
                             f"got {self.high_freq_factor} and {self.low_freq_factor}")

    @classmethod
    def from_params(cls, params: dict, max_position: int) -> "RopeScaling | None":
        """The scaling a Hugging Face config's rope_parameters (or older rope_scaling) names;
        None for plain RoPE. ValueError or KeyError says what is wrong."""
        kind = params.get("rope_type", params.get("type", "default"))
        if kind in ("default", "mrope"):  # (Qwen2-VL's multimodal RoPE is plain RoPE on text)
            return None
        if kind not in KINDS:  # before the fields, which another variant may lack
            raise ValueError(_unsupported(kind))
        original = int(params.get("original_max_position_embeddings") or 0)
        factor = params.get("factor", 1.0 if kind == "proportional" else None)
        if factor is None and kind in ("yarn", "longrope") and original:
            factor = max_position / original
        if factor is None:
            raise ValueError(f"RoPE scaling {kind!r} needs a factor")
        attention = params.get("attention_factor")
        if attention is None and kind == "longrope":
            attention = (math.sqrt(1 + math.log(factor) / math.log(original)) if factor > 1
                         else 1.0)
        if attention is None and params.get("mscale") and params.get("mscale_all_dim"):
            attention = (_yarn_mscale(float(factor), params["mscale"])
                         / _yarn_mscale(float(factor), params["mscale_all_dim"]))
        extras = {key: float(params[key]) for key in ("low_freq_factor", "high_freq_factor",
                                                      "beta_fast", "beta_slow") if params.get(key)}
        return cls(kind, float(factor), original_max_position=original,
                   attention_factor=None if attention is None else float(attention),
                   truncate=bool(params.get("truncate", True)),
                   short_factors=tuple(map(float, params.get("short_factor") or ())),
                   rotated_share=float(params.get("partial_rotary_factor", 1.0)
                                       if kind == "proportional" else 1.0), **extras)


def _unsupported(kind: str) -> str:
    return f"RoPE scaling {kind!r} is not supported; supported: default, {', '.join(KINDS)}"


def _yarn_mscale(factor: float, mscale: float) -> float:
    """YaRN's cos/sin scale for a context stretched `factor` times."""
    return 0.1 * mscale * math.log(factor) + 1.0 if factor > 1 else 1.0


def frequencies(rotary_dim: int, theta: float, scaling: RopeScaling | None = None) -> torch.Tensor:
    """Inverse frequencies [rotary_dim / 2] (the head's dimensions RoPE turns), fp32."""
    inv_freq = 1.0 / theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim)
    if scaling is None:
        return inv_freq
    if scaling.kind == "linear":
        return inv_freq / scaling.factor
    if scaling.kind == "llama3":
        return _llama3(inv_freq, scaling)
    if scaling.kind == "proportional":  # (as transformers counts the pairs kept)
        kept = int(scaling.rotated_share * rotary_dim // 2)
        return torch.cat((inv_freq[:kept], torch.zeros(len(inv_freq) - kept))) / scaling.factor
    if scaling.kind == "longrope":
        if len(scaling.short_factors) != len(inv_freq):
            raise ValueError(f"longrope's short_factor has {len(scaling.short_factors)} numbers, "
                             f"not one for each of the {len(inv_freq)} frequencies")
        return inv_freq / torch.tensor(scaling.short_factors, dtype=torch.float32)
    return _yarn(inv_freq, rotary_dim, theta, scaling)


def attention_factor(scaling: RopeScaling | None) -> float:
    """What cos and sin are scaled by: YaRN's and longrope's attention factor, 1 for every other
    kind. Scaling both scales each query-key product by its square, so the model folds it into
    the attention's softmax scale instead of multiplying cos and sin every step."""
    if scaling is None or scaling.kind not in ("yarn", "longrope"):
        return 1.0
    if scaling.attention_factor is not None:
        return scaling.attention_factor
    return _yarn_mscale(scaling.factor, 1.0)


def _llama3(inv_freq: torch.Tensor, s: RopeScaling) -> torch.Tensor:
    wavelen = 2 * math.pi / inv_freq
    long_edge = s.original_max_position / s.low_freq_factor    # longer: interpolated
    short_edge = s.original_max_position / s.high_freq_factor  # shorter: kept
    smooth = ((s.original_max_position / wavelen - s.low_freq_factor)
              / (s.high_freq_factor - s.low_freq_factor))
    blended = (1 - smooth) * inv_freq / s.factor + smooth * inv_freq
    scaled = torch.where(wavelen > long_edge, inv_freq / s.factor, inv_freq)
    return torch.where((wavelen >= short_edge) & (wavelen <= long_edge), blended, scaled)


def _yarn(inv_freq: torch.Tensor, head_dim: int, theta: float, s: RopeScaling) -> torch.Tensor:
    def dimension(rotations: float) -> float:
        """The dimension that turns `rotations` times over the original context."""
        return (head_dim * math.log(s.original_max_position / (rotations * 2 * math.pi))
                / (2 * math.log(theta)))

    low, high = dimension(s.beta_fast), dimension(s.beta_slow)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # the ramp needs a width
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    # ramp 0: the high frequencies, extrapolated (kept); ramp 1: the low ones, interpolated
    return inv_freq / s.factor * ramp + inv_freq * (1 - ramp)

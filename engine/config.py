"""Model architecture config: one validated dataclass and its named presets."""
from __future__ import annotations

from dataclasses import dataclass, replace

from engine.rope import RopeScaling

ACTIVATIONS = ("silu", "gelu_tanh", "gelu", "relu2")


@dataclass(slots=True)
class ModelConfig:
    """A Llama-family decoder. Qwen2 adds qkv bias (as Seed-OSS does, and GLM-4 with norms around
    each sublayer and RoPE on adjacent pairs), Qwen3 adds q/k RMSNorm, Phi-3 stores its
    projections fused (and Phi-4-mini turns only part of each head with RoPE), SmolLM3 leaves
    RoPE out of some layers, Granite scales embeddings, residuals, attention and logits, OLMo 2
    norms each sublayer's output (and q and k whole), as EXAONE 4 does (q and k by head), Gemma
    has GELU, norms by 1 + weight and embeddings scaled, Gemma 2 adds norms around each sublayer,
    sliding-window layers and capped scores, Gemma 3 q/k norms and a RoPE base of its own in its
    sliding layers (OLMo 3 is OLMo 2 with windows, RoPE unscaled in its sliding layers), Cohere
    LayerNorms, RoPE on adjacent pairs and its attention and MLP side by side (Cohere 2 with
    windows, RoPE in its sliding layers alone), StableLM LayerNorms with biases, Arcee an MLP
    without a gate, StarCoder2 both and biases everywhere, Phi-2 all of that side by side and
    its head's bias, Nemotron Arcee's MLP and LayerNorms by 1 + weight with biases. Mixtral,
    Qwen2-MoE, Qwen3-MoE, OLMoE and GraniteMoE are mixtures of experts. LFM2 runs gated short
    convolutions in most layers in place of attention (LFM2-MoE with experts routed by
    sigmoids; LFM3 with norms around each sublayer, windows and gated attention)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int = 0  # 0: hidden_size // num_heads
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None  # None: plain RoPE
    rms_norm_eps: float = 1e-5
    max_position: int = 8192
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False
    qk_norm_whole: bool = False  # q and k normed across all their heads (OLMo 2), not per head
    norm_before: bool = True  # each sublayer's input normed (all but OLMo 2)
    norm_after: bool = False  # each sublayer's output normed (OLMo 2, Gemma 2 and 3)
    # norms scale by 1 + weight, kept in fp32 (Gemma's RMSNorms, Nemotron's LayerNorm1P)
    gemma_norms: bool = False
    layer_norm: bool = False  # norms subtract the mean too: LayerNorm (Cohere's, StableLM's)
    norm_bias: bool = False  # the LayerNorms before each sublayer and the last add a bias
    # the attention and the MLP read one normed input and add to the residual together (Cohere's)
    parallel_block: bool = False
    activation: str = "silu"  # the MLP gate's: silu, or gelu_tanh (Gemma), gelu, relu2 (Arcee)
    gated_mlp: bool = True  # False: the MLP is down(act(up x)), with no gate (Arcee, StarCoder2)
    linear_bias: bool = False  # the attention's output and the MLP add biases (StarCoder2)
    head_bias: bool = False  # the LM head adds a bias (Phi-2's)
    # each head's attention output scaled by a sigmoid gate of the layer's input (LFM3's
    # self_attn.gate_proj)
    attention_gate: bool = False
    fused_projections: bool = False  # checkpoints hold qkv_proj and gate_up_proj (Phi-3)
    rotary_dim: int = 0  # a head's leading dimensions RoPE turns; 0: all (head_dim)
    # RoPE turns adjacent pairs of those dimensions (GLM-4's, ERNIE 4.5's), not their halves:
    # the q and k rows are reordered at load so that the halves turn (LlamaModel.from_state_dict)
    rope_interleaved: bool = False
    nope_layers: tuple[int, ...] = ()  # layers that use no RoPE at all (SmolLM3's every 4th)
    # Granite's scalars (the others' are 1, and head_dim ** -0.5 for the attention)
    embedding_multiplier: float = 1.0  # the embeddings scaled by it
    residual_multiplier: float = 1.0   # each layer's attention and MLP outputs scaled by it
    attention_multiplier: float | None = None  # the attention's softmax scale; None: usual
    logits_scaling: float = 1.0        # the logits divided by it
    # Gemma 2's caps: scores s become cap * tanh(s / cap)
    attention_softcap: float | None = None
    logits_softcap: float | None = None
    # Sliding-window layers: a query there sees only the last `sliding_window` keys, its own
    # included; with a base of their own (Gemma 3's local RoPE) where local_rope_theta is set.
    sliding_window: int | None = None
    sliding_layers: tuple[int, ...] = ()
    local_rope_theta: float | None = None
    # A mixture of experts: a layer's MLP output is the weighted sum of those of the
    # `experts_per_token` MLPs (of `num_experts`, each `expert_size` wide) its router ranks highest
    # for the token, their weights the router's softmax (rescaled to sum to 1 where
    # normalize_expert_weights: Mixtral's, GraniteMoE's, and Qwen3-MoE's as it ships); Qwen2-MoE
    # adds a gated shared expert every token runs. dense_layers keep a plain MLP of
    # intermediate_size.
    num_experts: int = 0  # 0: every layer's MLP is dense
    experts_per_token: int = 0
    expert_size: int = 0
    normalize_expert_weights: bool = False
    shared_expert_size: int = 0  # 0: none
    dense_layers: tuple[int, ...] = ()
    # LFM2-MoE's routing: each expert's score the sigmoid of its router logit rather than a
    # softmax over them, the experts chosen by score plus a bias of their own (expert_bias,
    # which weighs nothing), the chosen scores (normalized) the weights, times routed_scaling
    sigmoid_routing: bool = False
    expert_bias: bool = False
    routed_scaling: float = 1.0
    # Ministral 3's queries scaled by 1 + beta log(1 + floor(position / context)) (Llama 4's
    # long-context attention scale: 1 within the original context); beta 0: none
    query_scaling_beta: float = 0.0
    query_scaling_context: int = 0
    # LFM2's gated short convolutions in these layers in place of attention: in_proj's three
    # parts B, C and x give C * (a depthwise causal convolution over the last conv_kernel
    # positions of B * x), the positions before cached as keys and values are (engine/short_conv.py)
    conv_layers: tuple[int, ...] = ()
    conv_kernel: int = 3  # the positions a short convolution spans (LFM2's, or gated DeltaNet's)
    conv_bias: bool = False  # in_proj, the convolution and out_proj add biases
    # Gated DeltaNet in these layers in place of attention (Qwen3.5's linear attention): a
    # state of delta_key_dim x delta_value_dim a value head, decayed and written to token by
    # token (engine/gated_delta.py), its key heads each serving as many value heads in turn
    delta_layers: tuple[int, ...] = ()
    delta_key_heads: int = 0
    delta_value_heads: int = 0
    delta_key_dim: int = 128
    delta_value_dim: int = 128
    # its input projections stored by key head (Qwen3-Next's in_proj_qkvz and in_proj_ba: each
    # key head's q, k, and its value heads' v and z, then b and a), not by kind (Qwen3.5's)
    delta_by_key_head: bool = False
    # each attention output scaled by the sigmoid of a gate q_proj computes beside each head's
    # queries, as wide (Qwen3.5's)
    output_gate: bool = False
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    architecture: str = "llama"
    quantization: str = ""  # how a quantized checkpoint stored the weights ("fp8"); "": plain

    def __post_init__(self) -> None:
        if self.head_dim == 0:
            self.head_dim = self.hidden_size // self.num_heads
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads", "head_dim", "max_position"):
            if getattr(self, name) <= 0:
                raise ValueError(f"ModelConfig.{name} must be positive, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of "
                             f"num_kv_heads ({self.num_kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")
        if self.rotary_dim == 0:
            self.rotary_dim = self.head_dim
        if not 0 < self.rotary_dim <= self.head_dim or self.rotary_dim % 2:
            raise ValueError(f"the rotary dimensions must be even and at most head_dim "
                             f"({self.head_dim}), got {self.rotary_dim}")
        if not self.logits_scaling > 0 or not (self.attention_multiplier is None
                                               or self.attention_multiplier > 0):
            raise ValueError(f"logits_scaling and attention_multiplier must be positive, got "
                             f"{self.logits_scaling} and {self.attention_multiplier}")
        if self.num_experts and not (0 < self.experts_per_token <= self.num_experts
                                     and self.expert_size > 0 and self.shared_expert_size >= 0):
            raise ValueError(f"a mixture of {self.num_experts} experts needs 1 to "
                             f"{self.num_experts} experts a token (got {self.experts_per_token}) "
                             f"of a positive width (got {self.expert_size})")
        if (self.sigmoid_routing or self.expert_bias) and not self.num_experts:
            raise ValueError("sigmoid routing and expert biases are a mixture's")
        if not self.routed_scaling > 0:
            raise ValueError(f"routed_scaling must be positive, got {self.routed_scaling}")
        if self.query_scaling_beta and not self.query_scaling_context > 0:
            raise ValueError(f"query scaling needs a positive context, got "
                             f"{self.query_scaling_context}")
        for name in ("nope_layers", "sliding_layers", "dense_layers", "conv_layers",
                     "delta_layers"):
            layers = tuple(getattr(self, name))
            setattr(self, name, layers)
            if not all(0 <= i < self.num_layers for i in layers):
                raise ValueError(f"ModelConfig.{name} {layers} are not all among the "
                                 f"{self.num_layers} layers")
        if self.sliding_layers and not (self.sliding_window or 0) > 0:
            raise ValueError(f"sliding layers need a positive sliding_window, got "
                             f"{self.sliding_window}")
        if (self.conv_layers or self.delta_layers) and not self.conv_kernel >= 1:
            raise ValueError(f"a short convolution spans at least one position, got "
                             f"{self.conv_kernel}")
        if set(self.conv_layers) & set(self.delta_layers):
            raise ValueError("a layer mixes by a short convolution or by gated DeltaNet, not both")
        if self.delta_layers and not (
                self.delta_key_heads > 0 and self.delta_value_heads % self.delta_key_heads == 0
                and self.delta_value_heads > 0 and self.delta_key_dim > 0
                and self.delta_value_dim > 0):
            raise ValueError(f"gated DeltaNet needs positive head counts, value heads a multiple "
                             f"of key heads, and positive head widths; got "
                             f"{self.delta_key_heads} key heads of {self.delta_key_dim} and "
                             f"{self.delta_value_heads} value heads of {self.delta_value_dim}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation {self.activation!r} is not one of {ACTIVATIONS}")
        if not (self.norm_before or self.norm_after):
            raise ValueError("a layer norms its sublayers' inputs, outputs or both")
        if self.parallel_block and (self.norm_after or not self.norm_before):
            raise ValueError("a parallel block norms its input alone")
        if (not self.gated_mlp or self.linear_bias) and (self.num_experts or
                                                          self.fused_projections):
            raise ValueError("an MLP without a gate, or with biases, is a dense layer's, its "
                             "projections apart")
        if self.norm_bias and (not self.layer_norm or self.norm_after):
            raise ValueError("norm biases are a LayerNorm's before each sublayer")
        for name in ("rope_theta", "attention_softcap", "logits_softcap", "local_rope_theta"):
            value = getattr(self, name)
            if value is not None and not value > 0:  # a RoPE base of 0 turns nothing at all
                raise ValueError(f"ModelConfig.{name} must be positive, got {value}")
        self.eos_token_ids = tuple(self.eos_token_ids)
        outside = [i for i in self.eos_token_ids if not 0 <= i < self.vocab_size]
        if outside:
            raise ValueError(f"end-of-sequence ids {outside} are outside the vocabulary "
                             f"({self.vocab_size} ids)")

    def describe(self) -> str:
        """What the model is, as a user reads it: "qwen3_moe, 48 layers, 128 experts (8 a
        token), fp8 weights dequantized"."""
        experts = (f", {self.num_experts} experts ({self.experts_per_token} a token)"
                   if self.num_experts else "")
        convs = (f" ({len(self.conv_layers)} short-convolution)" if self.conv_layers else
                 f" ({len(self.delta_layers)} gated DeltaNet)" if self.delta_layers else "")
        stored = f", {self.quantization} weights dequantized" if self.quantization else ""
        return f"{self.architecture}, {self.num_layers} layers{convs}{experts}{stored}"

    def has_experts(self, layer: int) -> bool:
        """Whether `layer`'s MLP is a mixture of experts."""
        return self.num_experts > 0 and layer not in self.dense_layers

    @property
    def attention_layers(self) -> tuple[int, ...]:
        """The layers that attend (all but the short-convolution and gated DeltaNet ones)."""
        return tuple(i for i in range(self.num_layers)
                     if i not in self.conv_layers and i not in self.delta_layers)

    @property
    def group_size(self) -> int:
        """Query heads per KV head (GQA)."""
        return self.num_heads // self.num_kv_heads

    def with_(self, **changes) -> "ModelConfig":
        return replace(self, **changes)

    def first_layers(self, num_layers: int) -> "ModelConfig":
        """The config of this model's first `num_layers` layers (a self-draft's)."""
        return replace(self, num_layers=num_layers,
                       nope_layers=tuple(i for i in self.nope_layers if i < num_layers),
                       sliding_layers=tuple(i for i in self.sliding_layers if i < num_layers),
                       dense_layers=tuple(i for i in self.dense_layers if i < num_layers),
                       conv_layers=tuple(i for i in self.conv_layers if i < num_layers),
                       delta_layers=tuple(i for i in self.delta_layers if i < num_layers))


PRESETS: dict[str, ModelConfig] = {
    # A small random model of the same architecture, for fast tests (byte-level tokenizer).
    "tiny-test": ModelConfig(vocab_size=320, hidden_size=64, intermediate_size=128, num_layers=2,
                             num_heads=4, num_kv_heads=2, rope_theta=10000.0, max_position=4096,
                             tie_word_embeddings=True, eos_token_ids=(257,), bos_token_id=256),
    # SmolLM2-135M-Instruct, as read from its GGUF (the embedded default).
    "smollm2-135m": ModelConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                                num_layers=30, num_heads=9, num_kv_heads=3, rope_theta=100000.0,
                                max_position=8192, tie_word_embeddings=True,
                                eos_token_ids=(2,), bos_token_id=1),
}

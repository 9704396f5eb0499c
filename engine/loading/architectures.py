"""The Hugging Face architectures that load, as what: config.json's `architectures[0]` -> this
engine's name for it and the ModelConfig switches it sets (hf_folder.py reads the rest of each
config), the multimodal ones whose text model loads alone, and the fields' defaults that
transformers keeps in its config classes rather than the files."""
from __future__ import annotations

# Cohere's and Cohere 2's switches
COHERE = {"layer_norm": True, "parallel_block": True, "rope_interleaved": True}
COHERES = ("cohere", "cohere2")
# The config field of each architecture's norms' eps where it is not rms_norm_eps (those of
# the LayerNormed ones, and LFM2's RMSNorms')
NORM_EPS = {"cohere": "layer_norm_eps", "cohere2": "layer_norm_eps", "stablelm": "layer_norm_eps",
            "phi": "layer_norm_eps", "starcoder2": "norm_epsilon", "nemotron": "norm_eps",
            "lfm2": "norm_eps", "lfm2_moe": "norm_eps", "lfm3": "norm_eps"}
# Architectures whose head is tied to the embedding where a config does not say
TIED_BY_DEFAULT = ("gemma", "gemma2", "gemma3", "cohere", "cohere2", "starcoder2", "lfm2",
                   "lfm2_moe", "lfm3")
# The share of a head RoPE turns where a config leaves it out (transformers' defaults)
ROTARY_SHARES = {"stablelm": 0.25, "glm4": 0.5, "phi": 0.5, "nemotron": 0.5, "qwen3_5": 0.25,
                 "qwen3_5_moe": 0.25, "qwen3_next": 0.25}
# The families with gated DeltaNet layers (hf_families.gated_delta)
QWEN3_5 = ("qwen3_5", "qwen3_5_moe", "qwen3_next")
QWEN3_5_SWITCHES = {"qk_norm": True, "gemma_norms": True, "output_gate": True}
# architectures[0] in config.json -> (our architecture name, its switches).
SUPPORTED = {
    "LlamaForCausalLM": ("llama", {}),
    "MistralForCausalLM": ("mistral", {}),
    "Qwen2ForCausalLM": ("qwen2", {"qkv_bias": True}),
    "Qwen3ForCausalLM": ("qwen3", {"qk_norm": True}),
    "Phi3ForCausalLM": ("phi3", {"fused_projections": True}),
    "SmolLM3ForCausalLM": ("smollm3", {}),
    "GraniteForCausalLM": ("granite", {}),
    "Olmo2ForCausalLM": ("olmo2", {"qk_norm": True, "qk_norm_whole": True, "norm_before": False,
                                   "norm_after": True}),
    # OLMo 2's, three sliding layers to a full one, RoPE scaled in the full ones alone
    "Olmo3ForCausalLM": ("olmo3", {"qk_norm": True, "qk_norm_whole": True, "norm_before": False,
                                   "norm_after": True}),
    "GemmaForCausalLM": ("gemma", {"gemma_norms": True}),
    "Gemma2ForCausalLM": ("gemma2", {"gemma_norms": True, "norm_after": True}),
    "Gemma3ForCausalLM": ("gemma3", {"gemma_norms": True, "norm_after": True, "qk_norm": True}),
    # OLMo 2's norms after each sublayer, Qwen3's q/k norms
    "Exaone4ForCausalLM": ("exaone4", {"qk_norm": True, "norm_before": False,
                                       "norm_after": True}),
    # mixtures of experts (MIXTURES)
    "MixtralForCausalLM": ("mixtral", {}),
    "Qwen2MoeForCausalLM": ("qwen2_moe", {}),  # q/k/v biases unless qkv_bias is false
    "Qwen3MoeForCausalLM": ("qwen3_moe", {"qk_norm": True}),
    "OlmoeForCausalLM": ("olmoe", {"qk_norm": True, "qk_norm_whole": True}),
    "GraniteMoeForCausalLM": ("granitemoe", {}),  # with Granite's scalars
    # Mistral's, its queries scaled past the original context as Llama 4's are
    "Ministral3ForCausalLM": ("ministral3", {}),
    "SeedOssForCausalLM": ("seed_oss", {}),  # Llama's, q/k/v biases where attention_bias says
    # norms around each sublayer, q/k/v biases as Seed-OSS's, RoPE on adjacent pairs of half a head
    "Glm4ForCausalLM": ("glm4", {"norm_after": True, "rope_interleaved": True}),
    "Ernie4_5ForCausalLM": ("ernie4_5", {"rope_interleaved": True}),  # Llama's, RoPE as GLM-4's
    # LayerNorms, the attention and MLP side by side, RoPE on adjacent pairs, logits scaled;
    # Cohere 2 with three sliding layers to a full one, RoPE in those alone
    "CohereForCausalLM": ("cohere", COHERE),
    "Cohere2ForCausalLM": ("cohere2", COHERE),
    # LayerNorms with biases, RoPE on a quarter of each head unless told, q/k/v biases and the
    # attention and MLP side by side where its config says
    "StableLmForCausalLM": ("stablelm", {"layer_norm": True, "norm_bias": True}),
    "ArceeForCausalLM": ("arcee", {"gated_mlp": False}),  # Llama's, its MLP ReLU^2 without a gate
    # LayerNorms with biases, an MLP without a gate, biases wherever use_bias says (weights.py
    # reads its c_fc and c_proj as up_proj and down_proj), a window in every layer
    "Starcoder2ForCausalLM": ("starcoder2", {"layer_norm": True, "norm_bias": True,
                                             "gated_mlp": False}),
    # Phi-2 and Phi-1.5: StarCoder2's biases and gateless MLP, the attention and MLP side by
    # side, the head's bias (weights.py reads its dense, fc1, fc2 and final_layernorm as the
    # others name theirs)
    "PhiForCausalLM": ("phi", {"layer_norm": True, "norm_bias": True, "gated_mlp": False,
                               "parallel_block": True, "qkv_bias": True, "linear_bias": True,
                               "head_bias": True}),
    # Nemotron (Minitron, Nemotron-Mini): LayerNorm1P (by 1 + weight, with biases), Arcee's MLP,
    # RoPE on half of each head
    "NemotronForCausalLM": ("nemotron", {"layer_norm": True, "norm_bias": True,
                                         "gemma_norms": True, "gated_mlp": False}),
    # Granite 4.0's: Granite's scalars, its MLP's gate and up one tensor (weights.py reads its
    # halves), every layer attention (Granite 4.0 Micro); Mamba layers or experts refused
    "GraniteMoeHybridForCausalLM": ("granitemoehybrid", {}),
    # LFM2: gated short convolutions in most layers (layer_types), Qwen3's q/k norms in the
    # others (weights.py reads its operator_norm, ffn_norm, feed_forward and names as theirs)
    "Lfm2ForCausalLM": ("lfm2", {"qk_norm": True}),
    # LFM2's, its MLPs past the first few mixtures of experts routed by sigmoids
    "Lfm2MoeForCausalLM": ("lfm2_moe", {"qk_norm": True}),
    # LFM2's, with norms after each sublayer too, windowed layers and the attention's output
    # gated (its norms' names: weights.py)
    "Lfm3ForCausalLM": ("lfm3", {"qk_norm": True}),
    "HeliumForCausalLM": ("helium", {"rope_interleaved": True}),  # Llama's, RoPE as GLM-4's
    # Qwen3.5: gated DeltaNet in three layers of four (layer_types), Qwen3's q/k norms in the
    # others, its attention's output gated, every norm by 1 + weight (Gemma's) but the
    # DeltaNet's own
    "Qwen3_5ForCausalLM": ("qwen3_5", QWEN3_5_SWITCHES),
    # Qwen3.5's, every MLP a mixture with Qwen2-MoE's gated shared expert
    "Qwen3_5MoeForCausalLM": ("qwen3_5_moe", QWEN3_5_SWITCHES),
    # Qwen3-Next: Qwen3.5's mixture, its DeltaNet's projections stored by key head, some layers'
    # MLPs dense (decoder_sparse_step, mlp_only_layers)
    "Qwen3NextForCausalLM": ("qwen3_next", QWEN3_5_SWITCHES | {"delta_by_key_head": True}),
}
# transformers' config classes' defaults for the fields a config may leave out, where they are
# not the reader's (hf_folder.py)
LFM_ROPE = {"rope_theta": 1_000_000.0}
QWEN3_5_DEFAULTS = {"head_dim": 256, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
                    "linear_value_head_dim": 128, "linear_num_key_heads": 16,
                    "linear_num_value_heads": 32}
CONFIG_DEFAULTS = {
    "lfm2": LFM_ROPE, "lfm2_moe": LFM_ROPE,
    "lfm3": {"head_dim": 128, "sliding_window": 256, "conv_L_cache": 7, "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        "full_attention": {"rope_type": "proportional", "rope_theta": 1_000_000.0,
                           "partial_rotary_factor": 0.5}}},
    "helium": {"head_dim": 128, "rms_norm_eps": 1e-8},
    "qwen3_5": QWEN3_5_DEFAULTS, "qwen3_5_moe": QWEN3_5_DEFAULTS,
    "qwen3_next": QWEN3_5_DEFAULTS | {"norm_topk_prob": True},
}
GRANITES = ("granite", "granitemoe", "granitemoehybrid")  # with Granite's scalars
# A mixture's config field for its experts' width, and whether the chosen experts' weights are
# always rescaled to sum to 1 (else as norm_topk_prob says)
MIXTURES = {"mixtral": ("intermediate_size", True), "qwen2_moe": ("moe_intermediate_size", False),
            "qwen3_moe": ("moe_intermediate_size", False), "olmoe": ("intermediate_size", False),
            "granitemoe": ("intermediate_size", True),  # its softmax is over the chosen
            "lfm2_moe": ("moe_intermediate_size", False),
            "qwen3_5_moe": ("moe_intermediate_size", True),
            "qwen3_next": ("moe_intermediate_size", False)}
LLAVA_TEXT = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
              "qwen2": "Qwen2ForCausalLM"}
# Models that also see images, whose text model loads alone: its architecture (or by its
# text_config's model_type, the architecture of each), and the fields its text_config leaves out
# (as Gemma 3's 4B-27B ship it) with transformers' defaults
MULTIMODAL = {
    # Mistral Small 3.1 and 3.2 (Mistral's), Ministral 3
    "Mistral3ForConditionalGeneration": ({"mistral": "MistralForCausalLM",
                                          "ministral3": "Ministral3ForCausalLM"}, {}),
    "Gemma3ForConditionalGeneration": ("Gemma3ForCausalLM", {
        "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216,
        "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
        "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": 131_072, "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0,
        "rope_local_base_freq": 10_000.0, "query_pre_attn_scalar": 256, "sliding_window": 4096,
        "sliding_window_pattern": 6, "tie_word_embeddings": True}),
    # Qwen2-VL, Qwen2.5-VL and Qwen3-VL: their text model Qwen2's or Qwen3's, its multimodal
    # RoPE (mrope_section) the plain one where every position is text, as in a swarm's prompts
    "Qwen2VLForConditionalGeneration": ("Qwen2ForCausalLM", {}),
    "Qwen2_5_VLForConditionalGeneration": ("Qwen2ForCausalLM", {}),
    "Qwen3VLForConditionalGeneration": ("Qwen3ForCausalLM", {}),
    # LLaVA's (1.5, NeXT, OneVision) and SmolVLM's (Idefics3's) text models, by their type
    "LlavaForConditionalGeneration": (LLAVA_TEXT, {}),
    "LlavaNextForConditionalGeneration": (LLAVA_TEXT, {}),
    "LlavaOnevisionForConditionalGeneration": (LLAVA_TEXT, {}),
    "Idefics3ForConditionalGeneration": ({"llama": "LlamaForCausalLM"}, {}),
    "SmolVLMForConditionalGeneration": ({"llama": "LlamaForCausalLM"}, {}),
    "Lfm2VlForConditionalGeneration": ("Lfm2ForCausalLM", {}),  # LFM2-VL's LFM2
    # Qwen3.5 as it ships (it sees images), its RoPE by sections the plain one for text
    "Qwen3_5ForConditionalGeneration": ("Qwen3_5ForCausalLM", {}),
    "Qwen3_5MoeForConditionalGeneration": ("Qwen3_5MoeForCausalLM", {}),
}
# transformers' LlamaConfig defaults, which LLaVA 1.5's text_config leaves to it
LLAMA_DEFAULTS = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "max_position_embeddings": 2048,
                  "rms_norm_eps": 1e-6, "vocab_size": 32000}
# The MLP activations transformers names, as ModelConfig.activation names them
ACTIVATIONS = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh",
               "gelu": "gelu", "relu2": "relu2"}
# Granite's scalars, with transformers' defaults (its attention's scale is 1 unless given)
GRANITE = {"embedding_multiplier": 1.0, "residual_multiplier": 1.0, "attention_multiplier": 1.0,
           "logits_scaling": 1.0}


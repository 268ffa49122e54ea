"""Real decoder architectures for the analytic ledger: a Hugging Face `config.json` (or the same fields) read into
an `Architecture` with grouped-query attention, a gated (SwiGLU) MLP with its own width, RMSNorm, tied or untied
embeddings and mixture-of-experts layers (total and active experts).

The presets are the models' published `config.json` values (Hugging Face Hub, read 2026-11):
- Llama-2-7B: https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json
- Llama-3-8B: https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json (vocabulary 128,256, 8 KV heads)
- Mistral-7B: https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json
- Qwen2.5-7B: https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json (q/k/v biases)
- Llama-2-70B: https://huggingface.co/meta-llama/Llama-2-70b-hf/blob/main/config.json (GQA, 8 KV heads)
- Mixtral-8x7B: https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json (8 experts, 2 active)
`n_params` reproduces each model's published parameter count (tests/test_architectures.py, and a transformers
model built from the same config on the meta device).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from utils.ledger.gpt import MemoryEstimate
from utils.validate import check_bool, check_choice, check_instance, check_int

BYTES = {"fp32": 4, "bf16": 2}


@dataclass(frozen=True)
class Architecture:
    """A decoder-only transformer with RMSNorm, rotary positions (no position table) and a gated SiLU MLP."""

    n_layer: int
    d_model: int
    n_head: int
    n_kv_head: int
    d_ff: int
    vocab_size: int
    tied_embeddings: bool = False
    qkv_bias: bool = False
    n_experts: int = 1  # experts per MoE layer (1: a dense MLP)
    experts_per_token: int = 1  # active experts per token

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("bool", bool):
                check_bool(f.name, value)
            else:
                check_int(f.name, value, minimum=1)
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")
        if self.n_head % self.n_kv_head:
            raise ValueError(f"n_head ({self.n_head}) must be a multiple of n_kv_head ({self.n_kv_head})")
        if self.experts_per_token > self.n_experts:
            raise ValueError(f"experts_per_token ({self.experts_per_token}) exceeds n_experts ({self.n_experts})")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def kv_dim(self) -> int:
        """Width of the key (and of the value) projection: n_kv_head x head_dim."""
        return self.n_kv_head * self.head_dim

    @property
    def attention_parameters(self) -> int:
        d, kv = self.d_model, self.kv_dim
        bias = d + 2 * kv if self.qkv_bias else 0
        return 2 * d * d + 2 * d * kv + bias

    @property
    def expert_parameters(self) -> int:
        """One gated MLP: gate and up (d x d_ff each) and down (d_ff x d)."""
        return 3 * self.d_model * self.d_ff

    @property
    def layer_parameters(self) -> int:
        router = self.d_model * self.n_experts if self.n_experts > 1 else 0
        return self.attention_parameters + self.n_experts * self.expert_parameters + router + 2 * self.d_model

    @property
    def n_params(self) -> int:
        embeddings = self.vocab_size * self.d_model * (1 if self.tied_embeddings else 2)
        return embeddings + self.n_layer * self.layer_parameters + self.d_model

    @property
    def active_params(self) -> int:
        """Parameters one token passes through (MoE: only its experts_per_token experts)."""
        idle = (self.n_experts - self.experts_per_token) * self.expert_parameters
        return self.n_params - self.n_layer * idle


# The families this ledger models (a gated SiLU MLP, RMSNorm, rotary positions, grouped-query attention, Mixtral's
# experts): a config of another model_type (Phi's two-matrix GELU MLP, Gemma's wider heads) would be counted wrongly.
MODEL_TYPES = ("llama", "mistral", "qwen2", "mixtral")
_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")


def from_hf_config(config: Any) -> Architecture:
    """An Architecture from a Hugging Face config (a dict as in config.json, or a PretrainedConfig) of a family the
    ledger models (MODEL_TYPES; no model_type is read as Llama). Fields are checked under their config.json names,
    and a field that would change the count but is not modelled (another MLP, a head width of its own, another
    mixture-of-experts layout, a multimodal wrapper) is refused by name rather than ignored."""
    if not isinstance(config, dict):
        if not hasattr(config, "to_dict"):
            raise TypeError(f"config must be a dict (config.json) or a transformers config, "
                            f"got {type(config).__name__}")
        config = config.to_dict()
    if "text_config" in config:
        raise ValueError("config has a text_config (a multimodal model): use its text_config's fields")
    model_type = config.get("model_type", "llama")
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type {model_type!r} is not a family this ledger models ({', '.join(MODEL_TYPES)}: "
                         "a gated SiLU MLP, RMSNorm, rotary positions)")
    missing = [k for k in _FIELDS if k not in config]
    if missing:
        raise ValueError(f"config lacks {', '.join(missing)}")
    for key in (*_FIELDS, "num_key_value_heads", "num_local_experts", "num_experts_per_tok", "head_dim"):
        if config.get(key) is not None:
            check_int(f"config's {key}", config[key], minimum=1)
    heads = config["num_attention_heads"]
    if config.get("head_dim") not in (None, config["hidden_size"] // heads):
        raise ValueError(f"config's head_dim ({config['head_dim']}) differs from hidden_size / num_attention_heads "
                         f"({config['hidden_size'] // heads}): heads of their own width are not modelled")
    if config.get("hidden_act", "silu") not in ("silu", "swish"):
        raise ValueError(f"config's hidden_act {config['hidden_act']!r}: the ledger models a gated SiLU MLP")
    if "num_experts" in config or "moe_intermediate_size" in config:
        raise ValueError("config's num_experts / moe_intermediate_size (a mixture-of-experts layout other than "
                         "Mixtral's num_local_experts) is not modelled")
    qkv_bias = bool(config.get("attention_bias", model_type == "qwen2"))
    return Architecture(
        n_layer=config["num_hidden_layers"], d_model=config["hidden_size"], n_head=heads,
        n_kv_head=config.get("num_key_value_heads") or heads, d_ff=config["intermediate_size"],
        vocab_size=config["vocab_size"], tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        qkv_bias=qkv_bias, n_experts=config.get("num_local_experts", 1) or 1,
        experts_per_token=config.get("num_experts_per_tok", 1) or 1)


# The published config.json fields that set the memory (see the module docstring for the sources).
HF_CONFIGS: dict[str, dict[str, Any]] = {
    "Llama-2-7B": {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                   "num_key_value_heads": 32, "intermediate_size": 11008, "vocab_size": 32000,
                   "tie_word_embeddings": False, "max_position_embeddings": 4096},
    "Llama-3-8B": {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
                   "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
                   "tie_word_embeddings": False, "max_position_embeddings": 8192},
    "Mistral-7B": {"model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096,
                   "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                   "vocab_size": 32000, "tie_word_embeddings": False, "max_position_embeddings": 32768},
    "Qwen2.5-7B": {"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584, "num_attention_heads": 28,
                   "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
                   "tie_word_embeddings": False, "max_position_embeddings": 131072},
    "Llama-2-70B": {"model_type": "llama", "num_hidden_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
                    "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 32000,
                    "tie_word_embeddings": False, "max_position_embeddings": 4096},
    "Mixtral-8x7B": {"model_type": "mixtral", "num_hidden_layers": 32, "hidden_size": 4096,
                     "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                     "vocab_size": 32000, "tie_word_embeddings": False, "num_local_experts": 8,
                     "num_experts_per_tok": 2, "max_position_embeddings": 32768},
}
ARCHITECTURES: dict[str, Architecture] = {name: from_hf_config(cfg) for name, cfg in HF_CONFIGS.items()}
# Parameter counts the model cards publish (exact), reproduced by Architecture.n_params.
PUBLISHED_PARAMS: dict[str, int] = {"Llama-2-7B": 6_738_415_616, "Llama-3-8B": 8_030_261_248,
                                    "Mistral-7B": 7_241_732_096, "Qwen2.5-7B": 7_615_616_512,
                                    "Llama-2-70B": 68_976_648_192, "Mixtral-8x7B": 46_702_792_704}


def logits_bytes(tokens: int, vocab_size: int, precision: str = "fp32") -> int:
    """Bytes of one logits tensor (tokens x vocabulary): the largest activation of a large-vocabulary model. Its
    FP32 gradient is as large again, at the start of backward."""
    check_int("tokens", tokens, minimum=1)
    check_int("vocab_size", vocab_size, minimum=1)
    check_choice("precision", precision, tuple(BYTES))
    return tokens * vocab_size * BYTES[precision]


def parameter_tensors(arch: Architecture) -> int:
    """How many parameter tensors the Hugging Face model holds (Adam keeps a 4-byte step counter for each)."""
    check_instance("arch", arch, Architecture)
    return _parameter_tensors(arch)


def _parameter_tensors(arch: Architecture) -> int:
    per_layer = 4 + 3 * arch.n_experts + 2 + (3 if arch.qkv_bias else 0) + (1 if arch.n_experts > 1 else 0)
    return 1 + arch.n_layer * per_layer + 1 + (0 if arch.tied_embeddings else 1)


def activation_bytes(arch: Architecture, batch: int, seq_len: int, precision: str = "bf16", *,
                     checkpointing: bool = False, padding_mask: bool = False, attention: str = "sdpa") -> int:
    """Bytes autograd saves in one forward of a Hugging Face Llama-family model (Llama, Mistral, Qwen2, Mixtral)
    with SDPA attention and the loss, as counted on a CPU, for "bf16" (BF16 weights), "bf16-mixed" (FP32 weights
    under CPU autocast) or "fp32".

    Dense layers: with n = batch x seq_len tokens, per layer, in bytes per token: bf16 20d + 4kv + 8 d_ff + 8,
    bf16-mixed 30d + 4kv + 8 d_ff + 8 (norms and residual stream in FP32), fp32 32d + 8kv + 16 d_ff + 8 (the two
    RMSNorms, q, k and v at their own widths (kv = n_kv_head x head_dim under grouped-query attention), the
    attention output and o_proj's input, the gated MLP's four d_ff-wide tensors, two rsqrt statistics), plus a
    4-byte log-sum-exp per head per token; autocast also keeps a BF16 copy of every weight matrix (2 B per matrix
    parameter). Outside the layers: the final norm, the FP32 log-softmax of the logits (4V per token; under
    autocast also the head's BF16 weight copy, 2dV), ids and targets (20 per token), rotary tables.
    A real forward without a padding mask keeps no T x T mask and passes K and V to SDPA at their grouped width
    (transformers' `sdpa_attention_forward` with `enable_gqa`); a fake-tensor trace does otherwise, because
    transformers' `is_tracing()` is True there (it builds the mask and repeats K/V to the full head count), so
    these terms are checked against real steps metered on a CPU (tests/test_real_steps.py), not against a trace.
    With `padding_mask` (a batch padded to one length) the T x T mask is kept: 2 B per element (4 in FP32).
    The kernel is SDPA's on a CPU or a GPU whose flash or memory-efficient kernel takes the dtype
    (`utils.ledger.gpt.sdpa_attention` decides); where only the math kernel runs (BF16 below compute capability 8.0:
    a T4, a V100) it keeps the T x T probabilities instead of the log-sum-exp: `attention="sdpa-math"` counts what
    torch's math kernel keeps in BF16 (`utils.ledger.gpt.transformer_activation_bytes`: FP32 probabilities,
    4 x batch x heads x T^2, and FP32 q, k and v, here with K and V repeated to every head, 12 x n x d, where the
    fused kernel kept BF16 q, k and v at their own widths); measured for the course's GPT, a model of it here (no
    T4 run of these architectures is in this course).
    These are Hugging Face's unfused layers: Megatron-LM's or Transformer
    Engine's fused layers keep less (Korthikanti et al.'s 34 sbh per GPT layer, before autocast's weight copies).

    Mixture-of-experts layers (Mixtral; transformers indexes each expert's tokens, so a fake-tensor trace cannot
    size them; fitted to saved-tensor counts of small real Mixtrals on a CPU and checked within 1.5% on others):
    the dense MLP's tensors (c.d + 4c.d_ff per token, c the compute bytes) are replaced by, per token routed to
    each of its k experts, its gathered input and output (2 e.d), the gate/up output, SiLU and down's input
    (4 e.d_ff) and 32 B of indices and routing weight (e the experts' element bytes: 2 in BF16, 4 in FP32 and under
    autocast: transformers 5's default experts implementation, grouped_mm, is not autocast-enabled and casts the
    input to the weights' dtype, FP32 under torch.amp; transformers/integrations/moe.py `_grouped_mm`, citing
    pytorch/pytorch#174763), plus the router's FP32 probabilities and top-k (4E + 16 per token); no T x T mask is
    kept, and autocast copies the attention and router weights only.

    With `checkpointing` (each layer checkpointed, non-reentrant, as utils.lessons.estimate.checkpointed does) a layer
    keeps only its input (2 B per element in BF16, 4 otherwise); what lies outside the layers stays. A traced
    count misses the rotary tables there (Hugging Face passes them to a layer as keyword arguments, which
    checkpoint holds outside autograd's saved tensors), though they are alive: this count includes them."""
    check_instance("arch", arch, Architecture)
    check_int("batch", batch, minimum=1)
    check_int("seq_len", seq_len, minimum=1)
    check_choice("precision", precision, ("bf16", "bf16-mixed", "fp32"))
    check_bool("checkpointing", checkpointing)
    check_bool("padding_mask", padding_mask)
    check_choice("attention", attention, ("sdpa", "sdpa-math"))
    if attention == "sdpa-math" and precision == "fp32":
        raise ValueError("attention='sdpa-math' is modelled in BF16 (the math kernel runs FP32 only where forced)")
    per_layer, outside = _activation_parts(arch, batch, seq_len, precision, checkpointing=checkpointing,
                                           padding_mask=padding_mask, attention=attention)
    return arch.n_layer * per_layer + outside


def _activation_parts(arch: Architecture, batch: int, seq_len: int, precision: str, *, checkpointing: bool,
                      padding_mask: bool, attention: str) -> tuple[int, int]:
    """Bytes one layer saves and bytes saved outside the layers: `activation_bytes` is n_layer x the first +
    the second."""
    d, f, h, v, t, kv = arch.d_model, arch.d_ff, arch.n_head, arch.vocab_size, seq_len, arch.kv_dim
    n = batch * t
    per_token, per_kv, per_ff, mask, outside_d, rotary = {"bf16": (20, 4, 8, 2, 8, 4),
                                                          "bf16-mixed": (30, 4, 8, 2, 10, 8),
                                                          "fp32": (32, 8, 16, 4, 12, 8)}[precision]
    per_layer = n * (per_token * d + per_kv * kv + per_ff * f + 8 + 4 * h)
    per_layer += mask * batch * t * t if padding_mask and arch.n_experts == 1 else 0
    if attention == "sdpa-math":  # FP32 probabilities and q, k, v at every head, less BF16 q, k, v and the lse
        per_layer += 4 * batch * h * t * t + 12 * n * d - 2 * n * d - 4 * n * kv - 4 * n * h
    outside = n * (outside_d * d + 4 * v + 20) + rotary * t * arch.head_dim + 4
    if arch.n_experts > 1:  # fitted to real counts with the dense terms of K and V repeated to every head: kept
        per_layer += n * {"bf16": 4, "bf16-mixed": 4, "fp32": 8}[precision] * (d - kv)
        c, e, k = (4, 4, arch.experts_per_token) if precision == "fp32" else (2, 2 if precision == "bf16" else 4,
                                                                              arch.experts_per_token)
        per_layer += n * k * (2 * e * d + 4 * e * f + 32) + n * (4 * arch.n_experts + 16) - n * (c * d + 4 * c * f)
    if precision == "bf16-mixed":  # autocast's BF16 copies of the matrices (biases and the embedding table: none)
        per_layer += 2 * _cast_parameters(arch)
        outside += 2 * d * v
    if checkpointing:
        per_layer = n * d * (2 if precision == "bf16" else 4)
    return per_layer, outside


def _cast_parameters(a: Architecture) -> int:
    mlp = 3 * a.d_model * a.d_ff if a.n_experts == 1 else a.d_model * a.n_experts
    return 2 * a.d_model * a.d_model + 2 * a.d_model * a.kv_dim + mlp


def lora_parameters_of(arch: Architecture, rank: int, targets: str = "attention") -> int:
    """Trainable parameters of rank-`rank` LoRA adapters on `arch`: r x (d_in + d_out) per adapted matrix.
    "attention": q (d x d), k and v (d x kv_dim each, fewer under grouped-query attention), o (d x d);
    "attention+mlp" adds gate, up (d x d_ff) and down (d_ff x d) of every expert."""
    check_instance("arch", arch, Architecture)
    check_int("rank", rank, minimum=1)
    check_choice("targets", targets, ("attention", "attention+mlp"))
    return _lora_parameters_of(arch, rank, targets)


def _lora_parameters_of(arch: Architecture, rank: int, targets: str = "attention") -> int:
    d, kv = arch.d_model, arch.kv_dim
    per_layer = rank * (2 * d + 2 * (d + kv) + 2 * d)
    if targets == "attention+mlp":
        per_layer += arch.n_experts * 3 * rank * (d + arch.d_ff)
    return arch.n_layer * per_layer


@dataclass(frozen=True)
class ArchitectureShape:
    """An Architecture trained at a sequence length: what `utils.ledger.plan`'s ledger takes for a real model (as it
    takes a `utils.ledger.gpt.TransformerShape` for the course's GPT). `name` labels plans and figures."""

    arch: Architecture
    seq_len: int
    name: str = ""

    def __post_init__(self) -> None:
        check_instance("arch", self.arch, Architecture)
        check_int("seq_len", self.seq_len, minimum=1)
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a str, got {type(self.name).__name__}")

    n_layer = property(lambda self: self.arch.n_layer)
    d_model = property(lambda self: self.arch.d_model)
    n_head = property(lambda self: self.arch.n_head)
    vocab_size = property(lambda self: self.arch.vocab_size)
    n_params = property(lambda self: self.arch.n_params)

    @property
    def block_parameters(self) -> int:
        """Parameters of one layer (every expert of an MoE layer)."""
        return self.arch.layer_parameters

    @property
    def matrix_parameters(self) -> int:
        """Parameters in one layer's weight matrices (attention, experts, router): what NF4 quantizes."""
        a = self.arch
        router = a.d_model * a.n_experts if a.n_experts > 1 else 0
        return 2 * a.d_model * a.d_model + 2 * a.d_model * a.kv_dim + a.n_experts * a.expert_parameters + router

    @property
    def largest_matrix(self) -> int:
        """Elements of the largest weight matrix in a layer (what an NF4 base dequantizes at a time)."""
        return self.arch.d_model * max(self.arch.d_model, self.arch.d_ff)

    @property
    def cast_parameters(self) -> int:
        """Parameters of one layer that autocast copies to BF16: the attention's matrices and a dense MLP's (an MoE
        layer: the router's; transformers' grouped_mm experts are not autocast-enabled, see activation_bytes)."""
        return _cast_parameters(self.arch)

    @property
    def adapters_per_token(self) -> dict[str, int]:
        """LoRA adapters a token passes through per layer, by targets (an MoE token: its k experts' three)."""
        return {"attention": 4, "attention+mlp": 4 + 3 * self.arch.experts_per_token}


def shape_of_model(name: str, seq_len: int | None = None) -> ArchitectureShape:
    """The ArchitectureShape of a preset (ARCHITECTURES) at `seq_len` (default: 4,096)."""
    check_choice("name", name, tuple(ARCHITECTURES))
    return ArchitectureShape(ARCHITECTURES[name], 4096 if seq_len is None else seq_len, name)


def architecture_memory(arch: Architecture, batch: int, seq_len: int) -> MemoryEstimate:
    """One training step's parts (`MemoryEstimate`) of `arch` in pure BF16 with torch's AdamW, as
    `utils.lessons.estimate.estimate_memory` counts them: BF16 weights and gradients, two BF16 moments plus a 4-byte
    step per tensor, and `activation_bytes`. The total is the sum of the parts (the traced total is a peak)."""
    acts = activation_bytes(arch, batch, seq_len)
    n = arch.n_params
    states = 4 * n + 4 * _parameter_tensors(arch)
    return MemoryEstimate(2 * n, 2 * n, states, acts, 0, 4 * n + states + acts)



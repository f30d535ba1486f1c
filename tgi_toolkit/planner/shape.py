"""A decoder's shape read from its `config.json`, and its parameter count.

Configs name the same quantity differently (GPT-2's `n_embd`, Falcon's `n_head_kv` and
`multi_query`, ChatGLM's `multi_query_group_num`); everything is normalised here once, so the
memory arithmetic sees one shape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeAlias


class TransformersConfig(Protocol):
    """A transformers `PretrainedConfig` as the planner reads it: its config.json fields."""

    def to_dict(self) -> dict[str, Any]: ...


# What the planner reads a model's shape from: config.json's fields, a config.json path or model directory, a model
# by id (a shipped shape, a .gguf file, a model in the local cache), or a transformers config.
ModelConfigSource: TypeAlias = "dict[str, Any] | str | Path | TransformersConfig"

# Families whose MLP is gated (gate, up and down projections) whatever their activation name.
_GATED = {
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3",
    "gemma3_text", "phi3", "olmo", "olmo2", "olmoe", "granite", "granitemoe", "cohere", "internlm2", "stablelm",
    "deepseek", "deepseek_v2", "deepseek_v3", "exaone", "smollm3", "baichuan", "yi", "minicpm",
}
# Families with a plain two-matrix MLP (up, down) and LayerNorm with a bias.
_PLAIN = {"falcon", "gpt2", "gpt_neox", "gptj", "opt", "bloom", "phi", "starcoder2", "gpt_bigcode", "mpt"}
# Families with learned absolute position embeddings (a table of max_position_embeddings x hidden).
_LEARNED_POSITIONS = {"gpt2", "gpt_bigcode", "opt"}
# transformers' defaults for configs that leave the context length out (Falcon-7B's config.json does).
_DEFAULT_MAX_POSITIONS = {"falcon": 2048, "gpt2": 1024}


def _first(cfg: dict[str, Any], *names: str, default: Any = None) -> Any:
    for name in names:
        value = cfg.get(name)
        if value is not None:
            return value
    return default


def _names_a_model(model: str, path: Path) -> bool:
    """A model id or a GGUF model rather than a config.json path: read by models.files.model_config."""
    if path.exists():
        return (path.is_file() and path.suffix == ".gguf") or (path.is_dir() and not (path / "config.json").is_file())
    return not model.startswith(("/", ".", "~")) and not model.endswith(".json")


def load_config(model_config: ModelConfigSource) -> dict[str, Any]:
    """config.json contents from a dict, a path (file or model directory), a transformers config, or a model
    by id: a shipped shape (data/models/), a .gguf file or a model found as the embedded engine finds it
    (tgi_toolkit.models.files.model_config, which reads a GGUF's header, never its weights)."""
    if isinstance(model_config, dict):
        cfg = dict(model_config)
    elif isinstance(model_config, (str, Path)) and _names_a_model(str(model_config),
                                                                   Path(model_config).expanduser()):
        from tgi_toolkit.models.files import ModelNotFoundError
        from tgi_toolkit.models.files import model_config as config_of_model

        try:
            cfg = config_of_model(model_config)
        except ModelNotFoundError as exc:
            raise ValueError(f"model_config: {exc}") from None
    elif isinstance(model_config, (str, Path)):
        path = Path(model_config).expanduser()
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise ValueError(f"model_config: no config.json at {str(path)!r}; pass a config.json path, "
                             "a model directory, a dict or a transformers PretrainedConfig")
        try:
            cfg = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{str(path)!r} is not a readable JSON file: {exc}") from None
        if not isinstance(cfg, dict):
            raise ValueError(f"{str(path)!r} holds a JSON {type(cfg).__name__}, not an object of model settings")
    elif hasattr(model_config, "to_dict"):
        cfg = model_config.to_dict()
    else:
        raise ValueError("model_config must be a dict, a path to config.json or a model directory, or a "
                         f"transformers PretrainedConfig; got {type(model_config).__name__}")
    # Multimodal configs keep the language model's shape under text_config.
    text = cfg.get("text_config")
    if isinstance(text, dict) and _first(cfg, "num_hidden_layers", "n_layer", "num_layers") is None:
        cfg = {**text, "quantization_config": cfg.get("quantization_config"),
               "model_type": text.get("model_type", cfg.get("model_type"))}
    return cfg


@dataclass(frozen=True)
class ModelShape:
    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int | None
    sliding_window: int | None
    gated_mlp: bool
    norm_has_bias: bool
    norms_per_layer: int
    attention_bias: bool
    mlp_bias: bool
    learned_positions: bool
    num_experts: int = 0  # 0 for a dense model
    experts_per_token: int = 0
    expert_intermediate_size: int = 0
    shared_intermediate_size: int = 0  # always-on shared expert(s), summed
    dense_layers: int = 0  # leading layers with a dense MLP in an MoE model (DeepSeek's first_k_dense_replace)
    name: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    quantization_config: dict[str, Any] | None = None
    # config.json as read: TGI's launcher estimates (FLOPs, VRAM) read its raw fields, not the normalised shape.
    config: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_config(cls, model_config: ModelConfigSource) -> ModelShape:
        cfg = load_config(model_config)
        model_type = str(cfg.get("model_type") or "unknown")
        notes: list[str] = []

        def need(*names: str) -> int:
            value = _first(cfg, *names)
            if value is None:
                raise ValueError(f"model_config has no {names[0]!r} (also looked for {', '.join(names[1:]) or '-'}); "
                                 "the planner needs it")
            return positive(names[0], value)

        def positive(name: str, value: Any) -> int:
            # A size of 0 or a string would surface later as a ZeroDivisionError or a TypeError.
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 1:
                raise ValueError(f"model_config {name!r} must be a positive integer, got {value!r}")
            return int(value)

        hidden = need("hidden_size", "n_embd", "d_model", "dim")
        layers = need("num_hidden_layers", "n_layer", "num_layers", "n_layers")
        heads = need("num_attention_heads", "n_head", "num_heads", "n_heads")
        if model_type == "falcon" and cfg.get("new_decoder_architecture"):
            kv_heads = int(_first(cfg, "num_kv_heads", "n_head_kv", default=heads))  # Falcon-40B and later
        elif model_type == "falcon":
            kv_heads = 1 if cfg.get("multi_query", True) else heads
        elif cfg.get("multi_query") is True:  # GPT-BigCode, Falcon-style MQA
            kv_heads = 1
        else:
            kv_heads = positive("num_key_value_heads", _first(cfg, "num_key_value_heads", "num_kv_heads", "n_head_kv",
                                                              "multi_query_group_num", default=heads))
        head_dim = positive("head_dim", _first(cfg, "head_dim", default=0) or hidden // heads)
        gated = model_type in _GATED or (model_type not in _PLAIN and
                                         str(cfg.get("hidden_act", cfg.get("activation_function", "")))
                                         in ("silu", "swish", "swiglu"))
        intermediate = positive("intermediate_size", _first(cfg, "intermediate_size", "ffn_hidden_size", "n_inner",
                                                            "ffn_dim", default=0) or 4 * hidden)
        norm_has_bias = model_type in _PLAIN or ("rms_norm_eps" not in cfg and
                                                 ("layer_norm_epsilon" in cfg or "layer_norm_eps" in cfg))
        norms_per_layer = 2
        if model_type == "falcon" and cfg.get("parallel_attn", True):
            norms_per_layer = int(cfg.get("num_ln_in_parallel_attn") or 2) if cfg.get("new_decoder_architecture") else 1
        bias = bool(cfg.get("bias", False)) if model_type == "falcon" else None
        attention_bias = bool(_first(cfg, "attention_bias", "qkv_bias", default=bias if bias is not None
                                     else model_type in ("qwen2", "qwen2_moe", "gpt2", "gpt_bigcode",
                                                         "gpt_neox", "opt", "bloom", "starcoder2")))
        mlp_bias = bool(_first(cfg, "mlp_bias", default=bias if bias is not None
                               else model_type in ("gpt2", "gpt_bigcode", "gpt_neox", "opt", "bloom", "starcoder2")))

        window = cfg.get("sliding_window")
        if window is not None and cfg.get("use_sliding_window") is False:
            window = None
        if window is not None and cfg.get("layer_types") and any(t != "sliding_attention"
                                                                 for t in cfg["layer_types"]):
            notes.append("some layers use full attention; the sliding window is not applied to the KV estimate")
            window = None

        experts = int(_first(cfg, "num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts",
                             default=0) or 0)
        per_token = int(_first(cfg, "num_experts_per_tok", "moe_top_k", "top_k", default=0) or 0) if experts else 0
        expert_size = int(_first(cfg, "moe_intermediate_size", default=intermediate)) if experts else 0
        shared = 0
        if experts:
            if cfg.get("shared_expert_intermediate_size"):
                shared = int(cfg["shared_expert_intermediate_size"])
            elif cfg.get("n_shared_experts"):
                shared = int(cfg["n_shared_experts"]) * expert_size
        if cfg.get("kv_lora_rank"):
            notes.append("multi-head latent attention (kv_lora_rank) is costed as full K/V heads; "
                         "servers that cache the compressed latent need less")
        return cls(
            model_type=model_type, hidden_size=hidden, num_layers=layers, num_heads=heads,
            num_kv_heads=kv_heads, head_dim=head_dim, intermediate_size=intermediate,
            vocab_size=need("vocab_size", "padded_vocab_size", "n_vocab"),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", True)),
            max_position_embeddings=_first(cfg, "max_position_embeddings", "n_positions", "max_seq_len",
                                           "seq_length", "max_sequence_length",
                                           default=_DEFAULT_MAX_POSITIONS.get(model_type)),
            sliding_window=int(window) if window else None,
            gated_mlp=gated, norm_has_bias=norm_has_bias, norms_per_layer=norms_per_layer,
            attention_bias=attention_bias, mlp_bias=mlp_bias,
            learned_positions=model_type in _LEARNED_POSITIONS,
            num_experts=experts, experts_per_token=per_token, expert_intermediate_size=expert_size,
            shared_intermediate_size=shared,
            dense_layers=int(cfg.get("first_k_dense_replace") or 0) if experts else 0,
            name=str(_first(cfg, "_name_or_path", "name_or_path", default="") or ""),
            notes=tuple(notes), quantization_config=cfg.get("quantization_config") or None, config=cfg,
        )

    # -- sizes ---------------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def _mlp(self, inner: int) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden_size * inner

    def parameter_breakdown(self) -> dict[str, int]:
        """Parameters by part; `attention` and `mlp` hold the linear weights that quantization packs."""
        h, n = self.hidden_size, self.num_layers
        attention = n * (h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h)
        attention_bias = n * (self.q_dim + 2 * self.kv_dim + h) if self.attention_bias else 0
        moe_layers = n - self.dense_layers if self.num_experts else 0
        dense_layers = n - moe_layers
        mlp = dense_layers * self._mlp(self.intermediate_size)
        mlp += moe_layers * (self.num_experts * self._mlp(self.expert_intermediate_size)
                             + self._mlp(self.shared_intermediate_size))
        mlp_bias = 0
        if self.mlp_bias:
            per = (2 if self.gated_mlp else 1) * self.intermediate_size + h
            mlp_bias = dense_layers * per
        router = moe_layers * h * self.num_experts
        norm = h * (2 if self.norm_has_bias else 1)
        out = {
            "embeddings": self.vocab_size * h,
            "position_embeddings": (self.max_position_embeddings or 0) * h if self.learned_positions else 0,
            "attention": attention,
            "attention_bias": attention_bias,
            "mlp": mlp,
            "mlp_bias": mlp_bias,
            "router": router,
            "norms": n * self.norms_per_layer * norm + norm,
            "lm_head": 0 if self.tie_word_embeddings else self.vocab_size * h,
        }
        return out

    def parameters(self) -> int:
        return sum(self.parameter_breakdown().values())

    def active_parameters(self) -> int:
        """Parameters one token passes through (differs from `parameters()` for mixtures of experts)."""
        total = self.parameters()
        if not self.num_experts:
            return total
        moe_layers = self.num_layers - self.dense_layers
        idle = self.num_experts - self.experts_per_token
        return total - moe_layers * idle * self._mlp(self.expert_intermediate_size)

    def describe(self) -> str:
        attn = ("multi-head" if self.num_kv_heads == self.num_heads
                else "multi-query" if self.num_kv_heads == 1 else "grouped-query")
        parts = [f"{self.model_type}: {self.num_layers} layers, hidden {self.hidden_size}, "
                 f"{self.num_heads} heads / {self.num_kv_heads} KV heads ({attn}), head dim {self.head_dim}, "
                 f"{'gated ' if self.gated_mlp else ''}MLP {self.intermediate_size}, vocab {self.vocab_size}"]
        if self.num_experts:
            parts.append(f"{self.num_experts} experts ({self.experts_per_token} per token)")
        if self.sliding_window:
            parts.append(f"sliding window {self.sliding_window}")
        if self.tie_word_embeddings:
            parts.append("tied embeddings")
        return ", ".join(parts)

"""Configuration of NanoGPT, a causal language model in the style of Karpathy's nanoGPT.

The field names are nanoGPT's (`block_size`, `n_layer`, `n_head`, `n_embd`, `dropout`, `bias`); `attribute_map`
exposes them under the names the rest of transformers reads (`hidden_size`, `num_hidden_layers`, ...).
"""

from typing import ClassVar

from transformers import PreTrainedConfig
from transformers.activations import ACT2FN
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

NORM_TYPES = ("layernorm", "rmsnorm")
MLP_TYPES = ("gelu", "swiglu")
POSITION_EMBEDDING_TYPES = ("learned", "rope")
# RoPE types: "default" (plain RoPE) and every scaling type transformers implements.
ROPE_TYPES = ("default", *ROPE_INIT_FUNCTIONS)
# SwiGLU hidden sizes are rounded up to a multiple of this (LLaMA uses 256, too coarse for small models).
SWIGLU_MULTIPLE_OF = 64


def swiglu_hidden_size(n_embd: int) -> int:
    """The LLaMA rule: 2/3 of the usual 4·n_embd, so that three matrices hold as many weights as two would,
    rounded up to a multiple of 64 for efficient matmuls (n_embd=128 → 384, 768 → 2048, 4096 → 10944)."""
    hidden = int(2 * 4 * n_embd / 3)
    return SWIGLU_MULTIPLE_OF * ((hidden + SWIGLU_MULTIPLE_OF - 1) // SWIGLU_MULTIPLE_OF)


class NanoGPTConfig(PreTrainedConfig):
    r"""Configuration of a [`NanoGPTModel`] / [`NanoGPTForCausalLM`].

    The defaults build nanoGPT's GPT-2 (124M) layout: LayerNorm, a GELU MLP and learned absolute positions.
    `norm_type="rmsnorm", mlp_type="swiglu", position_embedding_type="rope"` gives the LLaMA-style variant.

    Args:
        vocab_size (`int`, defaults to 50304):
            Number of tokens in the vocabulary (nanoGPT pads GPT-2's 50257 up to a multiple of 64).
        block_size (`int`, defaults to 1024):
            Longest sequence one forward pass may see (`max_position_embeddings`). With learned positions a longer
            input raises `ValueError`; `generate()` still continues past it by conditioning on the last
            `block_size` tokens, like nanoGPT's `generate`. With RoPE it is the context the model was trained on
            and the reference length for `rope_parameters` scaling. Plain RoPE (`rope_type` "default") never lets
            a token attend further back than `block_size` tokens, itself included: longer inputs and generation
            past `block_size` use a sliding window of that width (see [`NanoGPTConfig.sliding_window`]).
        n_layer (`int`, defaults to 12):
            Number of Transformer blocks (`num_hidden_layers`).
        n_head (`int`, defaults to 12):
            Number of attention heads (`num_attention_heads`); must divide `n_embd`.
        n_embd (`int`, defaults to 768):
            Width of the residual stream (`hidden_size`).
        dropout (`float`, defaults to 0.0):
            Dropout probability used on the embeddings, the attention weights and both residual branches.
        bias (`bool`, defaults to `True`):
            Whether the Linear layers and LayerNorms have a bias (the tied output head never has one).
        norm_type (`str`, defaults to `"layernorm"`):
            `"layernorm"` (GPT-2) or `"rmsnorm"` (LLaMA). Both are applied before each sub-layer (pre-norm).
        layer_norm_epsilon (`float`, defaults to 1e-5):
            Epsilon of either norm.
        mlp_type (`str`, defaults to `"gelu"`):
            `"gelu"`: Linear(n_embd, 4·n_embd) → `activation_function` → Linear back (GPT-2).
            `"swiglu"`: (SiLU(x·W_gate) ⊙ x·W_up)·W_down (LLaMA), with the hidden size of [`swiglu_hidden_size`].
        intermediate_size (`int`, *optional*):
            Hidden size of the MLP. Left `None` it is derived: 4·n_embd for `"gelu"`; for `"swiglu"` 2/3·4·n_embd
            rounded up to a multiple of 64 (384 for n_embd=128, 2048 for n_embd=768).
        activation_function (`str`, defaults to `"gelu"`):
            Activation of the `"gelu"` MLP, any key of `transformers.activations.ACT2FN`. The default is the exact
            erf GELU of nanoGPT; GPT-2 checkpoints use `"gelu_new"` (tanh approximation). SwiGLU always gates
            with SiLU.
        position_embedding_type (`str`, defaults to `"learned"`):
            `"learned"`: a `block_size × n_embd` table added to the token embeddings (GPT-2).
            `"rope"`: rotary embeddings applied to queries and keys in every layer (LLaMA).
        rope_theta (`float`, defaults to 10000.0):
            Base period of the RoPE frequencies. Also stored as `rope_parameters["rope_theta"]`, where
            transformers looks for it.
        rope_parameters (`dict`, *optional*):
            transformers' RoPE dictionary (the old name `rope_scaling` is accepted too), only with
            `position_embedding_type="rope"`: a config with learned positions has no `rope_parameters` attribute at
            all, since it has nothing to scale. `{"rope_type": "default"}` (the default) is plain RoPE. Every RoPE
            type of `transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS` works and is computed by transformers'
            own functions: `"linear"`, `"dynamic"`, `"yarn"`, `"longrope"`, `"llama3"`, ... (see
            `transformers.modeling_rope_utils.RopeParameters` for their keys; scaling is relative to `block_size`).
            `{"rope_type": "dynamic", "factor": f}` is NTK-aware scaling for contexts longer than `block_size`: when
            a sequence of length L > block_size is seen, the base becomes
            `rope_theta · (f·L/block_size − (f − 1)) ** (d / (d − 2))` (d = head size), which stretches the slow
            frequencies and leaves the fast ones almost unchanged; positions inside `block_size` are untouched.
            Scaled RoPE types exist to use more context than `block_size`, so they attend to the whole sequence
            and keep the whole KV cache (no sliding window). As in transformers' own models, keys already in a KV
            cache keep the rotation they were computed with, so beyond `block_size` cached and uncached generation
            with "dynamic" may differ slightly.
        sliding_window (`int`, *optional*):
            Attend to at most this many most recent tokens (itself included). Left unset it is `block_size` for
            plain RoPE and `None` (no window) otherwise; see [`NanoGPTConfig.sliding_window`].
        initializer_range (`float`, defaults to 0.02):
            Standard deviation of the normal init of all Linear and Embedding weights. The projections that write
            into the residual stream (`c_proj`) use `initializer_range / sqrt(2·n_layer)`, as in GPT-2.
        tie_word_embeddings (`bool`, defaults to `True`):
            Share the token embedding with the output head (stored once in `model.safetensors`).
        use_cache (`bool`, defaults to `True`):
            Whether the model returns its key/value cache, which `generate()` uses.
        bos_token_id, eos_token_id, pad_token_id (`int`, *optional*):
            Special token ids, copied into the default generation config.

    Example:

    ```python
    >>> from nanoformer.modeling import NanoGPTConfig, NanoGPTForCausalLM
    >>> config = NanoGPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128,
    ...                        norm_type="rmsnorm", mlp_type="swiglu", position_embedding_type="rope")
    >>> model = NanoGPTForCausalLM(config)
    ```
    """

    model_type = "nanogpt"
    attribute_map = {
        "hidden_size": "n_embd",
        "num_hidden_layers": "n_layer",
        "num_attention_heads": "n_head",
        "max_position_embeddings": "block_size",
    }

    vocab_size: int = 50304
    block_size: int = 1024
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True
    norm_type: str = "layernorm"
    layer_norm_epsilon: float = 1e-5
    mlp_type: str = "gelu"
    intermediate_size: int | None = None
    activation_function: str = "gelu"
    position_embedding_type: str = "learned"
    rope_theta: float = 10000.0
    # `rope_parameters` and `sliding_window` are not fields: see `__post_init__` and the `sliding_window` property.
    # They are still constructor arguments, which tools that validate config keys (e.g. --config_overrides) accept.
    init_only_keys: ClassVar[tuple[str, ...]] = ("rope_parameters", "sliding_window")
    initializer_range: float = 0.02
    tie_word_embeddings: bool = True
    use_cache: bool = True
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None

    def __post_init__(self, **kwargs):
        if self.intermediate_size is None and isinstance(self.n_embd, int):
            self.intermediate_size = swiglu_hidden_size(self.n_embd) if self.mlp_type == "swiglu" else 4 * self.n_embd
        # Only a RoPE model gets a `rope_parameters` attribute: transformers (and its common tests) read its mere
        # presence as "this model supports RoPE scaling". The base class then moves `rope_theta` into it.
        rope_parameters = kwargs.pop("rope_parameters", None) or kwargs.pop("rope_scaling", None)
        if self.position_embedding_type == "rope":
            self.rope_parameters = dict(rope_parameters or {"rope_type": "default"})
        elif (rope_parameters or {}).get("rope_type", "default") != "default":
            raise ValueError(
                f"`rope_parameters` with rope_type {rope_parameters['rope_type']!r} needs "
                f"`position_embedding_type='rope'`, got {self.position_embedding_type!r}."
            )
        super().__post_init__(**kwargs)
        self.validate_architecture()

    @property
    def sliding_window(self) -> int | None:
        """Width of the attention window, read by transformers' masks and `DynamicCache`. Unless set
        (`config.sliding_window = w`, or `NanoGPTConfig(sliding_window=w)`; `None` turns it off), it is
        `block_size` for plain RoPE and `None` (no window) otherwise.

        A RoPE model trained on `block_size` tokens has never seen a query and a key further apart than
        `block_size - 1`, and produces garbage when asked to. Because RoPE only encodes relative positions, a
        window of the last `block_size` tokens (as in Mistral) keeps it inside what it was trained on, and the
        cached keys/values of those tokens stay valid: the cache holds the newest `block_size - 1` of them and
        generation goes on indefinitely. Sequences up to `block_size` are unaffected (plain causal attention).
        Learned positions cannot go past `block_size` at all, and scaled RoPE types exist to use the full,
        longer context, so neither has a window by default.
        """
        if "sliding_window" in self.__dict__:  # set explicitly (and then saved in config.json)
            return self.__dict__["sliding_window"]
        rope_type = (getattr(self, "rope_parameters", None) or {}).get("rope_type", "default")
        if self.position_embedding_type == "rope" and rope_type == "default":
            return self.block_size
        return None

    @sliding_window.setter
    def sliding_window(self, value: int | None) -> None:
        self.__dict__["sliding_window"] = value

    def validate_architecture(self) -> None:
        """Raise `ValueError` naming the field when a value cannot build a model."""
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "intermediate_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
        if self.n_embd % self.n_head != 0:
            raise ValueError(
                f"`n_embd` ({self.n_embd}) must be divisible by `n_head` ({self.n_head}): each head gets n_embd/n_head."
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1), got {self.dropout!r}.")
        for name, allowed in (
            ("norm_type", NORM_TYPES),
            ("mlp_type", MLP_TYPES),
            ("position_embedding_type", POSITION_EMBEDDING_TYPES),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"`{name}` must be one of {allowed}, got {getattr(self, name)!r}.")
        if self.activation_function not in ACT2FN:
            raise ValueError(
                f"`activation_function` must be a key of transformers.activations.ACT2FN (e.g. 'gelu', 'gelu_new', "
                f"'relu'), got {self.activation_function!r}."
            )
        for name in ("layer_norm_epsilon", "initializer_range", "rope_theta"):
            if not getattr(self, name) > 0:
                raise ValueError(f"`{name}` must be positive, got {getattr(self, name)!r}.")
        self._validate_rope()

    def _validate_rope(self) -> None:
        if self.sliding_window is not None and (
            isinstance(self.sliding_window, bool) or not isinstance(self.sliding_window, int) or self.sliding_window < 1
        ):
            raise ValueError(f"`sliding_window` must be a positive integer or None, got {self.sliding_window!r}.")
        if self.position_embedding_type != "rope":
            return
        params = self.rope_parameters
        rope_type = params.get("rope_type", "default")
        if rope_type not in ROPE_TYPES:
            raise ValueError(f"`rope_parameters['rope_type']` must be one of {ROPE_TYPES}, got {rope_type!r}.")
        if params.get("rope_theta", self.rope_theta) != self.rope_theta:
            raise ValueError(
                f"`rope_theta` ({self.rope_theta}) and `rope_parameters['rope_theta']` ({params['rope_theta']}) "
                "disagree; set only one of them."
            )
        if "factor" in params or rope_type in ("linear", "dynamic", "yarn"):
            factor = params.get("factor")
            if isinstance(factor, bool) or not isinstance(factor, int | float) or factor < 1.0:
                raise ValueError(
                    f"`rope_parameters['factor']` must be a number >= 1 for {rope_type!r}, got {factor!r}."
                )
        if (self.n_embd // self.n_head) % 2 != 0:
            raise ValueError(
                f"RoPE rotates pairs of dimensions, so the head size n_embd/n_head ({self.n_embd}/{self.n_head}) "
                "must be even."
            )
        self.validate_rope()  # transformers' own per-type checks of the remaining keys


__all__ = ["NanoGPTConfig"]

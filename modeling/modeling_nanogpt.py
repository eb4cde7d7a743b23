"""NanoGPT: a GPT-2 style decoder-only Transformer written like Karpathy's nanoGPT `model.py`, native to transformers.

Read top to bottom: rotary embeddings → attention → MLPs → block → model → language-model head.
One config switches between the GPT-2 layout (LayerNorm, GELU MLP, learned positions) and the LLaMA layout
(RMSNorm, SwiGLU, RoPE). Everything transformers needs (KV cache, padding masks, `generate()`, Auto classes,
`save_pretrained` with remote code) goes through its own machinery rather than re-implementations.
"""

import inspect
import math

import torch
from torch import nn
from torch.nn import functional as F
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache
from transformers.generation import GenerationMixin
from transformers.generation.stopping_criteria import MaxLengthCriteria, StoppingCriteriaList
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS, dynamic_rope_update
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, PreTrainedModel
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.generic import can_return_tuple
from transformers.utils.output_capturing import capture_outputs

from .configuration_nanogpt import NanoGPTConfig
from .layers import KnownSignaturesGenerationMixin, eager_attention_forward


def make_norm(config: NanoGPTConfig) -> nn.Module:
    """The pre-norm used before attention, before the MLP and at the end of the stack."""
    if config.norm_type == "rmsnorm":
        return nn.RMSNorm(config.n_embd, eps=config.layer_norm_epsilon)
    return nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon, bias=config.bias)


def positions_from_mask(attention_mask: torch.Tensor, query_length: int) -> torch.Tensor:
    """Position ids of the last `query_length` tokens, counted from each row's first real token (left padding)."""
    positions = attention_mask.long().cumsum(-1) - 1
    return positions.clamp(min=0)[:, -query_length:]


class NanoGPTRotaryEmbedding(nn.Module):
    """cos/sin tables of RoPE for the given positions, as in transformers' LLaMA.

    The frequencies of every RoPE type come from transformers' own functions (`ROPE_INIT_FUNCTIONS`: "linear",
    "dynamic", "yarn", "longrope", "llama3", ...); `dynamic_rope_update` recomputes them for the types that depend
    on the sequence length. `inv_freq` is a non-persistent buffer, refilled by `_init_weights` after meta-device
    loading.
    """

    def __init__(self, config: NanoGPTConfig):
        super().__init__()
        self.config = config
        self.max_seq_len_cached = self.original_max_seq_len = config.block_size
        self.rope_type = config.rope_parameters.get("rope_type", "default")
        if self.rope_type != "default" and self.rope_type not in ROPE_INIT_FUNCTIONS:
            raise ValueError(
                f"Unknown rope_type {self.rope_type!r}: use 'default' or one of {sorted(ROPE_INIT_FUNCTIONS)}."
            )
        rope_init_fn = ROPE_INIT_FUNCTIONS.get(self.rope_type, self.compute_default_rope_parameters)
        inv_freq, self.attention_scaling = rope_init_fn(config)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("original_inv_freq", inv_freq.clone(), persistent=False)

    @staticmethod
    def compute_default_rope_parameters(config: NanoGPTConfig, device=None, **kwargs) -> tuple[torch.Tensor, float]:
        """Plain RoPE: inv_freq[i] = rope_theta^(-2i/d) for the d = head size dimensions, no output scaling."""
        head_dim = config.n_embd // config.n_head
        exponents = torch.arange(0, head_dim, 2, device=device, dtype=torch.float) / head_dim
        return 1.0 / (config.rope_parameters["rope_theta"] ** exponents), 1.0

    @dynamic_rope_update  # "dynamic" / "longrope": frequencies depend on the sequence length
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.to(x.device)  # (B, T, head_dim/2)
        angles = torch.cat((freqs, freqs), dim=-1)  # LLaMA's "rotate half" layout
        cos, sin = angles.cos() * self.attention_scaling, angles.sin() * self.attention_scaling
        return cos.to(x.dtype), sin.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair of dimensions of x (B, heads, T, D) by its position's angle."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # broadcast over heads
    return x * cos + rotate_half(x) * sin


class NanoGPTAttention(nn.Module):
    """Causal multi-head self-attention, with one fused Linear for q, k and v like nanoGPT's `c_attn`."""

    def __init__(self, config: NanoGPTConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx  # which slot of the KV cache this layer owns
        self.n_head = config.n_head
        self.head_dim = config.n_embd // config.n_head
        self.scaling = self.head_dim**-0.5
        self.is_causal = True  # read by the SDPA kernel when no mask is needed
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.c_proj.is_residual_projection = True  # GPT-2 init scales it down, see `_init_weights`
        self.attention_dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        cache: Cache | None = None,
        only_last_query: bool = False,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, T, C = hidden_states.shape
        # (B, T, 3·C) → three (B, heads, T, head_dim) tensors
        q, k, v = self.c_attn(hidden_states).view(B, T, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        if position_embeddings is not None:  # RoPE
            cos, sin = position_embeddings
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if cache is not None:  # append this step's keys/values and attend over the cached history
            k, v = cache.update(k, v, self.layer_idx)
        if only_last_query:  # every position keeps its keys/values (and its cache entry); only the last one asks
            q = q[:, :, -1:]
            if isinstance(attention_mask, torch.Tensor):
                attention_mask = attention_mask[..., -1:, :]

        # "sdpa" by default, "eager" as the readable fallback. Spelled out here because transformers only lets
        # `set_attn_implementation` switch models whose file contains this call.
        attention = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)
        y, weights = attention(
            self,
            q,
            k,
            v,
            attention_mask,
            scaling=self.scaling,
            dropout=self.attention_dropout if self.training else 0.0,
            **kwargs,
        )
        y = y.reshape(B, -1, C)  # re-assemble all head outputs side by side
        return self.resid_dropout(self.c_proj(y)), weights


class NanoGPTMLP(nn.Module):
    """GPT-2's MLP: Linear(C, 4C) → GELU → Linear(4C, C)."""

    def __init__(self, config: NanoGPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, config.intermediate_size, bias=config.bias)
        self.act = ACT2FN[config.activation_function]
        self.c_proj = nn.Linear(config.intermediate_size, config.n_embd, bias=config.bias)
        self.c_proj.is_residual_projection = True
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class NanoGPTSwiGLUMLP(nn.Module):
    """LLaMA's MLP: (SiLU(x·W_gate) ⊙ x·W_up)·W_down. W_gate and W_up share one Linear (one matmul, not two)."""

    def __init__(self, config: NanoGPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 2 * config.intermediate_size, bias=config.bias)  # [gate; up]
        self.c_proj = nn.Linear(config.intermediate_size, config.n_embd, bias=config.bias)
        self.c_proj.is_residual_projection = True
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.c_fc(x).chunk(2, dim=-1)
        return self.dropout(self.c_proj(F.silu(gate) * up))


class NanoGPTBlock(GradientCheckpointingLayer):
    """Pre-norm Transformer block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: NanoGPTConfig, layer_idx: int):
        super().__init__()
        self.ln_1 = make_norm(config)
        self.attn = NanoGPTAttention(config, layer_idx)
        self.ln_2 = make_norm(config)
        self.mlp = NanoGPTSwiGLUMLP(config) if config.mlp_type == "swiglu" else NanoGPTMLP(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        cache: Cache | None = None,
        only_last_query: bool = False,
        **kwargs,
    ) -> torch.Tensor:
        attn_output, _ = self.attn(
            self.ln_1(hidden_states), attention_mask, position_embeddings, cache, only_last_query, **kwargs
        )
        if only_last_query:  # the block now answers for the last position only
            hidden_states = hidden_states[:, -1:]
        hidden_states = hidden_states + attn_output
        return hidden_states + self.mlp(self.ln_2(hidden_states))


class NanoGPTPreTrainedModel(PreTrainedModel):
    """Weight init, attention backends and checkpointing shared by [`NanoGPTModel`] and [`NanoGPTForCausalLM`]."""

    config: NanoGPTConfig
    config_class = NanoGPTConfig
    base_model_prefix = "transformer"
    supports_gradient_checkpointing = True
    _no_split_modules = ["NanoGPTBlock"]
    _supports_sdpa = True
    _can_record_outputs = {"hidden_states": NanoGPTBlock, "attentions": NanoGPTAttention}

    def _init_weights(self, module: nn.Module) -> None:
        # Decided per nn.Linear, because transformers only calls this on modules that own parameters.
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            if getattr(module, "is_residual_projection", False):
                # GPT-2: each block adds two branches to the residual stream; keep its variance from growing with depth
                std = std / math.sqrt(2 * self.config.n_layer)
            init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
            init.ones_(module.weight)
            if getattr(module, "bias", None) is not None:
                init.zeros_(module.bias)
        elif isinstance(module, NanoGPTRotaryEmbedding):
            super()._init_weights(module)  # transformers' RoPE init fills `inv_freq` and `original_inv_freq`


class NanoGPTModel(NanoGPTPreTrainedModel):
    """The Transformer without its output head: embeddings → `n_layer` blocks → final norm."""

    def __init__(self, config: NanoGPTConfig):
        super().__init__(config)
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        if config.position_embedding_type == "learned":
            if (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default") != "default":
                raise ValueError("`rope_parameters` needs `position_embedding_type='rope'`; learned positions ignore it.")
            self.wpe = nn.Embedding(config.block_size, config.n_embd)
        else:
            self.rotary_emb = NanoGPTRotaryEmbedding(config)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList(NanoGPTBlock(config, layer_idx) for layer_idx in range(config.n_layer))
        self.ln_f = make_norm(config)
        self.gradient_checkpointing = False
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.wte

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.wte = value

    @capture_outputs
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")  # the transformers 4.x name
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        last_position_only: bool = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPast:
        """`attention_mask` (B, past+T) marks real tokens with 1 and padding with 0; `position_ids` default to
        positions counted from the mask (left padding) or to past..past+T-1; `cache` is a transformers `Cache`.
        With plain RoPE, each token attends to at most the last `block_size` tokens (`config.sliding_window`).
        `last_position_only=True` returns the hidden state of the last position only (B, 1, n_embd), all that
        next-token logits need: see the loop below."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of `input_ids` or `inputs_embeds`.")
        if inputs_embeds is None:
            inputs_embeds = self.wte(input_ids)
        if use_cache is None:
            # A cache only helps the next decoding step; training would just pay for building it.
            use_cache = self.config.use_cache and not self.training
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)

        past_length = cache.get_seq_length() if cache is not None else 0
        T = inputs_embeds.shape[1]
        if self.config.position_embedding_type == "learned" and past_length + T > self.config.block_size:
            raise ValueError(
                f"Cannot forward a sequence of length {past_length + T}: block_size is {self.config.block_size} and "
                "the learned position embeddings end there. Keep the last block_size tokens "
                "(generate() does this itself), or use position_embedding_type='rope'."
            )
        # Only the caller's position ids can mark packed sequences: the mask builder scans those alone.
        given_position_ids = position_ids
        if position_ids is None:
            if attention_mask is not None and attention_mask.dim() == 2:
                position_ids = positions_from_mask(attention_mask, T)
            else:
                position_ids = torch.arange(past_length, past_length + T, device=inputs_embeds.device).unsqueeze(0)

        # None when plain causal attention is exact (SDPA then uses is_causal), otherwise a padding-aware mask.
        # Past `sliding_window` tokens (plain RoPE only) the mask is a band of that width; transformers' sliding
        # mask sizes it against the cache, which then only keeps the newest sliding_window - 1 keys/values. Up to
        # there the band equals the causal mask, whose builder can leave the work to SDPA's fast is_causal path.
        window = self.config.sliding_window
        make_mask = create_causal_mask
        if window is not None and past_length + T > window:
            make_mask = create_sliding_window_causal_mask
        mask = make_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            cache=cache,
            position_ids=given_position_ids,
        )

        position_embeddings = None
        if self.config.position_embedding_type == "learned":
            hidden_states = inputs_embeds + self.wpe(position_ids)
        else:
            hidden_states = inputs_embeds
            position_embeddings = self.rotary_emb(hidden_states, position_ids)
        hidden_states = self.drop(hidden_states)
        # Only the last position's output is wanted (generation): the final block still writes every position's
        # keys/values (a complete cache) but runs attention output, MLP and residual for that one row, about 3/4
        # of its work. (A single query needs no causal mask: it may see every key.)
        trim_last_block = last_position_only and (mask is None or isinstance(mask, torch.Tensor))
        for block in self.h:
            hidden_states = block(
                hidden_states,
                attention_mask=mask,
                position_embeddings=position_embeddings,
                cache=cache,
                only_last_query=trim_last_block and block is self.h[-1],
                **kwargs,
            )
        hidden_states = self.ln_f(hidden_states)
        return BaseModelOutputWithPast(last_hidden_state=hidden_states, cache=cache if use_cache else None)


class NanoGPTForCausalLM(NanoGPTPreTrainedModel, KnownSignaturesGenerationMixin, GenerationMixin):
    """NanoGPT with a language-modelling head tied to the token embedding; use it like `GPT2LMHeadModel`."""

    _tied_weights_keys = {"lm_head.weight": "transformer.wte.weight"}

    def __init__(self, config: NanoGPTConfig):
        super().__init__(config)
        self.transformer = NanoGPTModel(config)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.transformer.wte

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.transformer.wte = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    @can_return_tuple
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Unpack[TransformersKwargs],
    ) -> CausalLMOutputWithPast:
        """`labels` are the input ids themselves (shifted inside, -100 ignored); `logits_to_keep=n` computes
        logits for the last n positions only (0: all)."""
        # generate() keeps the last position's logits only; unless per-layer outputs are recorded (they would come
        # back one row short), the model can then skip most of the last block for the other positions.
        recording = kwargs.get("output_hidden_states", self.config.output_hidden_states) or kwargs.get(
            "output_attentions", self.config.output_attentions
        )
        outputs = self.transformer(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            last_position_only=isinstance(logits_to_keep, int) and logits_to_keep == 1 and not recording,
            return_dict=True,  # tuples (`return_dict=False`) are made once, by `can_return_tuple` on this forward
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(hidden_states[:, keep, :])

        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            cache=outputs.cache,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )

    def _get_stopping_criteria(self, generation_config, stopping_criteria, *args, **kwargs) -> StoppingCriteriaList:
        """transformers' stopping criteria, minus the "exceeded the model's predefined maximum length" reminder.

        `MaxLengthCriteria` logs that reminder once a sequence is longer than `config.max_position_embeddings`
        (here `block_size`, which RoPE scaling also reads as the trained context, so it stays mapped). Going past
        `block_size` is this model's documented behaviour (see `prepare_inputs_for_generation`), not a mistake to
        warn about; the length limit itself (`max_length` / `max_new_tokens`) is untouched.
        """
        criteria = super()._get_stopping_criteria(generation_config, stopping_criteria, *args, **kwargs)
        for criterion in criteria:
            if isinstance(criterion, MaxLengthCriteria):
                criterion.max_position_embeddings = None  # the reminder's only trigger
        return criteria

    def prepare_inputs_for_generation(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ) -> dict:
        """transformers' default, plus nanoGPT's rule for going past `block_size`: condition on the last
        `block_size` tokens.

        - Learned positions: nanoGPT's `generate` feeds `idx[:, -block_size:]` to the model at every step. Learned
          positions stop at `block_size - 1`, so once the sequence is longer, the cached keys/values (computed at
          other positions and with a longer context) no longer fit: the cache is emptied and the last `block_size`
          tokens are encoded again, without a cache, at positions 0..block_size-1, exactly like nanoGPT (with the
          last block computed for the last position only, see `NanoGPTModel.forward`).
        - Plain RoPE (`rope_type` "default"): nothing to do here. The model attends through a sliding window of
          `block_size` tokens (`config.sliding_window`), so `DynamicCache` keeps only the newest `block_size - 1`
          keys/values and positions keep counting up (RoPE only sees their differences). Unlike nanoGPT's
          re-encoding, a cached token keeps the keys/values it got from its own window, so after `n_layer` layers
          information can still flow from further back, as in Mistral; cached and uncached generation agree
          because a long forward applies the same window.
        - "dynamic" RoPE scaling: made to use more context than `block_size`, so the whole cache is kept.
        """
        if self.config.position_embedding_type == "learned" and input_ids.shape[1] > self.config.block_size:
            return self._window_inputs(input_ids, attention_mask, kwargs)
        return super().prepare_inputs_for_generation(
            input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
        )

    def _window_inputs(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None, kwargs: dict) -> dict:
        """nanoGPT's crop for learned positions: the last `block_size` tokens, encoded again without a cache."""
        # Every position moves, so nothing cached can be reused: generate()'s cache object is emptied once and
        # stays empty (beam search may still reorder it; empty, that costs nothing).
        cache = kwargs.get("cache")
        if cache is not None and cache.get_seq_length() > 0:
            cache.reset()
        block_size = self.config.block_size
        model_inputs = {"input_ids": input_ids[:, -block_size:]}
        window_mask = attention_mask[:, -block_size:] if attention_mask is not None else None
        if window_mask is not None and not bool(window_mask.all()):  # left padding still inside the window
            model_inputs["attention_mask"] = window_mask
            model_inputs["position_ids"] = positions_from_mask(window_mask, block_size)
        # Without padding the model's defaults apply: positions 0..block_size-1, plain causal attention. The other
        # arguments (logits_to_keep, output_attentions, ...) pass through, as transformers' own
        # prepare_inputs_for_generation forwards them; its input slicing and mask building are not needed here.
        internal = ("cache", "position_ids", "use_cache", "next_sequence_length", "is_first_iteration", "labels")
        model_inputs.update((key, value) for key, value in kwargs.items() if key not in internal)
        model_inputs["use_cache"] = False
        return model_inputs


# Folders written by save_pretrained get an `auto_map` and a copy of this code (plus configuration_nanogpt.py and
# layers.py, found through the single-dot imports), so they load with trust_remote_code=True without nanoformer.
NanoGPTConfig.register_for_auto_class()
NanoGPTModel.register_for_auto_class("AutoModel")
NanoGPTForCausalLM.register_for_auto_class("AutoModelForCausalLM")
# Registered classes count as remote code, for which generate() inspects `forward`'s signature at every step (a
# check for the removed `cache_position` argument); computed once here, that lookup costs nothing.
NanoGPTForCausalLM.forward.__signature__ = inspect.signature(NanoGPTForCausalLM.forward)

__all__ = ["NanoGPTForCausalLM", "NanoGPTModel", "NanoGPTPreTrainedModel"]

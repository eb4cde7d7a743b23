"""The "Attention Is All You Need" encoder–decoder (Vaswani et al., 2017) as a transformers 5 model.

Reading order follows the paper: sinusoidal positions (§3.5) → multi-head attention (§3.2) → position-wise
feed-forward (§3.3) → encoder and decoder layers (§3.1) → the shared init/plumbing (`TranslatorPreTrainedModel`) →
the stacks with the shared, √d_model-scaled embedding (§3.4) → the model with its output projection tied to that embedding, and the paper's decoding defaults (§6.1).

transformers plumbing kept visible rather than hidden:
- attention runs through transformers' `ALL_ATTENTION_FUNCTIONS` (SDPA by default, eager as fallback);
- masks come from `transformers.masking_utils` (bidirectional for encoder and cross attention, causal for the
  decoder), so padding, cached decoding and both attention kernels are handled by the library's tested code;
- `generate()` drives the decoder with an `EncoderDecoderCache`; cross-attention keys/values are computed once;
- `output_hidden_states` / `output_attentions` are recorded by transformers' `capture_outputs` hooks, and
  `return_dict=False` gives tuples (`can_return_tuple`), exactly as in MarianMT.
"""

import math

import torch
from torch import nn
from transformers import GenerationConfig, GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.generic import can_return_tuple
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_translator import TranslatorConfig
from .layers import KnownSignaturesGenerationMixin, eager_attention_forward

# Imported so that `save_pretrained` copies the pipeline file next to this one (it follows single-dot imports);
# `config.custom_pipelines` points `pipeline("translation", ...)` at it.
from .pipeline_translator import TranslatorPipeline

# Paper §6.1: "maximum output length = input length + 50". Used when a `generate()` call sets no length.
EXTRA_TARGET_TOKENS = 50


# The translator's length rule, in one place: `generate()`, the training-time evaluation and `score_mt` all use
# these two functions (nanoformer.training imports them from here; remote code gets them with this file).
def decoding_budget(source_length: int, max_positions: int | None) -> int:
    """`max_new_tokens` for a source of `source_length` tokens: source length + 50 (§6.1), capped so that the whole
    decoder sequence (start token + output) fits the `max_positions` position table (None: no cap)."""
    budget = source_length + EXTRA_TARGET_TOKENS
    if max_positions is not None:
        budget = min(budget, max_positions - 1)
    return max(1, budget)


def encode_sources(tokenizer, texts: list[str], max_length: int | None) -> tuple[list[list[int]], int]:
    """Token ids of `texts`, each cut to at most `max_length` tokens (still ending with the tokenizer's `</s>`),
    and how many were cut. `max_length` None: no cut.

    Tokenized with truncation at `max_length + 1` first, so an overlong line is found (and counted) without ever
    encoding all of it and without the tokenizer's "sequence length is longer than ..." warning; only the few
    overlong lines are encoded a second time at `max_length`, which lets the tokenizer keep its special tokens.
    """
    texts = list(texts)
    if max_length is None:
        return tokenizer(texts)["input_ids"], 0
    ids = tokenizer(texts, truncation=True, max_length=max_length + 1)["input_ids"]
    overlong = [i for i, row in enumerate(ids) if len(row) > max_length]
    if overlong:
        cut = tokenizer([texts[i] for i in overlong], truncation=True, max_length=max_length)["input_ids"]
        for i, row in zip(overlong, cut):
            ids[i] = row
    return ids, len(overlong)


def sinusoidal_positions(positions: torch.Tensor, dim: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/dim)), PE(pos, 2i+1) = cos(pos / 10000^(2i/dim)), shape (len, dim).

    Computed on the fly (a few element-wise ops) instead of stored: a non-persistent buffer would come back
    uninitialised when transformers builds the model on the meta device.
    """
    inv_freq = torch.exp(torch.arange(0, dim, 2, device=positions.device, dtype=torch.float32) * (-math.log(10000.0) / dim))
    angles = positions.float()[:, None] * inv_freq[None, :]
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher-forcing decoder input: `<s> y1 … y(n-1)` for labels `y1 … yn`; ignored labels (-100) become pad."""
    shifted = labels.new_full(labels.shape, decoder_start_token_id)
    shifted[:, 1:] = labels[:, :-1]
    return shifted.masked_fill(shifted == -100, pad_token_id)


def check_token_ids(input_ids: torch.Tensor, max_positions: int, what: str) -> None:
    """Clear errors for inputs the model cannot translate faithfully (instead of a silent wrong answer)."""
    if input_ids.dim() != 2:
        raise ValueError(f"{what} must have shape (batch, length), got {tuple(input_ids.shape)}")
    if input_ids.shape[1] == 0:
        raise ValueError(f"{what} is empty (length 0): there is nothing to translate")
    if input_ids.shape[1] > max_positions:
        raise ValueError(
            f"{what} has {input_ids.shape[1]} tokens but the model accepts at most max_position_embeddings="
            f"{max_positions}; truncate it (e.g. tokenizer(..., truncation=True, max_length={max_positions}))"
        )


def padding_mask(input_ids: torch.Tensor, pad_token_id: int) -> torch.Tensor | None:
    """1/0 mask from pad ids, or None when the batch has no padding (SDPA then needs no mask at all)."""
    mask = input_ids.ne(pad_token_id)
    return None if bool(mask.all()) else mask.long()


class TranslatorAttention(nn.Module):
    """Multi-head attention (§3.2.2): encoder self-attention, masked decoder self-attention, or cross-attention.

    Self-attention projects q, k, v with one fused matmul (`qkv_proj`), cross-attention projects k, v of the
    encoder output with one (`kv_proj`); each part is initialised like the paper's separate matrices.
    With `qk_norm`, q and k are RMS-normalised per head: their norms, and so the logits, stay bounded
    (RMSNorm rather than LayerNorm: centring adds nothing to that bound, as in OLMo 2 / Qwen 3).
    """

    def __init__(self, config: TranslatorConfig, num_heads: int, layer_idx: int, is_cross_attention: bool = False,
                 is_causal: bool = False):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.num_heads = num_heads
        self.head_dim = config.d_model // num_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        self.is_cross_attention = is_cross_attention
        # SDPA reads `is_causal` when it gets no mask; encoder and cross attention must never become causal.
        self.is_causal = is_causal

        d = config.d_model
        if is_cross_attention:
            self.q_proj = nn.Linear(d, d)
            self.kv_proj = nn.Linear(d, 2 * d)
            self.kv_proj.num_fused = 2
        else:
            self.qkv_proj = nn.Linear(d, 3 * d)
            self.qkv_proj.num_fused = 3
        self.out_proj = nn.Linear(d, d)
        if config.qk_norm:
            self.q_norm = nn.RMSNorm(self.head_dim, eps=config.layer_norm_eps)
            self.k_norm = nn.RMSNorm(self.head_dim, eps=config.layer_norm_eps)

        # Attention-logit monitor (see `TranslatorPreTrainedModel.set_attention_logit_monitor`).
        self.monitor_logits = False
        self.max_abs_logits: torch.Tensor | None = None

    def _heads(self, x: torch.Tensor, parts: int) -> tuple[torch.Tensor, ...]:
        """(B, T, parts·d) → `parts` tensors of shape (B, heads, T, head_dim)."""
        batch, length, _ = x.shape
        return x.view(batch, length, parts, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns the output and, for eager attention, the attention probabilities (`output_attentions`)."""
        batch, length, _ = hidden_states.shape
        if self.is_cross_attention:
            (query,) = self._heads(self.q_proj(hidden_states), 1)
            if cache is not None and cache.is_updated.get(self.layer_idx, False):
                # Encoder output does not change during generate(): reuse its keys/values from the first step.
                layer = cache.cross_attention_cache.layers[self.layer_idx]
                key, value = layer.keys, layer.values
            else:
                key, value = self._heads(self.kv_proj(encoder_hidden_states), 2)
                if self.config.qk_norm:
                    key = self.k_norm(key)
                if cache is not None:
                    key, value = cache.cross_attention_cache.update(key, value, self.layer_idx)
                    cache.is_updated[self.layer_idx] = True
            if self.config.qk_norm:
                query = self.q_norm(query)
        else:
            query, key, value = self._heads(self.qkv_proj(hidden_states), 3)
            if self.config.qk_norm:
                query, key = self.q_norm(query), self.k_norm(key)
            if cache is not None:
                key, value = cache.self_attention_cache.update(key, value, self.layer_idx)

        if self.monitor_logits:
            self._record_max_logits(query, key)

        # Spelled out (not wrapped in a helper): transformers only lets `set_attn_implementation` switch models whose
        # file contains this call.
        attention = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)
        output, weights = attention(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.attention_dropout if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        return self.out_proj(output.reshape(batch, length, -1)), weights

    @torch.no_grad()
    def _record_max_logits(self, query: torch.Tensor, key: torch.Tensor) -> None:
        """Running max over calls of |q·kᵀ|/√d per head, in fp32, over all query/key pairs (masked ones included,
        so it is an upper bound of what the softmax sees). Stays on the device: no synchronisation per step."""
        logits = torch.matmul(query.float(), key.float().transpose(-1, -2)) * self.scaling
        per_head = logits.abs().amax(dim=(0, 2, 3))
        self.max_abs_logits = per_head if self.max_abs_logits is None else torch.maximum(self.max_abs_logits, per_head)


class TranslatorFeedForward(nn.Module):
    """Position-wise feed-forward network (§3.3): FFN(x) = act(x·W1 + b1)·W2 + b2."""

    def __init__(self, config: TranslatorConfig, ffn_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, ffn_dim)
        self.act = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout
        self.fc2 = nn.Linear(ffn_dim, config.d_model)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.act(self.fc1(hidden_states))
        hidden_states = nn.functional.dropout(hidden_states, p=self.activation_dropout, training=self.training)
        return self.fc2(hidden_states)


class TranslatorEncoderLayer(GradientCheckpointingLayer):
    """Self-attention then feed-forward, each wrapped in dropout, residual and LayerNorm (§3.1, §5.4).

    Post-LN (paper): x = LN(x + Dropout(Sublayer(x))). Pre-LN (`norm_first`): x = x + Dropout(Sublayer(LN(x))).
    """

    def __init__(self, config: TranslatorConfig, layer_idx: int):
        super().__init__()
        self.norm_first = config.norm_first
        self.dropout = config.dropout
        self.self_attn = TranslatorAttention(config, config.encoder_attention_heads, layer_idx)
        self.self_attn_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.ffn = TranslatorFeedForward(config, config.encoder_ffn_dim)
        self.ffn_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def _drop(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.dropout(x, p=self.dropout, training=self.training)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
        x = hidden_states
        if self.norm_first:
            x = x + self._drop(self.self_attn(self.self_attn_norm(x), attention_mask, **kwargs)[0])
            x = x + self._drop(self.ffn(self.ffn_norm(x)))
        else:
            x = self.self_attn_norm(x + self._drop(self.self_attn(x, attention_mask, **kwargs)[0]))
            x = self.ffn_norm(x + self._drop(self.ffn(x)))
        return x


class TranslatorDecoderLayer(GradientCheckpointingLayer):
    """Masked self-attention, cross-attention over the encoder output, feed-forward (§3.1), post- or pre-LN."""

    def __init__(self, config: TranslatorConfig, layer_idx: int):
        super().__init__()
        self.norm_first = config.norm_first
        self.dropout = config.dropout
        heads = config.decoder_attention_heads
        self.self_attn = TranslatorAttention(config, heads, layer_idx, is_causal=True)
        self.self_attn_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.cross_attn = TranslatorAttention(config, heads, layer_idx, is_cross_attention=True)
        self.cross_attn_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.ffn = TranslatorFeedForward(config, config.decoder_ffn_dim)
        self.ffn_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def _drop(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.dropout(x, p=self.dropout, training=self.training)

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        use_cache: bool = False,
        **kwargs,
    ) -> torch.Tensor:
        x, memory = hidden_states, encoder_hidden_states
        if self.norm_first:
            x = x + self._drop(self.self_attn(self.self_attn_norm(x), attention_mask, cache=cache, **kwargs)[0])
            cross = self.cross_attn(self.cross_attn_norm(x), encoder_attention_mask, memory, cache=cache, **kwargs)
            x = x + self._drop(cross[0])
            x = x + self._drop(self.ffn(self.ffn_norm(x)))
        else:
            x = self.self_attn_norm(x + self._drop(self.self_attn(x, attention_mask, cache=cache, **kwargs)[0]))
            cross = self.cross_attn(x, encoder_attention_mask, memory, cache=cache, **kwargs)
            x = self.cross_attn_norm(x + self._drop(cross[0]))
            x = self.ffn_norm(x + self._drop(self.ffn(x)))
        return x


class TranslatorPreTrainedModel(PreTrainedModel):
    """Shared plumbing: config class, initialisation, attention kernels, attention-logit monitor."""

    config: TranslatorConfig
    config_class = TranslatorConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _no_split_modules = ["TranslatorEncoderLayer", "TranslatorDecoderLayer"]

    def _init_weights(self, module: nn.Module) -> None:
        """Normal(0, `config.init_std`) matrices and embedding, or with `init_std=None` the paper's code-base init:
        Xavier-uniform matrices and an N(0, d_model^-0.5) embedding, which √d_model scaling brings to unit variance,
        level with the sinusoids (Xavier on a vocab×d_model matrix would depend on the vocabulary size). Biases zero.

        transformers calls this for every leaf module (and never for loaded weights).
        """
        std = self.config.init_std
        if isinstance(module, nn.Linear):
            if std is not None:
                init.normal_(module.weight, mean=0.0, std=std)
            else:
                # A fused q/k/v (or k/v) weight is initialised as its separate d×d matrices would be.
                fan_out = module.out_features // getattr(module, "num_fused", 1)
                bound = math.sqrt(6.0 / (module.in_features + fan_out))
                init.uniform_(module.weight, -bound, bound)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=std if std is not None else self.config.d_model**-0.5)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, nn.RMSNorm):
            init.ones_(module.weight)

    def set_attention_logit_monitor(self, enabled: bool = True) -> None:
        """Turn on (or off) recording of max |QKᵀ/√d| per head in every attention module, and clear the records.

        Off by default; when off it costs one boolean check per attention call. When on, each call also computes
        the logits once in fp32 under `no_grad` (what the seed's stability diagnostic does).
        """
        for module in self.modules():
            if isinstance(module, TranslatorAttention):
                module.monitor_logits = enabled
                module.max_abs_logits = None

    def attention_logit_stats(self, reset: bool = True) -> dict[str, torch.Tensor]:
        """Max |QKᵀ/√d| per head seen since the monitor was enabled (or last reset): {module name: fp32 CPU tensor
        of shape (heads,)}, e.g. `"model.encoder.layers.0.self_attn"`. Empty if the monitor is off."""
        stats = {}
        for name, module in self.named_modules():
            if isinstance(module, TranslatorAttention) and module.max_abs_logits is not None:
                stats[name] = module.max_abs_logits.detach().float().cpu()
                if reset:
                    module.max_abs_logits = None
        return stats


class TranslatorEncoder(TranslatorPreTrainedModel):
    """Token embedding × √d_model + sinusoidal positions, dropout, N encoder layers (+ final LayerNorm if pre-LN)."""

    # What `output_hidden_states` / `output_attentions` record (transformers' `capture_outputs` hooks).
    _can_record_outputs = {"hidden_states": TranslatorEncoderLayer, "attentions": TranslatorAttention}

    def __init__(self, config: TranslatorConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.layers = nn.ModuleList(TranslatorEncoderLayer(config, i) for i in range(config.encoder_layers))
        # Pre-LN leaves the residual stream un-normalised; post-LN's last sub-layer already ends in a LayerNorm.
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.norm_first else None
        self.gradient_checkpointing = False
        self.post_init()

    @capture_outputs
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput:
        """Encode right-padded source ids (or their embeddings); `attention_mask` is 1 for real tokens, 0 for
        padding. `inputs_embeds` replace the token embedding lookup (they are scaled by √d_model as it is)."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids or inputs_embeds (the source)")
        if inputs_embeds is None:
            check_token_ids(input_ids, self.config.max_position_embeddings, "source (input_ids)")
            inputs_embeds = self.embed_tokens(input_ids)
        else:
            check_token_ids(inputs_embeds[..., 0], self.config.max_position_embeddings, "source (inputs_embeds)")
        if attention_mask is not None and not attention_mask.bool().any(dim=-1).all():
            raise ValueError("a source row is all padding (attention_mask has no 1): there is nothing to translate")

        positions = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device)
        x = inputs_embeds * self.embed_scale
        x = x + sinusoidal_positions(positions, self.config.d_model).to(x.dtype)
        x = nn.functional.dropout(x, p=self.config.dropout, training=self.training)

        mask = create_bidirectional_mask(config=self.config, inputs_embeds=x, attention_mask=attention_mask)
        for layer in self.layers:
            x = layer(x, mask, **kwargs)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return BaseModelOutput(last_hidden_state=x)


class TranslatorDecoder(TranslatorPreTrainedModel):
    """Embedding × √d_model + positions (continuing after the cached prefix), N decoder layers (+ final LN if pre-LN)."""

    _can_record_outputs = {
        "hidden_states": TranslatorDecoderLayer,
        "attentions": OutputRecorder(TranslatorAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(TranslatorAttention, index=1, layer_name="cross_attn"),
    }

    def __init__(self, config: TranslatorConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.layers = nn.ModuleList(TranslatorDecoderLayer(config, i) for i in range(config.decoder_layers))
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.norm_first else None
        self.gradient_checkpointing = False
        self.post_init()

    @capture_outputs
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")  # the transformers 4.x name
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of decoder_input_ids or decoder_inputs_embeds")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        if use_cache and cache is None:
            cache = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        past = cache.get_seq_length() if cache is not None else 0
        length = inputs_embeds.shape[1]
        if past + length > self.config.max_position_embeddings:
            raise ValueError(
                f"decoder input reaches position {past + length} > max_position_embeddings="
                f"{self.config.max_position_embeddings}"
            )

        # generate() sends no decoder positions: the cached prefix length tells where this chunk starts.
        positions = torch.arange(past, past + length, device=inputs_embeds.device)
        x = inputs_embeds * self.embed_scale
        x = x + sinusoidal_positions(positions, self.config.d_model).to(x.dtype)
        x = nn.functional.dropout(x, p=self.config.dropout, training=self.training)

        # Masks are built before the layers extend the cache (mask sizes are read from its current length).
        self_mask = create_causal_mask(
            config=self.config,
            inputs_embeds=x,
            attention_mask=attention_mask,
            cache=cache.self_attention_cache if cache is not None else None,
        )
        cross_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=x,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
        )
        for layer in self.layers:
            # Hidden states go positionally: gradient checkpointing only re-feeds positional arguments.
            x = layer(x, encoder_hidden_states, self_mask, cross_mask, cache=cache, use_cache=use_cache, **kwargs)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=x, cache=cache if use_cache else None)


class TranslatorModel(TranslatorPreTrainedModel):
    """The bare encoder–decoder returning decoder hidden states (no output projection).

    One embedding matrix serves encoder and decoder (the paper's shared source/target vocabulary): it is stored
    as `encoder.embed_tokens.weight`, and `decoder.embed_tokens` is tied to it when `tie_word_embeddings`.
    """

    _tied_weights_keys = {"decoder.embed_tokens.weight": "encoder.embed_tokens.weight"}

    def __init__(self, config: TranslatorConfig):
        super().__init__(config)
        self.encoder = TranslatorEncoder(config)
        self.decoder = TranslatorDecoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.encoder.embed_tokens = value
        self.decoder.embed_tokens = value

    def get_encoder(self) -> TranslatorEncoder:
        return self.encoder

    def get_decoder(self) -> TranslatorDecoder:
        return self.decoder

    @can_return_tuple
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")  # the transformers 4.x name
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqModelOutput:
        r"""
        input_ids (`(batch, src_len)`): right-padded source ids. Not needed when `encoder_outputs` is given.
        attention_mask (`(batch, src_len)`): 1 for source tokens, 0 for padding. If omitted, it is derived from
            `pad_token_id` (unlike BART/Marian, so that a padded batch is never silently mistranslated).
        decoder_input_ids (`(batch, tgt_len)`): decoder input, starting with `decoder_start_token_id`.
        decoder_attention_mask (`(batch, tgt_len)`): optional decoder padding mask; causality is always applied.
        encoder_outputs: reuse an encoder pass (as `generate()` does).
        cache (`EncoderDecoderCache`): decoder key/value cache; returned when `use_cache`.
        inputs_embeds, decoder_inputs_embeds: token embeddings to use instead of `input_ids` / `decoder_input_ids`.
        Also `output_hidden_states`, `output_attentions` (eager attention) and `return_dict`, as in MarianMT.
        """
        if use_cache is None:
            use_cache = self.config.use_cache and not self.training
        if attention_mask is None and input_ids is not None:
            attention_mask = padding_mask(input_ids, self.config.pad_token_id)
        if encoder_outputs is None:
            if input_ids is None and inputs_embeds is None:
                raise ValueError("pass input_ids (the source), inputs_embeds or encoder_outputs")
            # return_dict=True: the inner stacks answer with outputs even under `config.return_dict=False`.
            encoder_outputs = self.encoder(
                input_ids, attention_mask, inputs_embeds=inputs_embeds, return_dict=True, **kwargs
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(*encoder_outputs[:3])
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            raise ValueError("pass decoder_input_ids, or labels to TranslatorForConditionalGeneration")

        decoder_outputs = self.decoder(
            decoder_input_ids,
            encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            attention_mask=decoder_attention_mask,
            cache=cache,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            return_dict=True,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            cache=decoder_outputs.cache,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


class TranslatorForConditionalGeneration(TranslatorPreTrainedModel, KnownSignaturesGenerationMixin, GenerationMixin):
    """Encoder–decoder with the output projection tied to the shared embedding; `generate()` decodes like §6.1.

    Loss: token-mean cross entropy over labels ≠ -100 (with `config.label_smoothing`), or the sum divided by
    `num_items_in_batch` when the Trainer passes it (exact token mean under gradient accumulation).
    """

    _tied_weights_keys = {"lm_head.weight": "model.encoder.embed_tokens.weight"}

    def __init__(self, config: TranslatorConfig):
        super().__init__(config)
        self.model = TranslatorModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()
        # §6.1: beam 4, length penalty α = 0.6, stop once 4 hypotheses are finished ("terminate early when
        # possible"); length bound = source length + 50 (see `generate`), `max_length` only caps it at the
        # position limit. transformers' penalty divides the log-probability by length^α (GNMT uses
        # ((5 + length) / 6)^α). A hypothesis cut by the length bound is closed with </s>, as in fairseq/MarianMT.
        self.generation_config = GenerationConfig(
            num_beams=4,
            length_penalty=0.6,
            early_stopping=True,
            max_length=config.max_position_embeddings,
            forced_eos_token_id=config.eos_token_id,
            bos_token_id=config.bos_token_id,
            eos_token_id=config.eos_token_id,
            pad_token_id=config.pad_token_id,
            decoder_start_token_id=config.decoder_start_token_id,
        )

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.set_input_embeddings(value)

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    def get_encoder(self) -> TranslatorEncoder:
        return self.model.encoder

    def get_decoder(self) -> TranslatorDecoder:
        return self.model.decoder

    def _reorder_cache(self, cache: EncoderDecoderCache, beam_idx: torch.LongTensor) -> EncoderDecoderCache:
        """Beam search hook: reorder the decoder's self-attention keys/values to follow the surviving beams.

        The cross-attention cache is left alone: beams are only ever reordered within their own sentence, and all
        beams of a sentence hold identical copies of its encoder keys/values, so reordering them is a no-op.
        """
        cache.self_attention_cache.reorder_cache(beam_idx)
        return cache

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        """Used by `DataCollatorForSeq2Seq`: the teacher-forcing decoder input for `labels`."""
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    @can_return_tuple
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")  # the transformers 4.x name
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int = 0,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqLMOutput:
        r"""
        Arguments as in [`TranslatorModel.forward`], plus:
        labels (`(batch, tgt_len)`): target ids, -100 where ignored. If `decoder_input_ids` is omitted it is
            `shift_tokens_right(labels)`.
        logits_to_keep (`int`): compute logits for the last `n` positions only (0 = all); `generate()` uses 1.
        """
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        if labels is not None and decoder_input_ids is None and decoder_inputs_embeds is None:
            decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            return_dict=True,  # tuples (`return_dict=False`) are made once, by `can_return_tuple` on this forward
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        if logits_to_keep:
            hidden_states = hidden_states[:, -logits_to_keep:]
        logits = self.lm_head(hidden_states)

        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(
                logits.flatten(0, 1).float(),
                labels.flatten().to(logits.device),
                ignore_index=-100,
                label_smoothing=self.config.label_smoothing,
                reduction="mean" if num_items_in_batch is None else "sum",
            )
            if num_items_in_batch is not None:
                loss = loss / num_items_in_batch
        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            cache=outputs.cache,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )

    def generate(self, inputs: torch.Tensor | None = None, generation_config: GenerationConfig | None = None, **kwargs):
        """`GenerationMixin.generate` with the paper's length rule and a source mask derived from padding.

        Unless the call passes `max_length` or `max_new_tokens` (or the generation config in use sets
        `max_new_tokens`), at most source length + 50 tokens are generated (§6.1, `decoding_budget`), never beyond
        the config's `max_length` or `max_position_embeddings` (the decoder's position limit). A fixed `max_length`
        alone cannot express a bound relative to the source, hence this wrapper. Without an `attention_mask`,
        padded source rows are masked using `pad_token_id`.
        """
        source = inputs if inputs is not None else kwargs.get("input_ids")
        if source is not None and kwargs.get("attention_mask") is None and kwargs.get("encoder_outputs") is None:
            kwargs["attention_mask"] = padding_mask(source, self.config.pad_token_id)
        config = generation_config if generation_config is not None else self.generation_config
        if kwargs.get("max_length") is None and kwargs.get("max_new_tokens") is None and config.max_new_tokens is None:
            if source is not None:
                source_length = source.shape[-1]
            elif kwargs.get("encoder_outputs") is not None:
                source_length = kwargs["encoder_outputs"][0].shape[1]
            else:
                source_length = 0
            positions = self.config.max_position_embeddings
            cap = min(config.max_length or positions, positions)  # a larger max_length cannot lift the table's end
            kwargs["max_new_tokens"] = decoding_budget(source_length, cap)
        if kwargs.get("max_new_tokens") is None or kwargs.get("max_length") is not None:
            return super().generate(inputs, generation_config, **kwargs)
        # `max_new_tokens` decides this call: hide the stored `max_length` cap meanwhile, or transformers logs
        # "both max_new_tokens and max_length set" on every call.
        saved_max_length, self.generation_config.max_length = self.generation_config.max_length, None
        try:
            return super().generate(inputs, generation_config, **kwargs)
        finally:
            self.generation_config.max_length = saved_max_length


# `save_pretrained` then writes `auto_map` and copies this file, configuration_translator.py, layers.py and
# pipeline_translator.py, so every saved folder loads with `trust_remote_code=True` where nanoformer is absent.
TranslatorConfig.register_for_auto_class()
TranslatorModel.register_for_auto_class("AutoModel")
TranslatorForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")

__all__ = [
    "EXTRA_TARGET_TOKENS",
    "TranslatorForConditionalGeneration",
    "TranslatorModel",
    "TranslatorPipeline",
    "TranslatorPreTrainedModel",
    "decoding_budget",
    "encode_sources",
    "shift_tokens_right",
    "sinusoidal_positions",
]

"""Configuration of the "Attention Is All You Need" translator (Vaswani et al., 2017).

Field names follow `MarianConfig` so that anyone who knows MarianMT can read a `config.json` of ours.
The defaults are the paper's Transformer-base; the special-token ids are those of the project's shared
EN–ZH tokenizer (`<pad>`, `<unk>`, `<s>`, `</s>` = 0, 1, 2, 3).
"""

from transformers import PreTrainedConfig
from transformers.activations import ACT2FN

# What `pipeline("translation", model=folder, trust_remote_code=True)` reads: transformers 5 removed the built-in
# translation task, and `pipeline()` consults `config.custom_pipelines` before it rejects removed tasks.
# `pipeline_translator.py` is copied into every saved folder because modeling_translator.py imports it.
TRANSLATION_PIPELINE = {
    "translation": {
        "impl": "pipeline_translator.TranslatorPipeline",
        "pt": ["AutoModelForSeq2SeqLM"],
        "type": "text",
    }
}


class TranslatorConfig(PreTrainedConfig):
    r"""Configuration of [`TranslatorModel`] and [`TranslatorForConditionalGeneration`].

    Args:
        vocab_size (`int`, defaults to 37000):
            Size of the vocabulary shared by source and target (the paper's shared BPE has ~37k tokens).
        d_model (`int`, defaults to 512):
            Width of the residual stream, the embeddings and the attention projections.
        encoder_layers (`int`, defaults to 6):
            Number of encoder layers.
        decoder_layers (`int`, defaults to 6):
            Number of decoder layers.
        encoder_attention_heads (`int`, defaults to 8):
            Attention heads in each encoder self-attention; must divide `d_model`.
        decoder_attention_heads (`int`, defaults to 8):
            Attention heads in each decoder self- and cross-attention; must divide `d_model`.
        encoder_ffn_dim (`int`, defaults to 2048):
            Inner width of the encoder position-wise feed-forward network.
        decoder_ffn_dim (`int`, defaults to 2048):
            Inner width of the decoder position-wise feed-forward network.
        max_position_embeddings (`int`, defaults to 512):
            Longest source, and longest decoder input, the model accepts. Positions are sinusoidal (no table is
            learnt), so this is a guard rail: a longer source raises `ValueError` instead of silently extrapolating.
        dropout (`float`, defaults to 0.1):
            The paper's residual dropout: on the sum of embeddings and positions, and on every sub-layer output
            before it is added to the residual stream.
        attention_dropout (`float`, defaults to 0.0):
            Dropout on the attention probabilities (not used in the paper).
        activation_dropout (`float`, defaults to 0.0):
            Dropout after the feed-forward activation (not used in the paper).
        activation_function (`str`, defaults to `"relu"`):
            Feed-forward activation; any key of `transformers.activations.ACT2FN`.
        layer_norm_eps (`float`, defaults to 1e-5):
            Epsilon of every LayerNorm (and of the RMSNorms used by `qk_norm`).
        scale_embedding (`bool`, defaults to `True`):
            Multiply token embeddings by sqrt(d_model) before adding positions (paper §3.4).
        norm_first (`bool`, defaults to `False`):
            `False`: post-LN as in the paper, `x = LayerNorm(x + Sublayer(x))`. `True`: pre-LN,
            `x = x + Sublayer(LayerNorm(x))`, with a final LayerNorm after each stack; easier to train deep or
            without warmup.
        qk_norm (`bool`, defaults to `False`):
            Normalise queries and keys per head with an `nn.RMSNorm` over `head_dim` before the dot product, which
            bounds the attention logits (the seed's fp16/bf16 stability fix).
        init_std (`float` or `None`, defaults to 0.02):
            Standard deviation of the normal initialisation of every `nn.Linear` and of the shared embedding
            (biases zero, norms one), as in MarianMT, BART and GPT-2: sub-layers start close to zero, so each
            post-LN block starts close to the identity and the scaled token embedding is not washed out. `None`
            selects the initialisation of the paper's code bases (tensor2tensor, fairseq): Xavier-uniform matrices
            and an embedding drawn from N(0, d_model^-0.5). With Tatoeba EN→ZH at d_model 256, 3+3 layers and the
            paper's recipe, 0.02 learns as fast as MarianMTModel while `None` is slower in the first thousand
            updates (see the README's quality run).
        label_smoothing (`float`, defaults to 0.0):
            Label smoothing of the training loss computed by `TranslatorForConditionalGeneration` (the paper
            trains with 0.1; 0.0 gives the plain cross entropy).
        use_cache (`bool`, defaults to `True`):
            Whether the decoder returns its key/value cache at inference.
        tie_word_embeddings (`bool`, defaults to `True`):
            One embedding matrix for encoder input, decoder input and output projection (paper §3.4).
        pad_token_id (`int`, defaults to 0), bos_token_id (`int`, defaults to 2), eos_token_id (`int`, defaults to 3),
        decoder_start_token_id (`int`, defaults to 2):
            Special-token ids of the shared tokenizer. The decoder starts from `<s>`.

    Decoding settings (beam 4, length penalty 0.6, ...) live in the model's `generation_config`, not here
    (transformers 5 drops generation parameters from model configs).

    Example:

    ```python
    >>> from nanoformer.modeling import TranslatorConfig, TranslatorForConditionalGeneration
    >>> config = TranslatorConfig(vocab_size=8000, d_model=256, encoder_layers=3, decoder_layers=3)
    >>> model = TranslatorForConditionalGeneration(config)
    ```
    """

    model_type = "translator"
    # The KV cache sizes itself from `num_hidden_layers`; only decoder layers have a cache.
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "decoder_layers",
    }
    keys_to_ignore_at_inference = ["cache"]

    vocab_size: int = 37000
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_attention_heads: int = 8
    decoder_attention_heads: int = 8
    encoder_ffn_dim: int = 2048
    decoder_ffn_dim: int = 2048
    max_position_embeddings: int = 512
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    activation_function: str = "relu"
    layer_norm_eps: float = 1e-5
    scale_embedding: bool = True
    norm_first: bool = False
    qk_norm: bool = False
    init_std: float | None = 0.02
    label_smoothing: float = 0.0
    use_cache: bool = True
    is_encoder_decoder: bool = True
    tie_word_embeddings: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 2
    eos_token_id: int | None = 3
    decoder_start_token_id: int | None = 2

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        if not getattr(self, "custom_pipelines", None):
            self.custom_pipelines = {task: dict(spec) for task, spec in TRANSLATION_PIPELINE.items()}
        self._validate()

    def _validate(self) -> None:
        def positive_int(name: str) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TranslatorConfig.{name} must be a positive integer, got {value!r}")

        for name in ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
                     "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "max_position_embeddings"):
            positive_int(name)
        for name in ("encoder_attention_heads", "decoder_attention_heads"):
            if self.d_model % getattr(self, name):
                raise ValueError(
                    f"TranslatorConfig.{name}={getattr(self, name)} must divide d_model={self.d_model}"
                )
        if self.d_model % 2:
            raise ValueError(f"TranslatorConfig.d_model must be even for sinusoidal positions, got {self.d_model}")
        for name in ("dropout", "attention_dropout", "activation_dropout", "label_smoothing"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"TranslatorConfig.{name} must be in [0, 1), got {value!r}")
        if self.init_std is not None and (
            isinstance(self.init_std, bool) or not isinstance(self.init_std, (int, float)) or self.init_std <= 0
        ):
            raise ValueError(f"TranslatorConfig.init_std must be a positive number or None, got {self.init_std!r}")
        if not isinstance(self.layer_norm_eps, (int, float)) or self.layer_norm_eps <= 0:
            raise ValueError(f"TranslatorConfig.layer_norm_eps must be > 0, got {self.layer_norm_eps!r}")
        if self.activation_function not in ACT2FN:
            raise ValueError(
                f"TranslatorConfig.activation_function={self.activation_function!r} is not one of "
                f"transformers.activations.ACT2FN ({', '.join(sorted(ACT2FN))})"
            )
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            value = getattr(self, name)
            if value is None or isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < self.vocab_size:
                raise ValueError(
                    f"TranslatorConfig.{name} must be an id in [0, vocab_size={self.vocab_size}), got {value!r}"
                )


__all__ = ["TranslatorConfig"]

"""nanoformer models, registered with the transformers Auto classes on import."""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

from .configuration_nanogpt import NanoGPTConfig
from .configuration_translator import TranslatorConfig
from .modeling_nanogpt import NanoGPTForCausalLM, NanoGPTModel, NanoGPTPreTrainedModel
from .modeling_translator import (
    TranslatorForConditionalGeneration,
    TranslatorModel,
    TranslatorPreTrainedModel,
    decoding_budget,
    encode_sources,
    shift_tokens_right,
)
from .pipeline_translator import TranslatorPipeline

AutoConfig.register(NanoGPTConfig.model_type, NanoGPTConfig)
AutoModel.register(NanoGPTConfig, NanoGPTModel)
AutoModelForCausalLM.register(NanoGPTConfig, NanoGPTForCausalLM)
AutoConfig.register(TranslatorConfig.model_type, TranslatorConfig)
AutoModel.register(TranslatorConfig, TranslatorModel)
AutoModelForSeq2SeqLM.register(TranslatorConfig, TranslatorForConditionalGeneration)

__all__ = [
    "NanoGPTConfig",
    "NanoGPTForCausalLM",
    "NanoGPTModel",
    "NanoGPTPreTrainedModel",
    "TranslatorConfig",
    "TranslatorForConditionalGeneration",
    "TranslatorModel",
    "TranslatorPipeline",
    "TranslatorPreTrainedModel",
    "decoding_budget",
    "encode_sources",
    "shift_tokens_right",
]

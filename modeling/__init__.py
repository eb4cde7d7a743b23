"""nanoformer models, registered with the transformers Auto classes on import."""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from .configuration_nanogpt import NanoGPTConfig
from .modeling_nanogpt import NanoGPTForCausalLM, NanoGPTModel, NanoGPTPreTrainedModel

AutoConfig.register(NanoGPTConfig.model_type, NanoGPTConfig)
AutoModel.register(NanoGPTConfig, NanoGPTModel)
AutoModelForCausalLM.register(NanoGPTConfig, NanoGPTForCausalLM)

__all__ = [
    "NanoGPTConfig",
    "NanoGPTForCausalLM",
    "NanoGPTModel",
    "NanoGPTPreTrainedModel",
]

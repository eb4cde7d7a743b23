"""transformers' own common model tests (`ModelTesterMixin`, `ConfigTester`) run against nanoformer's models.

Every model inside transformers must pass `tests/test_modeling_common.py: ModelTesterMixin`. Here it runs, from
the sdist of the installed transformers version (see tests/hf_upstream_tests.py: fetched once from PyPI with pip and
cached outside the repository; the whole module skips with the reason when it cannot be fetched, e.g. offline),
against three model families with small testers modeled on transformers' GPT-2 and Marian ones:

- NanoGPT, GPT-2 layout (LayerNorm, GELU MLP, learned positions): `NanoGPTModel`, `NanoGPTForCausalLM`;
- NanoGPT, LLaMA layout (RMSNorm, SwiGLU, RoPE): the same classes;
- the Translator: `TranslatorModel`, `TranslatorForConditionalGeneration`.

The mixin classifies models by transformers' static name tables (`MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`, ...), which
`AutoModel.register` does not touch, so the class names are added to those tables for the duration of the module.

Left out, on purpose:
- `GenerationTesterMixin` and `ExportTesterMixin` are not in the sdist (stand-ins in tests/hf_upstream_tests.py);
  generation is tested by tests/test_nanogpt_generation.py and tests/test_translator.py, so the testers declare
  `all_generative_model_classes = ()` (the mixin's documented way to say "generate is tested elsewhere").

What skips, and why (the mixin's own `skipTest` reasons; everything that can run on a CPU runs, including
`test_can_init_all_missing_weights`, which the mixin otherwise keeps for models it prioritises):
- needs a GPU or other accelerator: flash-attention 2/3/4 and their kernels, SDPA-on-flash dispatch, multi-GPU
  model parallelism, CPU/disk offload ("test requires accelerator"), MPS; fp16/bf16 eager-vs-SDPA numerics run.
- optional packages not installed: deepspeed, kernels.
- gated by transformers as slow (`RUN_SLOW`): `test_torch_compile_for_training`.
- features these models do not have: composite/multimodal models (`test_sdpa_can_dispatch_composite_models`
  words this "does not support SDPA"), sub-configs, MoE experts and router logits, `_keep_in_fp32_modules`,
  checkpoint-conversion mappings, tensor-parallel plans, `grouped_mm`, position-embedding resizing, axial or
  partial RoPE, `use_sliding_window` (Qwen-style switch), RoPE scaling for learned positions and the Translator,
  sequence-classification heads; the decoder-only / seq2seq loss checks skip for the other kind of model;
  for the Translator, `test_can_capture_specific_layers_hidden_states` looks for `hidden_states`, which a
  seq2seq output names `encoder_hidden_states` / `decoder_hidden_states` (as MarianMT's does).
"""

import unittest

import pytest
from hf_upstream_tests import UpstreamTestsUnavailable, load_upstream_tests

try:
    upstream = load_upstream_tests()
except UpstreamTestsUnavailable as err:
    pytest.skip(str(err), allow_module_level=True)

from nanoformer.modeling import (  # noqa: E402
    NanoGPTConfig,
    NanoGPTForCausalLM,
    NanoGPTModel,
    TranslatorConfig,
    TranslatorForConditionalGeneration,
    TranslatorModel,
)
from transformers.models.auto import modeling_auto  # noqa: E402

ModelTesterMixin = upstream.modeling.ModelTesterMixin
ConfigTester = upstream.configuration.ConfigTester
ids_tensor = upstream.modeling.ids_tensor
random_attention_mask = upstream.modeling.random_attention_mask

# model_type -> class name, per name table the mixin consults.
NAME_TABLES = {
    "MODEL_MAPPING_NAMES": {"nanogpt": "NanoGPTModel", "translator": "TranslatorModel"},
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES": {"nanogpt": "NanoGPTForCausalLM"},
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES": {"translator": "TranslatorForConditionalGeneration"},
}


@pytest.fixture(scope="module", autouse=True)
def registered_class_names():
    patches = [unittest.mock.patch.dict(getattr(modeling_auto, table), names) for table, names in NAME_TABLES.items()]
    for patch in patches:
        patch.start()
    yield
    for patch in reversed(patches):
        patch.stop()


class NanoGPTModelTester:
    """Tiny NanoGPT configs and inputs, like transformers' GPT2ModelTester."""

    def __init__(self, parent, layout: dict, batch_size=3, seq_length=7, vocab_size=99, hidden_size=32,
                 num_hidden_layers=2, num_attention_heads=4, is_training=True):
        self.parent = parent
        self.layout = layout
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.is_training = is_training
        self.block_size = 64

    def get_config(self) -> NanoGPTConfig:
        return NanoGPTConfig(
            vocab_size=self.vocab_size,
            block_size=self.block_size,
            n_layer=self.num_hidden_layers,
            n_head=self.num_attention_heads,
            n_embd=self.hidden_size,
            bos_token_id=self.vocab_size - 1,
            eos_token_id=self.vocab_size - 1,
            pad_token_id=self.vocab_size - 1,
            **self.layout,
        )

    def prepare_config_and_inputs_for_common(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        attention_mask = random_attention_mask([self.batch_size, self.seq_length])
        return self.get_config(), {"input_ids": input_ids, "attention_mask": attention_mask}


class NanoGPTCommonTest(ModelTesterMixin, unittest.TestCase):
    """GPT-2 layout."""

    layout: dict = {}
    all_model_classes = (NanoGPTModel, NanoGPTForCausalLM)
    all_generative_model_classes = ()  # generation: tests/test_nanogpt_generation.py
    test_can_init_all_missing_weights_before_2023 = True  # (the mixin runs it only for models it prioritises)
    test_resize_embeddings = True

    def setUp(self):
        self.model_tester = NanoGPTModelTester(self, self.layout)
        self.config_tester = ConfigTester(
            self, config_class=NanoGPTConfig, n_embd=48, common_properties=["hidden_size", "num_hidden_layers",
                                                                               "num_attention_heads"]
        )

    def test_config(self):
        self.config_tester.run_common_tests()


class NanoGPTLlamaCommonTest(NanoGPTCommonTest):
    """LLaMA layout: RMSNorm, SwiGLU, RoPE."""

    layout = {"norm_type": "rmsnorm", "mlp_type": "swiglu", "position_embedding_type": "rope"}


class TranslatorModelTester:
    """Tiny Translator configs and inputs, like transformers' MarianModelTester."""

    def __init__(self, parent, batch_size=3, seq_length=7, vocab_size=99, hidden_size=32, num_hidden_layers=2,
                 num_attention_heads=4, intermediate_size=37, is_training=True):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.encoder_seq_length = seq_length
        self.decoder_seq_length = seq_length
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.is_training = is_training
        self.pad_token_id, self.bos_token_id, self.eos_token_id = 0, 2, 3

    def get_config(self) -> TranslatorConfig:
        return TranslatorConfig(
            vocab_size=self.vocab_size,
            d_model=self.hidden_size,
            encoder_layers=self.num_hidden_layers,
            decoder_layers=self.num_hidden_layers,
            encoder_attention_heads=self.num_attention_heads,
            decoder_attention_heads=self.num_attention_heads,
            encoder_ffn_dim=self.intermediate_size,
            decoder_ffn_dim=self.intermediate_size,
            max_position_embeddings=64,
            dropout=0.1,
            pad_token_id=self.pad_token_id,
            bos_token_id=self.bos_token_id,
            eos_token_id=self.eos_token_id,
            decoder_start_token_id=self.bos_token_id,
        )

    def prepare_config_and_inputs_for_common(self):
        # Real tokens only (ids >= 4), each source ending with </s>, as Marian's tester does.
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(4)
        input_ids[:, -1] = self.eos_token_id
        decoder_input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(4)
        decoder_input_ids[:, 0] = self.bos_token_id
        inputs = {
            "input_ids": input_ids,
            "attention_mask": input_ids.ne(self.pad_token_id).long(),
            "decoder_input_ids": decoder_input_ids,
            "decoder_attention_mask": decoder_input_ids.ne(self.pad_token_id).long(),
        }
        return self.get_config(), inputs


class TranslatorCommonTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (TranslatorModel, TranslatorForConditionalGeneration)
    all_generative_model_classes = ()  # generation: tests/test_translator.py
    test_can_init_all_missing_weights_before_2023 = True
    is_encoder_decoder = True

    def setUp(self):
        self.model_tester = TranslatorModelTester(self)
        self.config_tester = ConfigTester(self, config_class=TranslatorConfig, d_model=32,
                                          common_properties=["hidden_size", "num_hidden_layers",
                                                             "num_attention_heads"])

    def test_config(self):
        self.config_tester.run_common_tests()

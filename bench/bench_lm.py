"""Speed of NanoGPT against transformers' GPT2LMHeadModel and LlamaForCausalLM, at nanoGPT's CPU recipe size.

    python bench/bench_lm.py                 # ~5-10 minutes on 2 busy cores
    python bench/bench_lm.py --rounds 3 --no-compile --gen-tokens 200   # quicker look

Sizes follow nanoGPT's shakespeare_char CPU recipe: n_layer 4, n_head 4, n_embd 128, block 64, batch 12, vocab 65.
* training: tokens/s of one step = forward + backward + AdamW on a (12, 64) batch, fp32 and bf16 autocast
  (and torch.compile for NanoGPT if it works here);
* generation: tokens/s of greedy `generate()` of 500 new tokens with the KV cache, batch 1. The context limit of
  every model is raised to 1024 for this part so that all three keep their cache (GPT-2 cannot go past its
  position table at all; NanoGPT with learned positions would switch to nanoGPT's crop-and-re-encode loop).
Pairs compared like for like: NanoGPT GPT-2 style (LayerNorm, GELU, learned positions, biases) vs GPT2LMHeadModel
with exact GELU ("gpt2") and with GPT-2's stock tanh-approximate GELU ("gpt2-stock"), and NanoGPT LLaMA style (RMSNorm, SwiGLU, RoPE, no biases, same MLP width) vs LlamaForCausalLM.

The machine is shared and noisy, so the measurements are interleaved: each round times every model once, in
turn, and the report gives the median over rounds plus ratios to the peers measured in the same rounds.
"""

import argparse
import time
from dataclasses import dataclass

import torch
from nanoformer.modeling import NanoGPTConfig, NanoGPTForCausalLM
from timing import autocast, interleaved, synchronize
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
from transformers.utils import logging


@dataclass(frozen=True)
class LMSize:
    """Model and batch size of one comparison (default: nanoGPT's shakespeare_char CPU recipe)."""

    vocab: int = 65
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block: int = 64
    batch: int = 12


CPU_RECIPE = LMSize()
GPU_RECIPE = LMSize(n_layer=6, n_head=6, n_embd=384, block=256, batch=64)  # nanoGPT's shakespeare_char GPU recipe
LLAMA_STYLE = {"norm_type": "rmsnorm", "mlp_type": "swiglu", "position_embedding_type": "rope", "bias": False}
MODELS = ("nanogpt", "gpt2", "gpt2-stock", "nanogpt-llama", "llama")


def build(name: str, context: int, size: LMSize = CPU_RECIPE) -> torch.nn.Module:
    """One model of the comparison; `context` is its position limit."""
    torch.manual_seed(0)
    dims = {"vocab_size": size.vocab, "n_layer": size.n_layer, "n_head": size.n_head, "n_embd": size.n_embd}
    if name == "nanogpt":
        return NanoGPTForCausalLM(NanoGPTConfig(block_size=context, **dims))
    if name == "nanogpt-llama":
        return NanoGPTForCausalLM(NanoGPTConfig(block_size=context, **dims, **LLAMA_STYLE))
    if name in ("gpt2", "gpt2-stock"):
        # "gpt2": exact GELU like ours (like for like); "gpt2-stock": GPT-2's own tanh-approximate `gelu_new`,
        # the model nanoGPT's 1.17x speed-up was measured against.
        config = GPT2Config(
            vocab_size=size.vocab, n_positions=context, n_embd=size.n_embd, n_layer=size.n_layer, n_head=size.n_head,
            activation_function="gelu" if name == "gpt2" else "gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
        )  # fmt: skip
        return GPT2LMHeadModel(config)
    if name == "llama":
        config = LlamaConfig(
            vocab_size=size.vocab, hidden_size=size.n_embd, intermediate_size=NanoGPTConfig(n_embd=size.n_embd,
            n_head=size.n_head, mlp_type="swiglu").intermediate_size, num_hidden_layers=size.n_layer,
            num_attention_heads=size.n_head,
            max_position_embeddings=context, tie_word_embeddings=True, bos_token_id=None, eos_token_id=None,
        )  # fmt: skip
        return LlamaForCausalLM(config)
    raise ValueError(name)


class Trainer:
    """A model + AdamW + fixed batch on `device`; `run(steps)` returns training tokens/s.

    `compile_backend` is torch.compile's backend when `compile_model` ("eager" only traces, a quick CPU check).
    """

    def __init__(
        self, name: str, precision: str, compile_model: bool = False, size: LMSize = CPU_RECIPE,
        device: str = "cpu", compile_backend: str = "inductor",
    ):  # fmt: skip
        self.size, self.device, self.precision = size, torch.device(device), precision
        self.model = build(name, size.block, size).train().to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        generator = torch.Generator().manual_seed(0)
        self.batch = torch.randint(0, size.vocab, (size.batch, size.block), generator=generator).to(self.device)
        self.forward = torch.compile(self.model, backend=compile_backend) if compile_model else self.model
        self.run(5 if compile_model else 2)  # warm-up (compilation takes a few calls)

    def step(self) -> None:
        with autocast(self.device, self.precision):
            loss = self.forward(input_ids=self.batch, labels=self.batch, use_cache=False).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def run(self, steps: int) -> float:
        synchronize(self.device)
        start = time.perf_counter()
        for _ in range(steps):
            self.step()
        synchronize(self.device)
        return steps * self.size.batch * self.size.block / (time.perf_counter() - start)


class Generator:
    """Greedy cached generation of `new_tokens` tokens from a one-token prompt; `run()` returns tokens/s."""

    def __init__(self, name: str, new_tokens: int):
        self.model = build(name, 1024).eval()
        self.new_tokens = new_tokens
        self.prompt = torch.zeros((1, 1), dtype=torch.long)
        self.run(warmup=True)

    @torch.no_grad()
    def run(self, warmup: bool = False) -> float:
        n = 8 if warmup else self.new_tokens
        start = time.perf_counter()
        out = self.model.generate(
            self.prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False, use_cache=True, pad_token_id=0
        )
        elapsed = time.perf_counter() - start
        assert out.shape[1] == 1 + n
        return n / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=8, help="training steps per model per round")
    parser.add_argument("--gen-tokens", type=int, default=500)
    parser.add_argument("--gen-rounds", type=int, default=5)
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile contestant")
    parser.add_argument("--precisions", default="fp32,bf16", help="comma-separated training precisions: fp32,bf16")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1 is steadiest when other jobs share the CPU)"
    )
    args = parser.parse_args()
    logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")

    trainers = {}
    for name in MODELS:
        for precision in args.precisions.split(","):
            trainers[f"{name} {precision}"] = Trainer(name, precision)
    if not args.no_compile:
        for precision in args.precisions.split(","):
            try:
                trainers[f"nanogpt {precision} compiled"] = Trainer("nanogpt", precision, compile_model=True)
            except Exception as error:  # noqa: BLE001 - report and carry on without it
                print(f"torch.compile ({precision}) failed here: {type(error).__name__}: {str(error)[:200]}")
    train = interleaved(trainers, args.rounds, lambda trainer: trainer.run(args.steps))

    print(
        f"\nTraining, tokens/s (fwd+bwd+AdamW, batch {CPU_RECIPE.batch}x{CPU_RECIPE.block}), median of {args.rounds} interleaved rounds"
    )
    base = train["gpt2 fp32"]
    for name, value in train.items():
        print(f"  {name:26s} {value:9.0f}   x{value / base:5.2f} vs gpt2 fp32")
    print("  ratios:")
    for precision in args.precisions.split(","):
        print(f"    nanogpt/gpt2 {precision}:        x{train[f'nanogpt {precision}'] / train[f'gpt2 {precision}']:.2f}")
        print(
            f"    nanogpt/gpt2-stock {precision}:  x{train[f'nanogpt {precision}'] / train[f'gpt2-stock {precision}']:.2f}"
        )
        print(
            f"    nanogpt-llama/llama {precision}: x{train[f'nanogpt-llama {precision}'] / train[f'llama {precision}']:.2f}"
        )

    generators = {name: Generator(name, args.gen_tokens) for name in ("nanogpt", "gpt2", "nanogpt-llama", "llama")}
    gen = interleaved(generators, args.gen_rounds, lambda generator: generator.run())
    print(
        f"\nGeneration, tokens/s (greedy, cached, batch 1, {args.gen_tokens} new tokens), median of {args.gen_rounds}"
    )
    for name, value in gen.items():
        print(
            f"  {name:26s} {value:9.0f}   x{value / gen['gpt2']:5.2f} vs gpt2   x{value / gen['llama']:5.2f} vs llama"
        )


if __name__ == "__main__":
    main()

"""NanoGPT generating past `block_size` vs nanoGPT's own `GPT.generate` loop, side by side on one CPU.

    git clone https://github.com/karpathy/nanoGPT /tmp/nanoGPT        # its model.py is imported, never copied
    python bench/bench_past_block_size.py --nanogpt_dir /tmp/nanoGPT   # ~2 minutes at one thread

nanoGPT's `generate` feeds the last `block_size` tokens to the model at every step; NanoGPT with learned positions
does the same inside `generate()` (its cache cannot survive the shift of positions, see
`NanoGPTForCausalLM.prepare_inputs_for_generation`). Both models get the same weights (nanoGPT's parameter names
are ours) at nanoGPT's shakespeare_char CPU recipe size (4 layers, 4 heads, 128 wide, block 64, vocab 65), and
sample like nanoGPT's `sample.py` (temperature 0.8, top_k 200) `--new_tokens` tokens (default 500) from a one-token
prompt, batch 1. Contestants:

* `nanogpt generate()`: `NanoGPTForCausalLM.generate`, the thing users call;
* `nanoGPT GPT.generate`: nanoGPT's model and loop, the reference every ratio is against;
* `bare loop on NanoGPT`: nanoGPT's crop-forward-sample loop written around our model (no transformers
  `generate()` machinery), which separates the model's own speed from the generation framework's per-step cost;
* `nanogpt-llama generate()`: the RoPE variant, whose sliding-window cache keeps going past `block_size`
  (not the same computation: shown for scale).

Before timing, greedy decoding (top_k 1 for nanoGPT) of both models must give the same tokens. Timings are
interleaved (each round runs every contestant once, in rotating order) and the report gives medians and ratios
from the same rounds; absolute speeds from different runs or machines are not comparable.
"""

import argparse
import importlib.util
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch
from nanoformer.modeling import NanoGPTConfig, NanoGPTForCausalLM
from timing import interleaved
from transformers.utils import logging

SIZE = {"vocab_size": 65, "n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 64}
LLAMA_STYLE = {"norm_type": "rmsnorm", "mlp_type": "swiglu", "position_embedding_type": "rope", "bias": False}
TEMPERATURE, TOP_K = 0.8, 200  # nanoGPT's sample.py defaults


def load_nanogpt_module(nanogpt_dir: Path):
    """nanoGPT's own `model.py`, imported from a clone of karpathy/nanoGPT."""
    path = nanogpt_dir / "model.py"
    if not path.is_file():
        sys.exit(f"bench_past_block_size.py: error: {path} not found; git clone https://github.com/karpathy/nanoGPT")
    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nanogpt_twin(module, ours: NanoGPTForCausalLM) -> torch.nn.Module:
    """nanoGPT's `GPT` with our model's weights (the parameter names are the same by design)."""
    c = ours.config
    reference = module.GPT(module.GPTConfig(block_size=c.block_size, vocab_size=c.vocab_size, n_layer=c.n_layer,
                                            n_head=c.n_head, n_embd=c.n_embd, dropout=0.0, bias=c.bias))  # fmt: skip
    theirs = reference.state_dict()
    missing = set(theirs) - set(ours.state_dict())
    if missing:
        sys.exit(f"bench_past_block_size.py: error: nanoGPT parameters without a NanoGPT twin: {sorted(missing)}")
    reference.load_state_dict({name: ours.state_dict()[name] for name in theirs})
    return reference.eval()


@torch.no_grad()
def bare_loop(model: NanoGPTForCausalLM, idx: torch.Tensor, new_tokens: int, temperature: float, top_k: int):
    """nanoGPT's sampling loop (crop to block_size, forward, sample the last position) around our model."""
    block = model.config.block_size
    for _ in range(new_tokens):
        logits = model(idx[:, -block:], use_cache=False, logits_to_keep=1).logits[:, -1, :] / temperature
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
        probs = torch.softmax(logits.masked_fill(logits < kth, -float("inf")), dim=-1)
        idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
    return idx


def cpu_name() -> str:
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines()
        name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Model name")), "?")
        flags = next((line for line in lines if line.startswith("Flags")), "")
        extras = [flag for flag in ("avx512f", "avx512_bf16", "amx_bf16") if f" {flag}" in flags]
        return f"{name} ({', '.join(extras) or 'no AVX-512'})"
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nanogpt_dir", type=Path, required=True, help="a clone of karpathy/nanoGPT")
    parser.add_argument("--new_tokens", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    module = load_nanogpt_module(args.nanogpt_dir)

    torch.manual_seed(0)
    ours = NanoGPTForCausalLM(NanoGPTConfig(**SIZE, dropout=0.0)).eval()
    llama = NanoGPTForCausalLM(NanoGPTConfig(**SIZE, **LLAMA_STYLE, dropout=0.0)).eval()
    reference = nanogpt_twin(module, ours)
    prompt = torch.zeros((1, 1), dtype=torch.long)
    n = args.new_tokens

    with torch.no_grad():  # the same computation: greedy tokens agree (past block_size too)
        greedy_ours = ours.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
        greedy_theirs = reference.generate(prompt, n, temperature=1.0, top_k=1)
    if not torch.equal(greedy_ours, greedy_theirs):
        first = (greedy_ours != greedy_theirs).nonzero()[0, 1].item()
        sys.exit(f"bench_past_block_size.py: error: greedy tokens differ from nanoGPT's at position {first}")
    sampling = {"do_sample": True, "temperature": TEMPERATURE, "top_k": TOP_K, "pad_token_id": 0}
    contestants = {
        "nanogpt generate()": lambda: ours.generate(prompt, max_new_tokens=n, min_new_tokens=n, **sampling),
        "nanoGPT GPT.generate": lambda: reference.generate(prompt, n, temperature=TEMPERATURE, top_k=TOP_K),
        "bare loop on NanoGPT": lambda: bare_loop(ours, prompt, n, TEMPERATURE, TOP_K),
        "nanogpt-llama generate()": lambda: llama.generate(prompt, max_new_tokens=n, min_new_tokens=n, **sampling),
    }

    def tokens_per_second(run) -> float:
        start = time.perf_counter()
        with torch.no_grad():
            out = run()
        elapsed = time.perf_counter() - start
        assert out.shape == (1, 1 + n)
        return n / elapsed

    for run in contestants.values():  # warm-up
        tokens_per_second(run)
    speeds = interleaved(contestants, args.rounds, tokens_per_second)
    base = speeds["nanoGPT GPT.generate"]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), CPU: {cpu_name()}")
    print(f"greedy tokens identical to nanoGPT's for all {n} new tokens (block_size {SIZE['block_size']})")
    print(f"\nSampling {n} tokens past block_size {SIZE['block_size']}, batch 1, median of {args.rounds} interleaved rounds")
    print("| contestant | tokens/s | vs nanoGPT GPT.generate |\n|---|---|---|")
    for name, value in speeds.items():
        print(f"| {name} | {value:.0f} | {value / base:.2f}x |")


if __name__ == "__main__":
    main()

"""Sample text from a saved causal LM folder (nanoGPT's ``sample.py`` for Hugging Face folders).

    python training/sample_lm.py --model_name_or_path out --prompt "ROMEO:" --max_new_tokens 500 --num_samples 3
    nanoformer-sample --model_name_or_path out --temperature 0.8 --top_k 200

Loads any folder written by ``save_pretrained`` (a NanoGPT from ``train_lm.py``, or any other causal LM) with
`AutoModelForCausalLM` and `AutoTokenizer`, and prints exactly ``--max_new_tokens`` new tokens per sample (one token is
one character with the char tokenizer), also past the model's ``block_size``: like nanoGPT, the model then conditions on
the last ``block_size`` tokens.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from nanoformer.training.arguments import (
    CliParser,
    UsageError,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    run_cli,
)
from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed

try:  # registers NanoGPT with the Auto classes, so saved folders load without trust_remote_code
    import nanoformer.modeling  # noqa: F401
except ImportError:  # a folder with remote code still loads with --trust_remote_code
    pass


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = CliParser(
        description="Generate text from a saved causal language model.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--model_name_or_path", "--model_dir", required=True, help="A folder written by save_pretrained (or a Hub id)."
    )
    p.add_argument("--prompt", default="\n", help="Text to continue (nanoGPT starts from a newline).")
    p.add_argument("--prompt_file", default=None, help="Read the prompt from this UTF-8 file instead of --prompt.")
    p.add_argument(
        "--max_new_tokens", type=positive_int, default=500, help="New tokens (characters, for a char model) per sample."
    )
    p.add_argument("--num_samples", type=positive_int, default=1, help="Number of independent samples.")
    p.add_argument(
        "--temperature", type=non_negative_float, default=0.8, help="Softmax temperature; 0 means greedy decoding (no sampling)."
    )
    p.add_argument("--top_k", type=non_negative_int, default=200, help="Sample among the k most likely tokens only (0: all).")
    p.add_argument(
        "--top_p", type=positive_float, default=1.0, help="Nucleus sampling: the smallest set with this mass (1.0: all)."
    )
    p.add_argument("--seed", type=int, default=1337, help="Random seed, for reproducible samples.")
    p.add_argument("--device", default=None, help="Device to run on (default: cuda if available, else cpu).")
    p.add_argument("--trust_remote_code", action="store_true", help="Allow the folder's own modelling code to run.")
    args = p.parse_args(argv)
    if args.top_p > 1:
        p.error(f"argument --top_p: must be in (0, 1], got {args.top_p}")
    name = args.model_name_or_path
    if (os.sep in name or name.startswith(".")) and not os.path.isdir(name):
        p.error(f"model folder not found: {name}")
    if args.prompt_file and not os.path.isfile(args.prompt_file):
        p.error(f"--prompt_file {args.prompt_file}: file not found")
    return args


def generate_samples(model, tokenizer, prompt: str, args: argparse.Namespace) -> list[str]:
    """`args.num_samples` continuations of `prompt` (the new text only), each exactly `args.max_new_tokens` tokens."""
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    if tokenizer.unk_token_id is not None and tokenizer.unk_token_id in prompt_ids:
        unknown = prompt_ids.count(tokenizer.unk_token_id)
        print(
            f"warning: {unknown} prompt token(s) are unknown to the tokenizer (mapped to {tokenizer.unk_token})",
            file=sys.stderr,
        )
    if not prompt_ids:  # an empty prompt: start from the bos (or eos) token, as GPT-2 does
        start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        if start is None:
            raise ValueError("empty prompt and the tokenizer has no bos/eos token to start from; give --prompt")
        prompt_ids = [start]
    input_ids = torch.tensor([prompt_ids], device=model.device)
    sampling = args.temperature > 0
    out = model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        do_sample=sampling,
        temperature=args.temperature if sampling else None,
        top_k=args.top_k if sampling else None,
        top_p=args.top_p if sampling else None,
        num_return_sequences=args.num_samples,
        max_new_tokens=args.max_new_tokens,
        min_new_tokens=args.max_new_tokens,  # never stop early at eos: print as much as asked, like nanoGPT
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
    )
    return [tokenizer.decode(row[len(prompt_ids) :], skip_special_tokens=True) for row in out]


def sample(args: argparse.Namespace) -> None:
    """Load the model and print the samples."""
    prompt = args.prompt
    if args.prompt_file:
        with open(args.prompt_file, encoding="utf-8", errors="replace") as f:
            prompt = f.read()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path, trust_remote_code=args.trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path, trust_remote_code=args.trust_remote_code)
    except (OSError, ValueError) as err:
        raise UsageError(f"cannot load {args.model_name_or_path}: {str(err).strip().splitlines()[0]}") from None
    model.to(device).eval()
    set_seed(args.seed)
    with torch.no_grad():
        samples = generate_samples(model, tokenizer, prompt, args)
    for text in samples:
        print(prompt + text)
        print("---------------")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run_cli(lambda: sample(args), "sample_lm", errors=(ValueError,))


if __name__ == "__main__":
    main()

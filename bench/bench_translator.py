"""Speed of the translator against transformers' MarianMTModel, same dimensions, ratios measured in one run.

    python bench/bench_translator.py                      # ~5-10 minutes on 2 busy cores
    python bench/bench_translator.py --rounds 3 --train-batch 32 --precisions fp32   # quicker look
    python bench/bench_translator.py --threads 1          # steadier on a machine shared with other jobs

Both models: d_model 256, 4 heads, FFN 1024, 3+3 layers, vocab 8000, one tied embedding, ReLU, post-LN,
sinusoidal positions, embeddings scaled by √d_model, dropout 0.1 (training), SDPA attention, random weights.
* training: target tokens/s of one step = forward + backward + AdamW on a batch of ~4k target tokens
  (default 128 sentences × 32 target tokens, 32 source tokens);
* decoding: new tokens/s of `generate()` with exactly 32 new tokens (min_new_tokens = max_new_tokens = 32), source
  length 24: greedy at batch 32 and beam 4 (length penalty 0.6) at batch 1, ours and Marian with the KV cache, plus
  ours with `use_cache=False` (the seed's way: the whole prefix re-run at every step).
Each figure is given in fp32 and under bf16 autocast.

The machine is shared and noisy, so measurements are interleaved: each round times every contestant once, in
rotating order; the report gives medians over rounds and ratios between contestants measured in the same rounds.
"""

import argparse
import time
from dataclasses import dataclass

import torch
from nanoformer.modeling import TranslatorConfig, TranslatorForConditionalGeneration
from timing import autocast, interleaved, synchronize
from transformers import MarianConfig, MarianMTModel
from transformers.utils import logging

PAD, BOS, EOS = 0, 2, 3
SRC_LEN_DECODE = 24


@dataclass(frozen=True)
class MTSize:
    """Dimensions shared by both models (default: this benchmark's CPU size; BASE: the paper's Transformer-base)."""

    vocab: int = 8000
    d_model: int = 256
    heads: int = 4
    ffn: int = 1024
    layers: int = 3


CPU_SIZE = MTSize()
BASE = MTSize(vocab=37000, d_model=512, heads=8, ffn=2048, layers=6)


def build(name: str, size: MTSize = CPU_SIZE) -> torch.nn.Module:
    """`ours` or `marian`, same architecture and sizes."""
    torch.manual_seed(0)
    dims = dict(
        vocab_size=size.vocab, d_model=size.d_model, encoder_layers=size.layers, decoder_layers=size.layers,
        encoder_attention_heads=size.heads, decoder_attention_heads=size.heads, encoder_ffn_dim=size.ffn,
        decoder_ffn_dim=size.ffn,
    )  # fmt: skip
    if name == "ours":
        return TranslatorForConditionalGeneration(TranslatorConfig(**dims))
    if name == "marian":
        config = MarianConfig(
            **dims, activation_function="relu", scale_embedding=True, dropout=0.1, attention_dropout=0.0,
            activation_dropout=0.0, max_position_embeddings=512, pad_token_id=PAD, eos_token_id=EOS,
            bos_token_id=BOS, decoder_start_token_id=BOS, forced_eos_token_id=EOS,
            share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
        )  # fmt: skip
        return MarianMTModel(config)
    raise ValueError(name)


def random_ids(generator: torch.Generator, batch: int, length: int, vocab: int = CPU_SIZE.vocab) -> torch.Tensor:
    """Random non-special tokens ending in </s> (no padding: both models take their fast path)."""
    ids = torch.randint(4, vocab, (batch, length), generator=generator)
    ids[:, -1] = EOS
    return ids


class Trainer:
    """One training contestant: model, AdamW and a fixed batch on `device`."""

    def __init__(
        self, name: str, precision: str, batch: int, src_len: int, tgt_len: int, size: MTSize = CPU_SIZE,
        device: str = "cpu",
    ):  # fmt: skip
        self.device, self.precision = torch.device(device), precision
        self.model = build(name, size).train().to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        generator = torch.Generator().manual_seed(0)
        self.inputs = {
            "input_ids": random_ids(generator, batch, src_len, size.vocab),
            "attention_mask": torch.ones(batch, src_len, dtype=torch.long),
            "labels": random_ids(generator, batch, tgt_len, size.vocab),
        }
        self.inputs = {key: value.to(self.device) for key, value in self.inputs.items()}
        self.target_tokens = batch * tgt_len
        self.step()  # warm-up (allocator, kernels)

    def step(self) -> None:
        with autocast(self.device, self.precision):
            loss = self.model(**self.inputs).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def run(self, steps: int) -> float:
        synchronize(self.device)
        start = time.perf_counter()
        for _ in range(steps):
            self.step()
        synchronize(self.device)
        return steps * self.target_tokens / (time.perf_counter() - start)


class Decoder:
    """One decoding contestant: `generate()` with exactly `new_tokens` new tokens per sequence.

    `model` lets several contestants share one eval-mode model (built from `name` and `size` when not given).
    """

    def __init__(
        self, name: str, precision: str, batch: int, num_beams: int, use_cache: bool, new_tokens: int,
        size: MTSize = CPU_SIZE, device: str = "cpu", model: torch.nn.Module | None = None,
    ):  # fmt: skip
        self.device, self.precision = torch.device(device), precision
        self.model = model if model is not None else build(name, size).eval().to(self.device)
        generator = torch.Generator().manual_seed(1)
        self.input_ids = random_ids(generator, batch, SRC_LEN_DECODE, size.vocab).to(self.device)
        self.kwargs = dict(
            num_beams=num_beams, length_penalty=0.6, use_cache=use_cache, do_sample=False,
            min_new_tokens=new_tokens, max_new_tokens=new_tokens,
        )  # fmt: skip
        self.run()  # warm-up

    def run(self) -> float:
        synchronize(self.device)
        start = time.perf_counter()
        with torch.inference_mode(), autocast(self.device, self.precision):
            out = self.model.generate(
                input_ids=self.input_ids, attention_mask=torch.ones_like(self.input_ids), **self.kwargs
            )
        synchronize(self.device)
        elapsed = time.perf_counter() - start
        new_tokens = self.kwargs["max_new_tokens"]
        assert out.shape == (len(self.input_ids), 1 + new_tokens), out.shape
        return len(out) * new_tokens / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2, help="training steps per contestant per round")
    parser.add_argument("--train-batch", type=int, default=128, help="sentences per training batch")
    parser.add_argument("--src-len", type=int, default=32)
    parser.add_argument("--tgt-len", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=32, help="forced new tokens per decoded sequence")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--skip-decoding", action="store_true")
    args = parser.parse_args()
    logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} interleaved rounds (median)")

    if not args.skip_training:
        trainers = {
            f"{name} {precision}": Trainer(name, precision, args.train_batch, args.src_len, args.tgt_len)
            for precision in args.precisions
            for name in ("ours", "marian")
        }
        train = interleaved(trainers, args.rounds, lambda trainer: trainer.run(args.steps))
        tokens = args.train_batch * args.tgt_len
        print(
            f"\nTraining, target tokens/s (fwd+bwd+AdamW, {args.train_batch}x{args.tgt_len} = {tokens} target tokens)"
        )
        for precision in args.precisions:
            ours, marian = train[f"ours {precision}"], train[f"marian {precision}"]
            print(f"  {precision}: ours {ours:8.0f}   marian {marian:8.0f}   ours/marian x{ours / marian:.2f}")

    if not args.skip_decoding:
        settings = {"greedy b32": (32, 1), "beam4 b1": (1, 4)}
        for setting, (batch, beams) in settings.items():
            decoders = {}
            for precision in args.precisions:
                decoders[f"ours {precision}"] = Decoder("ours", precision, batch, beams, True, args.new_tokens)
                decoders[f"marian {precision}"] = Decoder("marian", precision, batch, beams, True, args.new_tokens)
                decoders[f"ours-nocache {precision}"] = Decoder("ours", precision, batch, beams, False, args.new_tokens)
            speed = interleaved(decoders, args.rounds, lambda decoder: decoder.run())
            print(
                f"\nDecoding {setting}, new tokens/s ({args.new_tokens} forced new tokens, source length {SRC_LEN_DECODE})"
            )
            for precision in args.precisions:
                ours, marian = speed[f"ours {precision}"], speed[f"marian {precision}"]
                nocache = speed[f"ours-nocache {precision}"]
                print(
                    f"  {precision}: ours {ours:7.0f}   marian {marian:7.0f}   ours no-cache {nocache:7.0f}   "
                    f"ours/marian x{ours / marian:.2f}   cache/no-cache x{ours / nocache:.2f}"
                )


if __name__ == "__main__":
    main()

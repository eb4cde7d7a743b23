"""End-to-end learning check: a small post-LN translator learns to reverse random token sequences.

Reversal is impossible without correct masks, positions and cross-attention: the decoder must find, for each output
position, the source token counted from the other end. ~30 s on one core.
"""

import pytest
import torch
from nanoformer.modeling import TranslatorConfig, TranslatorForConditionalGeneration

PAD, BOS, EOS = 0, 2, 3
FIRST_SYMBOL, NUM_SYMBOLS = 4, 16
MIN_LEN, MAX_LEN = 4, 10


def reversal_batch(generator: torch.Generator, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded sources `x1 … xn </s>` and labels `xn … x1 </s>` (-100 on padding), n in [MIN_LEN, MAX_LEN]."""
    lengths = torch.randint(MIN_LEN, MAX_LEN + 1, (size,), generator=generator)
    input_ids = torch.full((size, MAX_LEN + 1), PAD)
    labels = torch.full((size, MAX_LEN + 1), -100)
    for row, length in enumerate(lengths.tolist()):
        tokens = torch.randint(FIRST_SYMBOL, FIRST_SYMBOL + NUM_SYMBOLS, (length,), generator=generator)
        input_ids[row, :length], input_ids[row, length] = tokens, EOS
        labels[row, :length], labels[row, length] = tokens.flip(0), EOS
    return input_ids, input_ids.ne(PAD).long(), labels


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_small_translator_learns_to_reverse_sequences():
    torch.manual_seed(0)
    config = TranslatorConfig(
        vocab_size=FIRST_SYMBOL + NUM_SYMBOLS, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
        dropout=0.0, max_position_embeddings=32,
    )
    model = TranslatorForConditionalGeneration(config).train()
    steps, warmup = 600, 50
    # Short linear warmup, then linear decay to 0 (reaches >= 99% on seeds 0, 1 and 2; a constant rate after
    # warmup was seed-sensitive, 87-99%).
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup) * (1 - step / steps)
    )
    generator = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(steps):
        input_ids, attention_mask, labels = reversal_batch(generator, 64)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    assert sum(losses[-50:]) / 50 < 0.2 * sum(losses[:50]) / 50

    # Fresh sequences (another generator), greedy decoding through the KV cache, exact match of the whole output.
    model.eval()
    input_ids, attention_mask, labels = reversal_batch(torch.Generator().manual_seed(12345), 200)
    output = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1, max_new_tokens=MAX_LEN + 2)
    exact = 0
    for row in range(len(output)):
        expected = [t for t in labels[row].tolist() if t != -100]
        decoded = output[row, 1:].tolist()  # drop <s>
        decoded = decoded[: decoded.index(EOS) + 1] if EOS in decoded else decoded
        exact += decoded == expected
    assert exact / len(output) >= 0.9, f"only {exact}/{len(output)} sequences reversed exactly"

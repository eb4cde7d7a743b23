"""Pictures of attention: heatmaps of a saved model's attention weights, with the tokens as labels.

    python -m nanoformer.training.plot_attention --model_dir out/tatoeba --text "I have to go to sleep." \\
        --output attn.png
    nanoformer-plot-attention --model_dir out/tatoeba --text "..." --layer 2 --head 1 --output attn.png

A translator folder (`AutoModelForSeq2SeqLM`, ``config.is_encoder_decoder``): the text is translated with the
model's own `generate()` defaults (beam 4, length penalty 0.6 for train_mt.py folders), or ``--target`` gives the
translation to force by teacher forcing; the decoder then re-reads that translation in one forward pass and the
figure shows its **cross-attention** — source tokens across, translation tokens down, as in the alignment figures
of Bahdanau et al. and Vaswani et al. Row *i* is the decoder step that outputs translation token *i* (the last row
is the step that outputs ``</s>``), so each row is what the model looked at to produce that token; with the greedy
decoding the rows equal, to float precision, the weights `generate(output_attentions=True)` reports step by step.
``--kind self`` draws the decoder's masked self-attention instead (decoder input tokens, ``<s>`` first, on both
axes) and ``--kind encoder`` the encoder's self-attention (source × source).

A NanoGPT folder (`AutoModelForCausalLM`): the causal self-attention over the text's tokens (query token down,
key token across; the masked upper triangle is left blank). A text longer than ``block_size`` keeps its first ``block_size``
tokens (said on stderr).

Panels: by default one per layer, heads averaged (rows still sum to 1); ``--layer L`` one layer, ``--head H`` one
head (of each layer, or of ``--layer L``), ``--head all`` one panel per head. Indices count from 0 as in
``outputs.cross_attentions[L][:, H]``; negative ones count from the end. All panels share one colour scale.

Weights come from transformers' ``output_attentions=True``, which only the eager attention kernel can return (SDPA
returns none): the model is loaded with ``attn_implementation="eager"``, as transformers' docs advise.

Token labels: each token id is decoded on its own, surrounding spaces stripped (a token that is only whitespace
shows as ``␣``, ``\\n`` or ``\\t``). A byte-level BPE splits a rare Chinese character into byte pieces that do not
decode on their own (U+FFFD): consecutive pieces are merged until they decode to whole characters, and the figure
shows one row/column for the merged token — attention *to* it is the sum over its pieces (the attention mass on
that character) and attention *from* it the mean over its pieces, so rows still sum to 1. ``--raw_pieces`` draws the
pieces unmerged instead (labels then contain ``�``).

Fonts: matplotlib's default DejaVu Sans has no Han glyphs. When a label or the heading (it names the translation)
needs glyphs DejaVu lacks, a font that has them all is looked for, in this order: ``--font PATH`` (a TTF/OTF/TTC file); a system font matplotlib knows
(Noto Sans CJK SC, Source Han Sans SC, WenQuanYi, … preferred, then any font that covers the labels), or, for a
font installed after matplotlib built its font cache, one that ``fc-list :lang=zh`` lists; else Noto Sans CJK
(SIL Open Font Licence) from the `noto-cjk-sans-otc` package (15 MB; `pip install "nanoformer[cjk]"`, part of
the `dev` extra), so the glyphs render without a system font. Latin text stays in DejaVu Sans, the CJK font is matplotlib's fallback.
If none is found, one warning line says what to install or pass, and the PNG is still written (with boxes).

Errors (missing model folder, empty ``--text``, a layer or head index out of range, an unwritable ``--output``) are
one line, exit status 2.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from nanoformer.training.arguments import CliParser, UsageError, positive_int, run_cli
from nanoformer.training.common import missing_model_folder

KINDS = ("cross", "self", "encoder")
REPLACEMENT = "\ufffd"  # what a byte-level BPE piece that is not a whole character decodes to
# System CJK fonts preferred, Simplified Chinese first (the translator writes Simplified and Traditional Chinese).
PREFERRED_CJK_FONTS = (
    "Noto Sans CJK SC",
    "Source Han Sans SC",
    "Source Han Sans CN",
    "Noto Sans SC",
    "WenQuanYi Zen Hei",
    "WenQuanYi Micro Hei",
    "Microsoft YaHei",
    "PingFang SC",
    "Hiragino Sans GB",
    "Heiti SC",
    "SimHei",
    "Droid Sans Fallback",
    "AR PL UMing CN",
    "Noto Sans CJK TC",
    "Noto Sans CJK JP",
    "Noto Sans CJK KR",
)
NO_FONT_HINT = (
    "pip install 'nanoformer[cjk]' (the noto-cjk-sans-otc font), install a system CJK font (e.g. apt-get install fonts-noto-cjk), "
    "or pass --font PATH"
)


@dataclass
class AttentionMaps:
    """The attention weights of one sentence, with the token ids and labels of both axes.

    `weights` has shape (layers, heads, queries, keys), float32 on the CPU; each row (last axis) sums to 1.
    `kind` is "cross", "self" or "encoder" for a translator and "causal" for a causal LM. `translation` is the
    translator's output text and `source` its input (None for a causal LM). `query_groups` / `key_groups` give,
    for each label, the token positions it stands for (one each, unless byte pieces were merged).
    """

    kind: str
    weights: torch.Tensor
    query_ids: list[int]
    key_ids: list[int]
    query_labels: list[str]
    key_labels: list[str]
    query_groups: list[list[int]]
    key_groups: list[list[int]]
    translation: str | None = None
    source: str | None = None

    @property
    def num_layers(self) -> int:
        return self.weights.shape[0]

    @property
    def num_heads(self) -> int:
        return self.weights.shape[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = CliParser(
        prog="plot_attention",  # as run_cli names it: every error line starts the same way
        description="Draw a saved model's attention weights over a text as PNG heatmaps, tokens as labels.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--model_dir", required=True, help="A folder written by train_mt.py or train_lm.py (or a Hub id).")
    p.add_argument("--text", required=True, help="The source sentence (translator) or the text (causal LM).")
    p.add_argument(
        "--target",
        default=None,
        help="Translator only: the translation to draw, forced by teacher forcing; None = the model's own translation.",
    )
    p.add_argument("--output", default="attention.png", help="The image to write (PNG; .pdf/.svg work too).")
    p.add_argument(
        "--kind",
        default=None,
        choices=KINDS,
        help="Translator: decoder cross-attention, decoder self-attention or encoder self-attention; None = cross "
        "(a causal LM has only self).",
    )
    p.add_argument("--layer", type=int, default=None, help="Draw this layer only (0 = first, -1 = last); None = all.")
    p.add_argument(
        "--head", default=None, help="Draw this head only (0-based), or 'all' for one panel per head; None = mean."
    )
    p.add_argument("--raw_pieces", action="store_true", help="Do not merge byte-level BPE pieces of one character.")
    p.add_argument("--font", default=None, help="A TTF/OTF/TTC font file for labels DejaVu Sans cannot draw (CJK).")
    p.add_argument("--dpi", type=positive_int, default=150, help="Resolution of the image.")
    p.add_argument("--device", default=None, help="torch device; None = cpu.")
    args = p.parse_args(argv)
    if not args.text.strip():
        p.error("--text is empty: give the sentence to draw the attention of")
    if args.target is not None and not args.target.strip():
        p.error("--target is empty: give the translation to force, or leave it out")
    if missing_model_folder(args.model_dir):
        p.error(f"--model_dir {args.model_dir}: folder not found")
    if args.head is not None and args.head != "all":
        try:
            args.head = int(args.head)
        except ValueError:
            p.error(f"argument --head: expected an integer or 'all', got {args.head!r}")
    if args.font is not None and not Path(args.font).is_file():
        p.error(f"--font {args.font}: file not found")
    output = Path(args.output).expanduser()
    if output.is_dir():
        p.error(f"--output {args.output}: is a folder; give a file name such as attn.png")
    probe = next((d for d in output.resolve().parents if d.exists()), None)
    if probe is not None and (not probe.is_dir() or not os.access(probe, os.W_OK)):
        p.error(f"--output {args.output}: {probe} is not a writable folder")
    return args


# ---------------------------------------------------------------- the model and its attention weights


def load_model(model_dir: str, device: str | None = None):
    """(model, tokenizer) of `model_dir`: `AutoModelForSeq2SeqLM` when its config is an encoder–decoder, else
    `AutoModelForCausalLM`; eager attention (the kernel that returns weights), eval mode. A folder or Hub id that
    holds no such model is a one-line `UsageError`."""
    import nanoformer.modeling  # noqa: F401 - registers NanoGPT and the translator with the Auto classes
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    where = "" if Path(model_dir).expanduser().is_dir() else " (no such folder; tried it as a Hub id)"
    try:
        config = AutoConfig.from_pretrained(model_dir)
        auto = AutoModelForSeq2SeqLM if getattr(config, "is_encoder_decoder", False) else AutoModelForCausalLM
        model = auto.from_pretrained(model_dir, attn_implementation="eager")
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except (OSError, ValueError, KeyError, ImportError) as error:  # what HF raises for something that is no model
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UsageError(f"--model_dir {model_dir}: cannot load a model{where}: {first}") from None
    return model.to(device or "cpu").eval(), tokenizer


def _stack(attentions: Sequence[torch.Tensor] | None, what: str) -> torch.Tensor:
    """(layers, heads, queries, keys) of the first batch row of transformers' per-layer attention tuple."""
    if not attentions:
        raise UsageError(
            f"the model returned no {what} weights with output_attentions=True (its attention kernel does not "
            "record them; load it with attn_implementation='eager')"
        )
    return torch.stack([layer[0] for layer in attentions]).float().cpu()


def _single_groups(n: int) -> list[list[int]]:
    return [[i] for i in range(n)]


@torch.no_grad()
def attention_maps(model, tokenizer, text: str, *, kind: str | None = None, target: str | None = None) -> AttentionMaps:
    """The attention weights of `model` over `text`, unmerged: one label per token.

    Translator: `kind` "cross" (default; translation tokens × source tokens), "self" (decoder input × decoder input)
    or "encoder" (source × source); the translation is `target` forced by teacher forcing, or the model's own
    `generate()` output with its default settings. Causal LM: `kind` None or "self" (text tokens × text tokens).
    The model must run an attention kernel that returns weights (eager: see `load_model`).
    """
    device = next(model.parameters()).device
    if getattr(model.config, "is_encoder_decoder", False):
        return _translator_maps(model, tokenizer, text, kind or "cross", target, device)
    if kind not in (None, "self"):
        raise UsageError(f"--kind {kind} needs a translator (encoder–decoder); a causal LM has self-attention only")
    if target is not None:
        raise UsageError("--target needs a translator (encoder–decoder); a causal LM reads --text only")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise UsageError(f"--text {text!r} gives no tokens")
    limit = getattr(model.config, "block_size", None) or getattr(model.config, "max_position_embeddings", None)
    if limit is not None and len(ids) > limit:
        print(f"plot_attention: --text has {len(ids)} tokens; drawing the first {limit} (block_size)", file=sys.stderr)
        ids = ids[:limit]
    output = model(torch.tensor([ids], device=device), output_attentions=True)
    labels = token_labels(tokenizer, ids)
    groups = _single_groups(len(ids))
    weights = _stack(output.attentions, "self-attention")
    return AttentionMaps("causal", weights, ids, ids, labels, labels, groups, groups)


def _translator_maps(model, tokenizer, text: str, kind: str, target: str | None, device) -> AttentionMaps:
    from nanoformer.modeling import encode_sources

    if kind not in KINDS:
        raise UsageError(f"--kind {kind}: expected one of {', '.join(KINDS)}")
    limit = getattr(model.config, "max_position_embeddings", None)
    (source,), cut = encode_sources(tokenizer, [text], limit)
    if cut:
        print(f"plot_attention: --text is longer than {limit} tokens; truncated to fit the model", file=sys.stderr)
    input_ids = torch.tensor([source], device=device)
    start = model.config.decoder_start_token_id
    if target is not None:
        labels = tokenizer(text_target=target)["input_ids"]
        if not labels:
            raise UsageError(f"--target {target!r} gives no tokens")
        if limit is not None and len(labels) > limit:  # the decoder reads <s> + all but the last label
            print(
                f"plot_attention: --target is longer than {limit} tokens; truncated to fit the model", file=sys.stderr
            )
            labels = [*labels[: limit - 1], labels[-1]]
    else:
        sequence = model.generate(input_ids, attention_mask=torch.ones_like(input_ids))[0].tolist()
        labels = sequence[1:] if sequence and sequence[0] == start else sequence
        pad = model.config.pad_token_id
        while len(labels) > 1 and labels[-1] == pad:
            labels = labels[:-1]
    decoder_input = [start, *labels[:-1]]
    output = model(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        decoder_input_ids=torch.tensor([decoder_input], device=device),
        output_attentions=True,
    )
    translation = tokenizer.decode(labels, skip_special_tokens=True)
    if kind == "cross":
        weights, query_ids, key_ids = _stack(output.cross_attentions, "cross-attention"), labels, source
    elif kind == "self":
        weights, query_ids, key_ids = (
            _stack(output.decoder_attentions, "decoder self-attention"),
            decoder_input,
            decoder_input,
        )
    else:
        weights, query_ids, key_ids = _stack(output.encoder_attentions, "encoder self-attention"), source, source
    return AttentionMaps(
        kind,
        weights,
        list(query_ids),
        list(key_ids),
        token_labels(tokenizer, query_ids),
        token_labels(tokenizer, key_ids),
        _single_groups(len(query_ids)),
        _single_groups(len(key_ids)),
        translation,
        text,
    )


# ---------------------------------------------------------------- token labels and merged byte pieces


def _visible(text: str) -> str:
    """A token's text as a label: surrounding whitespace stripped; whitespace-only tokens made visible."""
    stripped = text.strip()
    if stripped:
        return stripped
    return "".join({" ": "␣", "\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(c, c) for c in text) or "∅"


def token_labels(tokenizer, ids: Sequence[int]) -> list[str]:
    """Each token id decoded on its own (special tokens kept, e.g. ``</s>``), as a readable label."""
    return [_visible(tokenizer.decode([i], skip_special_tokens=False, clean_up_tokenization_spaces=False)) for i in ids]


def piece_groups(tokenizer, ids: Sequence[int]) -> tuple[list[list[int]], list[str]]:
    """Positions grouped so that each group decodes to whole characters, and its label.

    A token that decodes on its own is a group of one; a byte piece (it decodes to U+FFFD) is joined with the
    following tokens until the joined ids decode without U+FFFD (a byte-level BPE splits a rare CJK character into
    2–3 such pieces). Pieces that never complete stay one group, labelled with the replacement mark.
    """

    def decode(span: Sequence[int]) -> str:
        return tokenizer.decode(list(span), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    groups: list[list[int]] = []
    labels: list[str] = []
    i = 0
    while i < len(ids):
        end = i + 1
        if REPLACEMENT in decode(ids[i:end]):
            # Join until whole: a UTF-8 character has at most 4 bytes, so a handful of pieces is always enough.
            for stop in range(i + 2, min(len(ids), i + 8) + 1):
                if REPLACEMENT not in decode(ids[i:stop]):
                    end = stop
                    break
        groups.append(list(range(i, end)))
        labels.append(_visible(decode(ids[i:end])))
        i = end
    return groups, labels


def _pool(weights: torch.Tensor, groups: list[list[int]], dim: int, how: str) -> torch.Tensor:
    parts = [weights.index_select(dim, torch.tensor(group)) for group in groups]
    return torch.cat(
        [part.sum(dim, keepdim=True) if how == "sum" else part.mean(dim, keepdim=True) for part in parts], dim
    )


def merge_pieces(maps: AttentionMaps, tokenizer) -> AttentionMaps:
    """`maps` with the byte pieces of each character merged into one token on both axes (see `piece_groups`):
    attention to a merged token is summed over its pieces, attention from it averaged, so rows still sum to 1."""
    query_groups, query_labels = piece_groups(tokenizer, maps.query_ids)
    key_groups, key_labels = piece_groups(tokenizer, maps.key_ids)
    weights = _pool(_pool(maps.weights, key_groups, 3, "sum"), query_groups, 2, "mean")
    return replace(
        maps,
        weights=weights,
        query_labels=query_labels,
        key_labels=key_labels,
        query_groups=query_groups,
        key_groups=key_groups,
    )


# ---------------------------------------------------------------- panels


def select_panels(
    maps: AttentionMaps, layer: int | None = None, head: int | str | None = None
) -> list[tuple[str, torch.Tensor]]:
    """(title, queries × keys matrix) of each panel to draw: every layer (or `layer`), heads averaged (or `head`,
    or "all": each head). Indices are 0-based, negative ones count from the end; out of range is a `UsageError`."""
    what = {"cross": "decoder", "self": "decoder", "encoder": "encoder", "causal": "model"}[maps.kind]

    def check(index: int, count: int, flag: str, unit: str) -> int:
        if not -count <= index < count:
            raise UsageError(f"{flag} {index}: the {what} has {count} {unit} (0 to {count - 1}, or -1 for the last)")
        return index % count

    layers = range(maps.num_layers) if layer is None else [check(layer, maps.num_layers, "--layer", "layers")]
    if head is None:
        heads: list[int | None] = [None]
    elif head == "all":
        heads = list(range(maps.num_heads))
    else:
        heads = [check(int(head), maps.num_heads, "--head", "heads per layer")]
    panels = []
    for lay in layers:
        for h in heads:
            matrix = maps.weights[lay].mean(0) if h is None else maps.weights[lay, h]
            panels.append((f"layer {lay}, " + ("heads averaged" if h is None else f"head {h}"), matrix))
    return panels


# ---------------------------------------------------------------- fonts


def _charmap(path: str, face_index: int = 0) -> set[int]:
    from matplotlib import ft2font

    try:  # face_index (a face of a .ttc collection) is new in matplotlib 3.10; older ones know face 0 only
        font = ft2font.FT2Font(path, face_index=face_index) if face_index else ft2font.FT2Font(path)
        return set(font.get_charmap())
    except (OSError, RuntimeError, ValueError, TypeError):
        return set()


def _covers(entry, needed: set[int]) -> bool:
    return needed <= _charmap(entry.fname, getattr(entry, "index", 0))


def _added_family(path: str, needed: set[int], flag: str | None = None) -> str | None:
    """Add a font file to matplotlib's manager (once); the family of its best face that covers `needed` (SC
    first), or None. An unreadable file is None, or a `UsageError` naming `flag` when the user gave it."""
    from matplotlib import font_manager

    manager = font_manager.fontManager
    real = os.path.realpath(path)
    if not any(os.path.realpath(e.fname) == real for e in manager.ttflist):
        try:
            manager.addfont(real)
        except (OSError, RuntimeError, ValueError) as error:
            if flag is None:
                return None
            raise UsageError(f"{flag} {path}: not a font file matplotlib can read ({error})") from None
    faces = [e for e in manager.ttflist if os.path.realpath(e.fname) == real and _covers(e, needed)]
    faces.sort(
        key=lambda e: (PREFERRED_CJK_FONTS.index(e.name) if e.name in PREFERRED_CJK_FONTS else 99, "Mono" in e.name)
    )
    return faces[0].name if faces else None


def _fc_list_zh() -> list[str]:
    """Files of the fonts fontconfig says cover Chinese (finds fonts installed after matplotlib built its cache)."""
    if shutil.which("fc-list") is None:
        return []
    try:
        listed = subprocess.run(["fc-list", ":lang=zh", "file"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return sorted({line.split(":")[0].strip() for line in listed.splitlines() if line.strip()})


def find_font(labels: Sequence[str], font: str | None = None) -> tuple[str | None, str, set[str]]:
    """A font family that can draw the characters of `labels` that DejaVu Sans lacks.

    Returns (family, where it came from, the characters needing it): family None with an empty set when DejaVu
    Sans draws every label, or None with the missing characters when no font has them. Looks at `font` (a file),
    then the system's fonts (preferred CJK names first), fontconfig's Chinese fonts, then the `noto-cjk-sans-otc`
    package.
    """
    from matplotlib import font_manager

    default = _charmap(font_manager.findfont("DejaVu Sans"))
    needed = {ord(c) for label in labels for c in label if not c.isspace() and ord(c) not in default}
    missing = {chr(c) for c in needed}
    family = _added_family(font, needed, "--font") if font is not None else None  # read even if not needed
    if not needed:
        return None, "DejaVu Sans", missing
    if font is not None:
        if family is None:
            raise UsageError(f"--font {font}: has no glyphs for {''.join(sorted(missing))[:20]}")
        return family, os.path.realpath(font), missing
    system = font_manager.fontManager.ttflist
    preferred = sorted(
        (e for e in system if e.name in PREFERRED_CJK_FONTS), key=lambda e: PREFERRED_CJK_FONTS.index(e.name)
    )
    hinted = [
        e for e in system if e not in preferred and re.search(r"CJK|Han|Hei|Song|Ming|Kai|Gothic|Fallback", e.name)
    ]
    for entry in (*preferred, *hinted):
        if _covers(entry, needed):
            return entry.name, entry.fname, missing
    for path in _fc_list_zh():
        if not any(e.fname == path for e in system):
            family = _added_family(path, needed)
            if family is not None:
                return family, path, missing
    try:
        import noto_cjk_sans_otc
    except ImportError:
        return None, "", missing
    path = str(noto_cjk_sans_otc.FONT_PATH)
    family = _added_family(path, needed)
    return family, (path if family else ""), missing


# ---------------------------------------------------------------- the figure


def plot(
    maps: AttentionMaps,
    output: str | os.PathLike,
    *,
    layer: int | None = None,
    head: int | str | None = None,
    font: str | None = None,
    title: str | None = None,
    dpi: int = 150,
) -> dict:
    """Draw the panels of `maps` (see `select_panels`) side by side into `output`, one shared colour scale.

    The figure is sized by token count (about 0.3 inch per token, source labels rotated), and the labels use a
    CJK font from `find_font` when they need one; without one, a single warning line on stderr and the image is
    still written. Returns what was drawn: panel titles, the font family used for CJK (or None) and the number of
    missing-glyph warnings matplotlib raised while drawing.
    """
    import matplotlib
    from matplotlib.figure import Figure  # no pyplot: no global figure state, the caller's backend is left alone

    panels = select_panels(maps, layer, head)
    heading = title or _heading(maps)  # it names the translation: CJK even where the labels are English
    family, source, missing = find_font([*maps.query_labels, *maps.key_labels, heading], font)
    if missing and family is None:
        print(
            f"plot_attention: warning: no font with glyphs for {''.join(sorted(missing))[:12]} found, they are drawn "
            f"as boxes; {NO_FONT_HINT}",
            file=sys.stderr,
        )
    families = ["DejaVu Sans", family] if family else ["DejaVu Sans"]
    n_queries, n_keys = len(maps.query_labels), len(maps.key_labels)
    widest = 4 if n_keys <= 16 else 3 if n_keys <= 30 else 2  # panels side by side, at most
    rows = math.ceil(len(panels) / widest)
    columns = math.ceil(len(panels) / rows)  # balanced: 4 panels as 2 × 2, not 3 + 1
    cell = 0.3
    panel_width = max(2.0, n_keys * cell) + 1.2
    panel_height = max(2.0, n_queries * cell) + 1.4
    vmax = max(float(matrix.max()) for _, matrix in panels) or 1.0
    axes_names = {
        "cross": ("source tokens", "translation tokens"),
        "self": ("decoder input tokens", "decoder input tokens"),
        "encoder": ("source tokens", "source tokens"),
        "causal": ("key tokens", "query tokens"),
    }[maps.kind]
    with (
        warnings.catch_warnings(record=True) as caught,
        matplotlib.rc_context({"font.family": families, "axes.titlesize": 10, "font.size": 9}),
    ):
        warnings.simplefilter("always")
        fig = Figure(figsize=(panel_width * columns + 1.0, panel_height * rows + 0.6), layout="constrained")
        axes = fig.subplots(rows, columns, squeeze=False)
        image = None
        colours = matplotlib.colormaps["viridis"].with_extremes(bad="white")
        causal = maps.kind in ("causal", "self") and n_queries == n_keys
        for index, (ax, (name, matrix)) in enumerate(zip(axes.flat, panels)):
            values = matrix.numpy().copy()
            if causal:  # what the mask forbids is left blank, not drawn as a weight of 0
                values[torch.ones(n_queries, n_keys).triu(1).bool().numpy()] = float("nan")
            image = ax.imshow(values, cmap=colours, vmin=0.0, vmax=vmax, aspect="equal", interpolation="nearest")
            ax.set_xticks(range(n_keys), maps.key_labels, rotation=90)
            ax.set_yticks(range(n_queries), maps.query_labels)
            if index % columns == 0:  # axis names once per row / column of panels: they would overlap the ticks
                ax.set_ylabel(axes_names[1])
            if index + columns >= len(panels):  # no panel below this one
                ax.set_xlabel(axes_names[0])
            ax.set_title(name)
        for ax in list(axes.flat)[len(panels) :]:
            ax.set_axis_off()
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
        fig.suptitle(heading, fontsize=10)
        try:
            fig.savefig(output, dpi=dpi, bbox_inches="tight")
        except (OSError, ValueError) as error:
            raise UsageError(f"--output {output}: cannot write the image ({error})") from None
    glyph_warnings = [w for w in caught if "missing from font" in str(w.message)]
    for w in caught:  # anything else matplotlib said is passed on; missing glyphs were reported once above
        if w not in glyph_warnings:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return {"panels": [name for name, _ in panels], "font": family, "font_source": source,
            "missing_glyph_warnings": len(glyph_warnings)}  # fmt: skip


def _heading(maps: AttentionMaps) -> str:
    name = {"cross": "cross-attention", "self": "decoder self-attention", "encoder": "encoder self-attention",
            "causal": "causal self-attention"}[maps.kind]  # fmt: skip
    return name if maps.translation is None else f"{name}: {maps.source} → {maps.translation}"


def run(args: argparse.Namespace) -> dict:
    """Load, compute, merge, draw; prints one line saying what was written."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    model, tokenizer = load_model(args.model_dir, args.device)
    maps = attention_maps(model, tokenizer, args.text, kind=args.kind, target=args.target)
    if not args.raw_pieces:
        maps = merge_pieces(maps, tokenizer)
    output = Path(args.output).expanduser()
    output.parent.mkdir(parents=True, exist_ok=True)
    drawn = plot(maps, output, layer=args.layer, head=args.head, font=args.font, dpi=args.dpi)
    said = f"translation: {maps.translation}; " if maps.translation is not None else ""
    print(f"{said}wrote {output} ({len(drawn['panels'])} panel(s) of {maps.kind} attention, "
          f"{len(maps.query_labels)}×{len(maps.key_labels)} tokens)")  # fmt: skip
    return drawn


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run_cli(lambda: run(args) and None, "plot_attention")


if __name__ == "__main__":
    main()

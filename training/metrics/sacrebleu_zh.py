"""A local `evaluate` metric: corpus BLEU (and optionally chrF) computed by sacreBLEU, with its signature.

Load it by path so that it works offline (no Hub round trip)::

    import evaluate
    from nanoformer.training.mt_evaluation import SACREBLEU_METRIC_PATH
    bleu = evaluate.load(SACREBLEU_METRIC_PATH)  # the path of this file
    bleu.compute(predictions=["今天天气很好。"], references=[["今天天气很好。"]])
    # {'score': 100.0, 'signature': 'nrefs:1|case:mixed|eff:no|tok:zh|smooth:exp|version:2.6.0', ...}

The tokenizer defaults to sacreBLEU's ``zh`` (each CJK character is a token, the rest is split like ``13a``),
which is the standard for Chinese output. Unlike the Hub's ``sacrebleu`` metric, the result carries the
sacreBLEU signature, so every reported score says how it was computed.
"""

import datasets
import evaluate
import sacrebleu

_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    pages = "186--191",
}
"""

_DESCRIPTION = "Corpus BLEU from sacreBLEU (tokenize='zh' by default), returned with the sacreBLEU signature."

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of hypothesis strings.
    references: list of lists of reference strings (the same number of references for every prediction).
    tokenize: sacreBLEU tokenizer name, default "zh".
    lowercase: lowercase before scoring, default False.
    chrf: also compute chrF (character n-gram F-score), default False.
Returns:
    score: corpus BLEU (0-100); signature: the sacreBLEU signature string; counts, totals, precisions, bp,
    sys_len, ref_len as in sacreBLEU; and chrf / chrf_signature when chrf=True.
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SacrebleuZh(evaluate.Metric):
    """Corpus BLEU via sacreBLEU with the `zh` tokenizer by default; records the signature."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Value("string"),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
            codebase_urls=["https://github.com/mjpost/sacreBLEU"],
        )

    def _compute(self, predictions, references, tokenize: str = "zh", lowercase: bool = False, chrf: bool = False):
        n_refs = {len(refs) for refs in references}
        if len(n_refs) > 1:
            raise ValueError(f"every prediction needs the same number of references, got counts {sorted(n_refs)}")
        # sacreBLEU wants one stream per reference position: [[ref0 of every segment], [ref1 of every segment], ...]
        ref_streams = [list(stream) for stream in zip(*references)] if references else [[]]
        bleu = sacrebleu.metrics.BLEU(tokenize=tokenize, lowercase=lowercase)
        result = bleu.corpus_score(predictions, ref_streams)
        out = {
            "score": result.score,
            "signature": str(bleu.get_signature()),
            "counts": result.counts,
            "totals": result.totals,
            "precisions": result.precisions,
            "bp": result.bp,
            "sys_len": result.sys_len,
            "ref_len": result.ref_len,
        }
        if chrf:
            chrf_metric = sacrebleu.metrics.CHRF()
            out["chrf"] = chrf_metric.corpus_score(predictions, ref_streams).score
            out["chrf_signature"] = str(chrf_metric.get_signature())
        return out

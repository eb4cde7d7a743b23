"""`TranslatorPipeline`: text in, `[{"translation_text": ...}]` out (one dict per input for a list of texts).

transformers 5 removed the built-in "translation" task. This small `Pipeline` subclass replaces it:
- in-process: `TranslatorPipeline(model=model, tokenizer=tokenizer)("Hello.")`;
- from any folder written by `model.save_pretrained(d)` + `tokenizer.save_pretrained(d)`:
  `pipeline("translation", model=d, trust_remote_code=True)` (the config's `custom_pipelines` entry points here).

The pipeline adds no generation defaults of its own: a call decodes exactly like
`tokenizer.decode(model.generate(**tokenizer(text, return_tensors="pt"), **kwargs)[0], skip_special_tokens=True)`,
i.e. with the model's `generation_config` (beam 4, length penalty 0.6, source length + 50) unless overridden.
This file imports nothing from the model, so it can be copied next to it as remote code.
"""

from transformers import Pipeline


class TranslatorPipeline(Pipeline):
    """Translate one string or a list of strings with a `TranslatorForConditionalGeneration`.

    Generation arguments (`num_beams`, `max_new_tokens`, ...) may be given at construction or per call.
    An empty (or whitespace-only) text raises `ValueError`; a text longer than the model's
    `max_position_embeddings` tokens raises the model's `ValueError` (nothing is truncated silently).
    """

    _pipeline_calls_generate = True
    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_video_processor = False

    def _sanitize_parameters(self, **generate_kwargs):
        return {}, generate_kwargs, {}

    def __call__(self, text: str | list[str], **generate_kwargs) -> list[dict] | list[list[dict]]:
        """`text`: a string → `[{"translation_text": ...}]` (one dict per returned sequence); a list of strings → one
        `{"translation_text": ...}` per string, as transformers 4's translation pipeline returned, or one list per
        string when `num_return_sequences` > 1."""
        results = super().__call__(text, **generate_kwargs)
        # transformers 4's Text2TextGenerationPipeline rule: a list of strings whose results are all single
        # sequences comes back flat, so `[r["translation_text"] for r in pipe(texts)]` works.
        if isinstance(text, list) and all(isinstance(t, str) for t in text) and all(len(r) == 1 for r in results):
            return [r[0] for r in results]
        return results

    def preprocess(self, text: str) -> dict:
        if not isinstance(text, str):
            raise TypeError(f"TranslatorPipeline expects a string or a list of strings, got {type(text).__name__}")
        if not text.strip():
            raise ValueError("TranslatorPipeline got an empty source text: there is nothing to translate")
        return self.tokenizer((self.prefix or "") + text, return_tensors="pt")

    def _forward(self, model_inputs: dict, **generate_kwargs) -> dict:
        inputs = {name: model_inputs[name] for name in ("input_ids", "attention_mask") if name in model_inputs}
        return {"output_ids": self.model.generate(**inputs, **self._prepare_generate_kwargs(generate_kwargs))}

    def postprocess(self, model_outputs: dict) -> list[dict]:
        return [
            {"translation_text": self.tokenizer.decode(ids, skip_special_tokens=True)}
            for ids in model_outputs["output_ids"]
        ]


__all__ = ["TranslatorPipeline"]

"""Export nanoformer models as self-contained Hugging Face Hub repos and push them.

    from nanoformer.hub import export_for_hub, push_to_hub

    folder = export_for_hub(model, tokenizer, "out/hub", metrics={"bleu": 21.3}, sacrebleu_signature=sig,
                            repo_id="me/nanoformer-en-zh")
    push_to_hub(folder, "me/nanoformer-en-zh")          # needs a token (HF_TOKEN or `hf auth login`)

Command line: `python -m nanoformer.hub export CHECKPOINT OUT` and `python -m nanoformer.hub push FOLDER REPO_ID`.
"""

from .export import check_no_pickles, check_remote_code, export_for_hub
from .model_card import build_model_card
from .push import HubPushError, push_to_hub

__all__ = ["HubPushError", "build_model_card", "check_no_pickles", "check_remote_code", "export_for_hub", "push_to_hub"]

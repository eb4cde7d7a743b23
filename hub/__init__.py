"""Export nanoformer models as self-contained Hugging Face Hub repos and push them.

    from nanoformer.hub import export_run, push_to_hub

    folder = export_run("out/tatoeba", "out/tatoeba-hub", repo_id="me/nanoformer-en-zh")  # card from the run
    push_to_hub(folder, "me/nanoformer-en-zh")          # needs a token (HF_TOKEN or `hf auth login`)

`export_for_hub(model, tokenizer, folder, run_dir=..., metrics=...)` does the same for a model object in hand.

Command line: `python -m nanoformer.hub export CHECKPOINT OUT` and `python -m nanoformer.hub push FOLDER REPO_ID`.
"""

from .export import check_no_pickles, check_remote_code, export_for_hub, export_run
from .model_card import build_model_card
from .push import HubPushError, push_to_hub
from .run_card import card_from_run, read_run

__all__ = [
    "HubPushError",
    "build_model_card",
    "card_from_run",
    "check_no_pickles",
    "check_remote_code",
    "export_for_hub",
    "export_run",
    "push_to_hub",
    "read_run",
]

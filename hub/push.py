"""`push_to_hub`: upload an exported folder to the Hugging Face Hub (or any server named by `HF_ENDPOINT`)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from huggingface_hub import CommitInfo, HfApi, constants, get_token

# errors.HTTPError is the HTTP client's base error (connection refused, timeouts), whichever client the hub uses.
from huggingface_hub.errors import HfHubHTTPError, HFValidationError, OfflineModeIsEnabled
from huggingface_hub.errors import HTTPError as TransportError
from huggingface_hub.utils import validate_repo_id

from .export import check_no_pickles, check_remote_code

logger = logging.getLogger(__name__)

DEFAULT_COMMIT_MESSAGE = "Upload nanoformer model"


class HubPushError(RuntimeError):
    """A push that cannot or did not succeed; the message says why in one line."""


def hub_offline() -> bool:
    """True when `HF_HUB_OFFLINE` is set now, or was set when huggingface_hub was imported (it then refuses requests)."""
    now = os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}
    return now or bool(constants.HF_HUB_OFFLINE)


def push_to_hub(
    folder: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    token: str | None = None,
    commit_message: str = DEFAULT_COMMIT_MESSAGE,
) -> CommitInfo:
    """Create `repo_id` if needed and upload every file of `folder` (an `export_for_hub` folder) in one commit.

    The server is `$HF_ENDPOINT` (default https://huggingface.co), read at call time. The token is `token`, else
    `$HF_TOKEN` or the one saved by `hf auth login`. Raises `HubPushError` when offline, without a token, for a
    folder that is not a clean export, or when the server refuses or cannot be reached.
    """
    folder = Path(folder)
    if not (folder / "config.json").is_file() or not (folder / "README.md").is_file():
        raise HubPushError(f"{folder} is not an export_for_hub folder (config.json and README.md are required)")
    try:
        check_no_pickles(folder)
        check_remote_code(folder)
    except RuntimeError as err:
        raise HubPushError(str(err)) from err
    try:
        validate_repo_id(repo_id)
    except HFValidationError as err:
        raise HubPushError(f"invalid repo id {repo_id!r}: {err}") from err
    if hub_offline():
        raise HubPushError(f"cannot push {folder} to {repo_id}: HF_HUB_OFFLINE is set (offline mode); unset it to push")
    token = token or get_token()
    if not token:
        raise HubPushError(
            f"cannot push {folder} to {repo_id}: no Hugging Face token; pass --token/token=, set HF_TOKEN, "
            "or run `hf auth login`"
        )

    endpoint = (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
    api = HfApi(endpoint=endpoint, token=token)
    try:
        repo_url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        commit = api.upload_folder(
            repo_id=repo_url.repo_id, folder_path=folder, repo_type="model", commit_message=commit_message,
        )
    except OfflineModeIsEnabled as err:
        raise HubPushError(f"cannot push to {repo_id}: huggingface_hub is in offline mode ({err})") from err
    except HfHubHTTPError as err:
        status = err.response.status_code if err.response is not None else "?"
        raise HubPushError(f"push to {repo_id} at {endpoint} failed (HTTP {status}): {str(err).splitlines()[0]}") from err
    except ValueError as err:  # the Hub's metadata check of README.md (POST /api/validate-yaml)
        if "README.md" not in str(err):
            raise
        raise HubPushError(f"the Hub refused {folder}/README.md: {' '.join(str(err).split())}") from err
    except TransportError as err:
        raise HubPushError(f"cannot reach {endpoint} to push {repo_id}: {err}") from err
    logger.info("pushed %s to %s (%s)", folder, repo_id, commit.commit_url)
    return commit

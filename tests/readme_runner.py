"""Run one README Python block, or a `python -m MODULE ...` README command, for tests/test_readme.py.

    python tests/readme_runner.py [--record-uploads RECORD.json] BLOCK.py
    python tests/readme_runner.py [--record-uploads RECORD.json] -m MODULE ARGS...

The block (a file) runs as `__main__` with its own folder first on sys.path, as `python BLOCK.py` would; a module
runs as `python -m MODULE ARGS...` would. With `--record-uploads`, the Hub's upload-side calls are SIMULATED (no
server implements the upload API): huggingface_hub's `create_repo` / `_validate_yaml` / `create_commit` are
intercepted exactly as in tests/test_hub.py (`_RecordingHub`), and what would have been sent (repo id, endpoint,
every file's path and sha256) is written to RECORD.json, even when the block or command fails.
"""

from __future__ import annotations

import hashlib
import json
import runpy
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    record = None
    if argv[:1] == ["--record-uploads"]:
        record, argv = Path(argv[1]), argv[2:]
    recorder = None
    if record is not None:
        import pytest
        from test_hub import _RecordingHub  # sys.path[0] is this folder

        recorder = _RecordingHub()
        recorder.install(pytest.MonkeyPatch())
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            block = Path(argv[0]).resolve()
            sys.argv = [str(block), *argv[1:]]
            sys.path[0] = str(block.parent)
            runpy.run_path(str(block), run_name="__main__")
    finally:
        if record is not None:
            commits = [
                {"repo_id": c["repo_id"], "endpoint": c["endpoint"],
                 "files": {path: hashlib.sha256(data).hexdigest() for path, data in c["files"].items()}}
                for c in recorder.commits
            ]  # fmt: skip
            record.write_text(json.dumps({"repos": [r["repo_id"] for r in recorder.repos], "commits": commits}))


if __name__ == "__main__":
    main(sys.argv[1:])

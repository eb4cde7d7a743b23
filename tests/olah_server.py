"""A real Hub-API server for the tests: olah (PyPI, MIT), a self-hosted Hugging Face mirror.

In offline mode olah serves *local git repositories* through the Hub HTTP API (`model_info`, `hf_hub_download`,
`snapshot_download`, git-LFS weights), so `from_pretrained("user/repo")` can be tested end to end with
`HF_ENDPOINT` pointing at it. It runs from its own virtual environment, kept outside the clone and reused between
runs (`$NANOFORMER_OLAH_VENV`, default `~/.cache/nanoformer/olah-venv`), so its pins never touch the project's.
Uploads are not implemented by olah (405); see the simulated-upload test in test_hub.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

OLAH_REQUIREMENT = "olah>=0.5.4,<0.6"
_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "nanoformer"
OLAH_VENV = Path(os.environ.get("NANOFORMER_OLAH_VENV", _CACHE / "olah-venv"))
_READY_MARKER = ".nanoformer-olah-ready"  # written only after a complete install


class OlahUnavailable(RuntimeError):
    """olah could not be installed or started; the tests that need it skip with this message."""


def ensure_olah(venv: Path = OLAH_VENV, timeout: float = 600) -> Path:
    """Return the path of `olah-cli`, creating its venv (python -m venv + pip install olah) on first use.

    A file lock serialises concurrent test runs; a venv without the ready marker (an interrupted install) is rebuilt.
    """
    cli = venv / "bin" / "olah-cli"
    if (venv / _READY_MARKER).exists() and cli.exists():
        return cli
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / _READY_MARKER).exists() and cli.exists():
            return cli
        shutil.rmtree(venv, ignore_errors=True)
        python = shutil.which("python3") or sys.executable
        steps = {
            "python -m venv": [python, "-m", "venv", str(venv)],
            f"pip install {OLAH_REQUIREMENT}": [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                                                 "--disable-pip-version-check", OLAH_REQUIREMENT],
        }
        for step, cmd in steps.items():
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            except (OSError, subprocess.TimeoutExpired) as err:
                raise OlahUnavailable(f"cannot install olah into {venv}: {err}") from err
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                raise OlahUnavailable(f"cannot install olah into {venv} ({step}): {' | '.join(tail)}")
        if not cli.exists():
            raise OlahUnavailable(f"olah installed into {venv} but {cli} is missing")
        (venv / _READY_MARKER).write_text(OLAH_REQUIREMENT + "\n")
    return cli


def git_lfs_available() -> bool:
    if shutil.which("git") is None:
        return False
    return subprocess.run(["git", "lfs", "version"], capture_output=True).returncode == 0


def _git(repo: Path, *args: str) -> None:
    cmd = ["git", "-c", "user.name=nanoformer-tests", "-c", "user.email=tests@nanoformer.invalid", *args]
    done = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"`git {' '.join(args)}` failed in {repo}: {done.stderr.strip()}")


def publish_git_repo(
    src: Path, mirrors: Path, repo_id: str, *, use_lfs: bool | None = None, repo_type: str = "model"
) -> Path:
    """Commit the files of `src` as branch `main` of a non-bare git repo at `<mirrors>/<repo_type>s/<repo_id>`.

    With `use_lfs` (default: when git-lfs is installed) weights, images and Parquet files are stored as git-LFS
    objects, as on the real Hub; otherwise as plain git blobs (olah serves both).

    Load these repos with a full commit SHA as `revision` (resolve `main` with `HfApi.model_info` first): for a
    branch name, olah 0.5.4 answers requests for *missing* files of a local repo with 401 "Repository not found"
    where the Hub answers 404 EntryNotFound, and AutoTokenizer probes several optional files. With a SHA it answers
    404 EntryNotFound like the Hub.
    """
    if shutil.which("git") is None:
        raise OlahUnavailable("git is not installed")
    if use_lfs is None:
        use_lfs = git_lfs_available()
    repo = mirrors / f"{repo_type}s" / repo_id
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    if use_lfs:
        _git(repo, "lfs", "install", "--local")
        _git(repo, "lfs", "track", "*.safetensors", "*.png", "*.parquet")
    shutil.copytree(src, repo, dirs_exist_ok=True)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", f"Add {repo_id}")
    return repo


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class OlahServer:
    """olah in offline mode on 127.0.0.1, serving the git repos under `<workdir>/mirrors`. Use as a context manager."""

    def __init__(self, olah_cli: Path, workdir: Path, port: int | None = None):
        self.olah_cli = olah_cli
        self.workdir = workdir
        self.mirrors = workdir / "mirrors"
        self.port = port or free_port()
        self.log_path = workdir / "olah.log"
        self.process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _write_config(self) -> Path:
        (self.workdir / "repos").mkdir(parents=True, exist_ok=True)
        self.mirrors.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "olah.toml"
        config.write_text(
            "[basic]\n"
            'host = "127.0.0.1"\n'
            f"port = {self.port}\n"
            f'repos-path = "{self.workdir / "repos"}"\n'
            f'mirror-netloc = "127.0.0.1:{self.port}"\n'
            f'mirror-lfs-netloc = "127.0.0.1:{self.port}"\n'
            f'mirrors-path = ["{self.mirrors}"]\n'
            "\n[accessibility]\n"
            "offline = true\n"
        )
        return config

    def start(self, ready_repo: str, timeout: float = 60, repo_type: str = "model") -> None:
        """Start olah and wait until it answers `GET /api/<repo_type>s/<ready_repo>/revision/main` (`/` answers 500)."""
        config = self._write_config()
        log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [str(self.olah_cli), "-c", str(config)], cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        url = f"{self.endpoint}/api/{repo_type}s/{ready_repo}/revision/main"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise OlahUnavailable(f"olah exited with {self.process.returncode}: {self.log_tail()}")
            with contextlib.suppress(OSError, urllib.error.URLError):
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            time.sleep(0.2)
        self.stop()
        raise OlahUnavailable(f"olah did not answer {url} within {timeout:.0f}s: {self.log_tail()}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def log_tail(self, lines: int = 5) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return " | ".join(self.log_path.read_text(errors="replace").strip().splitlines()[-lines:])

    def __enter__(self) -> OlahServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

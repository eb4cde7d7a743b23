"""transformers' own common model tests (its `tests/` folder), fetched from the sdist of the installed version.

The transformers wheel ships no tests; its sdist on PyPI ships the shared mixins (`tests/test_modeling_common.py`,
`tests/test_configuration_common.py`, ...) but not every module they import. `load_upstream_tests()` downloads the
sdist once with pip (cached outside the repository, `$NANOFORMER_HF_TESTS_CACHE`, default
`~/.cache/nanoformer/transformers-sdist/<version>`, like the olah venv of tests/olah_server.py), unpacks its
`tests/*.py` (adding the empty `__init__.py` the sdist lacks), and imports them as the package `nanoformer_upstream_tests` with stand-ins for the three missing
modules (written here, not copied from transformers):

- `generation/test_utils.py`: `GenerationTesterMixin`, an empty class. Generation has its own suites in this
  repository (tests/test_nanogpt_generation.py, tests/test_translator.py), so the testers leave it out.
- `exporters/test_export.py`: `ExportTesterMixin`, an empty class (the mixin derives from it; torch.export is
  not exercised).
- `utils/test_configuration_utils.py`: `config_common_kwargs`, one non-default value for each field of the
  base `PreTrainedConfig` of transformers 5.x, which `ConfigTester.check_config_arguments_init` sets and reads back.
"""

from __future__ import annotations

import fcntl
import importlib
import os
import subprocess
import sys
import tarfile
import types
from pathlib import Path

import transformers

PACKAGE = "nanoformer_upstream_tests"
_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "nanoformer" / "transformers-sdist"
CACHE = Path(os.environ.get("NANOFORMER_HF_TESTS_CACHE", _CACHE / transformers.__version__))
_READY_MARKER = ".nanoformer-tests-ready"  # written only after a complete unpack


class UpstreamTestsUnavailable(RuntimeError):
    """The sdist could not be fetched or unpacked (offline, PyPI down); the common tests skip with this message."""


def _fetch_tests(cache: Path, timeout: float) -> Path:
    """Return the folder holding the sdist's `tests/*.py`, downloading and unpacking it on first use."""
    tests = cache / "tests"
    if (cache / _READY_MARKER).exists():
        return tests
    cache.mkdir(parents=True, exist_ok=True)
    version = transformers.__version__
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent test runs download once
        if (cache / _READY_MARKER).exists():
            return tests
        archive = cache / f"transformers-{version}.tar.gz"
        if not archive.exists():
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                   "--disable-pip-version-check", "-d", str(cache), f"transformers=={version}"]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            except (OSError, subprocess.TimeoutExpired) as err:
                raise UpstreamTestsUnavailable(f"cannot download the transformers {version} sdist: {err}") from err
            if done.returncode != 0 or not archive.exists():
                tail = [line for line in (done.stderr or done.stdout).splitlines() if "is ignored" not in line][-3:]
                raise UpstreamTestsUnavailable(
                    f"cannot download the transformers {version} sdist from PyPI (offline?): {' | '.join(tail)}"
                )
        prefix = f"transformers-{version}/tests/"
        try:
            with tarfile.open(archive) as tar:
                members = [m for m in tar.getmembers() if m.isfile() and m.name.startswith(prefix)]
                tests.mkdir(exist_ok=True)
                for member in members:
                    target = tests / member.name[len(prefix):]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(tar.extractfile(member).read())
        except (OSError, tarfile.TarError) as err:
            raise UpstreamTestsUnavailable(f"cannot unpack {archive}: {err}") from err
        if not (tests / "test_modeling_common.py").exists():
            raise UpstreamTestsUnavailable(f"{archive} has no tests/test_modeling_common.py")
        # test_configuration_common.py executes `tests/__init__.py` (empty upstream, absent from the sdist).
        (tests / "__init__.py").touch()
        (cache / _READY_MARKER).write_text(version + "\n")
    return tests


def _stand_in(name: str, **attrs) -> None:
    module = types.ModuleType(f"{PACKAGE}.{name}")
    module.__path__ = []  # a package, so that `name.sub` can be registered below it
    module.__dict__.update(attrs)
    sys.modules[module.__name__] = module


class GenerationTesterMixin:
    """Stand-in: generation is tested by this repository's own suites."""


class ExportTesterMixin:
    """Stand-in: no torch.export tests."""


CONFIG_COMMON_KWARGS = {
    "return_dict": False,
    "output_hidden_states": True,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "architectures": ["NanoformerTestModel"],
    "id2label": {0: "label"},
    "label2id": {"label": "0"},
    "problem_type": "regression",
}


def load_upstream_tests(timeout: float = 300) -> types.SimpleNamespace:
    """Import transformers' `test_modeling_common` and `test_configuration_common` from the cached sdist."""
    if f"{PACKAGE}.test_modeling_common" not in sys.modules:
        tests = _fetch_tests(CACHE, timeout)
        package = types.ModuleType(PACKAGE)
        package.__path__ = [str(tests)]
        sys.modules[PACKAGE] = package
        _stand_in("generation")
        _stand_in("generation.test_utils", GenerationTesterMixin=GenerationTesterMixin)
        _stand_in("exporters")
        _stand_in("exporters.test_export", ExportTesterMixin=ExportTesterMixin)
        _stand_in("utils")
        _stand_in("utils.test_configuration_utils", config_common_kwargs=CONFIG_COMMON_KWARGS)
    return types.SimpleNamespace(
        modeling=importlib.import_module(f"{PACKAGE}.test_modeling_common"),
        configuration=importlib.import_module(f"{PACKAGE}.test_configuration_common"),
    )

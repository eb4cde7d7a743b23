"""The README is a contract: every fenced block of README.md runs here, or is checked against what does run it.

One test per block, in README order (`test_readme_block[L<line>-<lang>-<section>]`). What each block meets:

- ```python blocks run AS WRITTEN, each in a fresh interpreter (tests/readme_runner.py), with the working folder a
  checkout-like folder `<tmp>/nanoformer` (`training/`, `bench/` linked from the repo) beside `<tmp>/shared/data`,
  so the README's `../shared/data` resolves. What the README's other steps produce is there first, notebook-style:
  a block naming a path that a README command writes (`tok-8k`, `out/shakespeare-char`, `out/tatoeba`, ...) runs that
  command before it (each command runs once per module). A block that uploads (`push_to_hub`) runs with the Hub's
  upload calls SIMULATED and recorded (test_hub.py's `_RecordingHub`: no local server implements the upload API),
  online against a dead local endpoint with a fake token, so nothing can reach the real Hub; the recorded commit must
  hold a whole export.
- ```bash blocks are split into commands (`\\` continuations joined, `&&` steps, `|` pipes, comments dropped; a
  trailing `# or: PROGRAM ...` must name an installed program). Every command must match a row of COMMANDS, else the
  test fails ("add a handler"), so nothing is ever silently left out:
  - cheap commands RUN with bash as written (`accelerate launch`, `python` = this interpreter's venv), with the
    documented size substitutions of SUBSTITUTIONS (steps, model size, samples scored), after the command AS
    WRITTEN has passed its parser (below), so the README's own sizes are still checked; afterwards every path the
    command names as its output exists, and a few outputs are checked (the steps trained, the averaged final model,
    one translation per stdin line, one sample per `--num_samples`, a PNG);
  - commands that stream from the Hub (the main `train_mt.py` job without `--train_file`, `--dataset_name`) are
    PARSED: `accelerate launch`'s own parser, then the trainer's / tokenizer CLI's `parse_args`, i.e. all their
    parse-time validation (numbers, paths, tokenizer, schedule, averaging), in the same working folder;
  - `python -m nanoformer.hub push` runs through the real CLI with the uploads SIMULATED as above: the commit must
    carry exactly the pushed folder's files, byte for byte (sha256), to the README's repo id;
  - the install commands (`python3 -m venv`, `. .venv/bin/activate`, `pip install ...`) and the test command must be
    exactly what `.ci/run` runs (so CI installs and tests as the README says); they are not run again here.
- Any other fence language fails the test.

Kept as written: `--vocab_size 8000` and the Tatoeba files (the BPE trains in about a second), nanoGPT's tiny LM
recipe model, the sampling lengths, the Python blocks' Transformer-base. Offline (`HF_HUB_OFFLINE=1`, as CI runs
the suite), a fresh `HF_HOME` (no accelerate config of the machine applies), one torch thread per process. The
whole module takes about 1.5 minutes on 2 cores (85 s of CPU).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import importlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
README = REPO / "README.md"
CI_RUN = REPO / ".ci" / "run"
RUNNER = TESTS / "readme_runner.py"
SHARED_DATA = Path(os.environ.get("NANOFORMER_SHARED_DATA", REPO.parent / "shared" / "data"))  # as conftest.py
LINKED = ("training", "bench")  # repo folders the README's commands name by relative path

# ---------------------------------------------------------------------------------------------- size substitutions
# Applied to the README's command before it runs: a flag the command has gets the value here, a missing one is added.
# Each row: (program, flag, value, why). A value may be a function of the README's value (None when absent).

TINY_MT_MODEL = {  # the translator's size keys; the README's other --config_overrides items (dropout=0.0) are kept
    "d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
    "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64,
}  # fmt: skip
TINY_MT_STEPS, TINY_MT_CHECKPOINTS = 16, 2


def _tiny_mt_overrides(readme_value: str | None) -> str:
    from nanoformer.modeling import TranslatorConfig
    from nanoformer.training.arguments import parse_config_overrides

    items = parse_config_overrides(readme_value, TranslatorConfig)  # also proves the README's value parses
    return json.dumps({**items, **TINY_MT_MODEL})  # --config_overrides takes one JSON object too


SUBSTITUTIONS: list[tuple[str, str, str | Callable[[str | None], str], str]] = [
    ("accelerate launch training/train_lm.py", "--max_train_steps", "20",
     "nanoGPT's recipe is 2000 updates (~10 min on 2 cores); 20 updates pass through every stage (data, loop, "
     "evaluation, sample, save, curves). The recipe's model (4 x 4 x 128) is tiny already and kept."),
    ("accelerate launch training/train_mt.py", "--config_overrides", _tiny_mt_overrides,
     "model size: d_model 32, 1 + 1 layers, 2 heads, FFN 64 instead of the recipe's 256 / 3 + 3 / 4 / 1024; the "
     "README's other config items are kept"),
    ("accelerate launch training/train_mt.py", "--max_train_steps", str(TINY_MT_STEPS), "600 updates -> 16"),
    ("accelerate launch training/train_mt.py", "--checkpointing_steps", str(TINY_MT_CHECKPOINTS),
     "25 -> 2, so the 16 updates still leave 8 checkpoints for --average_last_checkpoints and the averaging CLI"),
    ("accelerate launch training/train_mt.py", "--eval_steps", str(TINY_MT_STEPS),
     "one evaluation, at the end, as the recipe's --eval_steps = --max_train_steps does"),
    ("accelerate launch training/train_mt.py", "--max_eval_samples", "8",
     "1000 validation pairs -> 8 (an untrained model decodes every one to the length limit)"),
    ("python -m nanoformer.training.average_checkpoints", "--every", str(2 * TINY_MT_CHECKPOINTS),
     "the README's 50 is 2 x its --checkpointing_steps 25; here 2 x the tiny 2"),
    ("python -m nanoformer.training.score_mt --test_file", "--max_samples", "8",
     "with a test file only: score the first 8 pairs instead of the whole file (same code path)"),
]  # fmt: skip

# --------------------------------------------------------------------------------------------------- the README


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int  # of the opening fence
    section: str  # the nearest heading above

    @property
    def id(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", self.section.lower()).strip("-")[:40]
        return f"L{self.line}-{self.lang or 'plain'}-{slug}"


def readme_blocks(text: str) -> list[Block]:
    """Every fenced block, with the heading it sits under (headings are only read outside fences)."""
    blocks, section, fence = [], "", None
    for number, line in enumerate(text.splitlines(), start=1):
        if fence is None:
            if line.startswith("```"):
                fence = (line[3:].strip(), number, [])
            elif line.startswith("#"):
                section = line.lstrip("#").strip()
        elif line.strip() == "```":
            blocks.append(Block(fence[0], "\n".join(fence[2]) + "\n", fence[1], section))
            fence = None
        else:
            fence[2].append(line)
    if fence is not None:
        raise ValueError(f"README.md line {fence[1]}: the ``` fence is never closed")
    return blocks


@dataclass
class Step:
    """One shell command of a bash block: a pipeline of stages, each the tokens bash would see."""

    stages: list[list[str]]
    line: int
    alternatives: list[str] = field(default_factory=list)  # programs named in a trailing "# or: PROGRAM ..."

    @property
    def main(self) -> list[str]:
        return self.stages[-1]

    @property
    def key(self) -> str:
        return " | ".join(shlex.join(stage) for stage in self.stages)


def split_commands(block: Block) -> list[Step]:
    steps, pending, start = [], "", None
    for number, line in enumerate(block.code.splitlines(), start=block.line + 1):
        if start is None:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        pending += line
        lexer = shlex.shlex(pending, posix=True, punctuation_chars=True)
        lexer.whitespace_split, lexer.commenters = True, "#"
        tokens = list(lexer)
        alternatives = re.findall(r"#\s*or:\s*(\S+)", pending)
        pending, line_no, start = "", start, None
        for chunk in _split(tokens, "&&"):
            for token in chunk:
                if token in (";", "||", "&", ">", ">>", "<", "(", ")"):
                    raise AssertionError(f"README.md line {line_no}: {token!r} in a command; only && and | are handled")
            steps.append(Step([stage for stage in _split(chunk, "|")], line_no, alternatives))
    return [step for step in steps if step.stages and step.stages[0]]


def _split(tokens: list[str], separator: str) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    for token in tokens:
        if token == separator:
            parts.append([])
        else:
            parts[-1].append(token)
    return parts


def argv_of(stage: list[str]) -> tuple[dict[str, str], list[str]]:
    """(leading NAME=value assignments, the command's argv)."""
    env = {}
    while stage and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", stage[0]):
        name, _, value = stage[0].partition("=")
        env[name], stage = value, stage[1:]
    return env, stage


def program_of(argv: list[str]) -> str:
    """The program a command runs, as COMMANDS and SUBSTITUTIONS name it."""
    if not argv:
        return "(nothing but variable assignments)"
    if argv[:2] == ["accelerate", "launch"]:
        script = next((token for token in argv[2:] if token.endswith(".py")), "?")
        return f"accelerate launch {script}"
    if argv[0] in ("python", "python3") and argv[1:2] == ["-m"] and len(argv) > 2:
        return f"{argv[0]} -m {argv[2]}"
    if argv[0] in ("python", "python3") and len(argv) > 1 and argv[1].endswith(".py"):
        return f"python {argv[1]}"
    if argv[0] in (".", "source"):
        return "activate"
    if argv[0] == "pip" and argv[1:2] == ["install"]:
        return "pip install"
    return argv[0]


def flag_value(argv: list[str], flag: str) -> str | None:
    for i, token in enumerate(argv):
        if token == flag and i + 1 < len(argv):
            return argv[i + 1]
        if token.startswith(flag + "="):
            return token.split("=", 1)[1]
    return None


def set_flag(argv: list[str], flag: str, value: str) -> list[str]:
    argv = list(argv)
    for i, token in enumerate(argv):
        if token == flag:
            argv[i + 1] = value
            return argv
        if token.startswith(flag + "="):
            argv[i] = f"{flag}={value}"
            return argv
    return [*argv, flag, value]


def substitute(argv: list[str]) -> list[str]:
    program = program_of(argv)
    for row_program, flag, value, _why in SUBSTITUTIONS:
        name, _, condition = row_program.partition(" --")
        if name == program and (not condition or f"--{condition}" in argv):
            argv = set_flag(argv, flag, value(flag_value(argv, flag)) if callable(value) else value)
    return argv


OUTPUT_FLAGS = ("--output_dir", "--output", "--output_file", "--hypotheses_file")


def outputs_of(argv: list[str]) -> list[str]:
    """The paths a command writes: its output flags, and `hub export`'s OUTPUT_DIR."""
    found = [flag_value(argv, flag) for flag in OUTPUT_FLAGS]
    if program_of(argv) == "python -m nanoformer.hub" and argv[3:4] == ["export"]:
        positional = [token for token in argv[4:] if not token.startswith("-")]
        found.append(positional[1] if len(positional) > 1 else None)
    return [os.path.normpath(path) for path in found if path]


def streams_from_hub(argv: list[str]) -> bool:
    program = program_of(argv)
    if program == "accelerate launch training/train_mt.py":
        return "--train_file" not in argv  # the default data is wmt/wmt19 from the Hub
    return "--dataset_name" in argv


# --------------------------------------------------------------------------------------------- how each one is met


@dataclass(frozen=True)
class Handler:
    mode: str  # "run" (bash, as written + substitutions), "parse", "push" (simulated upload), "ci" (compare)
    check: Callable[[list[str], Path, subprocess.CompletedProcess], None] | None = None


def _check_trainer(argv, cwd, done):
    out = cwd / flag_value(argv, "--output_dir")
    results = json.loads((out / "all_results.json").read_text())
    assert results["step"] == int(flag_value(argv, "--max_train_steps")), results
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    if flag_value(argv, "--average_last_checkpoints"):
        assert results["final_model"] == "average", results
        assert len(results["final_model_steps"]) == int(flag_value(argv, "--average_last_checkpoints")), results


def _check_sample(argv, cwd, done):
    prompt, samples = flag_value(argv, "--prompt"), int(flag_value(argv, "--num_samples") or 1)
    assert done.stdout.count(prompt or "") >= samples, done.stdout[-2000:]


def _check_score(argv, cwd, done):
    if flag_value(argv, "--test_file") is None:  # stdin: one translation per input line
        assert len([line for line in done.stdout.splitlines() if line.strip()]) == 1, done.stdout
        return
    out = flag_value(argv, "--output_file")
    if out:
        scores = json.loads((cwd / out).read_text())
        assert scores["num_samples"] == int(flag_value(argv, "--max_samples")) and "bleu_signature" in scores


def _check_average(argv, cwd, done):
    steps = json.loads((cwd / flag_value(argv, "--output") / "averaged_checkpoints.json").read_text())
    assert steps, steps


def _check_png(argv, cwd, done):
    output = cwd / flag_value(argv, "--output")
    pictures = sorted(output.glob("*.png")) if output.is_dir() else [output]
    assert pictures and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pictures), pictures


def _hub_mode(argv: list[str]) -> str:
    return "push" if argv[3:4] == ["push"] else "run"


COMMANDS: dict[str, Handler | Callable[[list[str]], Handler]] = {
    "python3 -m venv": Handler("ci"),
    "activate": Handler("ci"),
    "pip install": Handler("ci"),
    "python -m pytest": Handler("ci"),
    "accelerate launch training/train_lm.py": lambda argv: Handler("parse" if streams_from_hub(argv) else "run",
                                                                   _check_trainer),
    "accelerate launch training/train_mt.py": lambda argv: Handler("parse" if streams_from_hub(argv) else "run",
                                                                   _check_trainer),
    "python training/sample_lm.py": Handler("run", _check_sample),
    "python -m nanoformer.tokenization": lambda argv: Handler("parse" if streams_from_hub(argv) else "run"),
    "python -m nanoformer.training.score_mt": Handler("run", _check_score),
    "python -m nanoformer.training.average_checkpoints": Handler("run", _check_average),
    "python -m nanoformer.training.plot_attention": Handler("run", _check_png),
    "python -m nanoformer.hub": lambda argv: Handler(_hub_mode(argv)),
}  # fmt: skip
PARSERS = {  # the parse_args (all parse-time validation) of each program, by module
    "training/train_lm.py": "nanoformer.training.train_lm",
    "training/train_mt.py": "nanoformer.training.train_mt",
    "python -m nanoformer.tokenization": "nanoformer.tokenization.__main__",
    "python -m nanoformer.training.score_mt": "nanoformer.training.score_mt",
    "python -m nanoformer.training.average_checkpoints": "nanoformer.training.average_checkpoints",
}


def handler_of(step: Step) -> Handler:
    for stage in step.stages[:-1]:
        assert argv_of(stage)[1][:1] == ["echo"], f"README.md line {step.line}: only `echo ... |` may feed a command"
    argv = argv_of(step.main)[1]
    program = program_of(argv)
    found = COMMANDS.get(program)
    assert found is not None, (
        f"README.md line {step.line}: tests/test_readme.py does not know how to run or check `{program}` "
        f"({step.key}); add a row to COMMANDS (and SUBSTITUTIONS if it needs tiny sizes)"
    )
    return found(argv) if callable(found) else found


# ------------------------------------------------------------------------------------------------- the workspace


class ReadmeRun:
    """The checkout-like working folder, the README's steps and what has run (each step runs at most once)."""

    def __init__(self, root: Path, blocks: list[Block]):
        self.root, self.cwd = root, root / "nanoformer"
        (root / "shared").mkdir()
        (root / "shared" / "data").symlink_to(SHARED_DATA, target_is_directory=True)
        self.cwd.mkdir()
        for name in LINKED:
            (self.cwd / name).symlink_to(REPO / name, target_is_directory=True)
        self.env = {k: v for k, v in os.environ.items() if k not in {"HF_ENDPOINT", "HF_TOKEN", "PYTHONPATH"}}
        self.env.update(
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",  # `python`, `accelerate`
            HF_HOME=str(root / "hf_home"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
            MPLBACKEND="Agg",
        )  # fmt: skip
        self.steps = {block: split_commands(block) for block in blocks if block.lang == "bash"}
        # What the README's runnable commands write, in README order (the first writer of a path provides it).
        self.producers: list[tuple[str, Step]] = []
        for steps in self.steps.values():
            for step in steps:
                try:
                    runs = handler_of(step).mode == "run"
                except AssertionError:  # an unknown command: its block's test says so
                    continue
                if runs:
                    self.producers += [(path, step) for path in outputs_of(argv_of(step.main)[1])]
        self.results: dict[str, str | None] = {}  # step key -> None (passed) or why it failed
        self.cells = root / "cells"
        self.cells.mkdir()

    def needs(self, names: list[str], itself: Step | None = None) -> list[Step]:
        """The README steps that write the paths among `names`: for each, the first writer of the path itself or of
        the nearest folder above it (`out/tatoeba/x.json`: the step writing that file, else `out/tatoeba`'s)."""
        found: list[Step] = []
        for name in sorted({os.path.normpath(n) for n in names if n and not n.startswith("-")}):
            writers = [(path, step) for path, step in self.producers
                       if step is not itself and (name == path or name.startswith(path + os.sep))]  # fmt: skip
            if writers:
                step = max(writers, key=lambda writer: len(writer[0]))[1]  # max keeps the first of equals
                found += [step] if step not in found else []
        return found

    def ensure(self, step: Step, chain: tuple[str, ...] = ()) -> None:
        if step.key in self.results:
            if self.results[step.key] is not None:
                raise AssertionError(f"README step (line {step.line}) already failed: {self.results[step.key]}")
            return
        assert step.key not in chain, f"README steps depend on each other in a cycle: {chain}"
        for dependency in self.needs([t for stage in step.stages for t in stage], itself=step):
            self.ensure(dependency, (*chain, step.key))
        try:
            self._run(step)
        except BaseException as err:
            self.results[step.key] = f"{type(err).__name__}: {str(err)[:3000]}"
            raise
        self.results[step.key] = None

    # ----------------------------------------------------------------------------------------------- the steps
    def _run(self, step: Step) -> None:
        for alternative in step.alternatives:
            found = shutil.which(alternative, path=self.env["PATH"])
            assert found, f"`{alternative}` (README line {step.line}) is not installed"
        handler = handler_of(step)
        env_assignments, argv = argv_of(step.main)
        if handler.mode == "ci":
            return self._compare_with_ci(step)
        if handler.mode == "parse":
            parsed = self._parse(argv, step)
            assert getattr(parsed, "train_file", None) is None and parsed.dataset_name, parsed  # it does stream
            return
        if handler.mode == "push":
            return self._push(argv, step)
        tiny = substitute(argv)
        if tiny != argv and program_of(argv).replace("accelerate launch ", "") in PARSERS:
            self._parse(argv, step)  # the sizes as written pass every parse-time check, before tiny ones replace them
        stages = [*step.stages[:-1], [*(f"{k}={v}" for k, v in env_assignments.items()), *tiny]]
        command = " | ".join(shlex.join(stage) for stage in stages)
        done = subprocess.run(["bash", "-c", command], cwd=self.cwd, env=self.env, capture_output=True, text=True,
                              timeout=600, stdin=subprocess.DEVNULL)  # fmt: skip
        assert done.returncode == 0, f"`{command}` (README line {step.line}) exited {done.returncode}:\n" + (
            done.stdout[-2000:] + done.stderr[-4000:])
        final_argv = stages[-1][len(env_assignments):]
        for path in outputs_of(final_argv):
            assert (self.cwd / path).exists(), f"`{command}` did not write {path}"
        if handler.check:
            handler.check(final_argv, self.cwd, done)

    def _parse(self, argv: list[str], step: Step) -> argparse.Namespace:
        """Every parse-time check of the command as written: its launcher's (`accelerate launch`) and its own."""
        old, errors = os.getcwd(), io.StringIO()
        os.chdir(self.cwd)
        try:
            with contextlib.redirect_stderr(errors):
                if argv[0] == "accelerate":
                    from accelerate.commands.launch import launch_command_parser

                    launched = launch_command_parser().parse_args(argv[2:])
                    script, args = launched.training_script, launched.training_script_args
                    parse = importlib.import_module(PARSERS[script]).parse_args
                else:
                    parse, args = importlib.import_module(PARSERS[program_of(argv)]).parse_args, argv[3:]
                parsed = parse(args)
        except SystemExit as exit_:
            raise AssertionError(f"README line {step.line}: `{step.key}` does not parse (exit {exit_.code}): "
                                 f"{errors.getvalue().strip()}") from None
        finally:
            os.chdir(old)
        return parsed

    def _push(self, argv: list[str], step: Step) -> None:
        """`python -m nanoformer.hub push FOLDER REPO`: the real CLI, uploads SIMULATED and recorded."""
        record = self.cells / f"push-{step.line}.json"
        done = self._runner(["--record-uploads", str(record), "-m", *argv[2:]], online=True)
        assert done.returncode == 0, f"README line {step.line}: `{step.key}` failed:\n{done.stderr[-4000:]}"
        folder, repo_id = [t for t in argv[4:] if not t.startswith("-")][:2]
        [commit] = json.loads(record.read_text())["commits"]
        assert commit["repo_id"] == repo_id
        local = self.cwd / folder
        expected = {str(p.relative_to(local)): hashlib.sha256(p.read_bytes()).hexdigest()
                    for p in local.rglob("*") if p.is_file()}  # fmt: skip
        assert commit["files"] == expected

    def _compare_with_ci(self, step: Step) -> None:
        """Install and test commands: exactly what .ci/run runs (CI installs a fresh venv and runs the suite)."""
        ci = [pair for pair in map(argv_of, _ci_commands()) if pair[1]]
        env_assignments, argv = argv_of(step.main)
        program = program_of(argv)
        if program == "python3 -m venv":
            assert any(a[:3] == ["python3", "-m", "venv"] for _, a in ci), ".ci/run makes no `python3 -m venv`"
            assert len(argv) == 4, argv
        elif program == "activate":
            assert any(program_of(a) == "activate" and a[1].endswith("/bin/activate") for _, a in ci)
            assert argv[1].endswith("/bin/activate"), argv
        elif program == "pip install":
            setup = ci_installs()
            assert argv in setup, f"README line {step.line}: `{shlex.join(argv)}` is not what .ci/run installs: {setup}"
        else:
            assert program == "python -m pytest", program
            tests = _ci_commands("README: tests")
            assert [env_assignments, argv] in [list(argv_of(t)) for t in tests], (
                f"README line {step.line}: `{step.key}` is not .ci/run's test command {tests}")

    # ------------------------------------------------------------------------------------------- python blocks
    def python_block(self, block: Block) -> None:
        literals = [node.value for node in ast.walk(ast.parse(block.code)) if isinstance(node, ast.Constant)
                    and isinstance(node.value, str)]  # fmt: skip
        for dependency in self.needs(literals):
            self.ensure(dependency)
        cell = self.cells / f"block_L{block.line}.py"
        cell.write_text(block.code, encoding="utf-8")
        pushes = "push_to_hub" in block.code
        record = self.cells / f"block_L{block.line}.uploads.json"
        done = self._runner([*(["--record-uploads", str(record)] if pushes else []), str(cell)], online=pushes)
        assert done.returncode == 0, f"the Python block at README line {block.line} fails as written:\n" + (
            done.stdout[-1500:] + done.stderr[-4000:])
        if pushes:
            commits = json.loads(record.read_text())["commits"]
            assert commits, "the block calls push_to_hub but nothing was uploaded"
            for commit in commits:
                assert {"README.md", "config.json", "model.safetensors"} <= set(commit["files"]), commit

    def _runner(self, args: list[str], online: bool = False) -> subprocess.CompletedProcess:
        env = dict(self.env)
        if online:  # simulated uploads: online, but against a dead local endpoint, with a fake token
            env.update(HF_HUB_OFFLINE="0", HF_HUB_DISABLE_XET="1", HF_ENDPOINT="http://127.0.0.1:9",
                       HF_TOKEN="hf_readme_simulated")  # fmt: skip
        return subprocess.run([sys.executable, str(RUNNER), *args], cwd=self.cwd, env=env, capture_output=True,
                              text=True, timeout=600, stdin=subprocess.DEVNULL)  # fmt: skip


def ci_installs() -> list[list[str]]:
    """The `pip install` commands of .ci/run's README set-up part, in order."""
    return [argv for _, argv in _ci_commands("README: set-up", argv_only=True) if program_of(argv) == "pip install"]


def _ci_commands(section: str | None = None, argv_only: bool = False) -> list[list[str]]:
    """The commands of .ci/run (shell-split), or of its `# --- SECTION ---` part only."""
    commands, current = [], None
    for line in CI_RUN.read_text().replace("\\\n", " ").splitlines():
        marker = re.fullmatch(r"#\s*---\s*(.*?)\s*---\s*", line.strip())
        if marker:
            current = marker.group(1)
            continue
        tokens = shlex.split(line, comments=True)
        if tokens and (section is None or current == section):
            commands.append(argv_of(tokens) if argv_only else tokens)
    return commands


# ------------------------------------------------------------------------------------------------------ the tests

BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def readme(tmp_path_factory) -> ReadmeRun:
    assert SHARED_DATA.is_dir(), f"the README's commands read ../shared/data: not found at {SHARED_DATA}"
    return ReadmeRun(tmp_path_factory.mktemp("readme"), BLOCKS)


def test_readme_has_python_and_bash_blocks():
    assert {block.lang for block in BLOCKS} >= {"python", "bash"}, [block.id for block in BLOCKS]


@pytest.mark.parametrize("block", BLOCKS, ids=[block.id for block in BLOCKS])
def test_readme_block(block: Block, readme: ReadmeRun):
    if block.lang == "python":
        readme.python_block(block)
    elif block.lang == "bash":
        steps = readme.steps[block]
        assert steps, f"README line {block.line}: an empty bash block"
        for step in steps:
            readme.ensure(step)
        for line in sorted({step.line for step in steps}):  # an install chain installs all that CI does, in order
            chain = [argv_of(s.main)[1] for s in steps if s.line == line]
            installs = [argv for argv in chain if program_of(argv) == "pip install"]
            assert not installs or installs == ci_installs(), f"README line {line}: {installs}, .ci/run {ci_installs()}"
    else:
        raise AssertionError(f"README line {block.line}: a ```{block.lang} block; tests/test_readme.py runs python "
                             "and bash blocks only: add a handler (or use one of those)")  # fmt: skip


def test_every_substitution_applies_to_a_readme_command():
    """A substitution whose command left the README is stale: update the table with the README."""
    programs = {program_of(argv_of(step.main)[1]) + (" --test_file" if "--test_file" in step.main else "")
                for block in BLOCKS if block.lang == "bash" for step in split_commands(block)}  # fmt: skip
    for program, flag, _value, _why in SUBSTITUTIONS:
        assert program in programs, f"SUBSTITUTIONS row for `{program}` ({flag}): no such command in README.md"


def test_the_table_fails_an_unknown_block_or_command_and_substitutes_as_documented():
    """The guard itself: a new fence language or command fails (never skipped); the substitutions do what they say."""
    new = "## New\n```bash\nmake all && python -m nanoformer.new_cli --x 1\n```\n```text\nout\n```\n"
    bash, text = readme_blocks(new)
    assert [bash.id, text.id] == ["L2-bash-new", "L5-text-new"]
    for step in split_commands(bash):
        with pytest.raises(AssertionError, match="does not know how to run or check"):
            handler_of(step)
    with pytest.raises(AssertionError, match="runs python and bash blocks only"):
        test_readme_block(text, None)
    [block] = readme_blocks(
        "```bash\nHF_HUB_OFFLINE=1 accelerate launch --cpu training/train_mt.py --train_file t.jsonl \\\n"
        '    --config_overrides "d_model=256,dropout=0.0" --max_train_steps 600 --output_dir out/x\n```\n'
    )
    [step] = split_commands(block)
    env, argv = argv_of(step.main)
    assert env == {"HF_HUB_OFFLINE": "1"} and program_of(argv) == "accelerate launch training/train_mt.py"
    assert handler_of(step).mode == "run" and outputs_of(argv) == ["out/x"]
    tiny = substitute(argv)
    assert flag_value(tiny, "--max_train_steps") == str(TINY_MT_STEPS)
    assert flag_value(tiny, "--checkpointing_steps") == str(TINY_MT_CHECKPOINTS)  # added: the README had none
    assert json.loads(flag_value(tiny, "--config_overrides")) == {**TINY_MT_MODEL, "dropout": 0.0}
    [hub] = readme_blocks("```bash\naccelerate launch training/train_mt.py --vocab_size 37000 --output_dir o\n```\n")
    assert handler_of(split_commands(hub)[0]).mode == "parse"  # no --train_file: streams from the Hub

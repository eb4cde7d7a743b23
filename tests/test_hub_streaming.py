"""The trainer's real default path: `wmt/wmt19` (`zh-en`) streamed from a Hub server over HTTP, end to end.

The server is what `huggingface_hub`/`datasets` really talk to over HTTP on 127.0.0.1 (`HF_ENDPOINT`), not a mock:

- **olah** (tests/olah_server.py) serves the Hub API (dataset info, tree, resolve) from local git repos holding a
  dataset in `wmt/wmt19`'s exact layout: ``zh-en/train-000NN-of-00004.parquet`` shards (git-LFS when installed),
  ``zh-en/validation-00000-of-00001.parquet``, a README whose YAML ``configs:`` map the splits to those files, and the
  column ``translation`` = ``{"zh": ..., "en": ...}`` holding real Tatoeba pairs. A second olah serves the same repo
  with a leftover loading script ``wmt19.py`` (as the real repo has carried), which `datasets` >= 4 refuses: the
  trainer then streams the repo's Parquet files through ``data_files`` and says so.
- **A range-serving caching reverse proxy** in front of each olah (tests/range_proxy.py). olah answers file
  downloads chunked, without Content-Length, and ignores `Range`; `datasets` streams Parquet with byte-range reads
  (the footer first) through `HfFileSystem`, and fails on a whole-file answer with "Parquet magic bytes not found in
  footer". The proxy fetches each file from olah once and answers like the Hub's file server (Content-Length, ETag,
  `Range` → 206). It also lets a test hold the requests of one shard, to stop a run at a known point of its stream.
  Shards of a few KB are read in one request (`Range: bytes=0-<last>`), which olah alone survives; a third repo on
  the first server holds one shard over fsspec's 5 MiB read block, read in true ranges like the Hub's ~270 MB shards:
  a test streams it through the proxy and checks that olah alone fails on it.

Every run uses the trainer's default `--dataset_name wmt/wmt19 --dataset_config_name zh-en`, and its default
`--shuffle_shards`: each epoch reads the four shards in an order drawn from the seed and the epoch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from olah_server import OlahServer, OlahUnavailable, ensure_olah, publish_git_repo
from range_proxy import RangeProxy
from test_train_mt import TINY, launch_cmd

REPO = Path(__file__).resolve().parents[1]
TRAIN_MT = str(REPO / "training" / "train_mt.py")
SHARDS, PAIRS_PER_SHARD, VALID_PAIRS = 4, 300, 60
TRAIN_FILES = [f"zh-en/train-{i:05d}-of-{SHARDS:05d}.parquet" for i in range(SHARDS)]
README = """---
configs:
- config_name: zh-en
  data_files:
  - split: train
    path: zh-en/train-*
  - split: validation
    path: zh-en/validation-*
---
# WMT19 zh-en (a tiny copy in the Hub repo's layout, for tests)
"""
SCRIPT_NOTE = "holds a loading script (wmt19.py)"
SEED = 42  # train_mt's default --seed
# Epoch 0's file order for SEED (`shard_order`, pinned here so that a changed RNG fails loudly): not the file order.
EPOCH_0_ORDER = [0, 3, 1, 2]
LAST_FILE = TRAIN_FILES[EPOCH_0_ORDER[-1]]  # read last in epoch 0
LARGE_REPO = "nanoformer-test/wmt19-large-shard"  # one shard larger than fsspec's 5 MiB read block
BLOCK = 5 * 2**20
# The main run: a tokenizer trained from the first 500 streamed pairs, 30 steps over 1,100 of the 1,200 pairs
# (--max_train_samples), evaluated on the Hub validation split; checkpoints every 5 steps.
MAIN_FLAGS = {
    "vocab_size": 400,
    "tokenizer_train_samples": 500,
    "max_train_samples": 1100,
    "config_overrides": TINY,
    "max_source_length": 48,
    "max_target_length": 48,
    "max_tokens_per_batch": 1024,
    "shuffle_buffer_size": 200,
    "warmup_steps": 10,
    "max_train_steps": 30,
    "eval_steps": 30,
    "checkpointing_steps": 5,
    "max_eval_samples": 20,
    "num_beams": 1,
    "num_sample_translations": 0,
    "logging_steps": 5,
}


def flags(output_dir: Path, drop: tuple[str, ...] = (), **overrides) -> list[str]:
    chosen = {k: v for k, v in {**MAIN_FLAGS, **overrides, "output_dir": output_dir}.items() if k not in drop}
    return [item for key, value in chosen.items() for item in (f"--{key}", str(value))]


def hub_env(endpoint: str, hf_home: Path) -> dict[str, str]:
    """Online (conftest sets HF_HUB_OFFLINE=1), against `endpoint`, with an empty cache of its own."""
    return {
        **os.environ, "HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "0",
        "HF_HOME": str(hf_home), "HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false", "HF_HUB_DOWNLOAD_TIMEOUT": "60",
    }  # fmt: skip


def run(cmd: list[str], env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result


def read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def shard_position(dataset_state: dict) -> tuple[int, int]:
    """(shard, row in the shard) where a `datasets` stream state resumes: the Arrow rebatcher resumes from its
    `previous_state` (then skips chunks), so that is followed where it is set."""
    while "shard_idx" not in dataset_state:
        dataset_state = dataset_state.get("previous_state") or dataset_state["examples_iterable"]
    return dataset_state["shard_idx"], dataset_state["shard_example_idx"]


def resume_fields(state):
    """A stream state without what `datasets` does not resume from: after a resume, datasets 5.2's
    RebatchedArrowExamplesIterable keeps a stale copy of its inner iterable's state under "examples_iterable" (loading
    "previous_state" re-creates the inner state object); it resumes from "previous_state" and its chunk counts."""
    if isinstance(state, dict):
        drop = {"examples_iterable"} if state.get("type") == "RebatchedArrowExamplesIterable" else set()
        return {k: resume_fields(v) for k, v in state.items() if k not in drop}
    return state


@pytest.fixture(scope="module")
def pairs(shared_data) -> dict[str, list[dict]]:
    """Real Tatoeba pairs: 4 x 300 for the train shards, 60 for validation."""

    def read(name: str, n: int) -> list[dict]:
        lines = (shared_data / "tatoeba-cmn-eng" / name).read_text(encoding="utf-8").splitlines()[:n]
        return [{"zh": row["zh"], "en": row["en"]} for row in (json.loads(line)["translation"] for line in lines)]

    return {"train": read("train.jsonl", SHARDS * PAIRS_PER_SHARD), "validation": read("valid.jsonl", VALID_PAIRS)}


def write_repo(folder: Path, pairs: dict[str, list[dict]], with_script: bool) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / "zh-en").mkdir(parents=True)
    for i, name in enumerate(TRAIN_FILES):
        rows = pairs["train"][i * PAIRS_PER_SHARD : (i + 1) * PAIRS_PER_SHARD]
        pq.write_table(pa.table({"translation": rows}), folder / name, row_group_size=100)
    pq.write_table(pa.table({"translation": pairs["validation"]}), folder / "zh-en/validation-00000-of-00001.parquet")
    (folder / "README.md").write_text(README, encoding="utf-8")
    if with_script:  # never run: datasets >= 4 refuses any repo holding one
        (folder / "wmt19.py").write_text("import datasets  # the old loading script\n", encoding="utf-8")
    return folder


def large_shard_rows(shared_data: Path) -> list[dict]:
    """The Tatoeba training pairs 4 times: uncompressed, a shard of over 5 MiB."""
    lines = (shared_data / "tatoeba-cmn-eng" / "train.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["translation"] for line in lines] * 4


def write_large_shard_repo(folder: Path, shared_data: Path) -> Path:
    """`wmt/wmt19`'s layout with one train shard larger than fsspec's 5 MiB read block, which `datasets` then reads
    in byte ranges (the footer first), as it reads the Hub's ~270 MB shards."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / "zh-en").mkdir(parents=True)
    shard = folder / "zh-en" / "train-00000-of-00001.parquet"
    pq.write_table(pa.table({"translation": large_shard_rows(shared_data)}), shard, row_group_size=20_000,
                   compression="none", use_dictionary=False)  # fmt: skip
    assert shard.stat().st_size > BLOCK
    (folder / "README.md").write_text(README.replace("\n  - split: validation\n    path: zh-en/validation-*", ""))
    return folder


@pytest.fixture(scope="module")
def hubs(pairs, shared_data, tmp_path_factory):
    """Two Hub servers (olah + range proxy) serving `wmt/wmt19`: "parquet" (as now) and "script" (+ wmt19.py)."""
    try:
        cli = ensure_olah()
    except OlahUnavailable as err:
        pytest.skip(f"olah (a local Hub-API server) could not be installed: {err}")
    servers, proxies = [], {}
    try:
        for variant in ("parquet", "script"):
            root = tmp_path_factory.mktemp(f"hub_{variant}")
            src = write_repo(root / "src", pairs, with_script=variant == "script")
            server = OlahServer(cli, root / "olah")
            publish_git_repo(src, server.mirrors, "wmt/wmt19", repo_type="dataset")
            if variant == "parquet":
                large = write_large_shard_repo(root / "large", shared_data)
                publish_git_repo(large, server.mirrors, LARGE_REPO, repo_type="dataset")
            try:
                server.start(ready_repo="wmt/wmt19", repo_type="dataset")
            except OlahUnavailable as err:
                pytest.skip(f"olah could not be started: {err}")
            servers.append(server)
            proxies[variant] = RangeProxy(server.endpoint).start()
        yield proxies
    finally:
        for proxy in proxies.values():
            proxy.stop()
        for server in servers:
            server.stop()


@pytest.fixture(scope="module")
def main_run(hubs, tmp_path_factory) -> dict:
    """`accelerate launch training/train_mt.py` with the defaults, uninterrupted (also the resume test's reference)."""
    root = tmp_path_factory.mktemp("main_run")
    result = run(launch_cmd(flags(root / "out")), hub_env(hubs["parquet"].endpoint, root / "hf_home"))
    return {"out": root / "out", "log": result.stdout + result.stderr}


def test_train_streams_the_hub_dataset_and_evaluates_on_its_validation_split(main_run):
    import nanoformer.modeling  # noqa: F401 - registers the translator
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    out, log = main_run["out"], main_run["log"]
    assert "Streaming 'wmt/wmt19' (zh-en, split 'train')" in log and SCRIPT_NOTE not in log
    assert "Streaming 'wmt/wmt19' (zh-en, split 'validation')" in log
    assert f"epoch 0 (every epoch: --max_train_samples) reads the 4 training files in the order {EPOCH_0_ORDER}" in log
    for name in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "all_results.json",
                 "log_history.json", "training_curves.png", "tokenizer/tokenizer.json"):  # fmt: skip
        assert (out / name).is_file(), name
    assert sorted(int(p.name.split("_")[1]) for p in out.glob("step_*")) == [5, 10, 15, 20, 25, 30]
    results = read_json(out / "all_results.json")
    assert results["step"] == 30 and results["stop_reason"] == "max_train_steps"
    # --max_train_samples caps the streamed rows: 1,100 of the 1,200 in the four shards.
    assert results["rows_read"] == 1100 and results["skipped_rows"] == 0
    assert results["eval_samples"] == MAIN_FLAGS["max_eval_samples"] and results["eval_bleu"] is not None
    assert results["first_batch_seconds"] > 0 and 0 <= results["data_wait_fraction"] < 1
    evals = [r for r in read_json(out / "log_history.json") if "eval_loss" in r]
    assert [r["step"] for r in evals] == [0, 30] and evals[-1]["eval_loss"] < evals[0]["eval_loss"]
    # The tokenizer was trained from the stream (vocab 400) and the model loads and translates.
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert len(tokenizer) == MAIN_FLAGS["vocab_size"]
    model = AutoModelForSeq2SeqLM.from_pretrained(out)
    generated = model.generate(**tokenizer(["How are you?"], return_tensors="pt"), num_beams=1, max_new_tokens=4)
    assert generated[0, 0].item() == model.config.decoder_start_token_id


def test_kill_9_then_resume_continues_the_stream_across_shards(hubs, main_run, tmp_path):
    """A run killed while its stream waits for the shard it reads last (the files are read in the seeded order
    EPOCH_0_ORDER) resumes from its checkpoint in an earlier shard of that order and ends exactly where the
    uninterrupted run did: same stream state (rows read, position, buffered and batched pairs), same loss."""
    proxy, out = hubs["parquet"], tmp_path / "out"
    env = hub_env(proxy.endpoint, tmp_path / "hf_home")
    proxy.hold(LAST_FILE)
    proc = subprocess.Popen(launch_cmd(flags(out)), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not (proxy.held_hits.is_set() and list(out.glob("step_*/meta.json"))):  # poll, no fixed sleep
            assert proc.poll() is None, "training exited before it reached the held shard"
            assert time.monotonic() < deadline, "no checkpoint and no request of the held shard after 300 s"
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its training process, mid-stream
        proc.wait()
        proxy.release()
    assert not (out / "all_results.json").exists()
    steps = sorted(int(p.parent.name.split("_")[1]) for p in out.glob("step_*/meta.json"))
    killed_at = steps[-1]
    assert killed_at < MAIN_FLAGS["max_train_steps"]
    killed_state = read_json(out / f"step_{killed_at}" / "data_state_0.json")
    assert shard_position(killed_state["dataset"])[0] < SHARDS - 1  # stopped before the last shard

    served_before = len(proxy.served)
    result = run(launch_cmd([*flags(out), "--resume_from_checkpoint", "latest"]), env)
    assert f"Resumed from {out / f'step_{killed_at}'} at step {killed_at}" in result.stdout + result.stderr
    assert any(LAST_FILE in path for path in proxy.served[served_before:])  # it read on into the last shard
    reference = main_run["out"]
    assert (out / "tokenizer" / "tokenizer.json").read_text() == (reference / "tokenizer" / "tokenizer.json").read_text()
    for step in range(killed_at + 5, MAIN_FLAGS["max_train_steps"] + 1, 5):
        resumed = read_json(out / f"step_{step}" / "data_state_0.json")
        uninterrupted = read_json(reference / f"step_{step}" / "data_state_0.json")
        assert resume_fields(resumed) == resume_fields(uninterrupted), f"stream state differs at step {step}"
    final = read_json(out / f"step_{MAIN_FLAGS['max_train_steps']}" / "data_state_0.json")
    assert final["counters"]["rows"] == 1100 and final["counters"]["pairs"] > killed_state["counters"]["pairs"]
    resumed_log = {r["step"]: r["loss"] for r in read_json(out / "log_history.json") if "loss" in r}
    reference_log = {r["step"]: r["loss"] for r in read_json(reference / "log_history.json") if "loss" in r}
    assert resumed_log.keys() == reference_log.keys()
    for step in resumed_log:
        assert resumed_log[step] == pytest.approx(reference_log[step], rel=1e-4), step
    results, reference_results = read_json(out / "all_results.json"), read_json(reference / "all_results.json")
    assert results["rows_read"] == reference_results["rows_read"]
    assert results["eval_loss"] == pytest.approx(reference_results["eval_loss"], rel=1e-4)


def test_resuming_in_another_shard_order_fails_in_one_line(hubs, main_run, tmp_path):
    """The checkpoint saved epoch 0's file order: --no_shuffle_shards (or another --seed) would resume its position
    in other files, so the resume stops in one line instead."""
    step = main_run["out"] / "step_5"
    args = [*flags(tmp_path / "out", drop=("vocab_size", "tokenizer_train_samples"), tokenizer_name=main_run["out"]),
            "--resume_from_checkpoint", str(step), "--no_shuffle_shards"]  # fmt: skip
    result = subprocess.run([sys.executable, TRAIN_MT, *args], env=hub_env(hubs["parquet"].endpoint, tmp_path / "hf"),
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    [line] = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert line == (f"train_mt.py: error: the checkpoint's data stream read epoch 0's training files in the order "
                    f"{EPOCH_0_ORDER}, this run reads them in file order: resume with the checkpoint's --seed and "
                    "--shuffle_shards or --no_shuffle_shards")  # fmt: skip
    assert "Traceback" not in result.stderr


def test_two_processes_stream_their_own_shards_of_a_repo_with_a_loading_script(hubs, main_run, tmp_path):
    proxy, out = hubs["script"], tmp_path / "out"
    env = {**hub_env(proxy.endpoint, tmp_path / "hf_home"), "ACCELERATE_USE_CPU": "1"}
    served_before = len(proxy.served)
    args = flags(out, drop=("vocab_size", "tokenizer_train_samples", "max_train_samples"),
                 tokenizer_name=main_run["out"], max_train_steps=20, eval_steps=20, checkpointing_steps=20)  # fmt: skip
    result = run(launch_cmd(args, num_processes=2), env)
    log = result.stdout + result.stderr
    # datasets refuses the repo's script; the trainer streams its Parquet files and says so.
    assert f"{SCRIPT_NOTE}, which datasets" in log and "streaming its 4 Parquet file(s)" in log
    for rank in (0, 1):
        assert f"process {rank} of 2 streams its own 2 of the 4 shards" in log
    assert f"epoch 0 reads the 4 training files in the order {EPOCH_0_ORDER}, drawn from --seed {SEED}" in log
    states = [read_json(out / "step_20" / f"data_state_{rank}.json") for rank in (0, 1)]
    # Each process read its two whole shards (its rows are counted once, on the first pass) ...
    assert [s["counters"]["rows"] for s in states] == [2 * PAIRS_PER_SHARD] * 2
    # ... and together they fetched all four: each pair was read once, by one process.
    fetched = {path.rsplit("/", 2)[-2] + "/" + path.rsplit("/", 1)[-1] for path in proxy.served[served_before:]}
    assert set(TRAIN_FILES) <= fetched
    results = read_json(out / "all_results.json")
    assert results["num_processes"] == 2 and results["rows_read"] == SHARDS * PAIRS_PER_SHARD
    assert results["eval_bleu"] is not None


EPOCH_ROWS = """
import json, sys
from accelerate import PartialState
from nanoformer.training.mt_setup import epoch_shard_order, open_train_source, process_rows
from nanoformer.training.train_mt import parse_args

PartialState()  # accelerate's logger needs it
runs = []
for flags, epochs in json.loads(sys.argv[1]):
    args = parse_args(flags)
    train_files, parser = open_train_source(args)  # a fresh open each time, as a resumed run does
    runs.append([{
        "order": epoch_shard_order(args, train_files, epoch),
        "ranks": [[parser(row)[0] for row in process_rows(args, train_files, epoch, rank, 2)] for rank in (0, 1)],
    } for epoch in epochs])
print(json.dumps({"files": train_files.files, "runs": runs}))
"""


@pytest.mark.parametrize("variant", ["parquet", "script"])
def test_each_epoch_reads_the_shards_in_its_own_seeded_order(hubs, pairs, tmp_path, variant):
    """What two processes stream per epoch (the trainer's `process_rows`): the files in the order drawn from the seed
    and the epoch, reproducible (a second open gives the same), another each epoch; each process its own shards of
    that order, together every pair once. --no_shuffle_shards: file order; --max_train_samples: epoch 0's rows."""
    base = ["--output_dir", str(tmp_path / "out"), "--tokenizer_name", "unused"]
    runs = [(base, [0, 1, 2]), (base, [1]), ([*base, "--seed", "7"], [0]), ([*base, "--no_shuffle_shards"], [0, 1]),
            ([*base, "--max_train_samples", "700"], [0, 1])]  # fmt: skip
    env = hub_env(hubs[variant].endpoint, tmp_path / "hf_home")
    result = json.loads(run([sys.executable, "-c", EPOCH_ROWS, json.dumps(runs)], env).stdout.splitlines()[-1])
    assert [f.rsplit("/", 2)[-2] + "/" + f.rsplit("/", 1)[-1] for f in result["files"]] == TRAIN_FILES
    shards = [[p["en"] for p in pairs["train"][i * PAIRS_PER_SHARD : (i + 1) * PAIRS_PER_SHARD]] for i in range(SHARDS)]

    def rows(order: list[int], rank: int) -> list[str]:  # split_dataset_by_node: shards rank, rank + 2, ... of order
        return [en for position, shard in enumerate(order) if position % 2 == rank for en in shards[shard]]

    default, again, seed_7, file_order, capped = result["runs"]
    orders = [epoch["order"] for epoch in default]
    assert orders[0] == EPOCH_0_ORDER and len({tuple(o) for o in orders}) == 3  # another order each epoch
    assert again[0] == default[1]  # the same seed and epoch: the same order and rows, in a fresh open
    assert seed_7[0]["order"] != EPOCH_0_ORDER
    for epoch in [*default, *seed_7]:
        assert sorted(epoch["order"]) == list(range(SHARDS))
        assert epoch["ranks"] == [rows(epoch["order"], 0), rows(epoch["order"], 1)]
        assert sorted(epoch["ranks"][0] + epoch["ranks"][1]) == sorted(en for shard in shards for en in shard)
    assert [epoch["order"] for epoch in file_order] == [None, None]
    assert all(epoch["ranks"] == [rows([0, 1, 2, 3], 0), rows([0, 1, 2, 3], 1)] for epoch in file_order)
    # --max_train_samples 700, in every epoch epoch 0's order: `take` then `split_dataset_by_node`, which gives each
    # process 350 rows, the first of its own shards.
    assert [epoch["order"] for epoch in capped] == [EPOCH_0_ORDER] * 2
    assert capped[0]["ranks"] == capped[1]["ranks"] == [rows(EPOCH_0_ORDER, 0)[:350], rows(EPOCH_0_ORDER, 1)[:350]]


def test_tokenizer_cli_streams_the_hub_dataset(hubs, tmp_path):
    from transformers import AutoTokenizer

    env = hub_env(hubs["script"].endpoint, tmp_path / "hf_home")
    cmd = [sys.executable, "-m", "nanoformer.tokenization", "train", "--dataset_name", "wmt/wmt19",
           "--dataset_config_name", "zh-en", "--vocab_size", "300", "--max_train_samples", "700",
           "--output_dir", str(tmp_path / "tok")]  # fmt: skip
    result = run(cmd, env)
    assert SCRIPT_NOTE in result.stderr and "read 700 rows" in result.stderr
    # the files in train_mt's epoch-0 order for the same --seed (its own tokenizer pass reads the same pairs)
    assert f"reading the 4 files in the order {EPOCH_0_ORDER}, drawn from --seed {SEED}" in result.stderr
    in_file_order = run(cmd[:-1] + [str(tmp_path / "tok-file-order"), "--no_shuffle_shards"], env)
    assert "read 700 rows" in in_file_order.stderr and "files in the order" not in in_file_order.stderr
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert len(tokenizer) == 300
    assert tokenizer.decode(tokenizer("今天天气很好。")["input_ids"], skip_special_tokens=True) == "今天天气很好。"


def test_a_shard_larger_than_a_read_block_is_streamed_in_byte_ranges(hubs, shared_data, tmp_path):
    """Why the proxy: olah alone answers range reads with the whole file, which fails on a shard larger than one
    read block; through the proxy the same `load_dataset(..., streaming=True)` reads it in 206 ranges, footer first."""
    proxy = hubs["parquet"]
    code = (
        "from nanoformer.tokenization.corpus import stream_hub_dataset\n"
        f"dataset, how = stream_hub_dataset({LARGE_REPO!r}, 'zh-en', 'train')\n"
        "rows = list(dataset)\n"
        "print(len(rows), rows[0]['translation']['en'], rows[-1]['translation']['en'], sep='\\t')\n"
    )
    direct = subprocess.run([sys.executable, "-c", code], env=hub_env(proxy.upstream, tmp_path / "hf_olah"),
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert direct.returncode != 0 and "Parquet magic bytes not found in footer" in direct.stderr
    ranges_before = len(proxy.ranges)
    result = run([sys.executable, "-c", code], hub_env(proxy.endpoint, tmp_path / "hf_proxy"))
    rows = large_shard_rows(shared_data)
    assert result.stdout.strip().split("\t") == [str(len(rows)), rows[0]["en"], rows[-1]["en"]]
    shard_ranges = [header for path, header in proxy.ranges[ranges_before:] if path.endswith(".parquet")]
    starts = [int(header.removeprefix("bytes=").split("-")[0]) for header in shard_ranges]
    assert len(shard_ranges) >= 2 and max(starts) > BLOCK  # partial reads, the last block among them


def test_offline_streams_a_downloaded_copy(hubs, tmp_path):
    """HF_HUB_OFFLINE=1 (the hint of the unreachable-Hub error): `datasets` streams nothing offline, the trainer
    streams the Parquet files of a copy fetched before with `hf download` (as the README says) from the cache."""
    online = hub_env(hubs["parquet"].endpoint, tmp_path / "hf_home")
    hf = str(Path(sys.executable).with_name("hf"))
    run([hf, "download", "--repo-type", "dataset", "wmt/wmt19", "--include", "zh-en/*", "--include", "README.md"], online)
    offline = {**online, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}  # nothing listens there
    out = tmp_path / "out"
    result = run([sys.executable, TRAIN_MT, *flags(out, max_train_steps=5, eval_steps=5)], offline)
    for split in ("train", "validation"):
        assert f"HF_HUB_OFFLINE=1: streaming 'wmt/wmt19' (zh-en, split '{split}') from the " in result.stderr
    results = read_json(out / "all_results.json")
    assert results["step"] == 5 and results["eval_loss"] is not None and results["rows_read"] > 0


def test_stopped_server_fails_in_one_line_and_leaves_no_output_dir(pairs, tmp_path):
    stopped = RangeProxy("http://127.0.0.1:9").start()
    endpoint = stopped.endpoint
    stopped.stop()  # nothing listens there any more
    env = hub_env(endpoint, tmp_path / "hf_home")
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, TRAIN_MT, *flags(out)], env=env, capture_output=True, text=True,
                            timeout=120)  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    [line] = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert line.startswith("train_mt.py: error: cannot reach the Hugging Face Hub at " + endpoint)
    assert "HF_HUB_OFFLINE=1" in line and "--train_file" in line
    assert "Retrying" not in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()
    # Through `accelerate launch -q` (as the README says): the same line, without the launcher's traceback.
    launched = subprocess.run(launch_cmd(flags(out), quiet=True), env=env, capture_output=True, text=True,
                              timeout=120)  # fmt: skip
    assert launched.returncode == 1 and line in launched.stderr.splitlines()
    assert "Traceback" not in launched.stderr and "CalledProcessError" not in launched.stderr
    assert not out.exists()

"""Unit tests of the shared training utilities (schedules, checkpoints, reporting, arguments) and the LM data code."""

import json
import math

import numpy as np
import pytest
import torch
from accelerate import Accelerator
from nanoformer.training.arguments import parse_config_overrides
from nanoformer.training.checkpointing import (
    find_latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    prune_checkpoints,
    resolve_checkpoint,
    save_checkpoint,
)
from nanoformer.training.lm_data import (
    RandomWindowSampler,
    encode_to_file,
    full_split_windows,
    ids_dtype,
    read_text_chunks,
    split_train_val,
)
from nanoformer.training.reporting import plot_curves, write_all_results
from nanoformer.training.schedules import (
    cosine_with_warmup_lr,
    get_cosine_with_warmup_schedule,
    get_noam_schedule,
    noam_lr,
)

# --- schedules ---------------------------------------------------------------------------------------------------


def _lrs(optimizer, scheduler, steps):
    out = []
    for _ in range(steps):
        out.append([g["lr"] for g in optimizer.param_groups])
        optimizer.step()
        scheduler.step()
    return out


def test_cosine_schedule_is_nanogpts_get_lr():
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
    sched = get_cosine_with_warmup_schedule(opt, warmup_steps=10, decay_steps=100, min_lr=1e-4)
    lrs = [lr[0] for lr in _lrs(opt, sched, 120)]
    assert lrs[0] == pytest.approx(1e-3 * 1 / 11)  # warmup never starts at 0
    assert lrs[9] == pytest.approx(1e-3 * 10 / 11)
    assert lrs[10] == pytest.approx(1e-3)  # peak right after warmup
    assert lrs[55] == pytest.approx(1e-4 + 0.5 * (1e-3 - 1e-4))  # cosine midpoint
    assert all(a >= b for a, b in zip(lrs[10:100], lrs[11:101]))  # decays monotonically
    assert lrs[100:] == pytest.approx([1e-4] * 20)  # then flat at min_lr
    for step in (0, 5, 37, 99, 150):
        assert lrs[min(step, 119)] == pytest.approx(
            cosine_with_warmup_lr(min(step, 119), max_lr=1e-3, min_lr=1e-4, warmup_steps=10, decay_steps=100)
        )


def test_cosine_schedule_keeps_param_group_ratios():
    a, b = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([{"params": [a]}, {"params": [b], "lr": 5e-4}], lr=1e-3)
    sched = get_cosine_with_warmup_schedule(opt, warmup_steps=0, decay_steps=10, min_lr=0.0)
    for lr_a, lr_b in _lrs(opt, sched, 10):
        assert lr_b == pytest.approx(lr_a / 2)


def test_noam_schedule_matches_the_paper():
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=1.0)
    sched = get_noam_schedule(opt, d_model=512, warmup_steps=40, scale=2.0)
    lrs = [lr[0] for lr in _lrs(opt, sched, 200)]
    for step in (0, 10, 39, 40, 199):
        s = step + 1
        assert lrs[step] == pytest.approx(2.0 * 512**-0.5 * min(s**-0.5, s * 40**-1.5))
    assert max(lrs) == pytest.approx(lrs[39])  # the peak is at the end of warmup
    assert lrs[39] == pytest.approx(2.0 * (512 * 40) ** -0.5)
    with pytest.raises(ValueError, match="warmup_steps"):
        noam_lr(0, d_model=512, warmup_steps=0)


def test_noam_is_absolute_whatever_the_optimizer_lr():
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=7e-4)
    sched = get_noam_schedule(opt, d_model=256, warmup_steps=10)
    assert [lr[0] for lr in _lrs(opt, sched, 30)] == pytest.approx(
        [noam_lr(i, d_model=256, warmup_steps=10) for i in range(30)]
    )


def test_schedule_state_dict_resumes_mid_way():
    def make():
        opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
        return opt, get_cosine_with_warmup_schedule(opt, warmup_steps=5, decay_steps=50, min_lr=1e-5)

    opt, sched = make()
    full = _lrs(opt, sched, 40)
    opt, sched = make()
    _lrs(opt, sched, 17)
    state_opt, state_sched = opt.state_dict(), sched.state_dict()
    opt, sched = make()
    opt.load_state_dict(state_opt)
    sched.load_state_dict(state_sched)
    assert [lr[0] for lr in _lrs(opt, sched, 23)] == pytest.approx([lr[0] for lr in full[17:]])


def test_min_lr_above_peak_is_rejected():
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=1e-4)
    with pytest.raises(ValueError, match="must not exceed"):
        get_cosine_with_warmup_schedule(opt, warmup_steps=1, decay_steps=10, min_lr=1e-3)


# --- checkpoints -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def accel_setup():
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = get_cosine_with_warmup_schedule(optimizer, warmup_steps=2, decay_steps=10, min_lr=1e-3)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    return accelerator, model, optimizer, scheduler


def _train_step(model, optimizer, scheduler):
    loss = model(torch.randn(4, 3)).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    scheduler.step()


def test_save_and_load_round_trip(accel_setup, tmp_path):
    accelerator, model, optimizer, scheduler = accel_setup
    _train_step(model, optimizer, scheduler)
    path = save_checkpoint(
        accelerator, tmp_path, 7, args={"lr": 1e-2, "out": tmp_path}, data_state={"pos": [1, 2]}, extra={"best": 3.5}
    )
    assert path == tmp_path / "step_7" and not list(tmp_path.glob(".tmp-*"))
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    lr = scheduler.get_last_lr()

    _train_step(model, optimizer, scheduler)  # move everything away from the saved state
    state = load_checkpoint(accelerator, path)
    assert state.step == 7 and state.data_state == {"pos": [1, 2]} and state.extra == {"best": 3.5}
    assert state.args == {"lr": 1e-2, "out": str(tmp_path)}  # paths recorded as strings
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    assert scheduler.get_last_lr() == lr


def test_rng_state_is_restored(accel_setup, tmp_path):
    accelerator, *_ = accel_setup
    torch.manual_seed(5)
    np.random.seed(5)
    path = save_checkpoint(accelerator, tmp_path, 1)
    expected = (torch.rand(3), np.random.rand(3))
    torch.rand(100)
    np.random.rand(100)
    load_checkpoint(accelerator, path)
    assert torch.equal(torch.rand(3), expected[0])
    assert np.array_equal(np.random.rand(3), expected[1])


def test_latest_ignores_temp_and_incomplete_folders(accel_setup, tmp_path):
    accelerator, *_ = accel_setup
    assert find_latest_checkpoint(tmp_path) is None
    assert resolve_checkpoint("latest", tmp_path) is None  # nothing yet: start fresh
    for step in (5, 20, 10):
        save_checkpoint(accelerator, tmp_path, step)
    (tmp_path / ".tmp-step_30").mkdir()  # killed mid-save
    (tmp_path / "step_40").mkdir()  # no meta.json
    (tmp_path / "step_x").mkdir()
    (tmp_path / "step_50").write_text("not a folder")
    assert [s for s, _ in list_checkpoints(tmp_path)] == [5, 10, 20]  # numeric, not lexical, order
    assert resolve_checkpoint("latest", tmp_path) == tmp_path / "step_20"
    assert resolve_checkpoint(str(tmp_path / "step_10"), tmp_path) == tmp_path / "step_10"
    assert resolve_checkpoint(None, tmp_path) is None
    with pytest.raises(ValueError, match="not a complete checkpoint"):
        resolve_checkpoint(str(tmp_path / "step_40"), tmp_path)
    with pytest.raises(ValueError, match="not found"):
        resolve_checkpoint(str(tmp_path / "step_99"), tmp_path)


def test_stale_temp_dir_is_replaced(accel_setup, tmp_path):
    accelerator, *_ = accel_setup
    stale = tmp_path / ".tmp-step_3"
    stale.mkdir()
    (stale / "junk.bin").write_bytes(b"half")
    path = save_checkpoint(accelerator, tmp_path, 3)
    assert not stale.exists() and not (path / "junk.bin").exists()
    assert json.loads((path / "meta.json").read_text())["step"] == 3


def test_total_limit_prunes_oldest(accel_setup, tmp_path):
    accelerator, *_ = accel_setup
    for step in (1, 2, 3, 4):
        save_checkpoint(accelerator, tmp_path, step, total_limit=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3, 4]
    save_checkpoint(accelerator, tmp_path, 5)  # no limit: keeps all
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3, 4, 5]
    assert prune_checkpoints(tmp_path, 1) == [tmp_path / "step_3", tmp_path / "step_4"]
    assert prune_checkpoints(tmp_path, None) == []
    assert [s for s, _ in list_checkpoints(tmp_path)] == [5]


# --- reporting and arguments -------------------------------------------------------------------------------------


def test_plot_curves_and_all_results(tmp_path):
    history = [{"step": 0, "eval_loss": 4.2}, {"step": 10, "loss": 3.0}, {"step": 20, "loss": 2.5, "eval_loss": 2.7}]
    path = plot_curves(history, [["loss", "eval_loss"], "eval_bleu"], tmp_path / "curves.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_curves(history, ["eval_bleu"], tmp_path / "none.png") is None  # nothing to draw
    write_all_results(tmp_path, {"step": 20, "eval_loss": 2.7, "bad": float("nan")})
    assert json.loads((tmp_path / "all_results.json").read_text()) == {"step": 20, "eval_loss": 2.7, "bad": None}


def test_config_overrides_are_typed_and_checked():
    from nanoformer.modeling import NanoGPTConfig

    kwargs = parse_config_overrides("n_layer=6, dropout=0.2,bias=false,norm_type=rmsnorm", NanoGPTConfig)
    assert kwargs == {"n_layer": 6, "dropout": 0.2, "bias": False, "norm_type": "rmsnorm"}
    assert parse_config_overrides(None, NanoGPTConfig) == {} and parse_config_overrides(" ", NanoGPTConfig) == {}
    with pytest.raises(ValueError, match="unknown key 'n_layers'.*n_layer"):
        parse_config_overrides("n_layers=6", NanoGPTConfig)
    with pytest.raises(ValueError, match="n_layer='six' as int"):
        parse_config_overrides("n_layer=six", NanoGPTConfig)
    with pytest.raises(ValueError, match="key=value"):
        parse_config_overrides("n_layer", NanoGPTConfig)


def test_config_overrides_set_optional_fields_to_none():
    from nanoformer.modeling import TranslatorConfig

    # init_std is `float | None` with a float default: "null" selects None, other values stay floats.
    assert parse_config_overrides("init_std=null,d_model=64", TranslatorConfig) == {"init_std": None, "d_model": 64}
    assert parse_config_overrides("init_std=0.05", TranslatorConfig) == {"init_std": 0.05}
    with pytest.raises(ValueError, match="d_model='null' as int"):  # a required field still refuses it
        parse_config_overrides("d_model=null", TranslatorConfig)


# --- LM data -----------------------------------------------------------------------------------------------------


def test_file_chunks_reassemble_the_text(tmp_path):
    text = "".join(f"line {i} ☃ with some text\n" for i in range(500)) + "no newline at the end"
    path = tmp_path / "t.txt"
    path.write_text(text, encoding="utf-8")
    chunks = list(read_text_chunks(path, chunk_chars=100))
    assert "".join(chunks) == text
    assert all(c.endswith("\n") for c in chunks[:-1]) and len(chunks) > 10
    with pytest.raises(ValueError, match="not found"):
        list(read_text_chunks(tmp_path / "missing.txt"))


def test_dataset_name_offline_error_suggests_train_file(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="--train_file"):
        list(read_text_chunks(dataset_name="someone/surely-not-a-cached-dataset"))


def test_encode_to_file_matches_tokenizer_and_is_cached(tmp_path, char_tokenizer, shared_data):
    text = (shared_data / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:20000]
    path = tmp_path / "ids.bin"
    ids = encode_to_file(iter([text[:7000], text[7000:]]), char_tokenizer, path, {"name": "x"})
    assert ids.dtype == np.uint16 and isinstance(ids, np.memmap)
    assert ids.tolist() == char_tokenizer(text, add_special_tokens=False)["input_ids"]
    mtime = path.stat().st_mtime_ns
    again = encode_to_file(iter(["ignored"]), char_tokenizer, path, {"name": "x"})  # same source: reused
    assert path.stat().st_mtime_ns == mtime and np.array_equal(again, ids)
    changed = encode_to_file(iter(["abc"]), char_tokenizer, path, {"name": "y"})  # new source: re-encoded
    assert len(changed) == 3
    with pytest.raises(ValueError, match="empty"):
        encode_to_file(iter([]), char_tokenizer, tmp_path / "empty.bin", {"name": "z"})
    assert ids_dtype(65536) == np.uint16 and ids_dtype(65537) == np.uint32


def test_split_is_nanogpts_90_10():
    ids = np.arange(1000)
    train, val = split_train_val(ids, 10)
    assert len(train) == 900 and val[0] == 900 and len(val) == 100
    with pytest.raises(ValueError):
        split_train_val(ids, 0)


def test_sampler_windows_and_exact_state_round_trip():
    ids = np.arange(500, dtype=np.uint16)
    sampler = RandomWindowSampler(ids, block_size=8, batch_size=4, seed=[1, 0])
    x, y = sampler.next_batch()
    assert x.shape == y.shape == (4, 8) and x.dtype == torch.long
    assert torch.equal(y, x + 1)  # targets are the inputs shifted by one (ids are consecutive here)
    state = json.loads(json.dumps(sampler.state_dict()))  # survives JSON, as in a checkpoint
    expected = [sampler.next_batch() for _ in range(3)]
    other = RandomWindowSampler(ids, block_size=8, batch_size=4, seed=[99])
    other.load_state_dict(state)
    for (ex, ey), (gx, gy) in zip(expected, [other.next_batch() for _ in range(3)]):
        assert torch.equal(ex, gx) and torch.equal(ey, gy)
    assert other.batches_drawn == 4
    assert x.max() <= 499 - 1 and y.max() <= 499  # never reads past the end
    with pytest.raises(ValueError, match="block_size"):
        RandomWindowSampler(ids[:8], block_size=8, batch_size=1, seed=0)


@pytest.mark.parametrize("num_shards", [1, 3])
def test_full_split_windows_score_every_token_once(num_shards):
    ids = np.arange(103)
    targets = []
    for shard in range(num_shards):
        for x, y in full_split_windows(ids, block_size=10, batch_size=4, shard=shard, num_shards=num_shards):
            assert x.shape == y.shape and x.shape[1] <= 10
            assert torch.equal(y, x + 1)
            assert x[:, 0].remainder(10).eq(0).all()  # windows start at multiples of block_size: no overlap
            targets.extend(y.flatten().tolist())
    assert sorted(targets) == list(range(1, 103))


def test_full_split_loss_equals_mean_over_windows():
    """The per-token mean over non-overlapping windows, as the issue defines the whole-split validation loss."""
    ids = np.random.default_rng(0).integers(0, 7, size=57)
    logits_table = torch.randn(7, 7)
    total, count = 0.0, 0
    for x, y in full_split_windows(ids, block_size=8, batch_size=3):
        total += torch.nn.functional.cross_entropy(logits_table[x].flatten(0, 1), y.flatten(), reduction="sum").item()
        count += y.numel()
    direct = torch.nn.functional.cross_entropy(logits_table[torch.from_numpy(ids[:-1])], torch.from_numpy(ids[1:]))
    assert count == 56 and math.isclose(total / count, direct.item(), rel_tol=1e-5)


def test_dataset_name_reads_the_text_column(tmp_path):
    """A local folder is a valid `datasets` id: its .txt files load with the `text` builder, one row per line."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "train.txt").write_text("first line\nsecond line\n\nlast\n", encoding="utf-8")
    text = "".join(read_text_chunks(dataset_name=str(folder)))
    assert text == "first line\nsecond line\n\nlast\n"
    with pytest.raises(ValueError, match="no column 'content'"):
        list(read_text_chunks(dataset_name=str(folder), text_column="content"))


def test_loop_state_round_trips_and_reads_legacy_checkpoints():
    from nanoformer.training.common import LoopState

    state = LoopState(step=7, history=[{"step": 5, "loss": 1.0}], train_tokens=99)
    assert state.record_eval(0.5, higher_is_better=False) and not state.record_eval(0.6, higher_is_better=False)
    restored = LoopState()
    restored.load_state_dict(json.loads(json.dumps(state.state_dict())))  # what a checkpoint stores
    assert restored == state and (restored.best_metric, restored.best_step, restored.bad_evals) == (0.5, 7, 1)

    legacy = {"history": [{"step": 1}], "best": {"step": 4, "metric": "eval_bleu", "value": 3.5}, "bad_evals": 2,
              "step_seconds": 1.5, "target_tokens": 10, "train_runtime": 9.0, "tokenizer": "abc"}  # fmt: skip
    old = LoopState()
    old.load_state_dict(LoopState.from_legacy_extra(legacy))
    assert (old.history, old.best_metric, old.best_step, old.bad_evals) == ([{"step": 1}], 3.5, 4, 2)
    assert (old.train_seconds, old.train_tokens, old.runtime_before) == (1.5, 10, 9.0)


def test_config_overrides_take_json_values_and_objects():
    from nanoformer.modeling import NanoGPTConfig

    rope = '{"rope_type": "dynamic", "factor": 2.0}'
    parsed = parse_config_overrides(f"n_layer=2,rope_parameters={rope},position_embedding_type=rope", NanoGPTConfig)
    assert parsed == {"n_layer": 2, "rope_parameters": {"rope_type": "dynamic", "factor": 2.0},
                      "position_embedding_type": "rope"}  # fmt: skip
    assert parse_config_overrides('{"n_layer": 3, "dropout": 0}', NanoGPTConfig) == {"n_layer": 3, "dropout": 0}
    for bad, message in (("rope_parameters={oops", "not valid JSON"), ('{"n_layer": "x"}', "must be of type int"),
                         ('{"n_layers": 1}', "unknown key")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            parse_config_overrides(bad, NanoGPTConfig)

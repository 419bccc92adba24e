"""Soft targets (Penha & Hauff 2021): LS / WSLS at hand-computed points, the two-stage switch, and
properties over every method: rows sum to 1, eps = 0 is the hard labels, the label never flips."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.config import SMOOTHING_METHODS, TrialConfig
from harness.errors import ConfigError
from harness.losses.smoothing import smoothing_method
from harness.losses.targets import scale_weak_scores, soft_targets, weak_scores
from harness.records import Candidate, Query


def targets(method: str, labels: list[int], weak: list[float] | None = None, *, eps: float = 0.2,
            step: int = 0, switch: float = 100) -> np.ndarray:
    return soft_targets(np.array(labels), None if weak is None else np.array(weak), method=method,
                        epsilon=eps, step=step, switch_step=switch)


def test_ls_hand_computed() -> None:
    # q' = (1 - eps) delta_{k,y} + eps / K, K = 2
    np.testing.assert_allclose(targets("LS", [1, 0], eps=0.2), [[0.1, 0.9], [0.9, 0.1]])
    np.testing.assert_allclose(targets("LS", [0], eps=0.5), [[0.75, 0.25]])


def test_wsls_hand_computed() -> None:
    # negatives: q'(1) = eps * s; positives fall back to LS; no score (s = 0): one-hot
    t = targets("WSLS", [0, 0, 1, 0], [0.5, 0.99, 0.0, 0.0], eps=0.4)
    np.testing.assert_allclose(t, [[0.8, 0.2], [1 - 0.396, 0.396], [0.2, 0.8], [1.0, 0.0]])


def test_two_stage_variants_switch_to_hard_labels() -> None:
    hard = np.array([[0.0, 1.0], [1.0, 0.0]])
    for method in ("T-LS", "T-WSLS"):
        before = targets(method, [1, 0], [0.0, 0.5], step=99, switch=100)
        assert not np.array_equal(before, hard)
        for step in (100, 101, 10**6):
            assert np.array_equal(targets(method, [1, 0], [0.0, 0.5], step=step, switch=100), hard)
    np.testing.assert_allclose(targets("T-LS", [1], step=99), targets("LS", [1], step=99))
    np.testing.assert_allclose(targets("LS", [1], step=10**6), [[0.1, 0.9]])  # LS never switches


def test_weak_scores_min_max_into_001_099() -> None:
    q = Query("q", ("u",), (Candidate("p", "r", 1, 50.0), Candidate("a", "r", 0, 2.0),
                            Candidate("b", "r", 0, 4.0), Candidate("c", "r", 0, 3.0),
                            Candidate("d", "r", 0, None)))
    np.testing.assert_allclose(weak_scores(q), [0.0, 0.01, 0.99, 0.5, 0.0])
    assert scale_weak_scores([7.0, 7.0, None]).tolist() == [0.01, 0.01, 0.0]
    assert scale_weak_scores([None, None]).tolist() == [0.0, 0.0]
    assert scale_weak_scores([]).tolist() == []


def test_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match="smoothing.method.*valid: none, LS, T-LS, WSLS, T-WSLS"):
        targets("label_smoothing", [1])
    with pytest.raises(ConfigError, match="smoothing.epsilon"):
        targets("LS", [1], eps=1.0)
    with pytest.raises(ValueError, match="weak"):
        targets("WSLS", [0, 1], None)
    with pytest.raises(ValueError, match="weak"):
        targets("WSLS", [0], [1.5])


@st.composite
def batches(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    size = draw(st.integers(0, 32))
    labels = np.array(draw(st.lists(st.integers(0, 3), min_size=size, max_size=size)), dtype=int)
    weak = np.array(draw(st.lists(st.one_of(st.just(0.0), st.floats(0.01, 0.99)),
                                  min_size=size, max_size=size)), dtype=float)
    return labels, weak


@pytest.mark.parametrize("method", SMOOTHING_METHODS)
@settings(max_examples=80, deadline=None)
@given(batch=batches(), eps=st.floats(0.0, 0.999), step=st.integers(0, 200))
def test_rows_sum_to_one_and_lie_in_0_1(method: str, batch: tuple[np.ndarray, np.ndarray],
                                        eps: float, step: int) -> None:
    labels, weak = batch
    t = soft_targets(labels, weak, method=method, epsilon=eps, step=step, switch_step=100)
    assert t.shape == (len(labels), 2)
    assert np.array_equal(t.sum(axis=1), np.ones(len(labels)))  # exactly
    assert ((t >= 0) & (t <= 1)).all()


@pytest.mark.parametrize("method", SMOOTHING_METHODS)
@settings(max_examples=60, deadline=None)
@given(batch=batches(), step=st.integers(0, 200))
def test_epsilon_zero_is_exactly_the_hard_labels(method: str, batch: tuple[np.ndarray, np.ndarray],
                                                 step: int) -> None:
    labels, weak = batch
    t = soft_targets(labels, weak, method=method, epsilon=0.0, step=step, switch_step=100)
    hard = np.zeros((len(labels), 2))
    hard[np.arange(len(labels)), (labels > 0).astype(int)] = 1.0
    assert np.array_equal(t, hard)


@pytest.mark.parametrize("method", SMOOTHING_METHODS)
@settings(max_examples=60, deadline=None)
@given(batch=batches(), eps=st.floats(0.0, 0.4999), step=st.integers(0, 200))
def test_the_label_keeps_the_larger_mass(method: str, batch: tuple[np.ndarray, np.ndarray],
                                         eps: float, step: int) -> None:
    # For eps < 0.5 (the paper's range is eps <= 0.4) no method flips the class.
    labels, weak = batch
    t = soft_targets(labels, weak, method=method, epsilon=eps, step=step, switch_step=100)
    own = t[np.arange(len(labels)), (labels > 0).astype(int)]
    assert (own > 0.5).all()


@settings(max_examples=60, deadline=None)
@given(batch=batches(), eps=st.floats(0.0, 0.999))
def test_ls_never_flips_the_class_for_any_epsilon_below_one(batch: tuple[np.ndarray, np.ndarray],
                                                            eps: float) -> None:
    labels, _ = batch
    t = soft_targets(labels, None, method="LS", epsilon=eps, step=0, switch_step=100)
    assert (t.argmax(axis=1) == (labels > 0)).all()


# -- the methods as properties ------------------------------------------------------------------

@pytest.mark.parametrize(("alias", "paper"), [("uniform", "LS"), ("two-stage-uniform", "T-LS"),
                                              ("weak", "WSLS"), ("two-stage-weak", "T-WSLS")])
def test_alias_gives_the_paper_method_targets_and_config(alias, paper):
    labels, weak = np.array([1, 0, 0]), np.array([0.0, 0.7, 0.01])
    for step in (0, 10):
        np.testing.assert_array_equal(
            soft_targets(labels, weak, method=alias, epsilon=0.3, step=step, switch_step=5),
            soft_targets(labels, weak, method=paper, epsilon=0.3, step=step, switch_step=5))
    a = TrialConfig.from_flat({"smoothing.method": alias, "smoothing.epsilon": 0.3})
    p = TrialConfig.from_flat({"smoothing.method": paper, "smoothing.epsilon": 0.3})
    assert a.smoothing.method == paper and a.config_id() == p.config_id()


def test_properties_decide_behaviour():
    # two-stage: smoothed before the switch, hard from it on; weak prior: negatives follow s.
    t = smoothing_method("T-WSLS")
    assert (t.prior, t.two_stage, t.needs_weak_scores) == ("weak", True, True)
    before = soft_targets(np.array([0]), np.array([0.5]), method="T-WSLS", epsilon=0.2, step=4,
                          switch_step=5)
    after = soft_targets(np.array([0]), np.array([0.5]), method="T-WSLS", epsilon=0.2, step=5,
                         switch_step=5)
    assert before.tolist() == [[0.9, 0.1]] and after.tolist() == [[1.0, 0.0]]
    assert not smoothing_method("none").smooths and not smoothing_method("LS").needs_weak_scores


def test_unknown_method_names_close_names_and_aliases():
    with pytest.raises(ConfigError, match=r"smoothing.method: unknown name 'T-WSL'.*did you mean T-WSLS"):
        TrialConfig.from_flat({"smoothing.method": "T-WSL"})
    with pytest.raises(ConfigError, match="aliases: uniform"):
        smoothing_method("gaussian")


def test_loss_table_decides_instances_and_smoothing():
    from harness.losses.kinds import LOSSES

    assert TrialConfig.from_flat({"train.loss": "pairwise"}).train.loss == "pairwise"
    with pytest.raises(ConfigError, match=r"train.loss must be one of pointwise, pointwise_mse, pairwise, got 'listwise'"):
        TrialConfig.from_flat({"train.loss": "listwise"})
    for loss in ("pairwise", "pointwise_mse"):
        with pytest.raises(ConfigError, match=rf"it needs train.loss=pointwise, got {loss}"):
            TrialConfig.from_flat({"train.loss": loss, "smoothing.method": "LS"})
    assert [n for n, k in LOSSES.items() if k.pairwise] == ["pairwise"]

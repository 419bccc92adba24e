"""Cascade cost accounting: the paper's numbers (Table 3, Sec. 4.3.2), properties, validation."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.config import CascadeConfig, TrialConfig
from harness.errors import ConfigError
from harness.model.cascade_cost import CascadePlan, cost_table, default_exits, drop_count, plan_from_config

PAPER = {"num_layers": 12, "exits": (4, 6, 8, 10, 12)}


def reduction(alpha: float, rounding: str = "floor") -> float:
    return 100 * (1 - CascadePlan.build(**PAPER, alpha=(alpha,), rounding=rounding).relative_cost(128))


def test_table3_cost_reductions_with_the_stated_floor_rule() -> None:
    # Table 3: -37%, -45%, -51%. floor(alpha * k) (Sec. 4.3.2) gives 36.7, 44.4, 51.0.
    assert reduction(0.3) == pytest.approx(100 * (1 - 972 / 1536))
    assert [round(reduction(a)) for a in (0.3, 0.4, 0.5)] == [37, 44, 51]
    assert abs(reduction(0.4) - 45) < 1.0


def test_table3_cost_reductions_exactly_with_nearest_rounding() -> None:
    # The paper's printed numbers (37, 45, 51) and its example's survivors come from rounding.
    assert [round(reduction(a, "nearest")) for a in (0.3, 0.4, 0.5)] == [37, 45, 51]
    plan = CascadePlan.build(**PAPER, alpha=(0.3,), rounding="nearest")
    assert plan.entering(128) == (128, 90, 63, 44, 31)  # "only 31 samples are left"


def test_paper_worked_example_with_floor() -> None:
    plan = CascadePlan.build(**PAPER, alpha=(0.3,))
    # 0.3*128 -> 38 dropped, 90 left; 0.3*90 -> 27 dropped, 63 left (Sec. 4.3.2)
    assert plan.entering(128)[:3] == (128, 90, 63)
    assert plan.layer_passes(128) == 4 * 128 + 2 * (90 + 63 + 45 + 32)


def test_alpha_half_is_exact() -> None:
    plan = CascadePlan.build(**PAPER, alpha=(0.5,))
    assert plan.entering(128) == (128, 64, 32, 16, 8)
    assert plan.relative_cost(128) == pytest.approx(752 / 1536)
    assert plan.speedup(128) == pytest.approx(1536 / 752)


def test_default_exits() -> None:
    assert default_exits(12) == (4, 6, 8, 10, 12)
    assert default_exits(6) == (2, 3, 4, 5, 6)
    assert default_exits(4) == (2, 3, 4)
    assert default_exits(1) == (1,)
    for n in range(1, 40):
        ex = default_exits(n)
        assert ex[-1] == n and list(ex) == sorted(set(ex))


def test_drop_count_is_exact_in_decimal() -> None:
    assert drop_count(0.29, 100) == 29  # 0.29 * 100 == 28.999999999999996 in binary floating point
    assert drop_count(0.7, 10) == 7
    assert drop_count(0.5, 7, "nearest") == 4
    assert drop_count(0.0, 1000) == 0


@given(st.integers(1, 24).flatmap(lambda n: st.tuples(st.just(n), st.lists(
    st.integers(1, n), min_size=0, max_size=6, unique=True))),
    st.lists(st.floats(0, 0.99), min_size=1, max_size=1), st.integers(1, 600),
    st.sampled_from(["floor", "nearest"]))
def test_cost_properties(depth_exits: tuple[int, list[int]], alpha: list[float], n: int, rounding: str) -> None:
    depth, extra = depth_exits
    exits = tuple(sorted({*extra, depth}))
    plan = CascadePlan.build(num_layers=depth, exits=exits, alpha=alpha, rounding=rounding)
    k = plan.entering(n)
    assert k[0] == n and all(a >= b >= 1 for a, b in itertools.pairwise(k))
    cost = plan.relative_cost(n)
    assert exits[0] / depth - 1e-12 <= cost <= 1.0
    if alpha[0] == 0:
        assert cost == 1.0 and k == (n,) * len(exits)
    larger = plan.with_alpha((min(0.99, alpha[0] + 0.1),))
    assert larger.relative_cost(n) <= cost + 1e-12


def test_the_last_exit_drops_nothing_whatever_form_the_ratios_take() -> None:
    """One ratio for every exit, one per exit before the last, or one per exit with 0 last: the
    final exit ranks what is left, so the three plans score alike."""
    a = CascadePlan.build(**PAPER, alpha=(0.3, 0.3, 0.3, 0.3, 0.0))
    b = CascadePlan.build(**PAPER, alpha=(0.3, 0.3, 0.3, 0.3))
    c = CascadePlan.build(**PAPER, alpha=(0.3,))
    assert a.entering(128) == b.entering(128) == c.entering(128)
    assert a.relative_cost(128) == b.relative_cost(128) == c.relative_cost(128)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"alpha": (1.0,)}, r"cascade\.alpha must be in \[0, 1\)"),
    ({"alpha": (-0.1,)}, r"cascade\.alpha must be in \[0, 1\)"),
    ({"alpha": (float("nan"),)}, r"cascade\.alpha must be in \[0, 1\)"),
    ({"alpha": (0.3, 0.3)}, r"cascade\.alpha must have 1 value, one per exit before the last \(4, .*\(5\) for"),
    ({"alpha": (0.3, 0.3, 0.3, 0.3, 0.5)}, r"cascade\.alpha's last value \(0\.5\) is the final exit's"),
    ({"exits": (4, 6, 14)}, r"cascade\.exits .*14 is beyond its depth"),
    ({"exits": (4, 6, 8)}, r"cascade\.exits must end at the last layer \(12\)"),
    ({"exits": (6, 4, 12)}, r"cascade\.exits must be strictly increasing"),
    ({"exits": ()}, r"cascade\.exits must be a non-empty"),
    ({"rounding": "ceil"}, r"rounding must be one of floor, nearest"),
])
def test_bad_plans_name_the_key(kwargs: dict, match: str) -> None:
    args = {**PAPER, **kwargs}
    with pytest.raises(ConfigError, match=match):
        CascadePlan.build(**args)


def test_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"cascade\.alpha must be in \[0, 1\)"):
        CascadeConfig(enabled=True, alpha=(1.5,))
    with pytest.raises(ConfigError, match=r"cascade\.alpha must have 1 value, one per exit before the last"):
        CascadeConfig(enabled=True, exits=(2, 4), alpha=(0.1, 0.2, 0.3))
    with pytest.raises(ConfigError, match=r"cascade\.exits .*beyond its depth"):
        plan_from_config(CascadeConfig(enabled=True, exits=(2, 8)), num_layers=6)
    assert plan_from_config(CascadeConfig(enabled=True, alpha=(0.4,)), 6).alphas == (0.4,) * 5


@pytest.mark.parametrize(("flat", "match"), [
    ({"cascade.alpha": "1.2"}, r"cascade\.alpha must be in \[0, 1\)"),
    ({"cascade.alpha": [0.2, -0.1]}, r"cascade\.alpha must be in \[0, 1\)"),
    ({"cascade.exits": "4,6", "cascade.alpha": "0.1,0.2,0.3"},
     r"cascade\.alpha must have 1 value, one per exit before the last \(1, .*\(2\) for cascade\.exits=\[4, 6\]"),
])
def test_study_file_values_name_the_key(flat: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        TrialConfig.from_flat({"cascade.enabled": True, **flat})


def test_study_file_alphas_reach_the_plan() -> None:
    cfg = TrialConfig.from_flat({"cascade.enabled": True, "cascade.exits": "2,4,6",
                                 "cascade.alpha": "0.5,0.25,0"})
    plan = plan_from_config(cfg.cascade, 6)
    assert plan.alphas == (0.5, 0.25, 0.0) and plan.entering(8) == (8, 4, 3)


def test_the_rounding_is_a_config_key_that_reaches_the_model() -> None:
    """cascade.rounding: nearest trains and evaluates the cascade the paper's Table 3 printed (its
    worked example's survivors); it was only `harness cascade cost --rounding`. The default keeps
    every configuration id as it was."""
    from harness.model.factory import build_model

    plain = TrialConfig.from_flat({"cascade.enabled": True, "cascade.alpha": "0.3", "model.name": "tiny"})
    nearest = TrialConfig.from_flat({"cascade.enabled": True, "cascade.alpha": "0.3", "model.name": "tiny",
                                     "cascade.rounding": "nearest"})
    spelled = TrialConfig.from_flat({"cascade.enabled": True, "cascade.alpha": "0.3", "model.name": "tiny",
                                     "cascade.rounding": "floor"})
    assert spelled.config_id() == plain.config_id() != nearest.config_id()
    model = build_model(nearest, seed=0)
    assert model.plan.rounding == "nearest"
    assert model.plan.entering(128) == CascadePlan.build(num_layers=4, exits=model.plan.exits, alpha=(0.3,),
                                                         rounding="nearest").entering(128) == (128, 90, 63)
    assert build_model(plain, seed=0).plan.entering(128) == (128, 90, 63) and plan_from_config(
        plain.cascade, 12).entering(128) == (128, 90, 63, 45, 32)
    assert plan_from_config(nearest.cascade, 12).entering(128) == (128, 90, 63, 44, 31)  # the paper's example
    with pytest.raises(ConfigError, match=r"^cascade\.rounding must be one of floor, nearest, got 'ceil'"):
        TrialConfig.from_flat({"cascade.rounding": "ceil"})


def test_cost_table_mentions_survivors_and_cost() -> None:
    text = cost_table(CascadePlan.build(**PAPER, alpha=(0.3,)), 128)
    assert "972 of 1536" in text and "36.7%" in text
    assert text.splitlines()[1].split() == ["1", "4", "0.30", "128", "38", "90"]


def test_pure_modules_import_without_torch() -> None:
    code = ("import sys; import harness.model.cascade_cost, harness.model._cascade_rank, "
            "harness.model.cascade_eval; "
            "bad = [m for m in ('torch', 'ray', 'mlflow', 'transformers') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_papers_form_one_ratio_per_partial_classifier_is_the_plan_with_0_last() -> None:
    """Soldaini & Moschitti give {alpha_p1 .. alpha_p4} for 5 exits: one per partial classifier.
    That form was refused (it wanted 1 or 5 values) while a fifth value was taken and ignored; now
    4 values are the plan with the final exit dropping nothing, the same as 5 with 0 last."""
    four = CascadePlan.build(**{**PAPER, "alpha": (0.1, 0.2, 0.3, 0.4)})
    five = CascadePlan.build(**{**PAPER, "alpha": (0.1, 0.2, 0.3, 0.4, 0.0)})
    assert four == five and four.alphas == (0.1, 0.2, 0.3, 0.4, 0.0)
    assert four.entering(128) == (128, 116, 93, 66, 40)  # k_i = k_{i-1} - floor(alpha_i k_{i-1})
    assert TrialConfig.from_flat({"cascade.enabled": True, "cascade.exits": [4, 6, 8, 10, 12],
                                  "cascade.alpha": [0.1, 0.2, 0.3, 0.4]}).cascade.alpha == (0.1, 0.2, 0.3, 0.4)

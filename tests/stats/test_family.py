"""Family-wise control by default: Holm over every configuration compared with the baseline, early
stopped ones counted with p = 1; checked against statsmodels' Holm and by seeded simulation."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from harness.present.render import render
from harness.present.table import build_tables
from harness.results.stored import StudyResults
from harness.stats.corrections import adjust
from harness.stats.crossed import crossed_batch
from harness.stats.significance import AnalysisOptions, analyse
from tests.synthetic import synthetic_records


def _results(**kw: object) -> StudyResults:
    return StudyResults.build(synthetic_records(), **kw)  # type: ignore[arg-type]


@pytest.mark.slow
def test_the_default_is_holm_over_each_metric_equal_to_statsmodels() -> None:
    res = _results()
    analysis = analyse(res)
    assert analysis.options.correction == "holm" and analysis.options.family == "metric"
    for metric in res.metrics:
        comps = [c for c in analysis.comparisons if c.metric == metric]
        ref = multipletests([c.result.p_value for c in comps], method="holm")[1]
        assert [c.p_adjusted for c in comps] == pytest.approx(ref.tolist(), rel=1e-12)
        assert {c.family_size for c in comps} == {len(res.configs) - 1}
    footnote = render(build_tables(analysis, "seeds"), "md")
    assert "Holm-Bonferroni correction, family: each metric (m = 3 comparisons)" in footnote


def test_none_stays_and_says_so() -> None:
    analysis = analyse(_results(), AnalysisOptions(correction="none"))
    assert all(c.p_adjusted == c.result.p_value for c in analysis.comparisons)
    assert "No correction for multiple comparisons, family: each metric (m = 3 comparisons)" in \
        render(build_tables(analysis, "seeds"), "md")


@pytest.mark.slow
@pytest.mark.parametrize("test, per_config", [("crossed", 1), ("per-seed", 3)])
def test_configurations_stopped_early_count_in_the_family_with_p_one(test: str, per_config: int) -> None:
    res = dataclasses.replace(_results(), stopped={"tpe-1": "rung 1 of 2", "tpe-2": "rung 1 of 2"})
    analysis = analyse(res, AnalysisOptions(test=test))
    for metric in res.metrics:
        comps = [c for c in analysis.comparisons if c.metric == metric]
        assert len(comps) == 3 * per_config
        raw = [c.result.p_value for c in comps] + [1.0] * (2 * per_config)
        ref = multipletests(raw, method="holm")[1][:len(comps)]
        assert [c.p_adjusted for c in comps] == pytest.approx(ref.tolist(), rel=1e-12)
        assert {c.family_size for c in comps} == {5 * per_config}
    text = render(build_tables(analysis, "seeds"), "md")
    assert (f"(m = {5 * per_config} comparisons, including those of 2 configurations stopped early, each "
            "counted with p = 1)") in text
    # The whole table's family (configs form) counts them for every metric.
    whole = analyse(res, AnalysisOptions(test=test, family="all"))
    assert {c.family_size for c in whole.comparisons} == {5 * per_config * len(res.metrics)}


def _null_family_rejections(candidates: int, studies: int, seed: int, correction: str,
                            seeds: int = 10) -> float:
    """The share of null studies (no candidate differs from the baseline; ``seeds`` x 60 queries,
    per-seed training effect SD 0.02 next to query 0.1 and residual 0.1 noise) in which the
    crossed test marks at least one candidate at 0.05 after ``correction`` over the candidates.
    The candidates share the baseline's runs, so their tests correlate, as in a study."""
    g = np.random.default_rng(seed)
    queries = 60
    query = g.normal(0.5, 0.1, (studies, 1, 1, queries))
    runs = (query + g.normal(0, 0.02, (studies, candidates + 1, seeds, 1))
            + g.normal(0, 0.1, (studies, candidates + 1, seeds, queries)))
    p = np.stack([crossed_batch(runs[:, c] - runs[:, 0]).p_value for c in range(1, candidates + 1)], axis=1)
    return float(np.mean([(adjust(correction, row) < 0.05).any() for row in p]))


@pytest.mark.slow
@pytest.mark.parametrize("candidates", [8, pytest.param(30, marks=pytest.mark.heavy)])
def test_family_wise_error_with_many_null_candidates(candidates: int) -> None:
    # At 10 seeds; tests/stats/test_small_seeds.py holds the same at 3 seeds.
    studies = 1000 if candidates == 8 else 300
    holm = _null_family_rejections(candidates, studies, seed=candidates, correction="holm")
    none = _null_family_rejections(candidates, studies, seed=candidates, correction="none")
    # Holm keeps the family-wise error at or below 5% (binomial noise, 99.9% band); without a
    # correction most such studies show a marker somewhere.
    assert holm <= stats.binom.ppf(0.999, studies, 0.05) / studies, holm
    assert none > 0.2, none
    print(f"{candidates} null candidates: at least one marker in {holm:.3f} (holm) / {none:.3f} (none)")

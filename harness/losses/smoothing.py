"""The label-smoothing methods as properties, not names: what prior the smoothed mass follows and
whether the smoothing stops half-way (two-stage). Penha & Hauff (ECIR 2021), Sections 2-3.

- prior ``uniform``: LS, the eps mass spread as 1/K over the classes;
- prior ``weak``: WSLS, the eps mass of a negative follows its sampler's scaled score;
- ``two_stage``: T-LS / T-WSLS (Xu et al. 2020), hard labels from ``smoothing.switch`` on.

Configurations and MLflow records keep the paper's names (``smoothing.method: T-WSLS``); the
descriptive spellings are aliases that resolve to them, so both name the same configuration.
Code asks the properties (``method.prior == "weak"``), never the spelling of a name.

    >>> smoothing_method("T-WSLS")
    Smoothing(name='T-WSLS', prior='weak', two_stage=True)
    >>> smoothing_method("two-stage-uniform").name
    'T-LS'
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from harness.errors import ConfigError
from harness.suggest import did_you_mean

PRIORS = ("none", "uniform", "weak")


@dataclass(frozen=True)
class Smoothing:
    name: str        # the paper's name, recorded in configs and MLflow
    prior: str       # none | uniform | weak
    two_stage: bool  # hard labels from smoothing.switch on

    @property
    def smooths(self) -> bool:
        return self.prior != "none"

    @property
    def needs_weak_scores(self) -> bool:
        return self.prior == "weak"


_METHODS = (Smoothing("none", "none", False), Smoothing("LS", "uniform", False),
            Smoothing("T-LS", "uniform", True), Smoothing("WSLS", "weak", False),
            Smoothing("T-WSLS", "weak", True))
SMOOTHING = MappingProxyType({m.name: m for m in _METHODS})
# Descriptive spellings: the prior, with "two-stage-" in front for the T- variants.
ALIASES = MappingProxyType({("two-stage-" if m.two_stage else "") + m.prior: m.name
                            for m in _METHODS if m.smooths})
SMOOTHING_METHODS = tuple(SMOOTHING)  # the recorded names, in the paper's order


def smoothing_method(name: object) -> Smoothing:
    """The method a name (paper name or alias) stands for; a one-line ConfigError otherwise."""
    key = ALIASES.get(str(name), str(name))
    try:
        return SMOOTHING[key]
    except KeyError:
        valid = [*SMOOTHING, *ALIASES]
        hint = did_you_mean(name, valid, n=2)
        raise ConfigError(f"smoothing.method: unknown name {name!r}{hint}; valid: "
                          f"{', '.join(SMOOTHING)} (aliases: {', '.join(ALIASES)})", key="smoothing.method") from None

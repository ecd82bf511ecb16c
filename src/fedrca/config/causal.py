"""Causal-structure learning settings: the ``causal:`` section of a site configuration (``fedrca graph``).

Every key is optional; ``fedrca graph``'s options override them. Errors name the key
path (``causal.epsilon``) and what would be valid.

Examples
--------
>>> s = CausalSettings.model_validate({"mode": "vote", "keep_fraction": 0.4})
>>> s.mode, s.test, s.keep_fraction, s.epsilon
('vote', 'fisher-z', 0.4, inf)
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from fedrca.config._base import Strict, parse_inf, parse_section, parse_seed
from fedrca.config.limits import MAX_SEED

__all__ = ["MAX_EPSILON", "CausalSettings", "parse_causal_settings"]

#: The largest finite epsilon of a release: the Gaussian mechanism's mu^2 (about 2 epsilon) stays a float
#: (tests/cli/test_fuzz_commands.py drew 1e308, whose mu^2 overflowed in the site's ledger).
MAX_EPSILON = 1e300


class CausalSettings(Strict):
    """How the sites learn the causal graph together (docs/fedpc.md).

    ``mode``: ``pooled-stats`` = the server runs PC on the sites' summed sufficient
    statistics (secure aggregation: the pooled test without the pooled data); ``vote`` =
    P4's FedPC, each site tests on its own data and the server keeps an edge kept by more
    than ``keep_fraction`` of the sites. ``epsilon`` (pooled-stats with fisher-z only):
    (epsilon, ``delta``) of each site's one noised release of its standardised
    cross-products, rows clipped to L2 norm ``clip`` sqrt(p); ``inf`` = exact statistics.
    ``budget``: total epsilon a site allows (its ledger refuses a release past it).
    ``orientation``: how variable edges become plant arcs: ``skeleton`` (every edge both
    ways: directions read from closed-loop nominal data are the controllers'), ``cpdag``
    (directed edges one way, undirected both ways) or ``dag`` (the DAG extension's arcs).
    """

    mode: Literal["pooled-stats", "vote"] = "pooled-stats"
    test: Literal["fisher-z", "g-square"] = "fisher-z"
    alpha: float = Field(0.01, gt=0.0, lt=1.0)
    keep_fraction: float = Field(0.3, ge=0.0, lt=1.0, description="vote: keep an edge kept by more than this share")
    max_cond: int | None = Field(None, ge=0, description="largest conditioning set (null = no limit)")
    orientation: Literal["skeleton", "cpdag", "dag"] = "skeleton"
    epsilon: float = Field(
        math.inf, gt=0.0, description="per site, of the one noised release; inf = exact, else at most MAX_EPSILON"
    )
    delta: float = Field(1e-5, gt=0.0, lt=1.0)
    clip: float = Field(1.5, gt=0.0, le=100.0, description="row bound in units of sqrt(p) standard deviations")
    budget: float = Field(math.inf, gt=0.0, description="total epsilon per site")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="seed of the sites' noise")
    _seed = field_validator("seed", mode="before")(parse_seed)

    _inf = field_validator("epsilon", "budget", mode="before")(parse_inf)

    @field_validator("epsilon")
    @classmethod
    def _representable(cls, value: float) -> float:
        if math.isfinite(value) and value > MAX_EPSILON:
            raise ValueError(f"a finite epsilon must be at most {MAX_EPSILON:g} (its mu^2 is a float); inf = exact")
        return value

    @model_validator(mode="after")
    def _noise_needs_pooled_fisher_z(self) -> CausalSettings:
        if math.isfinite(self.epsilon) and (self.mode != "pooled-stats" or self.test != "fisher-z"):
            raise ValueError(
                "a finite epsilon noises the pooled statistics of fisher-z; set mode: pooled-stats and "
                "test: fisher-z, or epsilon: inf"
            )
        return self


def parse_causal_settings(data: Any, source: str | None = None) -> CausalSettings:
    """Validate a ``causal:`` mapping on its own (e.g. the config's section with a command's options over it).

    Raises
    ------
    ConfigError
        Naming the key (e.g. ``causal.epsilon``) and the valid values.
    """
    return parse_section(CausalSettings, "causal", "causal settings (mode, test, alpha, ...)", data, source)

"""Training settings: the ``training:`` section of a site configuration, validated.

Every key is optional; an empty section trains with the defaults below. Errors
name the key path, e.g. ``config/tep.yaml: training.privacy.delta: Input should
be less than 1``.

Examples
--------
>>> from fedrca.config import load_config
>>> settings = load_config("config/tep.yaml").training
>>> settings.estimator, settings.rounds > 0
('moments', True)
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from fedrca.config._base import Strict, parse_inf, parse_section, parse_seed
from fedrca.config.limits import MAX_SEED, MAX_TRAINING_ROUNDS

if TYPE_CHECKING:
    from fedrca.config.site import SiteConfig

__all__ = ["TrainingPrivacySettings", "TrainingSettings", "parse_training_settings"]


class TrainingPrivacySettings(Strict):
    """Differential privacy of the training messages (see :mod:`fedrca.privacy`).

    ``state_epsilon`` / ``gradient_epsilon`` are the (epsilon, delta) of *one* release of
    one record (one time step's state vectors, one per-sample gradient); ``inf`` turns the
    mechanism off (no clipping, no noise). With ``estimator: moments`` a plant releases its
    measurement states once (Laplace, pure ``state_epsilon``) and its lag moments once
    (Gaussian, ``moment_epsilon``); every round after that is post-processing (docs/privacy.md).
    ``budget`` is the total epsilon (at ``delta``) any plant may spend over the whole run;
    training refuses to start or continue past it.
    """

    state_epsilon: float = Field(math.inf, gt=0.0)
    gradient_epsilon: float = Field(math.inf, gt=0.0)
    moment_epsilon: float = Field(
        math.inf, gt=0.0, description="estimator 'moments': (epsilon, delta) of the one Gaussian release of the moments"
    )
    moment_lags: int = Field(4, ge=1, le=20, description="estimator 'moments': lags of the released moments")
    input_epsilon: float | None = Field(
        None,
        gt=0.0,
        description="estimator 'moments': pure epsilon of the one Laplace release of a plant's inputs "
        "(None: the inputs never leave the plant; inf: released without noise)",
        json_schema_extra={"hint": "a positive number or inf; leave it unset to keep the inputs in the plant"},
    )
    input_moment_epsilon: float | None = Field(
        None,
        gt=0.0,
        description="estimator 'moments': (epsilon, delta) of the one Gaussian release of a plant's own moments "
        "with its inputs (set together with input_epsilon)",
        json_schema_extra={"hint": "a positive number or inf; set it together with input_epsilon"},
    )
    input_clip: float = Field(4.0, gt=0.0, description="L2 bound of each input vector (the learner's input units)")
    delta: float = Field(1e-5, gt=0.0, lt=1.0)
    state_clip: float = Field(10.0, gt=0.0, description="L2 bound of each state vector (state units)")
    gradient_clip: float = Field(10.0, gt=0.0, description="L2 bound of each per-sample gradient")
    budget: float = Field(math.inf, gt=0.0, description="total epsilon per plant")

    _inf = field_validator("state_epsilon", "gradient_epsilon", "moment_epsilon", "budget", mode="before")(parse_inf)

    @field_validator("input_epsilon", "input_moment_epsilon", mode="before")
    @classmethod
    def _inf_only(cls, value: Any) -> Any:
        # "off" / "none" would read as "no noise" (parse_inf): for a release that may not happen at all, only "inf"
        if isinstance(value, str) and value.strip().lower() == "inf":
            return math.inf
        return value

    @model_validator(mode="after")
    def _inputs_together(self) -> TrainingPrivacySettings:
        if (self.input_epsilon is None) != (self.input_moment_epsilon is None):
            given = "input_epsilon" if self.input_epsilon is not None else "input_moment_epsilon"
            raise ValueError(
                f"{given} is set without {'input_moment_epsilon' if given == 'input_epsilon' else 'input_epsilon'}: "
                "the inputs and their moments are released together; set both or neither"
            )
        return self

    @property
    def releases_inputs(self) -> bool:
        """True when the plants release their inputs (and their own moments with inputs) once."""
        return self.input_epsilon is not None


class TrainingSettings(Strict):
    """Settings of the federated training job (``training:`` in the site YAML)."""

    rounds: int = Field(20, ge=1, le=MAX_TRAINING_ROUNDS, description="communication rounds")
    window: int | None = Field(None, ge=16, description="samples per round message; None = all")
    warm_up: int = Field(10, ge=1, description="leading samples skipped (filter transient)")
    client_lr: float = Field(0.5, gt=0.0, description="step of the preconditioned client update")
    server_lr: float | None = Field(None, gt=0.0, description="estimator 'gd' only; None = half the stable step")
    server_weight: float = Field(1.0, ge=0.0, description="lambda: weight of the server loss in the client objective")
    ridge: float = Field(1e-3, ge=0.0, description="relative L2 penalty on Theta")
    estimator: Literal["iv", "ols", "gd", "moments"] = "iv"
    instruments: int = Field(2, ge=1, le=10, description="lags of measurement states used as instruments (iv)")
    hac_lags: int = Field(2, ge=0, le=20, description="Newey-West lags of the standard errors")
    server_features: Literal["auto", "linear", "rff"] = "auto"
    server_n_features: int = Field(64, ge=1, le=4096, description="random features of the server model (le: memory)")
    server_lengthscale: float = Field(1.0, gt=0.0)
    server_ridge: float = Field(1e-2, ge=0.0)
    seed: int = Field(0, ge=0, le=MAX_SEED)
    _seed = field_validator("seed", mode="before")(parse_seed)
    disentanglement: float = Field(
        0.0, ge=0.0, description="xi: weight of the penalty that keeps the input effects out of Theta"
    )
    client_bias: bool | None = Field(
        None,
        description="clients learn a state offset and a bias vector (the aggregated cross-plant input effect); "
        "None = when any plant declares inputs",
    )
    input_instruments: Literal["exogenous", "lagged"] = Field(
        "exogenous",
        description="iv: inputs are their own instruments (open loop) or instrumented by lagged inputs (feedback)",
    )
    message_encoding: Literal["float64", "float32", "int8"] = Field(
        "float64", description="arrays of the training messages: lossless float64, float32 or int8 (one scale each)"
    )
    privacy: TrainingPrivacySettings = TrainingPrivacySettings()

    def resolved_client_bias(self, config: SiteConfig) -> bool:
        """``client_bias`` with None resolved: on when any plant of the site declares inputs."""
        if self.client_bias is not None:
            return self.client_bias
        return any(p.inputs for p in config.plants)

    def resolved_server_features(self, config: SiteConfig) -> str:
        """'linear' or 'rff' ('auto' = rff when any plant's augmentation uses random features)."""
        if self.server_features != "auto":
            return self.server_features
        return "rff" if any(p.augmentation.features == "rff" for p in config.plants) else "linear"


def parse_training_settings(data: Any, source: str | None = None) -> TrainingSettings:
    """Validate a ``training:`` mapping on its own (a site configuration validates its section in one pass).

    Raises
    ------
    ConfigError
        Naming ``training.<key>`` and what would be valid.
    """
    return parse_section(TrainingSettings, "training", "training settings (rounds, privacy, ...)", data, source)

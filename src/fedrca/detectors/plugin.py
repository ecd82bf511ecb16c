"""Plug-in protocol for a plant's own fixed (proprietary) filter.

A plant may bring any object that provides the four operations below; fedrca
only calls them and never changes the object's parameters. ``predict`` and
``measure`` are pure (they are also applied to the augmented state), ``step``
advances the plant's own filter by one sample.

Missing values (docs/missing.md): a filter whose ``step`` corrects on the observed
subset of a sample with NaN entries says so with ``handles_missing = True`` (the
Kalman and extended Kalman filters do). Any other filter never sees a NaN:
:func:`filter_batch` gives its ``step`` the filter's own prediction
``h(f(x(t-1|t-1), u))`` in place of a missing value (so that value's innovation is 0
and it moves the estimate only through the observed ones), and reports the missing
entries' innovations as NaN.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.detectors.kalman import FilterOutput, StepOutput
from fedrca.exceptions import ConfigError

__all__ = ["LinearModel", "ProprietaryFilter", "filter_batch", "load_plugin"]


@runtime_checkable
class ProprietaryFilter(Protocol):
    """What fedrca needs from a plant's fixed filter.

    ``LinearKalmanFilter`` and ``ExtendedKalmanFilter`` implement it; so can any
    vendor object (wrap it in a small adapter if its method names differ).
    """

    @property
    def state_dim(self) -> int: ...  # P

    @property
    def output_dim(self) -> int: ...  # D

    def predict(self, x: NDArray[np.float64], u: NDArray[np.float64] | None = None) -> NDArray[np.float64]:
        """Pure transition f(x, u); (P,) or (T, P) rows."""
        ...

    def measure(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        """Pure measurement h(x); (P,) -> (D,) or (T, P) -> (T, D)."""
        ...

    def step(self, y: ArrayLike, u: ArrayLike | None = None) -> StepOutput:
        """Advance the filter with one sample; returns the step evidence."""
        ...

    def reset(self) -> None:
        """Return to the initial estimate."""
        ...

    def get_state(self) -> dict[str, Any]:
        """The filter's state, a JSON-friendly dict with the estimate x(t|t) under ``"x"``."""
        ...

    def set_state(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class LinearModel(Protocol):
    """A filter whose transition and measurement are linear: ``f(x) = A x (+ B u)``, ``h(x) = C x``.

    The augmentation, the training client and the artifact fingerprint check
    ``isinstance(model, LinearModel)`` and then use the matrices in closed form
    (gradients, Hessians, measurement states) instead of Jacobians by finite
    differences. :class:`~fedrca.detectors.kalman.LinearKalmanFilter` is one.
    """

    @property
    def transition_matrix(self) -> NDArray[np.float64]: ...  # A (P, P)

    @property
    def C(self) -> NDArray[np.float64]: ...  # (D, P)


def filter_batch(
    model: ProprietaryFilter, Y: NDArray[np.float64], U: NDArray[np.float64] | None = None
) -> FilterOutput:
    """Run ``model`` over a batch: its own vectorised ``filter`` when it has one, else steps.

    ``Y`` may hold NaN (missing); a filter without ``handles_missing`` gets its own prediction in
    their place (module docstring).
    """
    missing = np.isnan(Y)
    if missing.any() and not getattr(model, "handles_missing", False):
        return _filled_steps(model, Y, U, missing)
    batch = getattr(model, "filter", None)
    if callable(batch):
        out = batch(Y, U)
        if isinstance(out, FilterOutput):
            return out
    steps = [model.step(Y[t], None if U is None else U[t]) for t in range(len(Y))]
    if not steps:
        return FilterOutput(
            np.empty((0, model.state_dim)), np.empty((0, model.state_dim)), np.empty((0, model.output_dim))
        )
    return FilterOutput(
        np.array([s.x_pred for s in steps]),
        np.array([s.x_est for s in steps]),
        np.array([s.residual for s in steps]),
    )


def _filled_steps(
    model: ProprietaryFilter, Y: NDArray[np.float64], U: NDArray[np.float64] | None, missing: NDArray[np.bool_]
) -> FilterOutput:
    """Steps of a filter that takes no NaN: a missing value is replaced by the filter's own prediction."""
    x = np.asarray(model.get_state()["x"], dtype=np.float64).reshape(model.state_dim)
    x_pred = np.empty((len(Y), model.state_dim))
    x_est = np.empty_like(x_pred)
    residuals = np.empty_like(Y)
    for t in range(len(Y)):
        u = None if U is None else U[t]
        y = Y[t]
        if missing[t].any():
            # y_m = h(f(x(t-1|t-1), u))_m : the innovation of a missing value is 0
            y = np.where(missing[t], model.measure(model.predict(x, u)), y)
        out = model.step(y, u)
        x = x_est[t] = out.x_est
        x_pred[t] = out.x_pred
        residuals[t] = np.where(missing[t], np.nan, out.residual)
    return FilterOutput(x_pred, x_est, residuals)


def load_plugin(dotted: str, **kwargs: Any) -> ProprietaryFilter:
    """Build a plant's filter from ``"package.module:factory"`` (or ``package.module.factory``).

    The factory is called with ``kwargs`` and must return an object that satisfies
    :class:`ProprietaryFilter`.

    Raises
    ------
    ConfigError
        When the module or attribute cannot be imported, or the object lacks a method.
    """
    module_name, sep, attr = dotted.partition(":")
    if not sep:
        module_name, _, attr = dotted.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(f"plugin '{dotted}' must look like 'package.module:factory'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"plugin '{dotted}': cannot import module '{module_name}' ({exc})") from None
    factory = getattr(module, attr, None)
    if factory is None:
        raise ConfigError(f"plugin '{dotted}': module '{module_name}' has no attribute '{attr}'")
    if callable(factory):
        try:
            model = factory(**kwargs)
        except Exception as exc:  # third-party code: whatever it raises is a configuration problem here
            args = ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) or "no arguments"
            raise ConfigError(
                f"plugin '{dotted}' failed when called with {args} ({type(exc).__name__}: {exc}); it must be a "
                "filter class or factory taking model.plugin_args, see fedrca.detectors.plugin.ProprietaryFilter"
            ) from None
    else:
        model = factory
    missing = [
        m
        for m in ("predict", "measure", "step", "reset", "get_state", "set_state")
        if not callable(getattr(model, m, None))
    ]
    if missing or not hasattr(model, "state_dim") or not hasattr(model, "output_dim"):
        missing += [a for a in ("state_dim", "output_dim") if not hasattr(model, a)]
        raise ConfigError(
            f"plugin '{dotted}' returned {type(model).__name__}, which lacks {', '.join(missing)}; "
            "see fedrca.detectors.plugin.ProprietaryFilter"
        )
    return model

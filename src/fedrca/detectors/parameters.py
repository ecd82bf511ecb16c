"""A detector's side of the parameter-artifact contract: what Theta means, and applying it.

Training writes a plant's artifact (:mod:`fedrca.contracts.artifacts`) with its
Theta, the augmented scorer re-calibrated on nominal data with that Theta, and
the fingerprint of what Theta's meaning depends on (:func:`model_fingerprint`);
:func:`apply_artifact` checks all of it against the detector and hot-swaps the
parameters.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedrca.contracts.artifacts import SERVER, ParameterArtifact
from fedrca.detectors.augment import RandomFourierFeatures
from fedrca.detectors.plant import PlantDetector
from fedrca.detectors.plugin import LinearModel
from fedrca.detectors.scoring import ScorerState
from fedrca.detectors.statistics import FamilyState
from fedrca.exceptions import ArtifactError, ModelError, NotFittedError

__all__ = ["FAMILY_PREFIX", "apply_artifact", "model_fingerprint", "scorer_arrays", "scorer_from_arrays"]


#: Artifact array prefix of the augmented statistic family (family method).
FAMILY_PREFIX = "family_a"


def scorer_arrays(state: ScorerState | FamilyState, prefix: str = "scorer_a") -> dict[str, np.ndarray]:
    """The arrays of an augmented calibration: a residual scorer's (threshold and EWMA start as 0-d
    arrays, under ``prefix``) or a statistic family's (:meth:`FamilyState.to_arrays`, under ``family_a``)."""
    if isinstance(state, FamilyState):
        return state.to_arrays(FAMILY_PREFIX)
    return {
        f"{prefix}.mean": np.asarray(state.mean, dtype=np.float64),
        f"{prefix}.whitening": np.asarray(state.whitening, dtype=np.float64),
        f"{prefix}.threshold": np.asarray(state.threshold, dtype=np.float64),
        f"{prefix}.ewma_start": np.asarray(state.ewma_start, dtype=np.float64),
    }


def scorer_from_arrays(arrays: Mapping[str, np.ndarray], prefix: str = "scorer_a") -> ScorerState | FamilyState | None:
    """Inverse of :func:`scorer_arrays` (None when the artifact carries no calibration)."""
    if f"{FAMILY_PREFIX}.threshold" in arrays:
        return FamilyState.from_arrays(arrays, FAMILY_PREFIX)
    if f"{prefix}.mean" not in arrays:
        return None
    return ScorerState(
        np.asarray(arrays[f"{prefix}.mean"], dtype=np.float64).copy(),
        np.asarray(arrays[f"{prefix}.whitening"], dtype=np.float64).copy(),
        float(arrays[f"{prefix}.threshold"]),
        float(arrays[f"{prefix}.ewma_start"]),
    )


def _check_scorer_arrays(detector: PlantDetector, artifact: ParameterArtifact) -> None:
    """The artifact's augmented calibration has the arrays, shapes and dtypes of the detector's own, finite means
    and whitening matrices: what one configuration's training makes (checked before anything is swapped in)."""
    prefixes = ("scorer_a.", f"{FAMILY_PREFIX}.")
    given = {k: a for k, a in artifact.arrays.items() if k.startswith(prefixes)}
    if not given:
        return
    try:
        own = scorer_arrays(detector.scorers[1].state)
    except NotFittedError:
        return
    shapes = {k: (a.shape, a.dtype.kind) for k, a in given.items()}
    if shapes != {k: (a.shape, a.dtype.kind) for k, a in own.items()}:
        raise ArtifactError(
            f"artifact '{artifact.plant}' {artifact.version}: its augmented calibration ({len(given)} arrays) does not "
            "have the arrays and shapes of this detector's; retrain with the current configuration"
        )
    for name, a in given.items():
        if name.endswith((".mean", ".whitening", ".scale", ".lambdas")) and not np.isfinite(a).all():
            raise ArtifactError(f"artifact '{artifact.plant}' {artifact.version}: {name} holds NaN or inf; retrain")


def model_fingerprint(detector: PlantDetector) -> str:
    """sha256 of what Theta's meaning depends on: the proprietary model, the scaler and the feature map.

    Rounded to 9 significant digits so that re-fitting on the same data on another machine matches.
    """

    def canon(a: Any) -> list[Any]:
        arr = np.asarray(a, dtype=np.float64)
        return [list(arr.shape), [float(f"{v:.9g}") for v in arr.ravel()]]

    model = detector.proprietary
    aug = detector.augmentation
    fmap = aug.feature_map
    parts: dict[str, Any] = {
        "model": type(model).__name__,
        "state_dim": model.state_dim,
        "output_dim": model.output_dim,
        "features": type(fmap).__name__,
        "n_features": fmap.n_features,
        "scaler": [canon(detector.scaler.mean), canon(detector.scaler.std)],
    }
    if isinstance(model, LinearModel):
        parts["transition_matrix"] = canon(model.transition_matrix)
        parts["C"] = canon(model.C)
    if isinstance(fmap, RandomFourierFeatures):
        parts["rff_W"] = canon(fmap.weights)
        parts["rff_b"] = canon(fmap.phases)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode("utf-8")).hexdigest()


def apply_artifact(detector: PlantDetector, artifact: ParameterArtifact) -> None:
    """Verify a plant artifact and hot-swap it into the detector (Theta + re-calibrated augmented scorer).

    Raises
    ------
    IntegrityError
        When the arrays do not match the manifest's sha256.
    ArtifactError
        When the artifact is for another plant, is the server's, or was trained for another
        proprietary model / feature map than the detector's.
    """
    artifact.verify()
    if artifact.plant == SERVER:
        raise ArtifactError("the server artifact holds no plant parameters; apply a plant's artifact")
    if artifact.plant != detector.name:
        raise ArtifactError(f"artifact for plant '{artifact.plant}' cannot be applied to plant '{detector.name}'")
    if "theta" not in artifact.arrays:
        raise ArtifactError(f"artifact '{artifact.plant}' {artifact.version} has no 'theta'")
    theta = np.asarray(artifact.arrays["theta"], dtype=np.float64)
    expected = detector.augmentation.theta.shape
    if theta.shape != expected:
        raise ArtifactError(
            f"artifact '{artifact.plant}' {artifact.version}: Theta has shape {theta.shape}, the detector's "
            f"augmentation needs {expected}; retrain with the current configuration"
        )
    fingerprint = artifact.manifest.get("model_fingerprint")
    if fingerprint is not None and fingerprint != model_fingerprint(detector):
        raise ArtifactError(
            f"artifact '{artifact.plant}' {artifact.version} was trained for another proprietary model or feature "
            "map than this detector's (fitted on other nominal data or with other settings); retrain"
        )
    if not np.isfinite(theta).all():
        raise ArtifactError(f"artifact '{artifact.plant}' {artifact.version}: Theta holds NaN or inf; retrain")
    _check_scorer_arrays(detector, artifact)
    scorer = scorer_from_arrays(artifact.arrays)
    mean = scorer.innovation.mean if isinstance(scorer, FamilyState) else None if scorer is None else scorer.mean
    if mean is not None and mean.shape != (detector.scaler.mean.shape[0],):
        raise ArtifactError(f"artifact '{artifact.plant}': the augmented scorer is for another sensor count")
    try:
        detector.set_parameters(theta, scorer_a=scorer, version=artifact.version)
    except ModelError as exc:
        raise ArtifactError(f"artifact '{artifact.plant}' {artifact.version}: {exc}") from None

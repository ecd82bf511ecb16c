"""Per-plant detection core (pure numpy/scipy, no I/O).

Proprietary filters (:class:`LinearKalmanFilter`, :class:`ExtendedKalmanFilter`,
any :class:`ProprietaryFilter` plug-in), identification from nominal data, the
learned :class:`Augmentation`, :class:`ResidualScorer`, and their composition :class:`PlantDetector`.
"""

from fedrca.detectors.augment import (
    Augmentation,
    FeatureMap,
    IdentityFeatures,
    RandomFourierFeatures,
    make_feature_map,
)
from fedrca.detectors.ekf import ExtendedKalmanFilter
from fedrca.detectors.identify import IdentifiedModel, Standardizer, identify_linear_model
from fedrca.detectors.kalman import (
    FilterOutput,
    LinearKalmanFilter,
    StepOutput,
    kf_predict,
    kf_update,
    steady_state_gain,
)
from fedrca.detectors.plant import DetectionResult, Detector, PlantDetector
from fedrca.detectors.plugin import ProprietaryFilter, load_plugin
from fedrca.detectors.scoring import ResidualScorer, ScorerState

__all__ = [
    "Augmentation",
    "DetectionResult",
    "Detector",
    "ExtendedKalmanFilter",
    "FeatureMap",
    "FilterOutput",
    "IdentifiedModel",
    "IdentityFeatures",
    "LinearKalmanFilter",
    "PlantDetector",
    "ProprietaryFilter",
    "RandomFourierFeatures",
    "ResidualScorer",
    "ScorerState",
    "Standardizer",
    "StepOutput",
    "identify_linear_model",
    "kf_predict",
    "kf_update",
    "load_plugin",
    "make_feature_map",
    "steady_state_gain",
]

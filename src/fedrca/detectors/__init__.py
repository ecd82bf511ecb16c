"""Per-plant detection core (pure numpy/scipy, no I/O).

Proprietary filters (:class:`LinearKalmanFilter`, :class:`ExtendedKalmanFilter`,
any :class:`ProprietaryFilter` plug-in), identification from nominal data, the
learned :class:`Augmentation`, :class:`ResidualScorer`, and their composition :class:`PlantDetector`.
Every detector implements the :class:`Detector` contract (:mod:`fedrca.detectors.base`);
:func:`check_detector` runs it on any detector, a plug-in's included (docs/plugins.md).
"""

from fedrca.detectors.augment import (
    Augmentation,
    FeatureMap,
    IdentityFeatures,
    RandomFourierFeatures,
    make_feature_map,
)
from fedrca.detectors.base import DetectionResult, Detector, check_samples
from fedrca.detectors.check import check_detector
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
from fedrca.detectors.plant import PlantDetector
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
    "check_detector",
    "check_samples",
    "identify_linear_model",
    "kf_predict",
    "kf_update",
    "load_plugin",
    "make_feature_map",
    "steady_state_gain",
]

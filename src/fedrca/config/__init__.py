"""The site configuration: one strict YAML read, one validation pass, typed immutable objects.

:func:`load_config` reads a site's YAML strictly (:mod:`fedrca.config._yaml`: no
duplicate keys, bounded aliases and nesting, UTF-8 only) and validates every
section at once: site, dataset, plants, privacy, topics, graph, ``training``
(:class:`TrainingSettings`), ``rca`` (:class:`RCASettings`), ``causal``
(:class:`CausalSettings`, ``fedrca graph``), ``edge`` (:class:`EdgeSettings`, the
plants' tags on their industrial protocols, ``fedrca edge``) and ``drift`` (:class:`DriftSettings`,
the re-baselining loop), each a frozen
model on the one strict base (:mod:`fedrca.config._base`). Every error is one
:class:`~fedrca.exceptions.ConfigError` line with the file, the key path and what
would be valid; nothing is validated later.

This package imports nothing of fedrca but :mod:`fedrca.exceptions`.
"""

from fedrca.config.causal import CausalSettings, parse_causal_settings
from fedrca.config.drift import DriftSettings, FederatedRefresh, parse_drift_settings
from fedrca.config.edge import EdgeSettings, OpcuaSource, OpcuaTag, ResolvedTag, resolve_tags
from fedrca.config.formats import KNOWN_COLUMNS, MIN_NOMINAL_SAMPLES, TEP_COLUMNS
from fedrca.config.health import HealthSettings
from fedrca.config.rca import GraphOptions, RCASettings, parse_rca_settings
from fedrca.config.site import (
    AugmentationSettings,
    ColumnMatch,
    DatasetSettings,
    GraphSettings,
    KafkaSettings,
    ModelSettings,
    PlantConfig,
    PrivacySettings,
    ScoringSettings,
    SiteConfig,
    SmoothingSettings,
    TopicSettings,
    compress_columns,
    group_columns,
    load_config,
    parameters_hash,
    parse_config,
    resolve_plants,
)
from fedrca.config.training import TrainingPrivacySettings, TrainingSettings, parse_training_settings

__all__ = [
    "KNOWN_COLUMNS",
    "MIN_NOMINAL_SAMPLES",
    "TEP_COLUMNS",
    "AugmentationSettings",
    "CausalSettings",
    "ColumnMatch",
    "DatasetSettings",
    "DriftSettings",
    "EdgeSettings",
    "FederatedRefresh",
    "GraphOptions",
    "GraphSettings",
    "HealthSettings",
    "KafkaSettings",
    "ModelSettings",
    "OpcuaSource",
    "OpcuaTag",
    "PlantConfig",
    "PrivacySettings",
    "RCASettings",
    "ResolvedTag",
    "ScoringSettings",
    "SiteConfig",
    "SmoothingSettings",
    "TopicSettings",
    "TrainingPrivacySettings",
    "TrainingSettings",
    "compress_columns",
    "group_columns",
    "load_config",
    "parameters_hash",
    "parse_causal_settings",
    "parse_config",
    "parse_drift_settings",
    "parse_rca_settings",
    "parse_training_settings",
    "resolve_plants",
    "resolve_tags",
]

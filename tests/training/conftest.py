"""Small training set-ups shared by the training tests (seeded, a few seconds at most)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedrca.config import load_config, parse_training_settings
from fedrca.datasets import linear_multiplant, nonlinear_two_plant
from fedrca.datasets.loader import plant_frames

REPO = Path(__file__).resolve().parents[2]


def linear_setup(n_samples: int = 1500, seed: int = 0, **training):
    config = load_config(REPO / "config" / "synthetic_linear.yaml")
    data = linear_multiplant(n_samples=n_samples, seed=seed)
    frames = plant_frames(config, pd.DataFrame(data.Y, columns=data.columns()))
    settings = parse_training_settings({**config.training.model_dump(), **training})
    return config, data, frames, settings


def inputs_setup(n_samples: int = 1500, seed: int = 0, input_mean: float = 1.0, input_ar: float = 0.5, **training):
    """The linear two-plant system with 2 inputs per plant (config/synthetic_inputs.yaml)."""
    config = load_config(REPO / "config" / "synthetic_inputs.yaml")
    data = linear_multiplant(
        n_samples=n_samples, seed=seed, inputs_per_plant=2, input_mean=input_mean, input_ar=input_ar
    )
    frame = pd.DataFrame(np.hstack([data.Y, data.U]), columns=data.columns() + data.input_columns())
    frames = plant_frames(config, frame)
    settings = parse_training_settings({**config.training.model_dump(), **training})
    return config, data, frames, settings


def nonlinear_setup(n_samples: int = 1500, seed: int = 0, **training):
    config = load_config(REPO / "config" / "synthetic.yaml")
    data = nonlinear_two_plant(n_samples=n_samples, seed=seed)
    frames = plant_frames(config, pd.DataFrame(data.Y, columns=data.columns()))
    settings = parse_training_settings({**config.training.model_dump(), **training})
    return config, data, frames, settings


@pytest.fixture
def linear_small():
    return linear_setup()


@pytest.fixture
def nonlinear_small():
    return nonlinear_setup()

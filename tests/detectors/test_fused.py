"""The fused batch path (detectors/fused.py) against its reference twin on every bundled TEP file.

The reference is ``PlantDetector._score(_evidence(...))``: the filter's ``filter``, the
augmentation's ``phi`` and :func:`~fedrca.detectors.statistics.family_statistics` per model.
The fused path rearranges the same algebra, so the numbers agree to rounding and every flag,
published flag and severity level is identical.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
import scipy.signal

from fedrca.config import load_config
from fedrca.datasets.loader import load_frame, plant_frames
from fedrca.detectors import kalman
from fedrca.detectors.base import DetectionResult
from fedrca.detectors.factory import build_detector
from fedrca.detectors.fused import _ewma
from fedrca.detectors.plant import PlantDetector

REPO = Path(__file__).resolve().parents[2]
TEP_FILES = sorted((REPO / "data" / "tep").glob("d*_te.dat"))


@pytest.fixture(scope="module")
def site() -> tuple[object, dict[str, PlantDetector]]:
    config = load_config(REPO / "config" / "tep.yaml")
    # flag privacy on, so the published flags and levels are compared too
    config = config.model_copy(update={"privacy": config.privacy.model_copy(update={"flag_epsilon": 2.0})})
    nominal = plant_frames(config, load_frame(config, REPO / "data" / "tep" / "d00.dat"), "d00.dat")
    rng = np.random.default_rng(5)
    detectors = {}
    for plant in config.plants:
        det = build_detector(config, plant).fit(nominal[plant.name].Y)
        # a non-zero Theta with its own calibration: the augmented family differs from the proprietary one
        det.set_parameters(0.05 * rng.standard_normal(det.augmentation.theta.shape), version="test")
        det.calibrate_augmented(nominal[plant.name].Y)
        detectors[plant.name] = det
    return config, detectors


def _reference(det: PlantDetector, Y: np.ndarray) -> DetectionResult:
    return det._score(det._evidence(Y, None))


def _assert_same(fused: DetectionResult, ref: DetectionResult) -> None:
    for field in ("zc", "za", "zc_pub", "za_pub", "level", "level_pub"):
        np.testing.assert_array_equal(getattr(fused, field), getattr(ref, field), err_msg=field)
    for field in ("x_c", "x_a", "r_c", "r_a", "d2_c", "d2_a", "stats_c", "stats_a"):
        np.testing.assert_allclose(getattr(fused, field), getattr(ref, field), rtol=1e-9, atol=1e-9, err_msg=field)


def _assert_close_state(a: object, b: object) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for key in a:
            _assert_close_state(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_close_state(x, y)
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-9)
    else:
        assert a == b


@pytest.mark.parametrize("path", TEP_FILES, ids=lambda p: p.name)
def test_fused_equals_reference_on_tep_files(site, path: Path) -> None:
    config, detectors = site
    frames = plant_frames(config, load_frame(config, path), path.name)
    for name, det in detectors.items():
        Y = frames[name].Y
        det.reset()
        start = det.get_state()  # the randomizers' generators included: both runs draw the same
        assert det._fused_maps(None) is not None  # the shipped configuration takes the fused path
        fused = det.step_batch(Y)
        state = det.get_state()
        det.set_state(start)
        ref = _reference(det, Y)
        _assert_same(fused, ref)
        # same streaming state after the batch: filter, EWMA memory (to rounding), randomizers (exactly)
        _assert_close_state(det.get_state(), state)


def test_fused_chunks_equal_one_batch(site) -> None:
    config, detectors = site
    path = REPO / "data" / "tep" / "d05_te.dat"
    Y = plant_frames(config, load_frame(config, path), path.name)["separator"].Y
    det = detectors["separator"]
    det.reset()
    start = det.get_state()
    whole = det.step_batch(Y)
    det.set_state(start)
    parts = [det.step_batch(Y[s : s + n]) for s, n in ((0, 1), (1, 7), (8, 300), (308, len(Y) - 308))]
    joined = DetectionResult.concat(parts)
    for field in dataclasses.fields(DetectionResult):
        a, b = getattr(whole, field.name), getattr(joined, field.name)
        if a.dtype == bool or a.dtype.kind == "i":
            np.testing.assert_array_equal(a, b, err_msg=field.name)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9, err_msg=field.name)


def _lti_complex_schur(F: np.ndarray, W: np.ndarray, x0: np.ndarray) -> np.ndarray:
    """The recursion through the complex Schur form, as kalman.lti_recursion computed it before its
    real-Schur form: the reference the flags must not move from."""
    T_len, P = W.shape
    if T_len == 0:
        return np.empty((0, P))
    T_mat, Z = scipy.linalg.schur(F.astype(np.complex128), output="complex")
    V = Z.conj().T @ W.T.astype(np.complex128)
    z0 = Z.conj().T @ x0.astype(np.complex128)
    modes = np.empty_like(V)
    for i in range(P - 1, -1, -1):
        drive = V[i]
        if i + 1 < P:
            coupling = T_mat[i, i + 1 :]
            drive[0] += coupling @ z0[i + 1 :]
            drive[1:] += coupling @ modes[i + 1 :, :-1]
        lam = T_mat[i, i]
        modes[i] = scipy.signal.lfilter([1.0], [1.0, -lam], drive, zi=np.array([lam * z0[i]]))[0]
    return np.ascontiguousarray(np.real(Z @ modes).T)


def test_flags_on_tep_files_are_those_of_the_complex_schur_recursion(site, monkeypatch) -> None:
    config, detectors = site

    def run_all() -> dict[tuple[str, str], DetectionResult]:
        out = {}
        for path in TEP_FILES:
            frames = plant_frames(config, load_frame(config, path), path.name)
            for name, det in detectors.items():
                det.reset()
                start = det.get_state()
                out[path.name, name] = det.step_batch(frames[name].Y)
                det.set_state(start)
        return out

    now = run_all()
    monkeypatch.setattr(kalman, "lti_recursion", _lti_complex_schur)
    before = run_all()
    for key, result in now.items():
        for field in ("zc", "za", "zc_pub", "za_pub", "level", "level_pub"):
            np.testing.assert_array_equal(getattr(result, field), getattr(before[key], field), err_msg=f"{key} {field}")
        np.testing.assert_allclose(result.d2_c, before[key].d2_c, rtol=1e-9, atol=1e-9, err_msg=str(key))


@pytest.mark.parametrize("T", [1, 3, 8])
def test_ewma_of_a_few_samples_is_lfilters_to_the_bit(T: int) -> None:
    rng = np.random.default_rng(T)
    W, start = rng.normal(size=(6, T)), rng.normal(size=6)
    for lam in (0.1, 0.05, 0.3):
        expected, _ = scipy.signal.lfilter([lam], [1.0, -(1.0 - lam)], W, axis=1, zi=((1.0 - lam) * start)[:, None])
        np.testing.assert_array_equal(_ewma(W, lam, start), expected)


def test_a_restored_state_does_not_reuse_the_kept_feature_products(site) -> None:
    # the fused path keeps Theta psi(y(t-1)) and its maps from one batch to the next
    # (PairOutput.last_features); a state set in between names another y(t-1)
    config, detectors = site
    path = REPO / "data" / "tep" / "d05_te.dat"
    Y = plant_frames(config, load_frame(config, path), path.name)["reactor"].Y
    det = detectors["reactor"]
    det.reset()
    det.step_batch(Y[:50])
    saved = det.get_state()
    first = det.step_batch(Y[50:51])  # with the products of y(49) from the batch before
    det.step_batch(Y[51:120])  # now the kept products are those of y(119)
    det.set_state(saved)
    again = det.step_batch(Y[50:51])
    for field in ("x_a", "r_a", "d2_a", "stats_a"):
        np.testing.assert_allclose(getattr(again, field), getattr(first, field), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(again.za, first.za)

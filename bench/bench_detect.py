"""Batch detection core vs a per-sample filterpy + scipy loop (issue 2 section 6, issue 24 point 4).

Workload: the five TEP plants of ``config/tep.yaml`` with its shipped detector (the
``family`` scoring method: innovation, two MEWMAs, level, reconstruction and dispersion
per model, one family-wise alpha), fitted on ``data/tep/d00.dat``, then 100,000 rows
synthesised from the nominal statistics (a VAR(1) fitted to the standardised nominal
data, driven by Gaussian noise with the nominal innovation covariance), with 3-sigma
sensor steps injected in 10% of the rows so that the flags being compared are not all zero.

* **fedrca**: ``PlantDetector.step_batch`` per plant in batches of ``BATCH`` rows — Kalman
  filter (steady-state gain, vectorised recursion), augmentation (a non-zero Theta with its
  own calibration, so it is really computed), both statistic families, flags, severity
  levels and randomized response (epsilon = 2).
* **peer**: the same statistics one sample at a time, built from filterpy's ``KalmanFilter``
  (predict/update), numpy for the augmentation and the EWMAs, and scipy's
  ``distance.mahalanobis`` for every distance. Run on the first ``PEER_ROWS`` rows (its cost
  per sample is constant).

Both must agree (identical flags Z_c and Z_a, family scores to 1e-6) before a speed is
reported. One more line, without a target and without a peer, times the same core on the
same rows with gaps (docs/missing.md): 5 % of the values missing at random and one sensor
per plant dead for a tenth of the rows, the path off the vectorised filter's steady state.

A **sample** is one plant's row of sensors (one sensor message; the TEP plants have
7 to 13 sensors), a **row** the 52 sensors of all five plants. Both run with one BLAS thread
(threadpoolctl): the products are (T, D) @ (D, D) with D ~ 10, which threads only slow down.

    python bench/run.py detect            # the figures (target: >= 1,000,000 samples/s)
    python bench/run.py --smoke detect    # tiny sizes, same code path, agreement only
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from filterpy.kalman import KalmanFilter
from scipy.spatial import distance
from threadpoolctl import threadpool_limits

from fedrca.config import load_config
from fedrca.datasets.loader import load_frame, plant_frames
from fedrca.detectors.factory import build_detector
from fedrca.detectors.identify import Standardizer, identify_linear_model
from fedrca.detectors.kalman import lti_recursion, steady_state_gain
from fedrca.detectors.plant import DetectionResult, PlantDetector
from fedrca.detectors.statistics import FamilyState, Moments

REPO = Path(__file__).resolve().parents[1]
N_ROWS = 100_000
PEER_ROWS = 2_000
BATCH = 4_096
EPSILON = 2.0
TARGET_RATE = 1_000_000.0  # samples (plant rows) per second
TARGET_RATIO = 20.0
SMOKE = {"N_ROWS": 3_000, "PEER_ROWS": 300}  # bench/run.py --smoke


def synthesize(nominal: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """n samples (n, D) from a VAR(1) fitted to the standardised nominal data."""
    rng = np.random.default_rng(seed)
    scaler = Standardizer.fit(nominal)
    Z = scaler.transform(nominal)
    model = identify_linear_model(nominal, n_states=nominal.shape[1], ridge=1e-3)
    A = model.C @ model.A @ model.C.T  # full-rank VAR(1) in the standardised space
    radius = max(abs(np.linalg.eigvals(A)))
    if radius > 0.98:
        A *= 0.98 / radius
    innovations = Z[1:] - Z[:-1] @ A.T
    L = np.linalg.cholesky(np.cov(innovations, rowvar=False) + 1e-6 * np.eye(len(A)))
    noise = rng.standard_normal((n, len(A))) @ L.T
    # z(t) = A z(t-1) + e(t), all t at once
    return scaler.inverse(lti_recursion(A, noise, np.zeros(len(A))))


def with_gaps(Y: np.ndarray, seed: int) -> np.ndarray:
    """``Y`` with 5 % of the values missing at random and one sensor missing for a tenth of the rows."""
    rng = np.random.default_rng(seed)
    out = Y.copy()
    out[rng.random(Y.shape) < 0.05] = np.nan
    start = int(rng.integers(0, len(Y) - len(Y) // 10))
    out[start : start + len(Y) // 10, int(rng.integers(Y.shape[1]))] = np.nan
    return out


def core_run(detectors: dict[str, PlantDetector], data: dict[str, np.ndarray]) -> tuple[float, dict, float]:
    """Seconds for the batch core over all plants (batches of BATCH rows), its results, and its CPU seconds."""
    for det in detectors.values():
        det.reset()
    started, cpu = time.perf_counter(), time.process_time()
    results = {}
    for name, det in detectors.items():
        Y = data[name]
        results[name] = [det.step_batch(Y[s : s + BATCH]) for s in range(0, len(Y), BATCH)]
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return seconds, {name: DetectionResult.concat(parts) for name, parts in results.items()}, cpu


class _PeerFamily:
    """One model's statistic family, one sample at a time (numpy + scipy.spatial.distance)."""

    def __init__(self, state: FamilyState) -> None:
        self.state = state
        self.ewma = [np.zeros(len(state.innovation.mean)) for _ in state.lambdas]
        self.dispersion = state.dispersion_start

    @staticmethod
    def d2(m: Moments, x: np.ndarray) -> float:
        # d2 = (x - μ)' S⁻¹ (x - μ), S⁻¹ = L⁻ᵀ L⁻¹
        return float(distance.mahalanobis(x, m.mean, m.whitening.T @ m.whitening) ** 2)

    def score(self, r: np.ndarray, xh: np.ndarray, e: np.ndarray) -> float:
        st = self.state
        cols = {"innovation": self.d2(st.innovation, r)}
        w = st.innovation.whitening @ (r - st.innovation.mean)
        for i, lam in enumerate(st.lambdas):
            self.ewma[i] = lam * w + (1 - lam) * self.ewma[i]
            cols[f"mewma@{lam:g}"] = self.d2(st.smoothed[i], self.ewma[i])
        if st.dispersion:
            self.dispersion = st.dispersion * cols["innovation"] + (1 - st.dispersion) * self.dispersion
            cols["dispersion"] = self.dispersion
        cols["level"] = self.d2(st.level, xh)
        cols["reconstruction"] = self.d2(st.reconstruction, e)
        return max(cols[s] / c for s, c in zip(st.statistics, st.scale, strict=True))


def peer_run(det: PlantDetector, Y: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per-sample filterpy + scipy twin of ``det.step_batch(Y)``: scores and flags (T,) of both models."""
    kfm = det.proprietary
    A, C = kfm.A, kfm.C
    P, D = A.shape[0], C.shape[0]
    kf = KalmanFilter(dim_x=P, dim_z=D)
    kf.F, kf.H, kf.Q, kf.R = A, C, kfm.Q, kfm.R
    kf.x = np.zeros((P, 1))
    # the steady-state posterior covariance P(t|t) = (I - K C) P(t|t-1), where the core's filter runs
    P_pred, K, _ = steady_state_gain(A, C, kfm.Q, kfm.R)
    kf.P = (np.eye(P) - K @ C) @ P_pred
    theta = det.augmentation.theta
    sc, sa = det.scorers
    fam_c, fam_a = _PeerFamily(sc.state), _PeerFamily(sa.state)
    tau_c, tau_a = det.thresholds
    mean, std = det.scaler.mean, det.scaler.std
    yz_prev = None
    out = np.empty((len(Y), 4))
    for t in range(len(Y)):
        yz = (Y[t] - mean) / std
        xhat_prev = kf.x[:, 0].copy()
        kf.predict()
        kf.update(yz)
        r_c, xh_c = kf.y[:, 0], kf.x[:, 0]
        # x_a(t) = A (x̂_c(t-1) + Theta y(t-1)) ;  x̂_a(t) = x̂_c(t) + Theta y(t)
        x_a = A @ (xhat_prev if yz_prev is None else xhat_prev + theta @ yz_prev)
        xh_a = xh_c + theta @ yz
        yz_prev = yz
        s_c = fam_c.score(r_c, xh_c, yz - C @ xh_c)
        s_a = fam_a.score(yz - C @ x_a, xh_a, yz - C @ xh_a)
        settled = t >= det.warmup  # no flag while the filter and the EWMAs settle
        out[t] = (s_c, s_a, settled and s_c > tau_c, settled and s_a > tau_a)
    return out[:, 0], out[:, 1], out[:, 2].astype(bool), out[:, 3].astype(bool)


def build(config_path: Path, n_rows: int) -> tuple[dict[str, PlantDetector], dict[str, np.ndarray], np.ndarray, int]:
    """Fitted detectors (non-zero Theta, recalibrated), the synthetic plant data and its fault mask."""
    config = load_config(config_path)
    config = config.model_copy(update={"privacy": config.privacy.model_copy(update={"flag_epsilon": EPSILON})})
    frame = load_frame(config, REPO / "data" / "tep" / "d00.dat")
    nominal = plant_frames(config, frame, "d00.dat")
    detectors = {}
    rng = np.random.default_rng(1)
    for plant in config.plants:
        det = build_detector(config, plant).fit(nominal[plant.name].Y)
        det.set_parameters(0.05 * rng.standard_normal(det.augmentation.theta.shape), version="bench")
        det.calibrate_augmented(nominal[plant.name].Y)
        detectors[plant.name] = det
    columns = [c for p in config.plants for c in p.sensors]
    synthetic = synthesize(frame[columns].to_numpy(), n_rows)
    # Faults: a 3-sigma step on every 7th sensor in rows 500..1499 of every 10,000.
    rows = np.arange(n_rows)
    faulty = (rows % 10_000 >= 500) & (rows % 10_000 < 1_500)
    synthetic[np.ix_(faulty, np.arange(0, len(columns), 7))] += 3.0 * frame[columns].to_numpy().std(axis=0)[::7]
    data, start = {}, 0
    for plant in config.plants:
        data[plant.name] = np.ascontiguousarray(synthetic[:, start : start + len(plant.sensors)])
        start += len(plant.sensors)
    return detectors, data, faulty, len(columns)


def main(argv: list[str] | None = None, smoke: bool = False) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, agreement only, no speed target")
    parser.add_argument("--config", type=Path, default=REPO / "config" / "tep.yaml")
    args = parser.parse_args([] if argv is None else argv)
    if args.smoke:
        globals().update(SMOKE)
    smoke = smoke or args.smoke
    n_rows, peer_rows = N_ROWS, PEER_ROWS
    detectors, data, faulty, n_sensors = build(args.config, n_rows)
    samples = n_rows * len(detectors)

    with threadpool_limits(limits=1, user_api="blas"):
        # Correctness first: the peer must compute the same thing.
        _, results, _ = core_run(detectors, {k: v[:peer_rows] for k, v in data.items()})
        peer_seconds = 0.0
        for name, det in detectors.items():
            det.reset()
            started = time.perf_counter()
            s_c, s_a, zc, za = peer_run(det, data[name][:peer_rows])
            peer_seconds += time.perf_counter() - started
            r = results[name]
            worst = max(float(np.max(np.abs(a - b) / (1 + np.abs(a)))) for a, b in ((s_c, r.d2_c), (s_a, r.d2_a)))
            if worst > 1e-6 or not (np.array_equal(zc, r.zc) and np.array_equal(za, r.za)):
                print(f"bench_detect: peer and core disagree on plant {name} (max rel score diff {worst:.2e})")
                return 1
        peer_rate = peer_rows * len(detectors) / peer_seconds
        timings = [core_run(detectors, data) for _ in range(1 if smoke else 5)]
    gappy = {name: with_gaps(Y, seed=i) for i, (name, Y) in enumerate(data.items())}
    with threadpool_limits(limits=1, user_api="blas"):
        gap_seconds = core_run(detectors, gappy)[0]
    core_rate = samples / min(t[0] for t in timings)
    cpu_rate = samples / min(t[2] for t in timings)
    ratio = core_rate / peer_rate
    flagged = np.any([r.zc for r in core_run(detectors, data)[1].values()], axis=0)
    print(
        f"workload: {len(detectors)} TEP plants ({n_sensors} sensors, family detector of config/tep.yaml), "
        f"{n_rows:,} synthesised rows = {samples:,} plant samples, batches of {BATCH:,} rows, 1 BLAS thread"
    )
    print(f"{'implementation':<46}{'samples/s':>14}{'rows/s':>12}{'per sample':>14}")
    for label, rate in (
        ("fedrca batch core (PlantDetector.step_batch)", core_rate),
        ("peer: filterpy KalmanFilter + scipy loop", peer_rate),
        ("fedrca, 5 % missing + a dead sensor per plant", samples / gap_seconds),
    ):
        print(f"{label:<46}{rate:>14,.0f}{rate / len(detectors):>12,.0f}{1e6 / rate:>11.3f} us")
    print(f"ratio fedrca / peer: {ratio:.0f}x   (targets: >= {TARGET_RATE:,.0f} samples/s and >= {TARGET_RATIO:.0f}x)")
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"fedrca on CPU time: {cpu_rate:,.0f} samples/s; load average at the end {load} (figures need < 2)")
    print(
        f"agreement on the first {peer_rows:,} rows of every plant: identical Z_c and Z_a, family scores within "
        f"1e-6; any-plant Z_c rate {flagged[faulty].mean():.3f} in the injected fault windows, "
        f"{flagged[~faulty].mean():.4f} elsewhere"
    )
    if smoke:
        return 0
    met = core_rate >= TARGET_RATE and ratio >= TARGET_RATIO
    if not met:
        print(f"bench_detect: TARGET MISSED ({core_rate:,.0f} samples/s, {ratio:.0f}x the peer)")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Transfer functions: invariant to the state basis, poles matched one to one."""

from __future__ import annotations

import numpy as np
import pytest

from fedrca.whatif import channel_zeros, invariant_zeros, pole_distance, transfer_function


def test_transfer_function_is_invariant_to_the_state_basis():
    rng = np.random.default_rng(2)
    A = np.diag([0.5, -0.3, 0.8]) + 0.05 * rng.normal(size=(3, 3))
    B, C = rng.normal(size=(3, 2)), rng.normal(size=(2, 3))
    T = rng.normal(size=(3, 3)) + 3 * np.eye(3)
    Ti = np.linalg.inv(T)
    g1, g2 = transfer_function(A, B, C), transfer_function(T @ A @ Ti, T @ B, C @ Ti)
    assert np.allclose(g1.singular_values, g2.singular_values)
    assert pole_distance(g1.poles, g2.poles) < 1e-9
    assert pole_distance(g1.zeros, g2.zeros) < 1e-6 and len(g1.zeros) == 1  # square 2x2 with 3 states: one zero
    # a tall system (more sensors than inputs) generically has no transmission zeros
    assert invariant_zeros(A, B[:, :1], C).size == 0
    # SISO channel zeros: G_ij = c_i (zI - A)^-1 b_j has (here) two
    assert all(len(z) == 2 for row in channel_zeros(A, B, C) for z in row)


def test_pole_distance_matches_poles_one_to_one():
    assert pole_distance([0.9, 0.1], [0.1, 0.8]) == pytest.approx(0.1)
    with pytest.raises(Exception, match="differ in size"):
        pole_distance([0.1], [0.1, 0.2])

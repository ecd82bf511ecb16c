"""The flag state of a plant in one sample: the pair (Z_c, Z_a) as one code.

The RCA method reads a plant's two flags together (ARCHITECTURE.md, "RCA"):
``(1, 1)`` the proprietary model and the augmented model both alarm, a
root-cause candidate; ``(1, 0)`` only the proprietary one, the augmented model
explains the anomaly by the other plants, a propagated effect; ``(0, 0)``
normal; ``(0, 1)`` only the augmented one, imperfect training. The code
``2 * Z_c + Z_a`` indexes every per-state table (nominal state counts in the
artifacts, emission probabilities of the RCA's flag model, the aligner's
released-row memory).
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["N_FLAG_STATES", "FlagState", "flag_bits", "flag_states"]


class FlagState(IntEnum):
    """Code of a flag pair: ``2 * Z_c + Z_a``."""

    NORMAL = 0  #: (0, 0)
    IMPERFECT = 1  #: (0, 1): the augmented model alone alarms (imperfect training)
    PROPAGATED = 2  #: (1, 0): explained by the other plants (a propagated effect)
    ROOT = 3  #: (1, 1): a root-cause candidate

    @classmethod
    def of(cls, zc: int, za: int) -> FlagState:
        """The state of one pair.

        Examples
        --------
        >>> FlagState.of(1, 0).name
        'PROPAGATED'
        """
        return cls(2 * int(zc) + int(za))

    @property
    def bits(self) -> tuple[int, int]:
        """``(Z_c, Z_a)``."""
        return int(self) >> 1, int(self) & 1


#: Number of flag states (the width of every per-state table).
N_FLAG_STATES = len(FlagState)


def flag_states(zc: ArrayLike, za: ArrayLike) -> NDArray[np.int64]:
    """Codes ``2 * zc + za`` of flag arrays (any shape; bool or 0/1 ints).

    Examples
    --------
    >>> flag_states([1, 0, 1], [1, 1, 0]).tolist()
    [3, 1, 2]
    """
    return 2 * np.asarray(zc, dtype=np.int64) + np.asarray(za, dtype=np.int64)


def flag_bits(states: ArrayLike) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Inverse of :func:`flag_states`: ``(zc, za)`` arrays.

    Examples
    --------
    >>> [a.tolist() for a in flag_bits([3, 1, 2])]
    [[1, 0, 1], [1, 1, 0]]
    """
    codes = np.asarray(states, dtype=np.int64)
    return codes >> 1, codes & 1

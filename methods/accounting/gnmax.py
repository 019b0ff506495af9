"""PATE's data-independent privacy analysis, the accountant's part (Papernot et al. 2018; THEORY.md, "PATE"): each
GNMax answer is a Gaussian release of a vote histogram one teacher moves by sqrt 2, each threshold check one of the
largest vote (sensitivity 1), whatever the votes. The data-dependent analysis, which reads the votes, stays with the
method (methods/pate/analysis.py)."""

from __future__ import annotations

import numpy as np

#: the Rényi orders of PATE's accounting
ORDERS = np.concatenate([np.linspace(1.1, 10.9, 99), np.arange(11, 101), [128, 256, 512]]).astype(np.float64)


def rdp_gnmax_data_independent(sigma: float, orders: np.ndarray = ORDERS) -> np.ndarray:
    """lambda / sigma^2: one GNMax answer (one teacher moves one vote: L2 sensitivity sqrt(2))."""
    return np.asarray(orders, dtype=np.float64) / sigma**2


def rdp_threshold_data_independent(sigma1: float, orders: np.ndarray = ORDERS) -> np.ndarray:
    """lambda / (2 sigma1^2): the noisy threshold check on max_j n_j (sensitivity 1)."""
    return np.asarray(orders, dtype=np.float64) / (2.0 * sigma1**2)


def data_independent_rdp(*, queries: int, answers: int, sigma1: float | None, sigma2: float,
                         orders: np.ndarray = ORDERS) -> np.ndarray:
    """The data-independent RDP at ``orders`` of ``answers`` GNMax answers and, with ``sigma1``, ``queries``
    threshold checks."""
    rdp = answers * rdp_gnmax_data_independent(sigma2, orders)
    if sigma1 is not None:
        rdp = rdp + queries * rdp_threshold_data_independent(sigma1, orders)
    return rdp

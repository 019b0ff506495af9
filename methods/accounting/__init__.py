"""Privacy accounting: pure functions (``rdp``, ``gaussian``), one conversion to (epsilon, delta)
(``rdp.rdp_to_epsilon``) and one Brent calibration (``calibration``). THEORY.md says what each computes."""

from .calibration import InfeasibleTarget, calibrate_parameter
from .rdp import (
    MAX_ORDER,
    dirichlet_epsilon,
    dirichlet_rdp,
    gaussian_rdp,
    integer_orders,
    poisson_subsampled_rdp,
    rdp_to_epsilon,
    rdp_to_epsilon_classic,
)

__all__ = [
    "MAX_ORDER",
    "InfeasibleTarget",
    "calibrate_parameter",
    "dirichlet_epsilon",
    "dirichlet_rdp",
    "gaussian_rdp",
    "integer_orders",
    "poisson_subsampled_rdp",
    "rdp_to_epsilon",
    "rdp_to_epsilon_classic",
]

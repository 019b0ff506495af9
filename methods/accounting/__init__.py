"""Privacy accounting: pure functions (``rdp``) and one Brent calibration (``calibration``)."""

from .calibration import InfeasibleTarget, largest_parameter_meeting
from .rdp import (
    MAX_ORDER,
    dirichlet_epsilon,
    dirichlet_rdp,
    gaussian_rdp,
    integer_orders,
    poisson_subsampled_rdp,
    rdp_to_epsilon,
)

__all__ = [
    "MAX_ORDER",
    "InfeasibleTarget",
    "dirichlet_epsilon",
    "dirichlet_rdp",
    "gaussian_rdp",
    "integer_orders",
    "largest_parameter_meeting",
    "poisson_subsampled_rdp",
    "rdp_to_epsilon",
]

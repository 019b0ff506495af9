"""Privacy accounting: pure functions (``rdp``, ``gaussian``), one conversion to (epsilon, delta)
(``rdp.rdp_to_epsilon``) and one Brent calibration (``calibration``). THEORY.md says what each computes."""

from importlib.metadata import PackageNotFoundError, version

# the submodule ``gaussian_rdp`` is imported before the function of that name is bound here: importing the submodule
# later (as the accountants do) would otherwise rebind the package's ``gaussian_rdp`` to the module
from . import gaussian_rdp as _gaussian_rdp_module  # noqa: F401
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
    "ACCOUNTING_REVISION",
    "accounting_version",
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

#: the revision of the suite's own accounting code (calibration, RDP, the per-example curve, PATE's analysis):
#: bumped whenever a formula or a calibration's tolerance changes, so that a store's runs at the old noise are rerun
ACCOUNTING_REVISION = 1


def accounting_version() -> str:
    """The accounting's identity, part of every private run's key: the suite's revision and the versions of the
    libraries an accountant may call (dp_accounting's PLD, Opacus' PRV and RDP). A changed one reruns, never reuses."""

    def of(dist: str) -> str:
        try:
            return version(dist)
        except PackageNotFoundError:
            return "absent"

    return f"inputdp {ACCOUNTING_REVISION}; dp_accounting {of('dp-accounting')}; opacus {of('opacus')}"

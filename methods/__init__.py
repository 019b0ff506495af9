"""Privacy methods as plug-ins: a registry of lazily imported entries, refusing duplicates.

The built-in methods are registered below. A method can also live in its own installed package: it declares an
entry point in the group ``inputdp.methods`` whose object is a :class:`MethodInfo` (its ``target`` the import
string of its :class:`~inputdp.methods.base.Method` subclass), and is registered on the registry's first use
(``inputdp.core.registry``). A plug-in whose name is taken, or that fails to load, is a one-line error naming
it, raised only by a command that asks for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inputdp.core.capabilities import Capabilities
from inputdp.core.errors import ConfigError
from inputdp.core.registry import Entry, Registry

#: the entry-point group that installed packages use to add methods
ENTRY_POINT_GROUP = "inputdp.methods"


@dataclass(frozen=True, kw_only=True)
class MethodInfo(Entry):
    protects: str  # what is private: "inputs", "inputs and labels", "nothing"
    needs_public_data: bool = False
    #: what the harness must know of the method besides its mechanism, beside its lazy target (as timm's registry
    #: keeps a model's facts), so that listing and filtering methods import none of them; the class declares the
    #: same record as ``INFO.capabilities`` (its loading refuses a class that says otherwise). None: the class's
    #: own, read on first use (a plug-in written before this field)
    capabilities: Capabilities | None = None

    def load(self) -> Any:
        cls = super().load()
        declared = getattr(cls, "capabilities", None)
        if self.capabilities is not None and declared != self.capabilities:
            raise ConfigError(f"method {self.name!r} declares other capabilities in its class ({self.target}) than "
                              "in its MethodInfo: give the class capabilities = INFO.capabilities")
        return cls

    def facts(self) -> Capabilities:
        """The method's capabilities: its record's, without importing it, where it declares them."""
        return self.capabilities if self.capabilities is not None else self.load().capabilities


METHODS: Registry[MethodInfo] = Registry("method", group=ENTRY_POINT_GROUP, entry_type=MethodInfo)


def register_method(info: MethodInfo, *, force: bool = False) -> MethodInfo:
    return METHODS.register(info, force=force)


def create_method(name: str, options: dict[str, Any] | None = None):
    cls = METHODS.get(name).load()
    return cls(**dict(options or {}))


def reference_method() -> str:
    """The registered method that spends no budget (``capabilities.private`` False): what speed and cost are
    compared to."""
    for info in METHODS:
        if not info.facts().private:
            return info.name
    raise ConfigError("no registered method is a non-private reference (capabilities.private False)")


NONPRIVATE_INFO = register_method(MethodInfo(
    name="nonprivate", target="inputdp.methods.nonprivate:NonPrivate", protects="nothing",
    capabilities=Capabilities(private=False, default_norm="batch"),
    summary="plain cross-entropy SGD on the same Poisson batches: the accuracy and speed reference"))
DIRICHLET_SOFTMAX_INFO = register_method(MethodInfo(
    name="dirichlet_softmax", target="inputdp.methods.dirichlet_softmax:DirichletSoftmax", protects="inputs",
    capabilities=Capabilities(variant_options=("accountant", "lr_rule"), releases_vectors=True),
    summary="the paper's Algorithm 1: train on -log p~_y with p~ ~ Dir(r*softmax + alpha), RDP-calibrated r"))
DPSGD_INFO = register_method(MethodInfo(
    name="dpsgd", target="inputdp.methods.dpsgd:DPSGD", protects="inputs and labels",
    capabilities=Capabilities(
        variant_options=("accountant", "adjacency", "augmult", "ema", "weight_standardisation", "max_grad_norm"),
        speed_variants=tuple({"grad_sample_mode": m} for m in ("hooks", "functorch", "ghost", "bk")),
        compile_refusal="Opacus' per-example-gradient hooks do not run under torch.compile"),
    summary="DP-SGD through Opacus: per-example clipping and Gaussian noise on the gradient, sigma from the PLD"))
GAUSSIAN_PENULTIMATE_INFO = register_method(MethodInfo(
    name="gaussian_penultimate", target="inputdp.methods.gaussian_penultimate:GaussianPenultimate", protects="inputs",
    capabilities=Capabilities(variant_options=("accountant",), releases_vectors=True),
    summary="Monir & Ghinita 2024 (our reading): clip the penultimate features, add Gaussian noise, train through"))
PATE_INFO = register_method(MethodInfo(
    name="pate", target="inputdp.methods.pate:PATE", protects="inputs and labels", needs_public_data=True,
    capabilities=Capabilities(own_loop=True, public_inputs_from_test=True, variant_options=(
        "student", "semi_epochs", "teacher_shift", "teacher_epochs", "teacher_width")),
    summary="PATE (Papernot et al. 2018): teacher ensemble, Confident/Interactive GNMax, student on public inputs"))
DP_LEAST_SQUARES_INFO = register_method(MethodInfo(
    name="dp_least_squares", target="inputdp.methods.dp_least_squares:DPLeastSquares", protects="inputs",
    capabilities=Capabilities(own_loop=True, variant_options=("adjacency", "ridge", "split", "psd"), fixed_features=True),
    summary="sufficient-statistics perturbation: one Gaussian release of X^T X, X^T Y on fixed clipped features, ridge"))
FEATURE_PERTURBATION_INFO = register_method(MethodInfo(
    name="feature_perturbation", target="inputdp.methods.feature_perturbation:FeaturePerturbation", protects="inputs",
    capabilities=Capabilities(own_loop=True, variant_options=("ridge",), fixed_features=True),
    summary="each example's clipped fixed features released once with Gaussian noise; ridge on the noisy copies"))


def load_plugins() -> list[str]:
    """Register every method that installed packages declare (not registered yet); returns their names."""
    return METHODS.load_plugins()


__all__ = ["ENTRY_POINT_GROUP", "METHODS", "MethodInfo", "create_method", "load_plugins",
           "reference_method", "register_method"]

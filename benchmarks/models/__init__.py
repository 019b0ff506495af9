"""The model registry. Every model is a :class:`Classifier`: ``features`` (to the penultimate layer), ``head``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inputdp.core.errors import ConfigError
from inputdp.core.registry import Entry, Registry

from .common import Classifier, norm_layer


@dataclass(frozen=True, kw_only=True)
class ModelInfo(Entry):
    default_width: int
    #: the fastest valid per-example-gradient mode (the suite's book-keeping ``bk``, or Opacus' hooks, functorch or
    #: ghost clipping) for this model, measured with `bench speed --variants` on the project's CPU machine
    #: (reports/performance-cpu/README.md); methods that clip per-example gradients use it when asked for "auto"
    grad_sample_mode: str = "hooks"
    #: the first weight layer is dense on the flattened input (one weight per input coordinate); such a model is
    #: built with the data set's blank pixel value (``input_zero``) and can be audited with ``exclusive_support``
    dense_input: bool = False
    #: the smallest image side the model takes (its convolutions and pools need room); smaller is refused in one line
    min_size: int = 1


#: the entry-point group that installed packages use to add models (an entry point naming a ModelInfo)
ENTRY_POINT_GROUP = "inputdp.models"
MODELS: Registry[ModelInfo] = Registry("model", group=ENTRY_POINT_GROUP, entry_type=ModelInfo)


def register_model(info: ModelInfo, *, force: bool = False) -> ModelInfo:
    """Add a model to the registry (a taken name is refused unless ``force``)."""
    return MODELS.register(info, force=force)


_M = "inputdp.benchmarks.models."
register_model(ModelInfo(name="small_cnn", target=_M + "small_cnn:SmallCNN", default_width=16, grad_sample_mode="bk",
                         min_size=4, summary="two conv layers and a 64-unit hidden layer; trains on a CPU in minutes"))
register_model(ModelInfo(name="mlp", target=_M + "mlp:MLP", default_width=512, grad_sample_mode="bk",
                         dense_input=True,
                         summary="two 512-unit dense ReLU layers on the flattened input (Abadi et al. 2016's kind)"))
register_model(ModelInfo(name="tanh_cnn", target=_M + "tanh_cnn:TanhCNN", default_width=16, grad_sample_mode="bk", min_size=16,
                         summary="Papernot et al. 2021's MNIST CNN with tanh (tempered sigmoid) activations, 26k parameters"))
register_model(ModelInfo(name="relu_cnn", target=_M + "tanh_cnn:ReluCNN", default_width=16, grad_sample_mode="bk", min_size=16,
                         summary="the same CNN with ReLU: the activation comparison of Papernot et al. 2021"))
register_model(ModelInfo(name="scatter_linear", target=_M + "scatternet:ScatterLinear", default_width=0,
                         grad_sample_mode="bk", min_size=4,
                         summary="Tramèr & Boneh 2021: fixed scattering features (kymatio), GroupNorm, one linear layer"))
register_model(ModelInfo(name="scatter_cnn", target=_M + "scatternet:ScatterCNN", default_width=16,
                         grad_sample_mode="bk", min_size=4,
                         summary="Tramèr & Boneh 2021: fixed scattering features, GroupNorm, a small tanh CNN"))
register_model(ModelInfo(name="wrn16_4", grad_sample_mode="bk", target=_M + "wrn:WRN16", default_width=4,
                         summary="WRN-16-4 (pre-activation, GroupNorm), De et al. 2022's CIFAR-10 DP-SGD model, 2.7M"))
register_model(ModelInfo(name="resnet18", grad_sample_mode="bk", target=_M + "resnets:ResNet18", default_width=64,
                         summary="ResNet-18 with the CIFAR stem (3x3 conv, no max-pool), 11M parameters"))
register_model(ModelInfo(name="resnet9", grad_sample_mode="bk", target=_M + "resnets:ResNet9", default_width=64, min_size=8,
                         summary="ResNet-9 (Myrtle/Hoelzl et al. 2022), the paper's DermaMNIST model"))
register_model(ModelInfo(name="inception_simple", grad_sample_mode="bk", target=_M + "inception:SimpleInception",
                         default_width=32, min_size=4,
                         summary="simplified Inception (Szegedy et al. 2015), the paper's MNIST model"))


def check_size(name: str, size: int) -> ModelInfo:
    """The model's record, or a one-line refusal when it cannot take images of side ``size``."""
    info = MODELS.get(name)
    if size < info.min_size:
        raise ConfigError(f"model {name!r} is not allowed for {size}x{size} images: it takes images of at least "
                          f"{info.min_size}x{info.min_size} (resize them: folder:PATH?size=N, npz:FILE?size=N)")
    return info


def build_model(name: str, *, num_classes: int, channels: int, size: int, norm: str, width: int = 0,
                input_zero: Sequence[float] = ()) -> Classifier:
    """``input_zero``: the data set's blank pixel per channel (``datasets.blank_value``), for models with
    ``dense_input`` (others ignore it); left empty, such a model takes 0 as blank."""
    info = check_size(name, size)
    cls = info.load()
    extra = {"input_zero": tuple(input_zero)} if info.dense_input else {}
    return cls(num_classes=num_classes, channels=channels, size=size, norm=norm, width=width or info.default_width,
               **extra)


__all__ = ["MODELS", "Classifier", "ModelInfo", "build_model", "check_size", "norm_layer", "register_model"]

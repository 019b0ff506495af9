"""A toy method plug-in: only its record is imported when inputdp loads plug-ins; the class loads on first use."""

from inputdp.core.capabilities import Capabilities
from inputdp.methods import MethodInfo

INFO = MethodInfo(
    name="toy_clipped_sgd", target="inputdp_toy_method.method:ToyClippedSGD", protects="inputs and labels",
    summary="(plug-in, for tests) DP-SGD in a few lines: per-example clipping, one Gaussian per step's sum; "
            "add/remove, zero-out or one input replaced",
    # read by listing and filtering without importing the class (which declares the same record)
    capabilities=Capabilities(variant_options=("adjacency",),
                              compile_refusal="this toy's per-example gradients (torch.func) are not compiled"),
)

"""A toy method plug-in: only its record is imported when inputdp loads plug-ins; the class loads on first use."""

from inputdp.methods import MethodInfo

INFO = MethodInfo(
    name="toy_logit_noise", target="inputdp_toy_method.method:ToyLogitNoise", protects="inputs",
    summary="(plug-in, for tests) clipped logits plus Gaussian noise, trained through; subsampled-Gaussian accounting",
)

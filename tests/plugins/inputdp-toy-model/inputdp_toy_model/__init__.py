"""A toy model plug-in: a linear classifier on the flattened image (features: flatten; head: one linear layer)."""

from inputdp.benchmarks.models import ModelInfo

INFO = ModelInfo(name="toy_linear", target="inputdp_toy_model.model:ToyLinear", default_width=0,
                 summary="(plug-in, for tests) one linear layer on the flattened image")

from torch import nn

from inputdp.benchmarks.models import Classifier


class ToyLinear(Classifier):
    def __init__(self, *, num_classes: int, channels: int, size: int, norm: str, width: int = 0):
        super().__init__()
        self.features = nn.Flatten()
        self.head = nn.Linear(channels * size * size, num_classes)

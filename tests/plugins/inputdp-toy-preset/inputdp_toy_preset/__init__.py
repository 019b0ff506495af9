"""A toy preset plug-in: a few seconds on any data set (one fallback for all)."""

from inputdp.benchmarks.presets import DatasetSettings, Preset

INFO = Preset(
    name="toy_quick", target="", summary="(plug-in, for tests) 30 steps at q = 0.1 on 400 examples",
    per_dataset={}, fallback=DatasetSettings(model="small_cnn", model_width=8, sampling_rate=0.1, steps=30, lr=0.05,
                                             momentum=0.9, train_examples=400, test_examples=200))

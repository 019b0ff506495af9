"""Data sets: one registry, the real loaders (``sources``), and the tensor-resident data (``tensor_data``)."""

from .registry import DATASETS, DatasetInfo, data_dir_from, register_dataset
from .tensor_data import TensorData, blank_value, check_holdout, load_tensor_data, normalise

__all__ = ["DATASETS", "DatasetInfo", "TensorData", "blank_value", "check_holdout", "data_dir_from", "load_tensor_data",
           "normalise", "register_dataset"]

"""Data sets: one registry, the real loaders (``sources``), and the tensor-resident data (``tensor_data``)."""

from .registry import DATASETS, DatasetInfo, data_dir_from, register_dataset
from .tensor_data import TensorData, load_tensor_data

__all__ = ["DATASETS", "DatasetInfo", "TensorData", "data_dir_from", "load_tensor_data", "register_dataset"]

"""Data sets: one registry, the real loaders (``sources``), data given by path (``generic``), the content fingerprint
(``fingerprint``), and the tensor-resident data (``tensor_data``)."""

from .lookup import canonical_name, dataset_info
from .registry import DATASETS, DatasetInfo, data_dir_from, register_dataset
from .tensor_data import TensorData, blank_value, check_holdout, load_tensor_data, normalise

__all__ = ["DATASETS", "DatasetInfo", "TensorData", "blank_value", "canonical_name", "check_holdout", "data_dir_from",
           "dataset_info", "load_tensor_data", "normalise", "register_dataset"]

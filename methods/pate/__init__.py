"""PATE: teachers, noisy aggregators, data-dependent accounting with smooth-sensitivity sanitisation."""

from .method import PATE

__all__ = ["PATE"]

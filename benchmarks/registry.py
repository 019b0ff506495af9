"""A registry of frozen info records whose implementations are import strings, loaded lazily (timm style).

A missing optional dependency of one entry never breaks ``import``; registering a name twice is refused
unless ``force=True`` (Opacus' accountant registry).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class Entry:
    name: str
    target: str  # "package.module:attribute"
    summary: str

    def load(self) -> Any:
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)


E = TypeVar("E", bound=Entry)


class Registry(Generic[E]):
    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, E] = {}

    def register(self, entry: E, *, force: bool = False) -> E:
        if entry.name in self._entries and not force:
            raise ConfigError(f"{self.kind} {entry.name!r} is already registered (by {self._entries[entry.name].target}); "
                              "pass force=True to replace it")
        self._entries[entry.name] = entry
        return entry

    def get(self, name: str) -> E:
        try:
            return self._entries[name]
        except KeyError:
            raise ConfigError(
                f"unknown {self.kind} {name!r}: choose one of {', '.join(self.names())}"
            ) from None

    def names(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[E]:
        return iter(self._entries.values())

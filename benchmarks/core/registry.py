"""A registry of frozen info records whose implementations are import strings, loaded lazily (timm style).

Every registry of the suite (methods, data sets, models, presets) is one of these, and each has an entry-point group
(``inputdp.methods``, ``inputdp.datasets``, ``inputdp.models``, ``inputdp.presets``) through which an installed
package adds entries without touching this one: its entry point names an info record of the registry's type.

Plug-ins are loaded on the registry's first use, not on import, and a broken one (it does not import, names an
object of the wrong type, or takes a name already registered) is set aside with a one-line error: only a command
that asks for it, by name or through ``all``, stops with that line. A missing optional dependency of one entry never
breaks ``import``; registering a name twice is refused unless ``force=True`` (Opacus' accountant registry).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .errors import ConfigError

BUILT_IN = "built-in"


@dataclass(frozen=True, kw_only=True)
class Entry:
    name: str
    target: str  # "package.module:attribute"
    summary: str

    def load(self) -> Any:
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)


E = TypeVar("E", bound=Entry)


def _distribution(ep) -> str:
    dist = getattr(ep, "dist", None)
    return getattr(dist, "name", None) or ep.value.partition(":")[0]


class Registry(Generic[E]):
    def __init__(self, kind: str, *, group: str | None = None, entry_type: type | None = None):
        self.kind = kind
        #: the entry-point group installed packages declare entries in (None: no plug-ins)
        self.group = group
        self.entry_type = entry_type
        self._entries: dict[str, E] = {}
        self._origins: dict[str, str] = {}
        self._broken: dict[str, str] = {}
        self._seen: set[str] = set()  # entry points registered already ("name = module:attr")
        self._plugins_loaded = group is None

    def register(self, entry: E, *, force: bool = False, origin: str = BUILT_IN) -> E:
        if entry.name in self._entries and not force:
            raise ConfigError(f"{self.kind} {entry.name!r} is already registered (by {self._entries[entry.name].target}); "
                              "pass force=True to replace it")
        self._entries[entry.name] = entry
        self._origins[entry.name] = origin
        self._broken.pop(entry.name, None)
        return entry

    def unregister(self, name: str) -> None:
        """Take an entry out (a test's plug-in, once the test is done); its entry point may be loaded again."""
        self._seen = {s for s in self._seen if s.partition(" = ")[0] != name}
        self._entries.pop(name, None)
        self._origins.pop(name, None)
        self._broken.pop(name, None)

    # -- plug-ins ---------------------------------------------------------------------------------------------------
    def load_plugins(self) -> list[str]:
        """Register every entry that installed packages declare in this registry's group (those not registered
        yet); returns the names registered now. A broken plug-in is set aside (see :meth:`broken`), not raised."""
        from importlib.metadata import entry_points

        self._plugins_loaded = True
        if self.group is None:
            return []
        added = []
        for ep in sorted(entry_points(group=self.group), key=lambda e: e.name):
            if f"{ep.name} = {ep.value}" in self._seen:
                continue  # loaded before
            label = f"the {self.kind} plug-in {ep.name!r} ({ep.value})"
            try:
                obj = ep.load()
            except Exception as err:  # noqa: BLE001 - a broken plug-in: one line naming it, not a traceback
                self._broken[ep.name] = f"{label} failed to load: {type(err).__name__}: {err}".replace("\n", " ")
                continue
            if self.entry_type is not None and not isinstance(obj, self.entry_type):
                self._broken[ep.name] = (f"{label} is not allowed: its entry point must name a "
                                         f"{self.entry_type.__name__}, not a {type(obj).__name__}")
                continue
            if obj.name in self._entries:
                self._broken[ep.name] = (f"{label} registers {obj.name!r}, a name already taken by "
                                         f"{self._entries[obj.name].target}: give the plug-in another name")
                continue
            self.register(obj, origin=f"plug-in {_distribution(ep)}")
            self._seen.add(f"{ep.name} = {ep.value}")
            added.append(obj.name)
        return added

    def _ensure_plugins(self) -> None:
        if not self._plugins_loaded:
            self.load_plugins()

    def broken(self) -> dict[str, str]:
        """Entry-point name -> the one-line error of each plug-in that could not be registered."""
        self._ensure_plugins()
        return dict(self._broken)

    def check_all_load(self) -> None:
        """For a command that uses every entry (``--methods all``): the first broken plug-in's line, if any."""
        for message in self.broken().values():
            raise ConfigError(message)

    def origin(self, name: str) -> str:
        """``built-in`` or ``plug-in DISTRIBUTION``."""
        self.get(name)
        return self._origins[name]

    # -- lookup -----------------------------------------------------------------------------------------------------
    def get(self, name: str) -> E:
        self._ensure_plugins()
        try:
            return self._entries[name]
        except KeyError:
            pass
        if name in self._broken:
            raise ConfigError(self._broken[name])
        extra = f" (plug-ins that failed to load: {', '.join(self._broken)})" if self._broken else ""
        raise ConfigError(f"unknown {self.kind} {name!r}: choose one of {', '.join(self.names())}{extra}")

    def names(self) -> list[str]:
        self._ensure_plugins()
        return list(self._entries)

    def __contains__(self, name: str) -> bool:
        self._ensure_plugins()
        return name in self._entries

    def __iter__(self) -> Iterator[E]:
        self._ensure_plugins()
        return iter(list(self._entries.values()))

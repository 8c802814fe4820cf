"""ChangeLog: the keys of a catalog's objects in the order they changed, for indexes
that follow it (an update costs them one key, not a rebuild).

The log is compacted by starting a new epoch once it holds far more entries than there
are objects; a reader that finds a new epoch rebuilds from every key (`LogReader.read`).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["ChangeLog", "LogReader"]


class ChangeLog:
    def __init__(self) -> None:
        self.keys: list[str] = []
        self.epoch = 0

    def changed(self, key: str, objects: int) -> None:
        """`key` was added, changed or deleted; `objects`: how many there are now."""
        if len(self.keys) > 1024 + 4 * objects:
            self.keys = []
            self.epoch += 1
        self.keys.append(key)


class LogReader:
    """Where one index stands in a ChangeLog."""

    def __init__(self) -> None:
        self._epoch = -1
        self._position = 0

    def read(self, log: ChangeLog, every: Iterable[str]) -> tuple[bool, list[str]]:
        """(rebuild, keys): after a new epoch, True and every key of `every` (the
        objects as they stand); else False and the keys changed since the last read."""
        if log.epoch != self._epoch:
            self._epoch = log.epoch
            self._position = len(log.keys)
            return True, list(every)
        keys = log.keys[self._position :]
        self._position = len(log.keys)
        return False, keys

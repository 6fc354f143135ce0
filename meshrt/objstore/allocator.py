"""Where objects go inside the shared-memory arena: a best-fit free-list allocator.

Pure bookkeeping (no memory is touched here), so it is tested on its own. Blocks
are page-aligned: copies into page-aligned destinations run at full memory speed,
while a destination 16 bytes past a page boundary runs at a third of it (4K
aliasing, measured on these machines), and a reader maps a block by itself with
``mmap(offset=...)``, which needs page alignment.

Written in Python rather than C: an allocation is a few dictionary and bisect
operations (a few microseconds), and only values over ~100 KiB come here, whose
copy takes far longer.
"""

from __future__ import annotations

import bisect

PAGE = 4096


def round_up(n: int, to: int = PAGE) -> int:
    return (n + to - 1) // to * to


class Allocator:
    """Free ranges kept sorted by offset; neighbours merge when freed."""

    def __init__(self, capacity: int) -> None:
        self.capacity = round_up(capacity) if capacity % PAGE else capacity
        self._starts: list[int] = [0] if capacity else []  # sorted offsets of free ranges
        self._sizes: dict[int, int] = {0: self.capacity} if capacity else {}
        self.used = 0
        # Offsets below this were handed out before: their pages exist (and stay
        # mapped in the writers that used them), so reusing them is fast.
        self.high_water = 0

    def alloc(self, size: int) -> int | None:
        """Offset of a free page-aligned block of ``size`` bytes, or None if none fits.

        Best fit among ranges that were used before (their pages are already there),
        then the lowest fresh range, so the arena grows only when it must.
        """
        size = max(round_up(size), PAGE)
        best = None
        best_key = None
        for start in self._starts:
            have = self._sizes[start]
            if have < size:
                continue
            key = (start >= self.high_water, have if start < self.high_water else start)
            if best_key is None or key < best_key:
                best, best_key = start, key
        if best is None:
            return None
        have = self._sizes.pop(best)
        index = bisect.bisect_left(self._starts, best)
        del self._starts[index]
        if have > size:
            rest = best + size
            self._sizes[rest] = have - size
            bisect.insort(self._starts, rest)
        self.used += size
        self.high_water = max(self.high_water, best + size)
        return best

    def fits_in_used(self, size: int) -> bool:
        """Would ``alloc(size)`` be served from pages used before (no spill, no fresh pages)?"""
        size = max(round_up(size), PAGE)
        high = self.high_water
        for start in self._starts:
            if start >= high:
                return False
            if min(self._sizes[start], high - start) >= size:
                return True
        return False

    def free(self, offset: int, size: int) -> None:
        size = max(round_up(size), PAGE)
        self.used -= size
        index = bisect.bisect_left(self._starts, offset)
        # merge with the following range
        if index < len(self._starts) and self._starts[index] == offset + size:
            size += self._sizes.pop(self._starts[index])
            del self._starts[index]
        # merge with the preceding range
        if index > 0:
            before = self._starts[index - 1]
            if before + self._sizes[before] == offset:
                self._sizes[before] += size
                return
        self._starts.insert(index, offset)
        self._sizes[offset] = size

    def largest_free(self) -> int:
        return max(self._sizes.values(), default=0)

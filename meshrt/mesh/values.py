"""ValueMesh: the replies of a ``call``, laid out like the mesh that was called."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .shape import Point, Shape, Shaped


class ValueMesh(Shaped):
    """One value per point. ``items()`` gives (Point, value); ``item(gpus=1)`` one value;
    ``slice(...)`` a smaller ValueMesh over the same values."""

    def __init__(self, shape: Shape, values: list) -> None:
        if len(values) != len(shape):
            raise ValueError(f"ValueMesh over {shape.extent} needs {len(shape)} values, got {len(values)}")
        self._shape = shape
        self._values = list(values)

    @classmethod
    def from_indexed(cls, shape: Shape, pairs) -> ValueMesh:
        """A ValueMesh over ``shape`` from ``(rank, value)`` pairs (a later pair for the
        same rank wins), as in Monarch; every rank needs a value."""
        n = len(shape)
        values: dict = {}
        for rank, value in pairs:
            if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < n:
                raise ValueError(f"ValueMesh.from_indexed(): rank {rank!r} is not in 0 .. {n - 1} ({shape.extent})")
            values[rank] = value
        if len(values) != n:
            missing = sorted(set(range(n)) - set(values))
            raise ValueError(f"ValueMesh.from_indexed(): no value for rank(s) {missing[:8]} of {shape.extent}")
        return cls(Shape.dense(shape.labels, shape.sizes), [values[r] for r in range(n)])

    def values(self) -> Iterator[Any]:
        return iter(self._values)

    def items(self) -> Iterator[tuple[Point, Any]]:
        extent = self._shape.extent
        for i, value in enumerate(self._values):
            yield Point(i, extent), value

    def __iter__(self) -> Iterator[tuple[Point, Any]]:
        return self.items()

    def item(self, **coords) -> Any:
        missing = [label for label in self._shape.labels if label not in coords]
        if missing:
            raise KeyError(f"item() needs a coordinate for every dimension; missing {missing} "
                           f"(extent {self.extent})")
        picked = self.slice(**coords)
        return picked._values[0]

    def slice(self, **dims) -> ValueMesh:
        local = Shape.dense(self._shape.labels, self._shape.sizes).slice(**dims)
        # (laid out densely again: the picked values are all this mesh has)
        return ValueMesh(Shape.dense(local.labels, local.sizes), [self._values[r] for r in local.ranks()])

    def _reshaped(self, shape: Shape) -> ValueMesh:
        return ValueMesh(shape, self._values)  # (the values are in this mesh's row-major order)

    def get(self, rank: int) -> Any:
        """The value at flat ``rank`` (0 .. len - 1), in row-major order of the dims."""
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise TypeError(f"get(rank): give the flat rank as an int, got {type(rank).__name__}; "
                            f"item(**coords) takes coordinates")
        if not 0 <= rank < len(self._values):
            raise IndexError(f"get({rank}): this ValueMesh {self.extent} has ranks 0 .. {len(self._values) - 1}")
        return self._values[rank]

    def __getitem__(self, point):
        if isinstance(point, Point):
            return self.item(**dict(point))
        if isinstance(point, dict):
            return self.item(**point)
        raise TypeError("index a ValueMesh with a Point or a dict of coordinates, or use item(**coords)")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ValueMesh) and self.extent == other.extent and self._values == other._values

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = ", ".join(f"{p}: {v!r}" for p, v in list(self.items())[:8])
        more = ", ..." if len(self) > 8 else ""
        return f"ValueMesh({self.extent}: {shown}{more})"

    def __reduce__(self):
        return (ValueMesh, (Shape.dense(self._shape.labels, self._shape.sizes), self._values))

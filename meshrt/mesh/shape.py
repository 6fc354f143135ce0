"""Named-dimension shapes: which processes of a mesh a (sliced) mesh covers.

A Shape is a strided view over the flat ranks of the mesh it came from (labels,
offset, sizes, strides), so ``slice(gpus=0)`` or ``slice(hosts=slice(0, 2))`` makes a
new small Shape and never copies the mesh. An int selects one coordinate and drops
the dimension; a Python slice keeps it, as in Monarch.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping


class Extent(Mapping):
    """Dimension names and sizes, in order: ``{"hosts": 2, "gpus": 4}``."""

    __slots__ = ("labels", "sizes")

    def __init__(self, labels, sizes) -> None:
        self.labels = tuple(labels)
        self.sizes = tuple(int(s) for s in sizes)
        if len(self.labels) != len(self.sizes):
            raise ValueError(f"extent needs one size per label, got {self.labels} and {self.sizes}")

    def __getitem__(self, label: str) -> int:
        try:
            return self.sizes[self.labels.index(label)]
        except ValueError:
            raise KeyError(label) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.labels)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def nelements(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Extent):
            return self.labels == other.labels and self.sizes == other.sizes
        return Mapping.__eq__(self, other)

    def __hash__(self) -> int:
        return hash((self.labels, self.sizes))

    def __repr__(self) -> str:
        return "{" + ", ".join(f"'{k}': {v}" for k, v in zip(self.labels, self.sizes, strict=True)) + "}"

    def __reduce__(self):
        return (Extent, (self.labels, self.sizes))


class Point(Mapping):
    """One position in an extent: ``point["gpus"]`` is a coordinate, ``point.rank`` the
    row-major index of the position within the extent."""

    __slots__ = ("rank", "extent")

    def __init__(self, rank: int, extent: Extent) -> None:
        self.rank = rank
        self.extent = extent

    def coords(self) -> tuple[int, ...]:
        out = []
        rest = self.rank
        for size in reversed(self.extent.sizes):
            out.append(rest % size)
            rest //= size
        return tuple(reversed(out))

    def __getitem__(self, label: str) -> int:
        try:
            return self.coords()[self.extent.labels.index(label)]
        except ValueError:
            raise KeyError(label) from None

    def size(self, label: str) -> int:
        """The size of dimension ``label`` of this point's extent (as in Monarch)."""
        try:
            return self.extent.sizes[self.extent.labels.index(label)]
        except ValueError:
            raise ValueError(f"Point.size({label!r}): no such dimension; the extent is {self.extent}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.extent.labels)

    def __len__(self) -> int:
        return len(self.extent.labels)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Point):
            return self.rank == other.rank and self.extent == other.extent
        return Mapping.__eq__(self, other)

    def __hash__(self) -> int:
        return hash((self.rank, self.extent))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v}" for k, v in zip(self.extent.labels, self.coords(), strict=True))
        return f"Point({inner or 'rank=' + str(self.rank)})"

    def __reduce__(self):
        return (Point, (self.rank, self.extent))


class Shape:
    """A strided selection of ranks ``offset + sum(coord[i] * strides[i])``."""

    __slots__ = ("labels", "offset", "sizes", "strides", "_ranks", "_extent")

    def __init__(self, labels, offset: int, sizes, strides) -> None:
        self.labels = tuple(labels)
        self.offset = offset
        self.sizes = tuple(sizes)
        self.strides = tuple(strides)
        self._ranks: list[int] | None = None  # computed once: shapes never change
        self._extent: Extent | None = None

    @classmethod
    def dense(cls, labels, sizes) -> Shape:
        strides = []
        step = 1
        for size in reversed(tuple(sizes)):
            strides.append(step)
            step *= size
        return cls(labels, 0, sizes, tuple(reversed(strides)))

    @property
    def extent(self) -> Extent:
        if self._extent is None:
            self._extent = Extent(self.labels, self.sizes)
        return self._extent

    def __len__(self) -> int:
        return len(self._ranks) if self._ranks is not None else math.prod(self.sizes)

    def ranks(self) -> list[int]:
        """The underlying ranks this shape covers, in row-major order of its dims."""
        if self._ranks is None:
            if not self.sizes:
                self._ranks = [self.offset]
            else:
                self._ranks = [
                    self.offset + sum(c * s for c, s in zip(coord, self.strides, strict=True))
                    for coord in itertools.product(*(range(n) for n in self.sizes))
                ]
        return self._ranks

    def slice(self, **dims) -> Shape:
        labels, offset = list(self.labels), self.offset
        sizes, strides = list(self.sizes), list(self.strides)
        for label, index in dims.items():
            if label not in labels:
                raise ValueError(f"slice(): this mesh has no dimension {label!r}; its dimensions are "
                                 f"{self.extent}")
            i = labels.index(label)
            size = sizes[i]
            if isinstance(index, bool) or not isinstance(index, (int, slice)):
                raise TypeError(f"slice({label}=...): give an int or a slice, got {type(index).__name__}")
            if isinstance(index, int):
                if not -size <= index < size:
                    raise IndexError(f"slice({label}={index}): {label!r} has size {size}")
                offset += (index % size) * strides[i]
                del labels[i], sizes[i], strides[i]
                continue
            start, stop, step = index.indices(size)
            if step <= 0:
                raise ValueError(f"slice({label}=...): the step must be positive")
            n = len(range(start, stop, step))
            if n == 0:
                raise IndexError(f"slice({label}={index}) selects nothing ({label!r} has size {size})")
            offset += start * strides[i]
            sizes[i] = n
            strides[i] *= step
        return Shape(labels, offset, sizes, strides)

    def split(self, **spec) -> Shape:
        """Some dims as several: ``split(hosts=("dp", "pp"), pp=2)`` makes "hosts" of
        size 8 into "dp" 4 x "pp" 2 (row-major, so the ranks keep their order). A dim
        named with a 1-tuple is renamed. Every new dim's size is given as ``name=int``
        except at most one per split dim, which is derived."""
        into: dict[str, tuple] = {}
        given: dict[str, int] = {}
        for key, value in spec.items():
            if key in self.labels:
                if isinstance(value, str) or not isinstance(value, (tuple, list)) or not value or \
                        not all(isinstance(v, str) and v.isidentifier() for v in value):
                    raise TypeError(f"split({key}=...): give the new dimension names as a tuple of "
                                    f"identifiers, e.g. {key}=('dp', 'pp'); got {value!r}")
                into[key] = tuple(value)
            elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"split({key}={value!r}): {key!r} is not a dimension of {self.extent}, so it "
                                 f"must be the int size (>= 1) of a new dimension")
            else:
                given[key] = value
        labels: list = []
        sizes: list = []
        strides: list = []
        used: set = set()
        for label, size, stride in zip(self.labels, self.sizes, self.strides, strict=True):
            names = into.get(label, (label,))
            known = math.prod(given[n] for n in names if n in given)
            unknown = [n for n in names if n not in given]
            if len(unknown) > 1:
                raise ValueError(f"split({label}={names}): give the size of all but one of {names}, "
                                 f"e.g. {unknown[0]}=2")
            if unknown:
                if size % known:
                    raise ValueError(f"split({label}={names}): {label!r} has size {size}, which "
                                     f"{known} does not divide")
                given[unknown[0]] = size // known
            elif known != size:
                raise ValueError(f"split({label}={names}): the sizes multiply to {known}, but {label!r} "
                                 f"has size {size}")
            new_sizes = [given.pop(n) for n in names]
            step = stride * math.prod(new_sizes)
            for name, n in zip(names, new_sizes, strict=True):
                if name in used:
                    raise ValueError(f"split(): the dimension name {name!r} would appear twice")
                used.add(name)
                step //= n
                labels.append(name)
                sizes.append(n)
                strides.append(step)
        if given:
            raise ValueError(f"split(): {sorted(given)} named no dimension of the result; sizes are for "
                             f"the new names given to a dimension of {self.extent}")
        return Shape(labels, self.offset, sizes, strides)

    def rename(self, **names) -> Shape:
        """``rename(gpus="tp")``: the same dims under new names."""
        for old, new in names.items():
            if not isinstance(new, str) or not new.isidentifier():
                raise TypeError(f"rename({old}=...): give the new name as an identifier, got {new!r}")
            if old not in self.labels:
                raise ValueError(f"rename(): this mesh has no dimension {old!r}; its dimensions are "
                                 f"{self.extent}")
        return self.split(**{old: (new,) for old, new in names.items()})

    def flatten(self, name: str) -> Shape:
        """All dims as one named ``name`` (ranks in the same order). Only where the dims
        lie evenly in the mesh below, as a slice with steps on inner dims does not."""
        if not isinstance(name, str) or not name.isidentifier():
            raise TypeError(f"flatten(name): give the new dimension's name, got {name!r}")
        for i in range(len(self.sizes) - 1):
            if self.strides[i] != self.strides[i + 1] * self.sizes[i + 1]:
                raise ValueError(f"flatten({name!r}): the points of {self.extent} lie at no one even step "
                                 f"in the mesh they were sliced from (along {self.labels[i]!r} it skips "
                                 f"ranks); flatten the mesh before slicing it")
        return Shape((name,), self.offset, (len(self),), (self.strides[-1] if self.strides else 1,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Shape) and (self.labels, self.offset, self.sizes, self.strides) == (
            other.labels, other.offset, other.sizes, other.strides)

    def __hash__(self) -> int:
        return hash((self.labels, self.offset, self.sizes, self.strides))

    def __repr__(self) -> str:
        return f"Shape({self.extent}, offset={self.offset}, strides={self.strides})"

    def __reduce__(self):
        return (Shape, (self.labels, self.offset, self.sizes, self.strides))


class Shaped:
    """``extent``, ``sizes`` and ``len`` of anything laid out on a Shape (``self._shape``)."""

    _shape: Shape

    @property
    def extent(self) -> Extent:
        return self._shape.extent

    @property
    def sizes(self) -> dict:
        return dict(self._shape.extent)

    def __len__(self) -> int:
        return len(self._shape)

    def rename(self, **names):
        """The same mesh with some dims renamed: ``mesh.rename(gpus="tp")``."""
        return self._reshaped(self._shape.rename(**names))

    def split(self, **spec):
        """The same mesh with dims split in several: ``mesh.split(gpus=("dp", "tp"), tp=2)``."""
        return self._reshaped(self._shape.split(**spec))

    def flatten(self, name: str):
        """The same mesh as one dim named ``name``: ``mesh.flatten("ranks")``."""
        return self._reshaped(self._shape.flatten(name))

    def _reshaped(self, shape: Shape):
        """This mesh laid out on ``shape`` (the same ranks, in the same order)."""
        raise NotImplementedError

    def size(self, dim: str | tuple | list | None = None) -> int:
        """How many points in all, along ``dim``, or over several dims (their product)."""
        if dim is None:
            return len(self._shape)
        if isinstance(dim, (tuple, list)):
            return math.prod(self.size(d) for d in dim)
        extent = self._shape.extent
        if dim not in extent:
            raise ValueError(f"size({dim!r}): this mesh has no dimension {dim!r}; its dimensions are {dict(extent)}")
        return extent[dim]


def check_dims(per_host: Mapping, what: str) -> tuple[tuple, tuple]:
    """Validate a ``{"name": size}`` mapping given by a user; returns (labels, sizes).
    ``{}`` is no dimension: one process, as in Monarch."""
    if not isinstance(per_host, Mapping):
        raise TypeError(f"{what}: give the dimensions as a dict of name -> size, e.g. {{'gpus': 4}}")
    labels, sizes = [], []
    for name, size in per_host.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"{what}: dimension names must be identifiers, got {name!r}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"{what}: dimension {name!r} needs an int size >= 1, got {size!r}")
        labels.append(name)
        sizes.append(size)
    return tuple(labels), tuple(sizes)

"""``ProcMesh.to_table()``, as Monarch's: each process of the mesh as ``host.gpu[i]``
(its host, and its rank among that host's processes of the mesh), laid out by the
mesh's dims in a grid: one row for a one-dim mesh, rows by columns for two, and a grid
per index of the leading dims for more. (Written here, not with a table library: a
few lines of text do not need a dependency.)"""

from __future__ import annotations


def to_table(mesh) -> str:
    shape = mesh._shape
    ranks = list(shape.ranks())
    local = mesh._local or ((0, 1),) * len(mesh._procs)
    cells = [f"{mesh._hosts[r]}.gpu[{local[r][0]}]" for r in ranks]
    labels, sizes = list(shape.labels), list(shape.sizes)
    if not labels:
        return _grid([[cells[0]]])
    if len(labels) == 1:
        return _grid([[labels[0], *map(str, range(sizes[0]))], ["", *cells]])
    rows, cols = sizes[-2], sizes[-1]
    per_block = rows * cols
    blocks = []
    for start in range(0, len(cells), per_block):
        block = cells[start:start + per_block]
        grid = [[f"{labels[-2]} \\ {labels[-1]}", *map(str, range(cols))]]
        grid += [[str(i), *block[i * cols:(i + 1) * cols]] for i in range(rows)]
        title = _leading(start // per_block, labels[:-2], sizes[:-2])
        blocks.append((title + "\n" if title else "") + _grid(grid))
    return "\n\n".join(blocks)


def _leading(index: int, labels: list, sizes: list) -> str:
    """``dim=i, ...`` of the leading dims for block ``index`` (row-major)."""
    parts = []
    for label, size in zip(reversed(labels), reversed(sizes), strict=True):
        parts.append(f"{label}={index % size}")
        index //= size
    return ", ".join(reversed(parts))


def _grid(rows: list[list[str]]) -> str:
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [line]
    for row in rows:
        out.append("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |")
        out.append(line)
    return "\n".join(out)

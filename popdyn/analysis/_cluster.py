"""Clustering end points when theory names no attractors.

Points are binned into cells of side ``radius`` in parameter space and occupied cells that touch
(including diagonally) are joined: single-linkage at scale ``radius``, so a continuum of minima
(a valley) becomes one cluster. Linear in the number of points.
"""

from __future__ import annotations

import itertools

import numpy as np


def cluster_points(X: np.ndarray, radius: float) -> np.ndarray:
    """Cluster ids (0 = largest cluster) for the rows of ``X`` (n, d); d ≤ 6 uses cell adjacency,
    larger d joins only points sharing a cell."""
    if len(X) == 0:
        return np.zeros(0, dtype=int)
    cells = np.floor(X / radius).astype(np.int64)
    uniq, inverse = np.unique(cells, axis=0, return_inverse=True)
    index = {tuple(c): i for i, c in enumerate(uniq)}
    parent = list(range(len(uniq)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    d = X.shape[1]
    offsets = [o for o in itertools.product((-1, 0, 1), repeat=d) if any(o)] if d <= 6 else []
    for i, c in enumerate(uniq):
        for o in offsets:
            j = index.get(tuple(c + np.asarray(o)))
            if j is not None:
                ri, rj = find(i), find(j)
                if ri != rj:
                    parent[ri] = rj
    roots = np.array([find(i) for i in range(len(uniq))])[inverse.ravel()]
    ids, sizes = np.unique(roots, return_counts=True)
    order = {r: k for k, r in enumerate(ids[np.argsort(-sizes, kind="stable")])}
    return np.array([order[r] for r in roots])

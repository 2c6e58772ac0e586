"""Deterministic label-stratified splits of a multi-label data set.

The MOPE protocol (mope §4.1) divides "the articles from each category into three
partitions with nearly the same size". With several labels per document a plain
per-label split is not a partition, so this is iterative stratification (Sechidis,
Tsoumakas and Vlahavas, ECML 2011): labels are served rarest first, and each
document carrying the current label goes to the part that still lacks most of
that label (ties: the part that lacks most documents overall, then a seeded coin).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def stratified_split(Y: np.ndarray, fractions: Sequence[float], seed: int = 0) -> np.ndarray:
    """Part of each document, stratified by label.

    Parameters
    ----------
    Y : array-like (n, q) of 0/1
        Label indicator matrix.
    fractions : sequence of k positive floats
        Wanted share of each part (normalised to sum to 1).
    seed : int
        Seed of the random order of documents and of the tie-breaks: the same Y,
        fractions and seed always give the same split.

    Returns
    -------
    ndarray of int64, shape (n,)
        Part index 0..k-1 of each document. Documents without labels are dealt out
        so that the part sizes follow ``fractions`` as closely as possible.
    """
    Y = np.asarray(Y)
    if Y.ndim != 2:
        raise ValueError(f"Y must be 2-D (documents x labels), got shape {Y.shape}")
    fr = np.asarray(list(fractions), dtype=np.float64)
    if fr.ndim != 1 or fr.size < 2 or not np.all(np.isfinite(fr)) or np.any(fr <= 0):
        raise ValueError(f"fractions must be two or more positive numbers, got {list(fractions)}")
    fr = fr / fr.sum()
    n, q = Y.shape
    k = fr.size
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    Yp = Y[order] != 0
    desired_total = fr * n
    desired_label = np.outer(Yp.sum(axis=0).astype(np.float64), fr)  # (q, k)
    left = Yp.sum(axis=0).astype(np.int64)
    part = np.full(n, -1, dtype=np.int64)
    while np.any(left > 0):
        # the label with the fewest documents still to place; ties: lowest index
        cand = np.where(left > 0, left, np.iinfo(np.int64).max)
        lab = int(np.argmin(cand))
        for r in np.flatnonzero(Yp[:, lab] & (part < 0)):
            want = desired_label[lab]
            best = np.flatnonzero(want == want.max())
            if best.size > 1:
                tot = desired_total[best]
                best = best[tot == tot.max()]
            f = int(best[0]) if best.size == 1 else int(rng.choice(best))
            part[r] = f
            labs = Yp[r]
            desired_label[labs, f] -= 1.0
            desired_total[f] -= 1.0
            left[labs] -= 1
    rest = np.flatnonzero(part < 0)
    if rest.size:
        # largest-remainder shares of what each part still lacks
        need = np.clip(desired_total, 0.0, None)
        share = need / need.sum() * rest.size if need.sum() > 0 else fr * rest.size
        counts = np.floor(share).astype(np.int64)
        for f in np.argsort(-(share - counts), kind="stable")[: rest.size - counts.sum()]:
            counts[f] += 1
        part[rest] = np.repeat(np.arange(k), counts)
    out = np.empty(n, dtype=np.int64)
    out[order] = part
    return out


def split_roles(Y: np.ndarray, fractions: Mapping[str, float], seed: int = 0
                ) -> dict[str, np.ndarray]:
    """Row indices (sorted) of each named part, e.g. ``{"train": .., "test": ..}``."""
    names = list(fractions)
    part = stratified_split(Y, [fractions[k] for k in names], seed=seed)
    return {name: np.flatnonzero(part == i) for i, name in enumerate(names)}

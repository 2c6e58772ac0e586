"""PNG plots of a pipeline report (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def _plt() -> Any:
    # Lazy: matplotlib is heavy and only report plotting needs it; Agg is set before pyplot.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)  # after tight_layout; bbox_inches="tight" would lay out twice
    _plt().close(fig)
    return out


def spectrum(fits: Sequence[Mapping[str, Any]], title: str, out: Path) -> Path:
    """:func:`spectrum_figure` saved to ``out``."""
    return _save(spectrum_figure(fits, title), out)


def spectrum_figure(fits: Sequence[Mapping[str, Any]], title: str) -> Any:
    """Eigenvalue spectrum of each fit: eigenvalue share per component (log scale) and the
    cumulative share, with the kept d (and the threshold t) marked.

    ``fits``: dicts with ``label``, ``eigenvalues``, ``n_components``, ``threshold`` and
    ``share_total``, the denominator of the shares (tr(A), the sum of all eigenvalues,
    or of the positive ones; see :func:`dmlfe.pipeline.report.spectrum_shares`), and
    ``capped`` (a threshold the d kept does not reach, marked on the plot). Without a
    ``share_total`` the shares are of the computed eigenvalues only, and the axis says so.
    """
    plt = _plt()
    # Lazy like _plt(): importing matplotlib at module level would load it for every user.
    from matplotlib import ticker

    n = len(fits)
    cols = min(n, 3)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    for ax, f in zip(axes.ravel(), fits, strict=False):
        w = np.asarray(f["eigenvalues"], dtype=np.float64)
        pos = np.clip(w, 0.0, None)
        known = f.get("share_total")
        total = float(known) if known else (pos.sum() if pos.sum() > 0 else 1.0)
        of = "tr(A)" if known else "computed sum"
        d = int(f["n_components"])
        m = int(min(w.size, max(3 * d, 30)))
        x = np.arange(1, m + 1)
        share = pos[:m] / total
        ax.semilogy(x, np.where(share > 0, share, np.nan), ".-", color="tab:blue", ms=3,
                    label="eigenvalue share")
        # plain exponent labels, no minor labels: mathtext tick labels are slow to lay out
        ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%.0e"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_xlabel("component")
        ax.set_ylabel(f"eigenvalue / {of}", color="tab:blue")
        ax2 = ax.twinx()
        ax2.plot(x, np.cumsum(pos)[:m] / total, color="tab:orange", label="cumulative share")
        ax2.set_ylim(0, 1.05)
        ax2.set_ylabel("cumulative share" + ("" if known else " (of the computed)"),
                       color="tab:orange")
        ax.axvline(d, color="tab:red", ls="--")
        t = f.get("threshold")
        mark = f"d = {d}" + (f" (t = {t})" if t is not None else "")
        if f.get("capped"):
            mark = f"d = {d} capped: {np.cumsum(pos)[d - 1] / total:.4f} < t = {t}"
        if t is not None:
            ax2.axhline(t, color="tab:gray", ls=":", lw=1)
        ax.text(d, 0.04, f" {mark}", color="tab:red", transform=ax.get_xaxis_transform(),
                va="bottom", ha="right" if d > 0.6 * m else "left", fontsize=9, zorder=5,
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
        ax.set_title(f"{f['label']}", fontsize=10)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def metric_vs_d(series: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]], metric: str,
                title: str, out: Path, xlabel: str = "d (number of components)",
                baselines: Mapping[str, Mapping[str, float]] | None = None) -> Path:
    """:func:`metric_vs_d_figure` saved to ``out``."""
    return _save(metric_vs_d_figure(series, metric, title, xlabel, baselines), out)


def metric_vs_d_figure(series: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]],
                       metric: str, title: str, xlabel: str = "d (number of components)",
                       baselines: Mapping[str, Mapping[str, float]] | None = None) -> Any:
    """``series[method][role] = [(d, value), ...]``: one line per method and role
    (test solid, validation dashed); ``xlabel`` names d (e.g. selected features).

    ``baselines[label][role] = value``: a horizontal line per role for a setting without
    d (the classifier on the raw features, "no reduction"). A line equal to an earlier
    one within :data:`COINCIDE_ATOL` (same d values) is labelled ``(= OTHER)`` in the
    legend and drawn dotted over it, so that it is not lost beneath it.
    """
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    _lines(ax, series, metric, xlabel, baselines=baselines)
    ax.set_title(title)
    fig.tight_layout()
    return fig


#: Two lines of a plot closer than this everywhere are marked as coinciding.
COINCIDE_ATOL = 1e-12


def _lines(ax: Any, series: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]],
           metric: str, xlabel: str, marker: str | None = "o",
           baselines: Mapping[str, Mapping[str, float]] | None = None) -> None:
    colors = _plt().rcParams["axes.prop_cycle"].by_key()["color"]
    drawn: list[tuple[str, str, np.ndarray, np.ndarray]] = []
    for i, (method, by_role) in enumerate(series.items()):
        c = colors[i % len(colors)]
        for role, pts in by_role.items():
            pts = sorted(pts)
            x = np.array([p[0] for p in pts], dtype=np.float64)
            y = np.array([p[1] for p in pts], dtype=np.float64)
            same = [m for m, r, xo, yo in drawn if r == role and xo.shape == x.shape
                    and np.array_equal(xo, x) and np.allclose(yo, y, rtol=0.0,
                                                              atol=COINCIDE_ATOL)]
            label = f"{method} ({role})" + (f" (= {same[0]})" if same else "")
            ls = ":" if same else ("--" if role == "validation" else "-")
            ax.plot(x, y, marker=marker, ms=3, color=c, ls=ls, label=label,
                    lw=2.2 if same else 1.5)
            drawn.append((method, role, x, y))
    for j, (label, by_role) in enumerate((baselines or {}).items()):
        c = colors[(len(series) + j) % len(colors)]
        for role, v in by_role.items():
            ax.axhline(v, color=c, lw=1.2, ls="--" if role == "validation" else "-",
                       label=f"{label}: no reduction ({role})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def metric_panels(panels: Mapping[str, Mapping[str, Mapping[str, Sequence[tuple[int, float]]]]],
                  title: str, out: Path, xlabel: str,
                  lower_is_better: Mapping[str, bool] | None = None) -> Path:
    """``panels[metric][method][role] = [(x, value), ...]``: one panel per metric, the
    lines of :func:`metric_vs_d` in each (e.g. a measure against the number of selected
    features); the y range is the data's, each panel says which way is better."""
    plt = _plt()
    n = len(panels)
    cols = min(n, 3)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    for ax, (metric, series) in zip(axes.ravel(), panels.items(), strict=False):
        _lines(ax, series, metric, xlabel, marker=None)
        low = (lower_is_better or {}).get(metric)
        ax.set_title(metric + ("" if low is None else
                               " (lower is better)" if low else " (higher is better)"),
                     fontsize=10)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, out)


def method_bars_figure(values: Mapping[str, Mapping[str, float]], title: str,
                       lower_is_better: Mapping[str, bool] | None = None,
                       spread: Mapping[str, Mapping[str, float]] | None = None) -> Any:
    """The figure of :func:`method_bars` (not saved; for inspection and tests).

    Bars start at 0 (every metric here is non-negative), so that a difference of 1e-4
    looks like one; each bar carries its value, and ``spread[metric][method]`` (a
    standard deviation over folds or seeds, where there is one) is drawn as an error bar.
    """
    plt = _plt()
    metrics = list(values)
    n = len(metrics)
    cols = min(n, 3)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.4 * rows), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, metric in zip(axes.ravel(), metrics, strict=False):
        methods = list(values[metric])
        v = np.array([values[metric][m] for m in methods], dtype=np.float64)
        err = None
        if spread and metric in spread:
            err = np.array([spread[metric].get(m, np.nan) for m in methods], dtype=np.float64)
        bars = ax.bar(range(len(methods)), v, yerr=err, capsize=3 if err is not None else 0,
                      color=[colors[i % len(colors)] for i in range(len(v))])
        ax.bar_label(bars, labels=[_value_label(x) for x in v], fontsize=7, padding=2)
        ax.set_xticks(range(len(methods)), methods, rotation=45, ha="right", fontsize=8)
        low = (lower_is_better or {}).get(metric)
        ax.set_title(metric + (" (lower is better)" if low else ""), fontsize=10)
        finite = v[np.isfinite(v)]
        if finite.size:
            top = float(finite.max() + (np.nanmax(err) if err is not None and
                                        np.isfinite(err).any() else 0.0))
            lo = min(0.0, float(finite.min()))
            # room above the tallest bar for its value label
            ax.set_ylim(lo, top * 1.15 if top > 0 else 1.0)
        ax.grid(axis="y", alpha=0.3)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def _value_label(x: float) -> str:
    return f"{x:.4f}" if np.isfinite(x) else str(x)


def method_bars(values: Mapping[str, Mapping[str, float]], title: str, out: Path,
                lower_is_better: Mapping[str, bool] | None = None,
                spread: Mapping[str, Mapping[str, float]] | None = None) -> Path:
    """``values[metric][method]``: one panel per metric, one bar per method, saved to ``out``
    (see :func:`method_bars_figure`)."""
    return _save(method_bars_figure(values, title, lower_is_better, spread), out)


def cd_diagram(avg_ranks: Mapping[str, float], cd: float | None, title: str, out: Path) -> Path:
    """Critical-difference diagram (Demšar 2006, fig. 1): methods at their average ranks
    (1 = best, left), the CD bar, and thick lines joining methods whose ranks differ by
    less than CD (not significantly different)."""
    plt = _plt()
    items = sorted(avg_ranks.items(), key=lambda kv: kv[1])
    k = len(items)
    names = [n for n, _ in items]
    r = np.array([v for _, v in items])
    half = (k + 1) // 2
    height = 1.6 + 0.32 * max(half, k - half)
    fig, ax = plt.subplots(figsize=(7.5, height))
    lo, hi = 1, max(k, 2)
    ax.set_xlim(lo - 0.9, hi + 0.9)
    ax.set_ylim(-(max(half, k - half) + 1.2), 1.4)
    ax.axis("off")
    ax.hlines(0, lo, hi, color="k", lw=1)
    for x in range(lo, hi + 1):
        ax.vlines(x, 0, 0.12, color="k", lw=1)
        ax.text(x, 0.2, str(x), ha="center", va="bottom", fontsize=9)
    for i, (name, x) in enumerate(zip(names, r, strict=True)):
        left = i < half
        y = -(i + 1 if left else k - i) * 0.8
        xe = lo - 0.5 if left else hi + 0.5
        ax.plot([x, x, xe], [0, y, y], color="k", lw=0.8)
        ax.text(xe + (-0.05 if left else 0.05), y, f"{name} ({x:.2f})",
                ha="right" if left else "left", va="center", fontsize=9)
    if cd is not None and np.isfinite(cd):
        ax.plot([lo, lo + cd], [1.0, 1.0], color="tab:red", lw=2)
        ax.vlines([lo, lo + cd], 0.9, 1.1, color="tab:red", lw=1)
        ax.text(lo + cd / 2, 1.15, f"CD = {cd:.2f}", ha="center", va="bottom", fontsize=9,
                color="tab:red")
        # maximal groups of consecutive methods within CD of each other
        groups, last_end = [], -1
        for i in range(k):
            j = i
            while j + 1 < k and r[j + 1] - r[i] < cd:
                j += 1
            if j > i and j > last_end:
                groups.append((i, j))
                last_end = j
        for g, (i, j) in enumerate(groups):
            y = -0.25 - 0.18 * g
            ax.plot([r[i] - 0.03, r[j] + 0.03], [y, y], color="tab:blue", lw=3)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, out)

"""Extreme label sets (issue 47): fit time and memory against the number of labels q.

The corpus is :mod:`dmlfe.readers.synthetic_xmc`: documents drawn with 30,000 fine
Zipf labels and written once for every q, so X is the same at every q and only Y
changes. Every step (generate, ingest, each fit, each transform) runs in a fresh process
(``python -m dmlfe.cli ...``) whose wall time and peak RSS -- the process and all its
descendants, the dask workers included, sampled every 0.1 s -- are recorded with the
load average before it; a step is stopped at its time limit or when the process tree
holds more than ``--mem-limit-gib`` (status "timeout" / "memory"); a failing step keeps
the first error line of its output (a method that refuses up front shows its message).
Each fit starts cold: what earlier fits cached beside the store (``STORE.stats``,
``STORE.graph``) is removed first, unless ``--warm-cache``.

Parts (``--parts``, comma list; default ``sweep,plot``):

* ``sweep``: ``--docs`` (100,000) documents hashed to ``--features`` (2^20) columns at
  ``--fine-labels`` (30,000) fine labels, written for each q of ``--labels``
  (100,1000,10000,30000); each ingested with ``dmlfe ingest --format xmc`` (time, peak);
  then, for each method of ``--methods`` (``mddm_p,mvmd,cca``; ``all``: every supervised
  method of the registry), ``dmlfe fit STORE --method M --dim 100 --split train`` with
  ``--workers`` (2) LocalCluster workers, stopped after ``--fit-timeout`` (300 s). Rows
  ``{method, q, seconds, peak_mib, status, error, load_avg}``. Reference in the same run:
  scikit-learn's TruncatedSVD(100) on the train CSR of the same corpus (labels play no
  part), in a fresh process. The summary gives each method's ratio
  time(largest q) / time(smallest q) and the issue's targets, checked when the sweep
  runs q = 100 and 30,000: MDDMp, MVMD and CCA at 30,000 labels within 3x their 100-label
  time, 60 s and 4 GiB; every other method within 5x or refusing with a message.
* ``million``: ``--million-docs`` (1,000,000) documents at 30,000 labels: generate,
  ingest and an MDDMp fit, the peak memory of each (target: 6 GiB each).
* ``quality``: on the test split at the largest q: each method of ``--methods`` and
  PCA (d = ``--dim``) fitted on train, train and test embedded (``dmlfe transform``), a
  10-nearest-neighbour label vote (``dmlfe.KNNLabelVote``) on the embeddings; P@1, P@3,
  P@5, nDCG@5 and PSP@5 (``dmlfe.evaluation.metrics``; propensities from the training
  label counts) on the whole test set at once, from CSR scores holding each row's top 5
  (nothing n_test x q is dense). Beside them: the same vote on the raw CSR features (its
  sparse path: nothing n x D dense), and napkinXC's PLT (a dedicated XMC tool) on the
  raw features (``--no-reference``: neither; ``--no-napkinxc``: no PLT).
  ``--label-share`` sets the corpus's share of label words (default 0.4; a lower share
  buries the label words under more background words). ``--quality-dims 100,400,1600`` repeats
  every method and PCA at each embedding size (rows named ``METHOD d=D``), to show how
  large d must be for a vote on an embedding to match the vote on the raw features.
  napkinXC is a benchmark-only dependency, not the package's::

      python -m pip install --no-deps --target bench-out/pydeps napkinxc

  (bench-out/pydeps is put on ``sys.path`` when it exists); without it the row says so.
* ``plot``: bench-out/labels-sweep.png, seconds against q (log-log, a line a method)
  from this run's sweep or from ``--json``; ``--plot-copy docs/_static/labels-sweep.png``
  copies it for the docs.

Everything is written under bench-out/labels-work/ (the corpus is kept and reused for
the same parameters; ``--regenerate`` writes it again). JSON to stdout and to
bench-out/labels.json (a run without the sweep: bench-out/labels-PARTS.json, so that
the sweep's file stays for ``--parts plot``).

    python benchmarks/labels.py                                   # the full sweep
    python benchmarks/labels.py --docs 2000 --labels 100,1000 --methods mddm_p
    python benchmarks/labels.py --parts quality --docs 20000 --labels 100,30000
    python benchmarks/labels.py --parts million
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import OUT, ROOT, emit, run_reference  # noqa: E402

WORK = OUT / "labels-work"
PYDEPS = OUT / "pydeps"
#: The issue's targets: (ratio of the largest to the smallest q, seconds, MiB) for the
#: methods named, a ratio for the others (or a refusal).
TARGETS = {"strict": ("mddm_p", "mvmd", "cca"), "ratio": 3.0, "seconds": 60.0,
           "peak_mib": 4096.0, "other_ratio": 5.0, "million_peak_mib": 6144.0}
DEFAULT_METHODS = "mddm_p,mvmd,cca"

TSVD_REF = """
import sys, time
import scipy.sparse as sp
from sklearn.decomposition import TruncatedSVD
from dmlfe.readers.xmc import read_xmc
t0 = time.perf_counter()
X = sp.vstack([b.X for b in read_xmc(sys.argv[1]).batches(20000)], format="csr")
t1 = time.perf_counter()
TruncatedSVD(int(sys.argv[2]), algorithm="randomized", random_state=0).fit(X)
result = {"tool": "sklearn TruncatedSVD (randomized, in memory)", "k": int(sys.argv[2]),
          "read_seconds": round(t1 - t0, 3), "fit_seconds": round(time.perf_counter() - t1, 3),
          "shape": list(X.shape), "nnz": int(X.nnz)}
"""


# --------------------------------------------------------------------------- measuring


def _first_error(text: str) -> str:
    """The first line that says "error" (else the last line) of a step's output."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    hit = next((ln for ln in lines if "error" in ln.lower()), lines[-1] if lines else "")
    return hit[:400]


def run_step(cmd: list[str], *, timeout: float, mem_limit_mib: float) -> dict[str, Any]:
    """Run ``cmd`` in a fresh process group; wall seconds, peak RSS of the process tree.

    Returns
    -------
    dict
        ``seconds``, ``peak_mib`` (the tree's summed RSS, sampled every 0.1 s),
        ``status`` ("ok", "error", "timeout" or "memory"), ``error`` (the first error
        line of the output, or None), ``load_avg`` (1-minute load before the step) and
        ``mem_limit_mib`` (the limit applied: ``mem_limit_mib``, or 85 % of the memory
        available at the start when that is less).
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    load = round(os.getloadavg()[0], 2)
    # never more than most of what the machine has free: the limit is there to stop
    # the step before the machine swaps or its OOM killer picks a process
    mem_limit_mib = min(mem_limit_mib, 0.85 * psutil.virtual_memory().available / 2**20)
    peak, status = 0, None
    with tempfile.TemporaryFile() as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            rss = 0
            try:
                for p in [root, *root.children(recursive=True)]:
                    try:
                        rss += p.memory_info().rss
                    except psutil.Error:
                        pass
            except psutil.Error:
                pass
            peak = max(peak, rss)
            if peak > mem_limit_mib * 2**20:
                status = "memory"
            elif time.perf_counter() - t0 > timeout:
                status = "timeout"
            if status:
                os.killpg(proc.pid, signal.SIGKILL)  # the group this step started
                proc.wait()
                break
            time.sleep(0.1)
        seconds = time.perf_counter() - t0
        log.seek(0)
        output = log.read().decode("utf-8", "replace")
    if status is None:
        status = "ok" if proc.returncode == 0 else "error"
    error = None
    if status == "error":
        error = _first_error(output)
    elif status == "timeout":
        error = f"stopped after {timeout:.0f} s"
    elif status == "memory":
        error = f"stopped above {mem_limit_mib:.0f} MiB"
    return {"seconds": round(seconds, 2), "peak_mib": round(peak / 2**20, 1),
            "status": status, "error": error, "load_avg": load,
            "mem_limit_mib": round(mem_limit_mib)}


def dmlfe_cmd(*args: str) -> list[str]:
    """The dmlfe command line run with this interpreter (``python -m dmlfe.cli``)."""
    return [sys.executable, "-m", "dmlfe.cli", *args]


def _log(what: str, rec: dict) -> None:
    print(f"{what}: {rec.get('status')} {rec.get('seconds')} s {rec.get('peak_mib')} MiB"
          + (f" ({rec['error']})" if rec.get("error") else ""), file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- corpus


def corpus_dir(n_docs: int, args: argparse.Namespace) -> Path:
    # the generator's default label share keeps the folder names of earlier runs
    share = "" if args.label_share == 0.4 else f"-w{args.label_share:g}"
    return WORK / f"xmc-n{n_docs}-D{args.features}-F{args.fine_labels}-s{args.seed}{share}"


def generate(n_docs: int, qs: list[int], args: argparse.Namespace) -> dict[str, Any]:
    """The corpus's files for every q (kept and reused unless ``--regenerate``)."""
    from dmlfe.readers.synthetic_xmc import corpus_files

    out = corpus_dir(n_docs, args)
    if not args.regenerate and all(p.exists() for q in qs for p in corpus_files(out, q)):
        return {"step": "generate", "n_docs": n_docs, "labels": qs, "status": "reused",
                "path": str(out)}
    cmd = [sys.executable, "-m", "dmlfe.readers.synthetic_xmc", str(out), "--docs",
           str(n_docs), "--labels", ",".join(map(str, qs)), "--features",
           str(args.features), "--fine-labels", str(args.fine_labels), "--seed",
           str(args.seed), "--label-share", str(args.label_share)]
    rec = {"step": "generate", "n_docs": n_docs, "labels": qs, "path": str(out),
           **run_step(cmd, timeout=args.step_timeout, mem_limit_mib=args.mem_limit_mib)}
    _log(f"generate {n_docs} docs", rec)
    return rec


def ingest(n_docs: int, q: int, args: argparse.Namespace) -> tuple[Path, dict[str, Any]]:
    from dmlfe.readers.synthetic_xmc import corpus_files

    train, test = corpus_files(corpus_dir(n_docs, args), q)
    store = WORK / "stores" / f"{corpus_dir(n_docs, args).name}-q{q}.zarr"
    store.parent.mkdir(parents=True, exist_ok=True)
    cmd = dmlfe_cmd("ingest", str(train), str(test), "--format", "xmc", "--out", str(store),
                    "--overwrite", "--workers", str(args.workers), "--quiet")
    rec = {"step": "ingest", "q": q, "n_docs": n_docs,
           **run_step(cmd, timeout=args.step_timeout, mem_limit_mib=args.mem_limit_mib)}
    _log(f"ingest q={q}", rec)
    return store, rec


def clear_caches(store: Path) -> None:
    """Remove what earlier fits cached beside ``store`` (``STORE.stats``, ``STORE.graph``,
    ...), so that each fit is timed from the store alone."""
    for p in store.parent.glob(store.name + ".*"):
        if p.is_dir():
            shutil.rmtree(p)


def fit(store: Path, method: str, q: int, args: argparse.Namespace, *, model: Path,
        timeout: float, dim: int | None = None) -> dict[str, Any]:
    if not args.warm_cache:
        clear_caches(store)
    cmd = dmlfe_cmd("fit", str(store), "--method", method, "--dim", str(dim or args.dim),
                    "--split", "train", "--out", str(model), "--overwrite", "--workers",
                    str(args.workers), "--quiet")
    rec = {"method": method, "q": q,
           **run_step(cmd, timeout=timeout, mem_limit_mib=args.mem_limit_mib)}
    _log(f"fit {method} q={q}", rec)
    return rec


def method_list(spec: str) -> list[str]:
    """``--methods``: a comma list (a family name such as ``mddm`` is its first variant,
    ``mddm_p``), or ``all`` (every supervised method of the registry)."""
    from dmlfe.methods.registry import all_methods, resolve_method

    if spec == "all":
        return [n for n, s in all_methods().items() if s.supervised]
    return list(dict.fromkeys(resolve_method(m.strip()).name for m in spec.split(",")
                              if m.strip()))


# --------------------------------------------------------------------------- parts


def summarise(rows: list[dict[str, Any]], qs: list[int]) -> dict[str, Any]:
    """Each method's ratio time(largest q) / time(smallest q) and the issue's targets."""
    lo, hi = min(qs), max(qs)
    checked = lo == 100 and hi == 30000
    out: dict[str, Any] = {"q_low": lo, "q_high": hi, "targets_checked": checked,
                           "methods": {}}
    for method in dict.fromkeys(r["method"] for r in rows):
        by_q = {r["q"]: r for r in rows if r["method"] == method}
        a, b = by_q.get(lo), by_q.get(hi)
        ratio = None
        if a and b and a["status"] == b["status"] == "ok" and a["seconds"] > 0:
            ratio = round(b["seconds"] / a["seconds"], 2)
        s: dict[str, Any] = {"ratio": ratio, "seconds_high": b and b["seconds"],
                             "peak_mib_high": b and b["peak_mib"],
                             "status_high": b and b["status"]}
        if checked and b is not None:
            if method in TARGETS["strict"]:
                s["meets_target"] = bool(
                    b["status"] == "ok" and ratio is not None
                    and ratio <= TARGETS["ratio"] and b["seconds"] <= TARGETS["seconds"]
                    and b["peak_mib"] <= TARGETS["peak_mib"])
            else:
                refused = b["status"] == "error"
                s["meets_target"] = bool(refused or (ratio is not None
                                                     and ratio <= TARGETS["other_ratio"]))
        out["methods"][method] = s
    return out


def part_sweep(args: argparse.Namespace, qs: list[int], res: dict[str, Any]) -> None:
    sweep: dict[str, Any] = {"n_docs": args.docs, "labels": qs, "dim": args.dim,
                             "workers": args.workers, "fit_timeout_s": args.fit_timeout,
                             "cache": "warm" if args.warm_cache else "cold",
                             "steps": [], "rows": []}
    res["sweep"] = sweep
    gen = generate(args.docs, qs, args)
    sweep["steps"].append(gen)
    if gen["status"] not in ("ok", "reused"):
        return
    stores = {}
    for q in qs:
        stores[q], rec = ingest(args.docs, q, args)
        sweep["steps"].append(rec)
    if not args.no_reference:
        from dmlfe.readers.synthetic_xmc import corpus_files

        train = corpus_files(corpus_dir(args.docs, args), qs[0])[0]
        try:
            sweep["reference"] = run_reference(TSVD_REF, str(train), str(args.dim))
        except subprocess.CalledProcessError as exc:
            sweep["reference"] = {"status": "error", "error": _first_error(exc.stderr)}
    models = WORK / "models"
    for q in qs:
        if not any(s["step"] == "ingest" and s["q"] == q and s["status"] == "ok"
                   for s in sweep["steps"]):
            continue
        for method in method_list(args.methods):
            model = models / f"{method}-q{q}"
            sweep["rows"].append(fit(stores[q], method, q, args, model=model,
                                     timeout=args.fit_timeout))
            shutil.rmtree(model, ignore_errors=True)  # 0.8 GB a model at 2^20, d = 100
    sweep["summary"] = summarise(sweep["rows"], qs)


def part_million(args: argparse.Namespace, res: dict[str, Any]) -> None:
    q = args.fine_labels
    rec: dict[str, Any] = {"n_docs": args.million_docs, "q": q,
                           "target_peak_mib": TARGETS["million_peak_mib"], "steps": []}
    res["million"] = rec
    gen = generate(args.million_docs, [q], args)
    rec["steps"].append(gen)
    if gen["status"] not in ("ok", "reused"):
        return
    store, ing = ingest(args.million_docs, q, args)
    rec["steps"].append(ing)
    if ing["status"] == "ok":
        model = WORK / "models" / f"million-mddm_p-q{q}"
        rec["steps"].append({"step": "fit mddm_p", **fit(store, "mddm_p", q, args,
                                                         model=model,
                                                         timeout=args.step_timeout)})
        shutil.rmtree(model, ignore_errors=True)
    rec["meets_target"] = all(s["status"] in ("ok", "reused")
                              and s.get("peak_mib", 0) <= TARGETS["million_peak_mib"]
                              for s in rec["steps"])


def _xmc_matrices(path: Path) -> tuple[Any, Any]:
    """X (CSR) and Y (CSR, uint8) of one XMC file."""
    import scipy.sparse as sp

    from dmlfe.readers.xmc import read_xmc

    xs, ys = [], []
    for b in read_xmc(path).batches(5000):
        xs.append(b.X)
        ys.append(sp.csr_matrix(b.Y))
    return sp.vstack(xs, format="csr"), sp.vstack(ys, format="csr")


def _top_k_csr(idx: np.ndarray, vals: np.ndarray, q: int) -> Any:
    """A CSR score matrix holding only each row's ranked labels (``idx`` -1: none)."""
    import scipy.sparse as sp

    keep = idx >= 0
    counts = keep.sum(axis=1)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    S = sp.csr_matrix((vals[keep].astype(np.float64), idx[keep], indptr),
                      shape=(idx.shape[0], q))
    S.sum_duplicates()
    return S


def _metrics(S: Any, Y_test: Any, prop: np.ndarray, fns: dict[str, Any]) -> dict[str, float]:
    """P@1/3/5, nDCG@5 and PSP@5 on the whole test set at once (PSP@5 is normalised by
    the ideal ranking, a ratio of means, so it cannot be averaged over row batches).

    ``S`` is a CSR score matrix (n_test x q) and ``Y_test`` CSR: the measures rank the
    stored scores only, in O(nnz + n_test x 5) memory; nothing n_test x q is dense.
    """
    out = {f"P@{k}": fns["precision_at_k"](Y_test, S, k) for k in (1, 3, 5)}
    out["nDCG@5"] = fns["ndcg_at_k"](Y_test, S, 5)
    out["PSP@5"] = fns["psprecision_at_k"](Y_test, S, 5, prop, normalize=True)
    return {k: round(float(v), 4) for k, v in out.items()}


def _vote_row(name: str, Z_train: Any, Y_train: Any, Z_test: Any, Y_test: Any,
              prop: np.ndarray, fns: dict[str, Any]) -> dict[str, Any]:
    """The 10-neighbour vote fitted on ``Z_train`` and its measures on ``Z_test``.

    Embeddings take the vote's dense path; raw CSR features its sparse path (training
    rows kept as CSR, the keys sparse products made dense only at block size). Its
    scores are CSR (the labels some neighbour carries); the top 5 of each row are kept.
    """
    t0 = time.perf_counter()
    try:
        vote = fns["KNNLabelVote"](n_neighbors=10).fit(Z_train, Y_train)
        fit_s = time.perf_counter() - t0
        idx, vals = fns["top_k"](vote.decision_function(Z_test), 5)
        S = _top_k_csr(idx, vals, Y_test.shape[1])
        row = {"fit_seconds": round(fit_s, 2),
               "sparse_features": bool(vote.sparse_features_),
               **_metrics(S, Y_test, prop, fns), "status": "ok"}
    except Exception as exc:  # a row that fails says why; the others still run
        row = {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:400]}
    return {"features": name, "seconds": round(time.perf_counter() - t0, 2), **row}


def _napkinxc_row(X_train: Any, Y_train: Any, X_test: Any, Y_test: Any,
                  prop: np.ndarray, fns: dict[str, Any]) -> dict[str, Any]:
    """napkinXC's PLT on the raw features: its top-5 (label, probability) pairs of each
    test document become a CSR score matrix (O(n_test x 5))."""
    if PYDEPS.is_dir() and str(PYDEPS) not in sys.path:
        sys.path.append(str(PYDEPS))
    try:
        from napkinxc.models import PLT
    except ImportError as exc:
        return {"features": "raw (napkinXC PLT)", "status": "skipped",
                "error": f"napkinxc not installed ({exc}); python -m pip install "
                         f"--no-deps --target {PYDEPS} napkinxc"}
    t0 = time.perf_counter()
    try:
        labels = [Y_train.indices[a:b].tolist()
                  for a, b in zip(Y_train.indptr[:-1], Y_train.indptr[1:], strict=True)]
        plt = PLT(str(WORK / "napkinxc-plt"), seed=0)
        plt.fit(X_train, labels)
        fit_s = time.perf_counter() - t0
        pairs = plt.predict_proba(X_test, top_k=5)
        idx = np.full((X_test.shape[0], 5), -1, dtype=np.int64)
        vals = np.zeros((X_test.shape[0], 5))
        for i, row_pairs in enumerate(pairs):
            for j, (label, p) in enumerate(row_pairs[:5]):
                idx[i, j], vals[i, j] = int(label), float(p)
        row = {"fit_seconds": round(fit_s, 2),
               **_metrics(_top_k_csr(idx, vals, Y_test.shape[1]), Y_test, prop, fns),
               "status": "ok"}
    except Exception as exc:  # a row that fails says why; the others still run
        row = {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:400]}
    return {"features": "raw (napkinXC PLT)", "seconds": round(time.perf_counter() - t0, 2),
            **row}


def _quality_row(store: Path, method: str, q: int, dim: int, args: argparse.Namespace,
                 steps: list[dict[str, Any]], truth: tuple[Any, ...]) -> dict[str, Any]:
    """``method`` fitted at ``dim`` on train, train and test embedded, the vote's row."""
    from dmlfe.io.embeddings import read_embeddings

    Y_train, Y_test, prop, fns = truth
    model = WORK / "models" / f"quality-{method}-q{q}-d{dim}"
    step = fit(store, method, q, args, model=model, timeout=args.step_timeout, dim=dim)
    steps.append({"step": f"fit {method} d={dim}", **step})
    Z = {}
    for split in ("train", "test"):
        emb = WORK / "embeddings" / f"{method}-q{q}-d{dim}-{split}"
        if step["status"] == "ok":
            step = run_step(dmlfe_cmd("transform", str(model), str(store), "--split", split,
                                      "--out", str(emb), "--overwrite", "--workers",
                                      str(args.workers), "--quiet"),
                            timeout=args.step_timeout, mem_limit_mib=args.mem_limit_mib)
            steps.append({"step": f"transform {method} d={dim} {split}", **step})
        if step["status"] == "ok":
            Z[split] = read_embeddings(emb)
            shutil.rmtree(emb, ignore_errors=True)
    shutil.rmtree(model, ignore_errors=True)
    if len(Z) < 2:
        return {"method": method, "dim": dim, "status": step["status"],
                "error": step["error"]}
    return {"method": method, "dim": dim, **_vote_row(
        f"{method} d={dim}", Z["train"], Y_train, Z["test"], Y_test, prop, fns)}


def part_quality(args: argparse.Namespace, qs: list[int], res: dict[str, Any]) -> None:
    try:
        from dmlfe import KNNLabelVote
        from dmlfe.evaluation.metrics import (
            label_propensities,
            ndcg_at_k,
            precision_at_k,
            psprecision_at_k,
            top_k,
        )
    except ImportError as exc:
        res["quality"] = {"skipped": "needs dmlfe.KNNLabelVote and dmlfe.evaluation.metrics"
                          f" precision_at_k/ndcg_at_k/psprecision_at_k/label_propensities "
                          f"({exc})"}
        print(f"quality: skipped: {res['quality']['skipped']}", file=sys.stderr)
        return
    from dmlfe.readers.synthetic_xmc import corpus_files

    fns = {"KNNLabelVote": KNNLabelVote, "precision_at_k": precision_at_k,
           "ndcg_at_k": ndcg_at_k, "psprecision_at_k": psprecision_at_k, "top_k": top_k}
    q = max(qs)
    dims = sorted({int(v) for v in args.quality_dims.split(",") if v.strip()}) \
        if args.quality_dims else [args.dim]
    rec: dict[str, Any] = {"q": q, "dims": dims, "neighbours": 10, "rows": [],
                           "steps": []}
    res["quality"] = rec
    gen = generate(args.docs, [q], args)
    rec["steps"].append(gen)
    if gen["status"] not in ("ok", "reused"):
        return
    store = WORK / "stores" / f"{corpus_dir(args.docs, args).name}-q{q}.zarr"
    if not store.exists():
        store, ing = ingest(args.docs, q, args)
        rec["steps"].append(ing)
    train_file, test_file = corpus_files(corpus_dir(args.docs, args), q)
    X_train, Y_train = _xmc_matrices(train_file)
    X_test, Y_test = _xmc_matrices(test_file)
    # propensities from the training labels: N_l documents with label l of N
    counts = np.asarray((Y_train > 0).sum(axis=0)).ravel()
    prop = label_propensities(counts, int(Y_train.shape[0]))
    for dim in dims:
        for method in ["pca", *[m for m in method_list(args.methods) if m != "pca"]]:
            rec["rows"].append(_quality_row(store, method, q, dim, args, rec["steps"],
                                            (Y_train, Y_test, prop, fns)))
    if args.no_reference:
        return
    rec["rows"].append({"method": "none", **_vote_row("raw", X_train, Y_train, X_test,
                                                       Y_test, prop, fns)})
    if args.no_napkinxc:
        return
    rec["rows"].append({"method": "napkinxc", **_napkinxc_row(X_train, Y_train, X_test,
                                                              Y_test, prop, fns)})


def part_plot(res: dict[str, Any], json_path: Path, copy: Path | None) -> None:
    """Seconds against q, log-log, one line a method (the fits that finished; an x for
    a fit stopped or failed, at the seconds it ran)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweep = res.get("sweep")
    if sweep is None:
        if not json_path.exists():
            print(f"plot: no sweep in this run and no {json_path}", file=sys.stderr)
            return
        sweep = json.loads(json_path.read_text()).get("sweep")
    if not sweep or not sweep.get("rows"):
        print("plot: the sweep has no fits to plot", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for method in dict.fromkeys(r["method"] for r in sweep["rows"]):
        pts = sorted((r["q"], r["seconds"]) for r in sweep["rows"]
                     if r["method"] == method and r["status"] == "ok")
        stopped = [(r["q"], r["seconds"]) for r in sweep["rows"]
                   if r["method"] == method and r["status"] != "ok"]
        line = ax.plot(*zip(*pts, strict=True), marker="o", label=method) if pts else None
        if stopped:  # an x where a fit was stopped or failed, at the time it took
            ax.plot(*zip(*stopped, strict=True), "x", markersize=9,
                    color=line[0].get_color() if line else None,
                    label=None if line else f"{method} (stopped)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("labels q")
    ax.set_ylabel("fit seconds")
    ax.set_title(f"dmlfe fit, {sweep['n_docs']:,} documents, d = {sweep['dim']}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = OUT / "labels-sweep.png"
    fig.savefig(out, dpi=120)
    plt.close(fig)
    res["plot"] = {"png": str(out)}
    if copy is not None:
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out, copy)
        res["plot"]["copy"] = str(copy)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="sweep,plot",
                    help="comma list of sweep, million, quality, plot (default sweep,plot)")
    ap.add_argument("--docs", type=int, default=100_000, help="documents of the sweep")
    ap.add_argument("--labels", default="100,1000,10000,30000", help="label counts q")
    ap.add_argument("--fine-labels", type=int, default=30000)
    ap.add_argument("--features", type=int, default=2**20)
    ap.add_argument("--methods", default=DEFAULT_METHODS,
                    help=f"comma list, or all (supervised methods); default {DEFAULT_METHODS}")
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--fit-timeout", type=float, default=300.0, help="seconds a sweep fit")
    ap.add_argument("--step-timeout", type=float, default=3600.0,
                    help="seconds for the other steps (generate, ingest, million, quality)")
    ap.add_argument("--mem-limit-gib", type=float, default=8.0,
                    help="stop a step whose process tree holds more (default 8)")
    ap.add_argument("--million-docs", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--label-share", type=float, default=0.4,
                    help="the corpus's share of label words among a document's words "
                    "(dmlfe.readers.synthetic_xmc; default 0.4)")
    ap.add_argument("--regenerate", action="store_true", help="write the corpus again")
    ap.add_argument("--no-reference", action="store_true",
                    help="sweep: no TruncatedSVD; quality: no raw-feature vote or napkinXC")
    ap.add_argument("--no-napkinxc", action="store_true",
                    help="quality: the raw-feature vote without napkinXC's PLT")
    ap.add_argument("--quality-dims", default="",
                    help="quality: comma list of embedding sizes d (each method and PCA at "
                    "each; default --dim)")
    ap.add_argument("--warm-cache", action="store_true",
                    help="keep the statistics the fits cache beside a store (default: "
                    "removed before each fit, so every fit is timed cold)")
    ap.add_argument("--json", type=Path, default=OUT / "labels.json",
                    help="plot: the JSON to read when this run has no sweep")
    ap.add_argument("--plot-copy", type=Path, default=None,
                    help="also copy the PNG here (e.g. docs/_static/labels-sweep.png)")
    args = ap.parse_args()
    args.mem_limit_mib = args.mem_limit_gib * 1024
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(parts) - {"sweep", "million", "quality", "plot"}
    if unknown:
        ap.error(f"--parts: unknown part(s) {sorted(unknown)}")
    qs = sorted(int(v) for v in args.labels.split(",") if v.strip())
    if not qs or max(qs) > args.fine_labels:
        ap.error(f"--labels: give label counts of at most --fine-labels ({args.fine_labels})")
    WORK.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python":
                                       platform.python_version(),
                                       "load_avg_start": os.getloadavg()},
                           "parts": parts, "targets": TARGETS}
    if "sweep" in parts:
        part_sweep(args, qs, res)
    if "million" in parts:
        part_million(args, res)
    if "quality" in parts:
        part_quality(args, qs, res)
    if "plot" in parts:
        part_plot(res, args.json, args.plot_copy)
    res["machine"]["load_avg_end"] = os.getloadavg()
    # a run without the sweep keeps the sweep's labels.json (the plot reads it)
    emit(res, "labels" if "sweep" in parts else "labels-" + "-".join(parts))


if __name__ == "__main__":
    main()

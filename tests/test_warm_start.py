"""Issue 34, the matrix-free route's warm start: a refit after a 1 % append starts from
the Ritz vectors the fit before the append saved beside the store, with their scatter
image X^T X V (the appended rows' part added: no pass over X for the start), and takes at
most half the passes over X of a fresh fit, to the same accuracy; ``warm_start=True``
starts a fit from the previous ``components_``; ``randomized_eigsh(v0=, av0=)`` itself.

References: eigenvalues and eigenvectors of the dense matrix (numpy ``eigh`` of the
centred scatter, or the dense solver's fit on the same documents), and a fresh fit (no
cache) of the grown store.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import dmlfe
from dmlfe.estimators import make_estimator
from dmlfe.solvers import matrix_free
from dmlfe.solvers.matrix_free import ScatterOperator, randomized_eigsh
from dmlfe.stats.cache import arrays_digest, earlier_start, save_start, saved_start, stats_dir_for
from dmlfe.store import open_store

WORDS = [f"w{i:03d}" for i in range(400)]
LABELS = ["alpha", "beta", "gamma", "delta"]
APPEND = {"id_field": "id", "split_field": "split"}
#: documents before the append, and the 1 % appended
N_FIRST, N_NEW = 1500, 15
K = 6
TOL = 1e-5


def _docs(seed: int, n: int, start: int) -> list[dict]:
    """Each document mostly about one of 16 topics (its own band of 20 words), topic j
    drawn with odds 0.75^j, the rest Zipf-distributed background words: a covariance
    spectrum that decays geometrically above a noise floor. A topic's label is
    ``LABELS[j % 4]`` (plus a random one at times)."""
    rng = np.random.default_rng(seed)
    topics = 0.75 ** np.arange(16)
    topics /= topics.sum()
    background = 1.0 / np.arange(1, len(WORDS) + 1)
    background /= background.sum()
    out = []
    for k in range(n):
        t = int(rng.choice(topics.size, p=topics))
        size = int(rng.integers(40, 80))
        own = rng.choice(WORDS[20 * t:20 * t + 20], size=size // 2)
        words = np.r_[own, rng.choice(WORDS, size=size - size // 2, p=background)]
        labs = {LABELS[t % 4]} | ({str(rng.choice(LABELS))} if rng.uniform() < 0.3 else set())
        out.append({"id": f"d{start + k}", "text": " ".join(words), "labels": sorted(labs),
                    "split": "train"})
    return out


def _write(path: Path, docs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, Path]:
    """(store, new-docs file): the store holds the first documents, in six chunks, and is
    to be appended to from the file."""
    first, more = _docs(1, N_FIRST, 0), _docs(2, N_NEW, N_FIRST)
    opts = dict(chunk_rows=256, vectorizer="hashing", n_features=256, **APPEND)
    grown = dmlfe.ingest(_write(tmp_path / "a.jsonl", first), "jsonl",
                         tmp_path / "grown.zarr", **opts)
    return Path(grown), _write(tmp_path / "b.jsonl", more)


def _aligned(U: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """U's columns with the signs that match ``ref``'s (an invariant of the subspace
    pair, not of either sign rule)."""
    return U * np.where(np.sum(U * ref, axis=0) < 0, -1.0, 1.0)


def _assert_accurate(fit, ref_vals: np.ndarray, ref_vecs: np.ndarray, what: str) -> None:
    """Eigenvalues within tol * theta_1 of the dense ones (a Ritz value is within its
    residual of an eigenvalue) and components within 2 tol theta_1 / gap_i of the
    dense eigenvectors (sin of the angle <= residual / gap)."""
    np.testing.assert_array_less(np.abs(fit.eigenvalues_[:K] - ref_vals[:K]),
                                 TOL * ref_vals[0], err_msg=what)
    ref = ref_vecs[:, :K]
    errors = np.linalg.norm(_aligned(fit.components_[:K].T, ref) - ref, axis=0)
    np.testing.assert_array_less(errors, _vector_bounds(ref_vals), err_msg=what)


def _vector_bounds(ref_vals: np.ndarray) -> np.ndarray:
    """||u_i - v_i|| allowed for component i: 2 tol theta_1 / gap_i (the sine of the
    angle to the eigenvector is at most the residual over the gap to the other
    eigenvalues)."""
    gaps = np.minimum(np.abs(np.diff(ref_vals[:K + 1])),
                      np.r_[np.inf, np.abs(np.diff(ref_vals[:K]))])
    return 2 * TOL * ref_vals[0] / gaps


def _dense_reference(method: str, store: Path) -> tuple[np.ndarray, np.ndarray]:
    """(eigenvalues, eigenvectors D x (K + 1)) of A by a dense eigh: numpy on the centred
    scatter for PCA, the dense solver's fit for MVMD (its A holds the label part)."""
    if method == "pca":
        X = open_store(store).X.compute().toarray()
        Xc = X - X.mean(axis=0)
        w, V = np.linalg.eigh(Xc.T @ Xc)  # PCA's eigenvalues: the scatter's
        return w[::-1][:K + 1], V[:, ::-1][:, :K + 1]
    dense = make_estimator(method, n_components=K + 1, route="feature", solver="dense",
                           cache=False).fit(str(store))
    return dense.eigenvalues_[:K + 1], dense.components_[:K + 1].T


@pytest.mark.parametrize("krylov", [True, False], ids=["block-krylov", "subspace"])
def test_refit_after_append_starts_from_the_saved_block(corpus, cluster_client, monkeypatch,
                                                        krylov) -> None:
    """PCA and MVMD on the matrix-free route, on a LocalCluster: fit, append 1 %, refit.
    The refit starts from the block the first fit saved, makes at most half the passes
    of a fresh fit on the grown store, and is as accurate."""
    grown, new = corpus
    if not krylov:  # block subspace iteration, what D = 2^20 with many components takes
        monkeypatch.setattr(matrix_free, "KRYLOV_MEMORY", 0)
    methods = ("pca", "mvmd")

    def est(method: str, **kw):
        return make_estimator(method, n_components=K, route="feature", solver="randomized",
                              tol=TOL, client=cluster_client, **kw)

    for method in methods:
        first = est(method).fit(str(grown))
        assert first.solver_info_ is None or "warm_start" not in first.solver_info_
    _check_saved_images(grown, n_blocks=len(methods))
    dmlfe.append(grown, new, **APPEND)
    X = open_store(grown).X.compute()
    for method in methods:
        refit = est(method).fit(str(grown))
        # a fresh fit of the grown store: its statistics and solve from all rows
        fresh = est(method, cache=False).fit(str(grown))
        assert refit.n_samples_ == fresh.n_samples_ == N_FIRST + N_NEW
        assert refit.solver_ == fresh.solver_ == ("block-krylov" if krylov
                                                  else "randomized-subspace")
        note = refit.solver_info_["warm_start"]
        assert note.startswith("components of store version") and \
            f"[0, {N_FIRST})" in note, note
        assert f"that of the {N_NEW} appended: no pass over X" in note, note
        assert fresh.solver_info_ is None or "warm_start" not in fresh.solver_info_
        assert refit.converged_ and fresh.converged_
        # the count the issue sets: at most half a fresh fit's passes over X. The fresh
        # fit's statistics are one; the refit's read the appended rows only (or come from
        # the cache, after the first method's refit), as does its start's image, so every
        # pass it counts is one of the solver's over all rows
        assert not fresh.stats_from_cache_
        assert refit.n_passes_ <= 0.5 * fresh.n_passes_, (method, refit.n_passes_,
                                                          fresh.n_passes_)
        # a matrix-free solve reads every row, warm or not
        assert refit.rows_read_ == fresh.rows_read_ == N_FIRST + N_NEW
        vals, vecs = _dense_reference(method, grown)
        for fit, what in ((refit, "warm refit"), (fresh, "fresh fit")):
            _assert_accurate(fit, vals, vecs, f"{method} {what}")
        # embeddings: each within ||x - mean|| times both fits' component bounds
        Zf = fresh.transform(X)
        Zr = _aligned(refit.transform(X), Zf)
        Xd = X.toarray()
        rows = np.linalg.norm(Xd - Xd.mean(axis=0), axis=1)
        assert np.all(np.abs(Zr - Zf) <= rows[:, None] * 2 * _vector_bounds(vals)[None, :])


def _check_saved_images(store: Path, n_blocks: int) -> None:
    """Each start block saved beside the store has its image X^T X block beside it (by
    the block's digest), equal to numpy's product over the store's rows."""
    X = open_store(store).X.compute().toarray()
    folder = stats_dir_for(store)
    blocks = {arrays_digest({"start": np.load(p)}): np.load(p)
              for p in folder.glob("*.start.npy")}
    images = [(json.loads(p.with_suffix(".json").read_text())["params"]["block"], np.load(p))
              for p in folder.glob("*.startimage.npy")]
    assert len(blocks) == len(images) == n_blocks
    for digest, image in images:
        block = blocks[digest]
        assert image.shape == block.shape == (X.shape[1], K + matrix_free.N_OVERSAMPLES)
        np.testing.assert_allclose(image, X.T @ (X @ block), rtol=1e-10,
                                   atol=1e-12 * np.abs(image).max())


def test_randomized_eigsh_warm_start_is_as_accurate(monkeypatch) -> None:
    """v0 = the Ritz block of a fit on 99 % of the rows: fewer passes, same residual rule,
    eigenvalues as close to numpy's eigh as a random start's."""
    rng = np.random.default_rng(3)
    D = 300

    def rows(m: int) -> sp.csr_matrix:
        Z = rng.standard_normal((m, D)) * 0.95 ** np.arange(D)
        return sp.csr_matrix(np.where(rng.uniform(size=Z.shape) < 0.4, Z, 0.0))

    X = rows(2000)
    Xn = sp.vstack([X, rows(20)]).tocsr()
    Xc = Xn.toarray() - Xn.toarray().mean(axis=0)
    ref = np.linalg.eigvalsh(Xc.T @ Xc)[::-1][:K]
    for memory in (matrix_free.KRYLOV_MEMORY, 0):
        monkeypatch.setattr(matrix_free, "KRYLOV_MEMORY", memory)
        before = randomized_eigsh(ScatterOperator(X), K, tol=TOL, keep_ritz=True)
        assert before.ritz.shape == (D, K + matrix_free.N_OVERSAMPLES)
        fresh = randomized_eigsh(ScatterOperator(Xn), K, tol=TOL)
        warm = randomized_eigsh(ScatterOperator(Xn), K, tol=TOL, v0=before.ritz)
        assert warm.info["warm_start"] and not fresh.info["warm_start"]
        assert warm.converged and fresh.converged
        assert warm.n_passes < fresh.n_passes
        for res in (warm, fresh):
            assert res.residuals.max() <= TOL * res.eigenvalues[0]
            np.testing.assert_array_less(np.abs(res.eigenvalues - ref), TOL * ref[0])
        # fewer columns than the block: random ones fill it up
        few = randomized_eigsh(ScatterOperator(Xn), K, tol=TOL, v0=before.components[:, :2])
        assert few.converged and np.all(np.abs(few.eigenvalues - ref) < TOL * ref[0])

        # the start's image from the saved scatter part plus the new rows' part: the same
        # iteration as from v0 alone, one pass fewer
        V = before.ritz
        old = ScatterOperator(X)
        old.known_sums(X.shape[0], np.asarray(X.sum(axis=0)).ravel(),
                       float(X.multiply(X).sum()))
        scatter = old.scatter_part(V, before.ritz_image)
        Xd = X.toarray()
        np.testing.assert_allclose(scatter, Xd.T @ (Xd @ V), rtol=1e-10,
                                   atol=1e-12 * np.abs(scatter).max())
        new = Xn[X.shape[0]:]
        op = ScatterOperator(Xn)
        op.known_sums(Xn.shape[0], np.asarray(Xn.sum(axis=0)).ravel(),
                      float(Xn.multiply(Xn).sum()))
        av0 = op.finish(V, scatter + new.T @ (new @ V))
        np.testing.assert_allclose(av0, (Xc.T @ (Xc @ V)), rtol=1e-10,
                                   atol=1e-12 * np.abs(av0).max())
        imaged = randomized_eigsh(op, K, tol=TOL, v0=V, av0=av0)
        assert imaged.info["start_image"] and not warm.info["start_image"]
        assert imaged.converged and imaged.n_passes == warm.n_passes - 1
        assert imaged.residuals.max() <= TOL * imaged.eigenvalues[0]
        np.testing.assert_array_less(np.abs(imaged.eigenvalues - ref), TOL * ref[0])
        # narrower than the block: random columns, whose image is unknown
        assert not randomized_eigsh(ScatterOperator(Xn), K, tol=TOL, v0=V[:, :3],
                                    av0=av0[:, :3]).info["start_image"]
    with pytest.raises(ValueError, match="v0 has 5 rows"):
        randomized_eigsh(ScatterOperator(Xn), K, v0=np.ones((5, 2)))


def test_estimator_warm_start_in_memory() -> None:
    """warm_start=True: the second fit starts from the first one's last Ritz vectors
    (kept with it), or from its components_ when the first fit did not keep them; it says
    so and converges to the same accuracy; warm_start=False (default) starts afresh."""
    rng = np.random.default_rng(4)
    D = 300

    def rows(m: int) -> tuple[sp.csr_matrix, np.ndarray]:
        Z = rng.standard_normal((m, D)) * 0.95 ** np.arange(D)
        return (sp.csr_matrix(np.where(rng.uniform(size=Z.shape) < 0.4, Z, 0.0)),
                (rng.uniform(size=(m, 3)) < 0.4).astype(np.uint8))

    X, Y = rows(2000)
    Xa, Ya = rows(20)
    X2, Y2 = sp.vstack([X, Xa]).tocsr(), np.vstack([Y, Ya])
    for method in ("pca", "mvmd"):
        kw = dict(n_components=K, route="feature", solver="randomized", tol=TOL)
        fresh = make_estimator(method, **kw).fit(X2, Y2)
        assert fresh.solver_info_ is None
        dense = make_estimator(method, n_components=K + 1, route="feature",
                               solver="dense").fit(X2, Y2)
        vals, vecs = dense.eigenvalues_, dense.components_.T
        _assert_accurate(fresh, vals, vecs, f"{method} fresh")

        est = make_estimator(method, warm_start=True, **kw).fit(X, Y)
        assert est.solver_info_ is None  # nothing to start from yet
        est.fit(X2, Y2)
        assert est.solver_info_["warm_start"] == "the last Ritz vectors of the previous " \
            f"fit ({K + matrix_free.N_OVERSAMPLES} vectors)"
        # the solvers' passes (each fit also makes its statistics pass over all rows)
        assert est.n_passes_ - 1 <= 0.5 * (fresh.n_passes_ - 1), (method, est.n_passes_,
                                                                  fresh.n_passes_)
        _assert_accurate(est, vals, vecs, f"{method} warm_start=True")

        # a first fit without warm_start keeps no Ritz vectors: components_ start
        est = make_estimator(method, **kw).fit(X, Y)
        est.set_params(warm_start=True).fit(X2, Y2)
        assert est.solver_info_["warm_start"] == f"components_ of the previous fit ({K} " \
            "components)"
        assert est.n_passes_ < fresh.n_passes_
        _assert_accurate(est, vals, vecs, f"{method} warm_start from components_")

        # other features: no start from vectors of another D
        other = make_estimator(method, warm_start=True, **kw).fit(X, Y)
        other.fit(X2[:, :200], Y2)
        assert other.solver_info_ is None


def test_saved_start_keeps_the_image_with_its_block(corpus) -> None:
    """save_start saves the block's image beside it; after an append saved_start returns
    both and the appended rows; a block saved again without an image is never paired with
    the earlier block's image."""
    grown, new = corpus
    store = open_store(grown)
    method = {"method": "test", "params": {}, "route": "feature", "centred": True,
              "n_features": 256}
    rng = np.random.default_rng(5)
    block, image = rng.standard_normal((256, 4)), rng.standard_normal((256, 4))
    save_start(store, method, block, image=image)
    dmlfe.append(grown, new, **APPEND)
    saved = saved_start(open_store(grown), method)
    np.testing.assert_array_equal(saved.block, block)
    np.testing.assert_array_equal(saved.image, image)
    assert saved.added.n_docs == N_NEW and f"[0, {N_FIRST})" in saved.note
    assert earlier_start(open_store(grown), method)[1] == saved.note

    save_start(store, method, block[:, ::-1].copy())  # the same version, another block
    again = saved_start(open_store(grown), method)
    np.testing.assert_array_equal(again.block, block[:, ::-1])
    assert again.image is None and again.added is None
    assert not list(stats_dir_for(grown).glob("*.startimage.*"))  # the old one went with it

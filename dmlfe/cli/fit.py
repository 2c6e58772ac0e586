"""``dmlfe fit``: a projection learnt from a store and saved as a model."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dmlfe.cli.outputs import _check_out, _split_text, _unrecorded_warning
from dmlfe.cluster import client_from_args, positive_int
from dmlfe.embed import training_classifier
from dmlfe.estimators import MultiLabelProjection, make_estimator
from dmlfe.fit.params import COMMON, SELECTION_CHOICES
from dmlfe.io.classifier import PREDICT_CLASSIFIERS, save_classifier
from dmlfe.io.model import check_model_target
from dmlfe.methods.registry import all_methods, method_choices, resolve_method
from dmlfe.params import Param, bounds_of, flag_options
from dmlfe.pipeline.config import ClassifierSpec
from dmlfe.pipeline.runner import make_classifier
from dmlfe.relation.prototypes import AUTO_SELECTION, MAX_AUTO_PROTOTYPES
from dmlfe.relation.similarities import similarity_choices
from dmlfe.solvers.dimension import check_n_components
from dmlfe.store import open_store

#: Relation-route estimator parameter -> its ``dmlfe fit`` flag.
_RELATION_FLAGS = {
    "route": "--route", "n_prototypes": "--prototypes",
    "prototype_selection": "--prototype-selection", "similarity": "--similarity",
    "tau": "--tau", "n_neighbors": "--n-neighbors", "random_state": "--random-state",
    "knn_search": "--knn-search",
}


def method_flags() -> dict[str, tuple[Param, list[str]]]:
    """Method parameter -> (its declaration, the methods that take it), for every
    parameter of a registered method that declares a command-line flag."""
    out: dict[str, tuple[Param, list[str]]] = {}
    for spec in all_methods().values():
        for p in spec.parameters:
            if p.flag is not None:
                out.setdefault(p.name, (p, []))[1].append(spec.name)
    return out


def _common(name: str) -> Param:
    """The common estimator parameter ``name`` (:data:`dmlfe.fit.params.COMMON`)."""
    return next(p for p in COMMON if p.name == name)


def _choices(name: str) -> list[Any]:
    """``dmlfe fit``'s choices for the common parameter ``name``, read from its
    constraint."""
    return flag_options(_common(name))["choices"]


def _variant_families() -> list[str]:
    return list(dict.fromkeys(s.family for s in all_methods().values() if s.variant))


def _n_components(kind: type) -> Any:
    """argparse type of --dim (int) and --threshold (float): the one n_components rule
    (:func:`dmlfe.solvers.dimension.check_n_components`), told in the flag's terms."""
    expected = ("a number of components, a whole number of 1 or more" if kind is int else
                "a share of the eigenvalue sum, a number above 0 and at most 1 (e.g. 0.999)")

    def parse(s: str) -> int | float:
        try:
            return check_n_components(kind(s))
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected {expected}; got {s!r}") from None

    return parse


def _seed(s: str) -> int:
    """argparse type of --random-state: the seeds ``random_state``'s constraint takes."""
    check = _common("random_state").check
    try:
        return check("random_state", int(s))
    except (TypeError, ValueError):
        lo, hi = bounds_of(check)
        raise argparse.ArgumentTypeError(f"expected a seed from {lo} to {hi}, got {s!r}") from None


def _fit_estimator(args: argparse.Namespace) -> MultiLabelProjection:
    """The estimator ``dmlfe fit`` asked for; ValueError names a bad method or option."""
    method = args.method.lower().replace("-", "_")
    choices = method_choices()
    if method not in choices:
        raise ValueError(f"unknown method {args.method!r}; choose one of {', '.join(choices)}")
    if args.variant is not None:
        families = _variant_families()
        spec = resolve_method(method)
        if spec.variant is None:
            others = f" (or {', '.join(families[1:])})" if len(families) > 1 else ""
            raise ValueError(f"--variant applies to --method {families[0]} only{others}, not "
                             f"{args.method}")
        if method != spec.family and spec.variant != args.variant:
            raise ValueError(f"--variant {args.variant} contradicts --method {args.method}")
        method = spec.family
    kw: dict[str, Any] = {"solver": args.solver, "split": args.split,
                          "progress": not args.quiet}
    if args.variant is not None:
        kw["variant"] = args.variant
    if args.dim is not None:
        kw["n_components"] = args.dim
    elif args.threshold is not None:
        kw["n_components"] = args.threshold
    if args.max_dense_features is not None:
        kw["max_dense_features"] = args.max_dense_features
    for name in ("max_components", "threshold_memory", "max_dual_samples", "max_gather_bytes",
                 "n_oversamples", "n_iter", "tol", "max_passes", "components_dtype"):
        if getattr(args, name, None) is not None:
            kw[name] = getattr(args, name)
    for param in _RELATION_FLAGS:
        value = getattr(args, param, None)
        if value is not None:
            kw[param] = value
    est = make_estimator(method, **kw)
    if "n_components" not in kw and isinstance(est.n_components, int):
        # a method whose d no threshold can choose (OLPP minimises: no positive
        # eigenvalue to take a share of) has a fixed default, which is no rule for data
        raise ValueError(f"--method {args.method} needs --dim N: it minimises its objective, "
                         "whose eigenvalues are not positive, so --threshold cannot choose "
                         "d; compare it with other methods at the same d, as the MOPE paper "
                         "does")
    accepted = est._spec().params
    for name, (param, _) in method_flags().items():
        value = getattr(args, name)
        if value is None:
            continue
        if name not in accepted:
            opts = ", ".join(p.option for p in est._spec().parameters if p.flag is not None)
            raise ValueError(f"{param.option} does not apply to method {est._method}; "
                             + (f"its options: {opts}" if opts else "it takes no method options"))
        est.set_params(**{name: value})
    return est



def _classifier(name: str) -> Any:
    return make_classifier(ClassifierSpec(name, name, {}))


def cmd_fit(args: argparse.Namespace) -> int:
    # bad methods or options, a missing store, an unknown split or an existing output
    # fail here, before a cluster is started
    est = _fit_estimator(args)
    store = open_store(args.store)
    if args.split is not None:
        store.subset(args.split)
    _check_out(args.out, args.overwrite, "a model (a folder)")
    # with --overwrite too: a path that is not a model is refused now, not after the fit
    check_model_target(args.out, args.overwrite)
    clf = None
    with client_from_args(args) as client:
        est.set_params(client=client)
        try:
            est.fit(args.store)
        finally:
            est.set_params(client=None)
        if args.classifier is not None:
            clf = training_classifier(est, _classifier(args.classifier))
    out = est.save(args.out, overwrite=args.overwrite)
    if clf is not None:
        save_classifier(clf, out, name=args.classifier)
    split = f" (split {_split_text(args.split)})" if args.split else ""
    how = ("fixed" if isinstance(est.n_components, int)
           else f"eigenvalue-sum threshold {est.n_components}")
    top = ", ".join(f"{w:.6g}" for w in est.eigenvalues_[:10])
    more = f" ... ({est.eigenvalues_.size} computed)" if est.eigenvalues_.size > 10 else ""
    print(f"method: {est._method} ({type(est).__name__}"
          + "".join(f", {k}={v}" for k, v in est.method_params_.items()
                    if not isinstance(v, list)) + ")")
    print(f"trained on: {args.store}{split}: {est.n_samples_} documents x "
          f"{est.n_features_in_} features")
    print(f"d: {est.n_components_} ({how})")
    print(f"route: {est.route_} ({est.route_reason_})")
    if est.relation_ is not None:
        rel = est.relation_
        tau = "" if rel["tau"] is None else f", tau={rel['tau']:.6g}"
        print(f"relation features: p = {rel['n_prototypes']} prototypes "
              f"({rel['prototype_selection']}), similarity {rel['similarity']}{tau}")
    print(f"solver: {est.solver_}")
    print(f"passes over the data: {est.n_passes_}")
    if est.regularization_:
        print(f"constraint regularised: + {est.regularization_:.3g} * I")
    print(f"top eigenvalues: {top}{more}")
    if clf is not None:
        print(f"classifier: {args.classifier} on the training embeddings, saved with the model")
    print(f"model: {Path(out).resolve()}")
    _unrecorded_warning(store)
    return 0


def add_fit_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``dmlfe fit`` to the ``dmlfe`` parser's subcommands."""
    pf = sub.add_parser("fit", help="learn a projection from a store and save the model",
                        epilog="example: dmlfe fit r10.zarr --method mddm_f --dim 9 --split "
                        "train --out mddm-model")
    pf.add_argument("store", help="the training store")
    pf.add_argument("--method", required=True, metavar="NAME",
                    help=f"one of {', '.join(method_choices())} (a family name such as mddm "
                    "= its first variant)")
    d = pf.add_mutually_exclusive_group()
    d.add_argument("--dim", type=_n_components(int), default=None, help="number of components d")
    d.add_argument("--threshold", type=_n_components(float), default=None,
                   help="smallest d whose eigenvalues hold this share of the total "
                   "(default 0.999)")
    mo = pf.add_argument_group("method options (default: the method's own)")
    for name, (param, methods) in method_flags().items():
        options = {k: v for k, v in flag_options(param).items() if k != "help"}
        text = ", ".join(methods) + (f": {param.flag['help']}" if "help" in param.flag else "")
        mo.add_argument(param.option, dest=name, default=None, help=text, **options)
    families = _variant_families()
    variants = list(dict.fromkeys(s.variant for s in all_methods().values() if s.variant))
    mo.add_argument("--variant", choices=variants, default=None, help=", ".join(families))
    ro = pf.add_argument_group(
        "route (relation = similarities to prototype documents, a p x p problem at any D)")
    ro.add_argument("--route", choices=_choices("route"), default=None,
                    help="default: auto (kmddm: relation); above --max-dense-features auto "
                    "picks dual (exact, through the n x n Gram) when n <= "
                    "--max-dual-samples, else matrix-free (PCA, LSI, MVMD) or relation")
    ro.add_argument("--prototypes", dest="n_prototypes", type=positive_int, default=None,
                    help=f"number of prototypes p (default: min(n, {MAX_AUTO_PROTOTYPES:,}) of "
                    "the n training documents)")
    # the Python parameter also takes row positions, which the flag does not
    ro.add_argument("--prototype-selection", choices=list(SELECTION_CHOICES), default=None,
                    help=f"how prototypes are chosen (default auto: all when p = n, else "
                    f"{AUTO_SELECTION}; 'all' without --prototypes: every training document)")
    ro.add_argument("--similarity", default=None,
                    choices=similarity_choices("relation", aliases=True),
                    help="relation similarity (default linear; kmddm: gaussian)")
    ro.add_argument("--tau", type=float, default=None,
                    help="gaussian / inverse_normalized_distance width (gaussian default: "
                    "median heuristic)")
    ro.add_argument("--n-neighbors", type=positive_int, default=None,
                    help="local_scaling: K-th nearest neighbour (default 7)")
    ro.add_argument("--knn-search", choices=_choices("knn_search"), default=None,
                    help="graph methods: exact or approximate (NN-descent, needs dmlfe[ann]) "
                    "K-NN search (default auto: exact up to 100,000 documents)")
    lo, hi = bounds_of(_common("random_state").check)
    ro.add_argument("--random-state", type=_seed, default=None,
                    help=f"seed of prototype selection and randomized solvers, {lo} to {hi} "
                    "(default 0)")
    pf.add_argument("--solver", choices=_choices("solver"), default="auto",
                    help="eigensolver (default auto: dense when D is small "
                    "enough, else matrix-free)")
    pf.add_argument("--max-dense-features", type=positive_int, default=None,
                    help="largest D for which a D x D matrix is formed (default 20000)")
    pf.add_argument("--max-components", type=positive_int, default=None,
                    help="a threshold: most eigenpairs computed (default: as many as it "
                    "needs, within --threshold-memory)")
    pf.add_argument("--threshold-memory", type=positive_int, default=None,
                    help="a threshold on the dual, n-space or matrix-free route: bytes of "
                    "driver memory its eigenpairs may take (default 2**32)")
    pf.add_argument("--max-dual-samples", type=positive_int, default=None,
                    help="largest n for the dual route (an n x n Gram; default 12000)")
    pf.add_argument("--max-gather-bytes", type=int, default=None,
                    help="dual route, and relation route with a dense p x p solve, on a "
                         "store: read X to the driver when its sparse arrays are at most "
                         "this size and the cluster has no more threads than the driver "
                         "(default 2**30; 0: never)")
    pf.add_argument("--n-oversamples", type=int, default=None,
                    help="matrix-free solver: extra block columns (default 10)")
    pf.add_argument("--n-iter", type=positive_int, default=None,
                    help="matrix-free solver: a fixed number of passes (default: until --tol)")
    pf.add_argument("--tol", type=float, default=None,
                    help="matrix-free solver: relative residual to stop at (default 1e-5)")
    pf.add_argument("--max-passes", type=positive_int, default=None,
                    help="matrix-free solver: most passes (default 30)")
    pf.add_argument("--components-dtype", choices=_choices("components_dtype"), default=None,
                    help="storage of the saved components (d x D; default float64: 0.8 GB "
                    "per 100 components at D = 2^20; float32: half that, and float32 "
                    "embeddings). The solve is float64 either way")
    pf.add_argument("--out", required=True, help="the model directory to write")
    pf.add_argument("--classifier", choices=PREDICT_CLASSIFIERS, default=None,
                    help="also fit this classifier on the training embeddings and save it "
                    "with the model, for dmlfe predict (default: none)")
    pf.set_defaults(func=cmd_fit)
    return pf

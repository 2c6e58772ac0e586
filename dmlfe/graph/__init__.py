"""Proximity-graph methods of the MOPE paper (mope sections 2.1.1, 3.2-3.4).

Their objective matrix A is n x n (documents x documents), built from a K-nearest-
neighbour graph over the documents and from label similarities, so they take a route of
their own beside the statistics pass (``MethodSpec.needs_graph``):

* :mod:`dmlfe.graph.knn` -- the K-NN graph (exact and blockwise up to 10^5 documents,
  NN-descent above, with its recall measured), its weights W (eq. 7-9, cosine) and its
  cache beside the store (an exact graph extended by the rows of an append);
* :mod:`dmlfe.graph.label_similarity` -- the label proximity G of schemes 1-3
  (eq. 34-42) on the graph's sparsity pattern;
* :mod:`dmlfe.graph.combine` -- Psi(W, G) (eq. 43), G o W, beta G + (1 - beta) W;
* :mod:`dmlfe.graph.products` -- A = sparse + low-rank and the one pass that reduces
  it to X^T A X (R^T A R on the relation route);
* :mod:`dmlfe.graph.methods` -- LPP, OLPP, MOPE, MESD, SSMOPE, HSL as (A, B);
* :mod:`dmlfe.fit.graph` -- the fit hop that :func:`dmlfe.fit.run.run_fit` calls.
"""

"""The relation-feature route (mope section 3.5): documents as similarities to prototypes.

At D = 10^6 no D x D matrix can exist. Representing each document by its
similarities R = sim(X, prototypes) to p prototype documents makes every method's
eigenproblem p x p (p <= n training documents). The pieces:

* :mod:`dmlfe.relation.prototypes` -- choosing the prototypes (all, uniform random,
  label-stratified, k-means++ seeding), deterministic from a seed and independent of
  the row chunking, and gathering their sparse rows;
* :mod:`dmlfe.relation.similarities` -- the similarity registry (mope section 2.1.1,
  eq. 7-9), shared with the graph methods' K-NN weights;
* :mod:`dmlfe.relation.kernels` -- the similarities of a block of relation features;
* :mod:`dmlfe.relation.features` -- :class:`RelationMap`, the picklable ``block_fn``
  that turns a CSR row block into its dense block of relation features, and
  :func:`build_relation_map`.
"""

from dmlfe.relation.features import RelationMap, build_relation_map, relation_block_rows, ship
from dmlfe.relation.kernels import SIMILARITIES
from dmlfe.relation.prototypes import SELECTIONS, gather_rows, select_prototypes
from dmlfe.relation.similarities import (
    SimilaritySpec,
    all_similarities,
    get_similarity,
    register_similarity,
)

__all__ = [
    "SELECTIONS", "SIMILARITIES", "RelationMap", "build_relation_map", "gather_rows",
    "relation_block_rows",
    "select_prototypes", "ship", "SimilaritySpec", "all_similarities", "get_similarity",
    "register_similarity",
]

"""The multi-label classifiers on embeddings, in one namespace.

:class:`MultiLabelRidge` (MVMD's baseline), :class:`MLkNN` (Zhang & Zhou 2007),
:class:`KNNLabelVote` (an exact nearest-neighbour label vote with sparse scores),
:class:`BinaryRelevance`, :class:`PerLabelFLDA` (MOPE's classifier) and :class:`PPML`
(penalised PLS-DA, Ma et al. 2014). Each has
``fit(Z, Y)`` with Y an n x q 0/1 matrix, ``predict`` (0/1 int8 matrix) and
``decision_function`` (n x q float scores for the ranking measures), and accepts dask
embeddings chunked by rows.
"""

from dmlfe.evaluation.binary_relevance import BinaryRelevance
from dmlfe.evaluation.knn_vote import KNNLabelVote
from dmlfe.evaluation.linear import MultiLabelRidge, PerLabelFLDA
from dmlfe.evaluation.mlknn import MLkNN
from dmlfe.evaluation.ppml import PPML

__all__ = ["PPML", "BinaryRelevance", "KNNLabelVote", "MLkNN", "MultiLabelRidge",
           "PerLabelFLDA"]

"""The files dmlfe writes besides its stores: saved models, their classifiers, embeddings.

=========================  ===============================================================
:mod:`dmlfe.io.schema`     the small schema engine (:class:`~dmlfe.io.schema.Key`,
                           :class:`~dmlfe.io.schema.ArraySpec`) the model format declares
                           its keys and arrays with
:mod:`dmlfe.io.model`      the saved-model format: its schema, save, read and restore
:mod:`dmlfe.io.classifier` a fitted classifier saved beside its model
:mod:`dmlfe.io.embeddings` the embeddings files: zarr (an AnnData) or parquet
=========================  ===============================================================

The AnnData skeleton that the embeddings share with the store (the ``obs``, ``obsm``,
``uns`` and ``var`` groups and their encodings) is written by :mod:`dmlfe.store.layout`.
:func:`dmlfe.load_model` (:mod:`dmlfe.model_io`) stays outside this package, above
:mod:`dmlfe.estimators`: it looks the estimator class up by name, and the estimators import
:mod:`dmlfe.io.model` to save; everything it does with the files is
:func:`dmlfe.io.model.restore_model`.
"""

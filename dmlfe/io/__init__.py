"""The files dmlfe writes besides its stores: saved models, their classifiers, embeddings.

=========================  ===============================================================
:mod:`dmlfe.io.schema`     the small schema engine (:class:`~dmlfe.io.schema.Key`,
                           :class:`~dmlfe.io.schema.ArraySpec`) the model format declares
                           its keys and arrays with
:mod:`dmlfe.io.model`      the saved-model format: its schema, save, read and restore
:mod:`dmlfe.io.loading`    :func:`~dmlfe.io.loading.load_model` (the estimator class by
                           name), :func:`~dmlfe.io.loading.check_compatible`,
                           :func:`~dmlfe.io.loading.text_pipeline`
:mod:`dmlfe.io.classifier` a fitted classifier saved beside its model
:mod:`dmlfe.io.embeddings` the embeddings files: zarr (an AnnData) or parquet
=========================  ===============================================================

The AnnData skeleton that the embeddings share with the store (the ``obs``, ``obsm``,
``uns`` and ``var`` groups and their encodings) is written by :mod:`dmlfe.store.layout`.
This package imports none of its modules itself: :mod:`dmlfe.estimators` imports
:mod:`dmlfe.io.model` to save, and :mod:`dmlfe.io.loading` imports the estimators.
"""

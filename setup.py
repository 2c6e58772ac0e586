"""Packaging beyond what pyproject.toml can say: the pipeline and cluster YAML files.

``pipelines/`` and ``cluster_configs/`` stay at the top of the source tree (the
pipelines' relative ``data_dir`` and the documentation name them there) and are
installed inside the package as ``dmlfe/pipelines`` and ``dmlfe/cluster_configs``, so
that ``dmlfe demo`` and ``--cluster local`` work from a non-editable install.
"""

from setuptools import find_packages, setup

DATA = {"dmlfe.pipelines": "pipelines", "dmlfe.cluster_configs": "cluster_configs"}

setup(
    packages=find_packages(include=["dmlfe", "dmlfe.*"]) + list(DATA),
    package_dir=DATA,
    package_data={name: ["*.yaml"] for name in DATA},
)

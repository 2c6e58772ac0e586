"""Batch pipelines: ``dmlfe run PIPELINE.yaml`` (ingest -> fit -> transform -> classify ->
metrics -> report), every stage cached under a key of its parameters and inputs."""

from dmlfe.pipeline.cli import add_run_parser, cmd_run
from dmlfe.pipeline.config import PipelineConfig, PipelineConfigError, load_config, parse_config
from dmlfe.pipeline.ranks import compare, critical_difference, friedman, q_alpha, rank_matrix
from dmlfe.pipeline.runner import RunResult, Stage, run_pipeline
from dmlfe.pipeline.splits import split_roles, stratified_split

__all__ = [
    "PipelineConfig", "PipelineConfigError", "RunResult", "Stage", "add_run_parser", "cmd_run",
    "compare", "critical_difference", "friedman", "load_config", "parse_config", "q_alpha",
    "rank_matrix", "run_pipeline", "split_roles", "stratified_split",
]

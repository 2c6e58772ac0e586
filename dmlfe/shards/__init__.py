"""Data kept on the workers between passes: slots (where parts live and their tasks run)
and X in tiles (:mod:`dmlfe.shards.tiles`)."""

from dmlfe.shards.slots import ShardLostError, Slots
from dmlfe.shards.tiles import TiledMatrix, tile_blocks, tile_matrix

__all__ = ["ShardLostError", "Slots", "TiledMatrix", "tile_blocks", "tile_matrix"]

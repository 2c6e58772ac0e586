"""The one way dmlfe reads a YAML file (cluster profiles, pipeline files).

YAML's anchors and aliases let a few hundred bytes stand for a structure of billions
of nodes (the "billion laughs" document): PyYAML's ``safe_load`` builds it with shared
references, and whatever then walks it (flattening dask settings, printing them, a
``deepcopy``) runs for minutes and fills the memory. :func:`read_yaml` refuses, with one
line naming the file, before anything is built:

* a file of more than :data:`MAX_YAML_BYTES` bytes;
* a document whose node count, counting every alias as a full copy of what it stands
  for, is above :data:`MAX_YAML_NODES`;
* an alias that refers to the node containing it (a recursive structure);
* collections nested more than :data:`MAX_YAML_DEPTH` deep (PyYAML's scanner slows
  down with the square of the depth, and its composer recurses once per level).

Anchors and aliases within those limits are read as usual.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

#: Largest YAML file dmlfe reads (bytes). dmlfe's own profiles and pipeline files are a
#: few kilobytes; the limit also bounds the time PyYAML's (pure Python) scanner spends.
MAX_YAML_BYTES = 256 * 1024

#: Most nodes (scalars, sequences, mappings) a YAML document may hold once every alias
#: is counted as a copy of the node it refers to.
MAX_YAML_NODES = 1_000_000

#: Deepest nesting of sequences and mappings (block and flow together) dmlfe reads.
MAX_YAML_DEPTH = 100


class _TooDeep(Exception):
    pass


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader that stops scanning at :data:`MAX_YAML_DEPTH` levels."""

    def fetch_more_tokens(self) -> None:
        super().fetch_more_tokens()
        if self.flow_level + len(self.indents) > MAX_YAML_DEPTH:
            raise _TooDeep


def read_yaml(path: str | os.PathLike[str], error: type[Exception], what: str) -> Any:
    """Read the single YAML document of ``path`` with PyYAML's safe loader, within limits.

    Parameters
    ----------
    path : path-like
        The file.
    error : type of Exception
        Raised (with a one-line message naming ``what`` and ``path``) for a file over
        :data:`MAX_YAML_BYTES`, a document over :data:`MAX_YAML_NODES` once its aliases
        are expanded, a recursive alias, nesting deeper than :data:`MAX_YAML_DEPTH`, or
        invalid YAML.
    what : str
        How the messages name the file, e.g. ``"cluster profile"``.

    Returns
    -------
    object
        The document's contents (None for an empty document).
    """
    path = Path(path)
    where = f"{what} {path}"
    with open(path, "rb") as fh:
        data = fh.read(MAX_YAML_BYTES + 1)
    if len(data) > MAX_YAML_BYTES:
        raise error(f"{where} is larger than {MAX_YAML_BYTES} bytes, the most dmlfe reads "
                    "from a YAML file; is it the right file?")
    loader = _Loader(data)
    try:
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _check_size(node, where, error)
            return loader.construct_document(node)
        except yaml.YAMLError as exc:
            detail = " ".join(str(exc).split())
            raise error(f"{where} is not valid YAML: {detail}") from None
        except (_TooDeep, RecursionError):
            raise error(f"{where} nests sequences or mappings more than {MAX_YAML_DEPTH} "
                        "deep; refusing to read it") from None
    finally:
        loader.dispose()


def _check_size(root: yaml.Node, where: str, error: type[Exception]) -> None:
    """Count ``root``'s nodes with every alias expanded, without expanding anything.

    A node reached through several aliases is the same object each time (PyYAML's
    composer shares it), so the expanded count of each node is computed once.
    """
    expanded: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            expanded[key] = 1 + sum(expanded[id(c)] for c in _children(node))
            if expanded[key] > MAX_YAML_NODES:
                raise error(f"{where} expands to more than {MAX_YAML_NODES} YAML nodes "
                            "through its aliases (*name); refusing to read it")
            continue
        if key in expanded:
            continue
        if key in on_path:
            raise error(f"{where} has an alias (*name) inside the node it refers to; "
                        "refusing to read a recursive structure")
        on_path.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in on_path:
                raise error(f"{where} has an alias (*name) inside the node it refers to; "
                            "refusing to read a recursive structure")
            if id(child) not in expanded:
                stack.append((child, False))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []

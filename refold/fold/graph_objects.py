"""The fold's graphs as Python objects: building many at once, and copying one apart (pure).

:func:`paused_gc` keeps the cyclic collector off while a large graph is built (a snapshot load,
a full fold); :func:`detached_copy` copies a graph so that the copy shares no mutable object with
it (the merge appends to ``sources`` and ``aliases`` lists in place).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

import networkx as nx

__all__ = ["detached_copy", "paused_gc"]


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while building a large graph.

    Building 20k edges allocates a few hundred thousand long-lived objects; the collector's
    passes over them doubled the time of a snapshot load or a full fold (measured). Reference
    counting still frees everything acyclic; the previous setting is restored on exit.

    On exit the objects made meanwhile go straight to the oldest generation (``gc.freeze()`` then
    ``gc.unfreeze()``: two list splices, no scan), unless the process keeps frozen objects of its
    own. Otherwise the first allocation after the pause scanned all of them as young objects
    (~20-30 ms after a 20k-event snapshot decode, a third of the load; ~0.1 s after a full fold,
    which then landed in the next small fold), and the next middle-generation pass again. Young
    cyclic garbage made meanwhile is collected by the next full collection instead.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def _copy_value(value):
    if type(value) is list:
        return [list(v) if type(v) is list else v for v in value]
    if type(value) is dict:
        return {k: _copy_value(v) for k, v in value.items()}
    return value


def detached_copy(graph: nx.MultiDiGraph) -> nx.MultiDiGraph:
    """A copy of ``graph`` whose attribute dicts, lists and nested lists are all new objects."""
    out = nx.MultiDiGraph()
    out.add_nodes_from((n, {k: _copy_value(v) for k, v in d.items()}) for n, d in graph.nodes(data=True))
    out.add_edges_from((u, v, k, {a: _copy_value(b) for a, b in d.items()})
                       for u, v, k, d in graph.edges(keys=True, data=True))
    return out

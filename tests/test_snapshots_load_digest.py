"""The state digest over the snapshot encoding (``snapshot_codec.table_digest``): the same for a
graph, its encoded tables, the tables as read back from a snapshot (dictionary columns, one chunk
per bucket) and a decode/encode round trip; blind to row order and to a summary's key order;
different when any attribute differs (a UTC offset included)."""

from __future__ import annotations

from datetime import timedelta, timezone

import pyarrow as pa
import pytest

from refold.fold.errors import StoreError
from refold.fold.snapshot_codec import decode_graph, encode_graph, table_digest
from refold.storage import snapshots
from refold.storage.layout import Layout
from refold.storage.snapshots import SnapshotStore
from tests.snapshot_helpers import folded
from tests.test_snapshots_codec import STEPS


def test_the_digest_is_the_same_however_the_state_is_held(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshots, "BUCKET_ROWS", 2)  # several bucket files, read back as several chunks
    live = folded(STEPS)
    nodes, edges = encode_graph(live.graph)
    digest = table_digest(nodes, edges)
    store = SnapshotStore(Layout(str(tmp_path)))
    info = store.write(live)
    assert snapshots.edge_bucket_count(info) > 1
    read = store.read_tables(info, for_decode=True)
    assert table_digest(read["nodes"], read["edges"]) == digest
    assert table_digest(*encode_graph(decode_graph(read["nodes"], read["edges"]))) == digest
    shuffled = pa.array(list(reversed(range(edges.num_rows))))
    assert table_digest(nodes.take(pa.array(list(reversed(range(nodes.num_rows))))), edges.take(shuffled)) == digest


def test_a_summary_key_order_is_not_part_of_the_state():
    graph = folded(STEPS).detached_graph()
    node = next(iter(graph.nodes))
    graph.nodes[node]["summary"] = {"lives_in": ["Oslo"], "works_at": ["Acme"]}
    digest = table_digest(*encode_graph(graph))
    graph.nodes[node]["summary"] = {"works_at": ["Acme"], "lives_in": ["Oslo"]}
    assert table_digest(*encode_graph(graph)) == digest
    graph.nodes[node]["summary"] = {"works_at": ["Acme"], "lives_in": ["Rome"]}
    assert table_digest(*encode_graph(graph)) != digest


@pytest.mark.parametrize("change", ["confidence", "offset", "source", "alias", "drop"])
def test_any_changed_attribute_changes_the_digest(change):
    graph = folded(STEPS).detached_graph()
    digest = table_digest(*encode_graph(graph))
    u, v, k, d = next((u, v, k, d) for u, v, k, d in graph.edges(keys=True, data=True) if d["valid_from"])
    if change == "confidence":
        d["confidence"] = d["confidence"] / 2
    elif change == "offset":  # the same instant written with another UTC offset
        d["valid_from"] = d["valid_from"].astimezone(timezone(timedelta(hours=5)))
    elif change == "source":
        d["sources"].append("e9999")
        d["source_seqs"].append(9999)
        d["source_principals"].append([])
    elif change == "alias":
        graph.nodes[u]["aliases"].append("Someone")
    else:
        graph.remove_edge(u, v, key=k)
    assert table_digest(*encode_graph(graph)) != digest


def test_foreign_tables_are_refused():
    nodes, edges = encode_graph(folded(STEPS).graph)
    with pytest.raises(StoreError):
        table_digest(nodes.drop_columns(["summary"]), edges)

"""Snapshot load vs rebuilding the same graph from JSON, measured in the same run.

Folds N synthetic events (rules extractor, in memory, no store), then stores the merged graph two
ways and times getting a usable graph back (datetimes as datetimes, lists as lists):

* snapshot   refold's columnar snapshot (Parquet: nodes, edges, contained ids; digests checked)
* JSON       networkx node-link JSON of the same graph (``json_graph.node_link_data``), read back
             with ``json.loads`` + ``json_graph.node_link_graph`` + ISO-8601 parsing of the times

Both hold the same folded graph (merged and derived edges, node summaries); the full resume
(graph + the merge's open-edge index, ready to apply more events) is timed on top of each.

    python benchmarks/snapshot_load.py [--events 20000] [--repeat 7] [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import networkx as nx  # noqa: E402
from networkx.readwrite import json_graph  # noqa: E402

from refold.fold.graph_objects import paused_gc  # noqa: E402
from refold.fold.incremental import LiveFold  # noqa: E402
from refold.fold.snapshot_codec import decode_graph, stats_from_json  # noqa: E402
from refold.fold.extractors.rules import RulesExtractor  # noqa: E402
from refold.storage.layout import Layout  # noqa: E402
from refold.storage.schema import events_to_table, table_to_events  # noqa: E402
from refold.storage.snapshots import SnapshotStore  # noqa: E402
from snapshot_workload import best, events, ratio, timed  # noqa: E402

TIMES = ("valid_from", "valid_to", "recorded_at")


def stored_events(n: int):
    """The workload as stored-looking Events (seq, record time, a link), without a Delta table."""
    from datetime import timezone

    from refold.fold.events import Event

    now = datetime(2025, 1, 1, tzinfo=timezone.utc)
    out = []
    for seq, e in enumerate(events(n, seed=3)):
        out.append(Event(seq=seq, event_id=e.event_id, recorded_at=now, table_version=seq // 1000,
                         kind=e.kind, tenant=e.tenant, source=e.source, content=e.content,
                         subjects=e.subjects, fact=e.fact, justification=e.justification, link=f"link-{seq}"))
    return list(table_to_events(events_to_table(out)))  # same value types as read from the log


def to_json(graph: nx.MultiDiGraph) -> str:
    data = json_graph.node_link_data(graph, edges="edges")
    for edge in data["edges"]:
        for name in TIMES:
            if edge[name] is not None:
                edge[name] = edge[name].isoformat()
    return json.dumps(data)


def from_json(text: str) -> nx.MultiDiGraph:
    data = json.loads(text)
    for edge in data["edges"]:
        for name in TIMES:
            if edge[name] is not None:
                edge[name] = datetime.fromisoformat(edge[name])
    return json_graph.node_link_graph(data, directed=True, multigraph=True, edges="edges")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="2,000 events, 3 repeats (for the test suite)")
    args = parser.parse_args(argv)
    n, repeat = (2_000, 3) if args.quick else (args.events, args.repeat)
    ext = RulesExtractor()
    spec = ext.default_spec()
    evs = stored_events(n)
    extractions = {x.event_id: x for x in ext.extract(evs, spec)}
    live = LiveFold.empty(spec)
    for e in evs:
        live.apply(e, extractions.get(e.event_id))
    live.refresh()
    base = live.detached_graph()  # the folded graph: merged + derived edges, node summaries

    with tempfile.TemporaryDirectory(prefix="refold-bench-") as tmp:
        store = SnapshotStore(Layout(tmp))
        info = store.write(live)
        folder = Path(info.path)
        snap_bytes = sum(p.stat().st_size for p in folder.iterdir())
        json_path = Path(tmp) / "graph.json"
        json_path.write_text(to_json(base))

        def load_snapshot_graph():  # the store's own read (digests checked), then the decode
            with paused_gc():
                tables = store.read_tables(info, for_decode=True)
                return decode_graph(tables["nodes"], tables["edges"])

        def load_json_graph():
            with paused_gc():
                return from_json(json_path.read_text())

        def resume_snapshot():
            with paused_gc():
                return store.load(info, spec)

        def resume_json():
            with paused_gc():
                return LiveFold.resume(spec, from_json(json_path.read_text()), stats_from_json(info.stats),
                                       contained=live.contained, link=live.link, started_from=live.last_seq)

        g1, g2 = load_snapshot_graph(), load_json_graph()
        same = nx.utils.edges_equal(g1.edges(keys=True, data=True), g2.edges(keys=True, data=True)) and \
            dict(g1.nodes(data=True)) == dict(g2.nodes(data=True))
        # best of N, alternating the two: on a shared machine the minimum is the steadiest estimate
        runs: dict[str, list] = {"snap": [], "json": [], "rsnap": [], "rjson": []}
        for _ in range(repeat):
            runs["snap"].append(timed(load_snapshot_graph)[0])
            runs["json"].append(timed(load_json_graph)[0])
            runs["rsnap"].append(timed(resume_snapshot)[0])
            runs["rjson"].append(timed(resume_json)[0])
        t_snap, t_json, r_snap, r_json = (best(runs[k]) for k in ("snap", "json", "rsnap", "rjson"))
        print(f"graph: {base.number_of_nodes()} nodes, {base.number_of_edges()} facts (merged + derived) "
              f"from {n} events; "
              f"snapshot {snap_bytes / 1e6:.2f} MB, node-link JSON {json_path.stat().st_size / 1e6:.2f} MB")
        print(f"same graph from both: {'yes' if same else 'NO'}")
        print(f"graph from snapshot (Parquet): {t_snap * 1000:.1f} ms; from node-link JSON: {t_json * 1000:.1f} ms "
              f"(best of {repeat})")
        print(f"ratio JSON / snapshot load: {ratio(t_json, t_snap)} (target >= 3x)")
        print(f"full resume (graph + merge index): snapshot {r_snap * 1000:.1f} ms, JSON {r_json * 1000:.1f} ms; "
              f"ratio {ratio(r_json, r_snap)}")
        return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

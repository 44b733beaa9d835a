"""The main job on the embedded default: ``python -m refold.demo [STORE]`` (``make demo``).

Creates a store (local folder, no services), ingests the sample dataset shipped with refold in
its ingestion runs (one log commit each), folds it with the default (rules) extractor and prints
what a newcomer wants to see: the log, the facts, a ``why``, a supersession history and the same
question answered as of two record times.
"""

from __future__ import annotations

import json
import shutil
import sys
from importlib import resources
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

import refold


def sample_lines() -> list[str]:
    """The JSONL lines of the sample dataset that ships with refold."""
    text = resources.files("refold").joinpath("data/sample_events.jsonl").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip()]


def ingest_sample(mem: refold.Memory) -> list[tuple[str, int]]:
    """Append the sample, one commit per ingestion run; return (run, table version) pairs."""
    runs: dict[str, list[str]] = {}
    for line in sample_lines():
        runs.setdefault(json.loads(line).get("ingestion_run", "run-default"), []).append(line)
    out = []
    for run, lines in runs.items():
        mem.append_jsonl(lines)
        out.append((run, mem.head().table_version))
    return out


def _facts_table(console: Console, title: str, frame) -> None:
    table = Table(title=title, title_justify="left")
    for name in ("tenant", "subject", "relation", "object", "valid from", "valid to", "derivation"):
        table.add_column(name)
    for r in frame.iter_rows(named=True):
        table.add_row(r["tenant"], r["subject"], r["relation"], r["object"],
                      r["valid_from"].date().isoformat(),
                      r["valid_to"].date().isoformat() if r["valid_to"] else "[green]current[/]",
                      r["derivation"])
    console.print(table)


@click.command(help=__doc__.splitlines()[0])
@click.argument("store", default="./demo-store")
@click.option("--keep", is_flag=True, help="Reuse an existing store instead of starting fresh.")
def command(store: str, keep: bool) -> None:
    sys.exit(run(store, keep=keep))


def main(argv: list[str] | None = None) -> int:
    """Run the demo with ``argv`` (default: the command line); return the exit status."""
    try:
        command.main(args=argv, prog_name="python -m refold.demo", standalone_mode=False)
    except SystemExit as done:
        return int(done.code or 0)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    return 0


def run(store: str, *, keep: bool = False) -> int:
    """Ingest the sample into ``store`` (a fresh one unless ``keep``), fold, read, verify."""
    console = Console()
    root = Path(store)
    if root.exists() and not keep:
        if not (root / "store.json").exists() and any(root.iterdir()):
            console.print(f"[red]{root} exists and is not a refold store; pick another folder[/]")
            return 2
        shutil.rmtree(root)
    mem = refold.open(root, create=True)  # --keep reuses the store; otherwise it was removed above
    console.rule("[bold]1. Ingest")
    runs = ingest_sample(mem)
    for run, version in runs:
        console.print(f"  {run:<22} → table version {version}")
    log = mem.log()
    console.print(f"  {log.height} events; by kind: "
                  + ", ".join(f"{k} {n}" for k, n in log.group_by("kind").len().sort("kind").iter_rows()))

    console.rule("[bold]2. Fold (rules extractor)")
    report = mem.fold()
    console.print(f"  events folded {report.events_folded}, extraction calls {report.extraction_calls}, "
                  f"facts {report.facts}, derived facts {report.derived_facts}, "
                  f"rejected outputs {report.rejected_outputs}, spec {report.spec_hash}")
    _facts_table(console, "Current facts", mem.facts(current_only=True))

    console.rule("[bold]3. Supersession: where has Maria lived?")
    history = mem.facts(subject="Maria Santos", relation="lives_in")
    _facts_table(console, "lives_in history (one current, the rest closed by valid time)", history)

    console.rule("[bold]4. Why do you believe Maria lives where she lives?")
    current = history.filter(history["current"])
    answer = mem.why(current["fact_id"][0])
    console.print(f"  {answer['fact']['subject']} {answer['fact']['relation']} {answer['fact']['object']} "
                  f"({answer['derivation']}, since {answer['valid_from'].date()})")
    for e in answer["events"]:
        where = ", ".join(f"{label} {e[key]}" for label, key in (("run", "ingestion_run"), ("trace", "trace_id"))
                          if e[key])
        console.print(f"   • seq {e['seq']} {e['kind']} from {e['source']}" + (f" ({where})" if where else ""))
        if e["justification"]:
            console.print(f"     justification: {e['justification']}")
        console.print(f"     quote: “{e['quote']}”")

    console.rule("[bold]5. What did the agent know, and when? (record time)")
    first_version = runs[0][1]
    for label, as_of in ((f"as of table version {first_version} ({runs[0][0]})", first_version),
                         ("now", None)):
        frame = mem.facts(subject="Maria Santos", relation="risk_tolerance", as_of=as_of, current_only=True)
        answer = ", ".join(frame["object"].to_list()) or "(nothing known)"
        console.print(f"  Maria's risk tolerance {label}: [bold]{answer}[/]")
    frame = mem.facts(subject="Maria Santos", relation="risk_tolerance", valid_at="2022-01-01T00:00:00+00:00")
    console.print(f"  …and what was true on 2022-01-01 (valid time), as known now: "
                  f"[bold]{', '.join(frame['object'].to_list())}[/]")

    console.rule("[bold]6. Tamper evidence")
    check = mem.verify()
    console.print(f"  verify: {'[green]chain intact[/]' if check.ok else '[red]TAMPERED[/]'} "
                  f"({check.events} events, head seq {check.head.seq if check.head else -1})")
    console.print(f"\nStore at {root.resolve()} — try: refold facts {root} --subject 'Tom Becker'")
    return 0 if check.ok else 1


if __name__ == "__main__":
    sys.exit(main())

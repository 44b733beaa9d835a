"""Log commands: init, schema, append, log, verify, head, signing-key, sign-head."""

from __future__ import annotations

import json
import sys

import click

from refold.cli.app import emit_json, emit_jsonl, iso_text, json_option, main, open_store, store_argument

_TABLE_COLUMNS = ["seq", "event_id", "recorded_at", "kind", "tenant", "source", "content"]
_SHREDDED = "(shredded: key destroyed)"


def _readable(mem, frame, as_of):
    """A shred-mode log frame with what the store's keys can open decrypted (content,
    justification, fact; ``cipher`` cleared on those rows); a row whose key was destroyed keeps
    its ``cipher`` and shows no content. Plain stores are returned as they are."""
    if mem.mode != "shred" or frame.is_empty() or frame["cipher"].null_count() == frame.height:
        return frame
    import polars as pl

    wanted = set(frame["event_id"].to_list())
    opened = {e.event_id: e for e in mem.events(as_of=as_of) if e.event_id in wanted}
    rows = []
    for row in frame.to_dicts():
        event = opened.get(row["event_id"])
        if row["cipher"] is not None and event is not None:
            readable = event.content is not None
            row.update(content=event.content, justification=event.justification,
                       fact=json.dumps(event.fact.as_dict(), sort_keys=True) if event.fact else None,
                       cipher=None if readable else row["cipher"])
        rows.append(row)
    return pl.DataFrame(rows, schema=frame.schema)


def _printable(frame):
    """``frame`` with its times as ISO-8601 text when Python's datetime cannot hold one of them
    (stored by an older refold that did not check the range), so the listing prints instead of
    failing; otherwise unchanged."""
    import polars as pl

    from refold.fold.events import MAX_TIME, MIN_TIME

    times = [name for name, dtype in frame.schema.items() if isinstance(dtype, pl.Datetime)]
    outside = frame.select(pl.any_horizontal(
        [(pl.col(c) < MIN_TIME) | (pl.col(c) > MAX_TIME) for c in times]).any()).item() if times else False
    if not outside:
        return frame
    return frame.with_columns(pl.col(times).dt.strftime("%Y-%m-%dT%H:%M:%S%.6f+00:00"))


@main.command()
@store_argument
@click.option("--mode", type=click.Choice(["delete", "shred"]), default="delete", show_default=True,
              help="Erasure mode, fixed for the store's life: delete rewrites files, shred destroys keys.")
@click.option("--kms-key-id", help="Shred mode: keep the keys in AWS KMS, wrapped by this KMS key "
              "(ARN, key id or alias/NAME). Region and credentials: the usual AWS environment.")
@click.option("--kms-key-per-subject", is_flag=True,
              help="Shred mode: one KMS key per data subject, scheduled for deletion when it is erased.")
@click.option("--kms-endpoint", help="KMS endpoint URL (default: AWS_ENDPOINT_URL_KMS / AWS_ENDPOINT_URL or AWS's own).")
@click.option("--kms-region", help="KMS region (default: the key ARN's, or AWS_REGION).")
@click.option("--kms-pending-days", type=int,
              help="Per-subject KMS keys: days before KMS deletes an erased subject's key (7-30; default 7).")
@click.option("--group", is_flag=True,
              help="Share the store with your group (folders 2770 setgid, files 0660) instead of keeping it "
                   "private (0700/0600).")
@json_option
def init(store: str, mode: str, kms_key_id: str | None, kms_key_per_subject: bool, kms_endpoint: str | None,
         kms_region: str | None, kms_pending_days: int | None, group: bool, as_json: bool) -> None:
    """Create a new store at STORE."""
    import refold

    mem = refold.init(store, mode=mode, kms_key_id=kms_key_id,  # type: ignore[arg-type]
                      kms_key_per_subject=kms_key_per_subject, kms_endpoint=kms_endpoint,
                      kms_region=kms_region, kms_pending_window_days=kms_pending_days, group=group)
    keys = mem.settings.get("keys") or {}
    if as_json:
        emit_json({"store": mem.root, "mode": mem.mode, **({"keys": keys} if keys else {})})
    else:
        where = ""
        if keys.get("kms_key_per_subject"):
            where = ", keys in AWS KMS (one KMS key per subject)"
        elif keys:
            where = f", keys in AWS KMS under {keys['kms_key_id']}"
        click.echo(f"created {mode}-mode store at {mem.root}{where}")


@main.command()
@store_argument
# bytes: parse_jsonl decodes each line itself, so a byte that is not UTF-8 is named with its line
@click.argument("file", type=click.File("rb"))
@click.option("--ingestion-run", help="Tag every event of this batch with an ingestion run id.")
@json_option
def append(store: str, file, ingestion_run: str | None, as_json: bool) -> None:
    """Append events from FILE (JSON Lines; '-' reads stdin). Prints `seq event_id` per event."""
    from refold.fold.events import parse_jsonl

    mem = open_store(store)
    batch = parse_jsonl(file, max_content_bytes=mem.max_content_bytes, ingestion_run=ingestion_run)
    seqs = mem.log_store.append(batch)
    if as_json:
        emit_jsonl({"seq": s, "event_id": e.event_id} for s, e in zip(seqs, batch))
    else:
        for seq, event in zip(seqs, batch):
            click.echo(f"{seq} {event.event_id}")


@main.command()
def schema() -> None:
    """Print the JSON Schema of the JSON Lines input that `refold append` takes (docs/log.md).

    The file refold ships (refold/data/event.schema.json), byte for byte: save it with
    `refold schema > event.schema.json` and check events with any JSON Schema validator."""
    from refold.fold.events import input_schema_text

    click.echo(input_schema_text(), nl=False)


@main.command("log")
@store_argument
@click.option("--since", type=int, help="First seq to show (inclusive).")
@click.option("--as-of", "as_of", help="Record time: a table VERSION or an ISO-8601 TIME.")
@click.option("--format", "fmt", type=click.Choice(["table", "jsonl"]), default="table", show_default=True)
@click.option("--raw", is_flag=True, help="Shred mode: show the stored ciphertext instead of decrypting.")
@json_option
def log_cmd(store: str, since: int | None, as_of: str | None, fmt: str, raw: bool, as_json: bool) -> None:
    """Show the log. On a shred-mode store, content is decrypted where its key exists (--raw: as stored)."""
    mem = open_store(store)
    frame = mem.log(since=since, as_of=as_of)
    if not raw:
        frame = _readable(mem, frame, as_of)
    frame = _printable(frame)
    if as_json or fmt == "jsonl":
        emit_jsonl(frame.to_dicts())
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=False)
    for name in _TABLE_COLUMNS:
        table.add_column(name, overflow="fold", max_width=60 if name == "content" else None)
    for row in frame.iter_rows(named=True):
        cells = [iso_text(row[name]) for name in _TABLE_COLUMNS]
        if row["content"] is None and row.get("cipher"):
            cells[-1] = _SHREDDED
        table.add_row(*cells)
    Console().print(table)
    click.echo(f"{frame.height} event(s)")


@main.command()
@store_argument
@click.option("--against", type=click.Path(dir_okay=False, exists=True),
              help="A chain head kept outside the store (from `refold head --json`).")
@click.option("--signed-heads", is_flag=True,
              help="Require the log to end at a head signed with the store's recorded key.")
@click.option("--public-key", type=click.Path(dir_okay=False, exists=True),
              help="The operator's Ed25519 public key (PEM) to check signed heads with; implies --signed-heads.")
@json_option
def verify(store: str, against: str | None, signed_heads: bool, public_key: str | None, as_json: bool) -> None:
    """Recompute the chain and check statistics, tombstones and heads (docs/verify.md).

    Exit 0 when intact; exit 1 when a check failed (naming the first bad seq when there is one,
    and each bad line of the published heads)."""
    from refold.fold.errors import IntegrityError
    from refold.storage.log.verify import VerifyReport

    try:
        mem = open_store(store)
    except IntegrityError as exc:  # the Delta log itself does not load: a finding, not a usage error
        report = VerifyReport(ok=False, events=0, head=None, first_bad_seq=exc.first_bad_seq, problems=(str(exc),))
    else:
        report = mem.verify(against=against, signed_heads=signed_heads, public_key=public_key)
    if as_json:
        emit_json(report.as_json())
        sys.exit(0 if report.ok else 1)
    for note in report.notes:
        click.echo(f"note: {note}", err=True)
    if report.ok:
        signed = (f", signed by key {report.signed['key'][:16]}… ({report.signed['key_from']})"
                  if report.signed else "")
        click.echo(f"ok: {report.events} event(s), chain intact"
                   + (f", head seq {report.head.seq}" if report.head else "") + signed)
    else:
        where = (f"first bad seq {report.first_bad_seq}" if report.first_bad_seq is not None
                 else "no single bad seq to name")
        click.echo(f"TAMPERED: {where}", err=True)
        for problem in report.problems:
            click.echo(f"  {problem}", err=True)
    sys.exit(0 if report.ok else 1)


@main.command("signing-key")
@store_argument
@click.option("--key", "key_path", required=True, type=click.Path(dir_okay=False),
              help="The Ed25519 private key (PEM), outside the store; created when absent.")
@json_option
def signing_key(store: str, key_path: str, as_json: bool) -> None:
    """Set up signed heads: record KEY's public key in STORE and sign its current head.

    Later appends sign their heads when REFOLD_SIGNING_KEY names KEY."""
    from refold.storage.log.signing import set_up_signing
    from refold.storage.log.verify import sign_current_head

    mem = open_store(store)
    fingerprint = set_up_signing(mem.layout, key_path)
    head = sign_current_head(mem.log_store, key_path)
    if as_json:
        emit_json({"key": fingerprint, "signed_head": head.as_json()})
    else:
        click.echo(f"key {fingerprint} recorded; head seq {head.seq} signed. Keep {key_path} outside the store "
                   f"and set REFOLD_SIGNING_KEY={key_path} for every process that appends.")


@main.command("sign-head")
@store_argument
@click.option("--key", "key_path", type=click.Path(dir_okay=False, exists=True),
              help="The Ed25519 private key (PEM); default: REFOLD_SIGNING_KEY.")
@json_option
def sign_head(store: str, key_path: str | None, as_json: bool) -> None:
    """Sign the current head, after a full verify passes (e.g. after a crash left it unsigned)."""
    from refold.storage.log.verify import sign_current_head

    head = sign_current_head(open_store(store).log_store, key_path)
    if as_json:
        emit_json(head.as_json())
    else:
        click.echo(f"signed head seq {head.seq}")


@main.command()
@store_argument
@json_option
def head(store: str, as_json: bool) -> None:
    """Print the chain head (seq, link, table version) as JSON."""
    emit_json(open_store(store).head().as_json())



"""Proof commands: ``refold checkpoint`` and ``refold proof inclusion|consistency|verify`` (RFC 9162
Merkle proofs over the log, C2SP checkpoints; docs/verify.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from refold.cli.app import emit_json, json_option, main, open_store, store_argument


@main.command()
@store_argument
@click.option("--size", type=int, help="The checkpoint of this tree size (default: the newest published).")
@click.option("--unsigned", is_flag=True,
              help="Print the checkpoint of the tree as it stands (or of --size), without a signature.")
@click.option("--verifier-key", "vkey", is_flag=True,
              help="Print the signed-note verifier key of the store's signing key instead.")
@json_option
def checkpoint(store: str, size: int | None, unsigned: bool, vkey: bool, as_json: bool) -> None:
    """Print STORE's newest signed checkpoint (a C2SP signed note of the Merkle tree's size and root).

    Save it where the store's writers cannot change it; later, `refold proof verify` checks
    proofs against it. Checkpoints are signed by appends with REFOLD_SIGNING_KEY set and by
    `refold sign-head`."""
    mem = open_store(store)
    if vkey:
        from refold.fold.errors import NotFoundError
        from refold.storage.log.checkpoints import verifier_key
        from refold.storage.log.signing import recorded_public_key

        public = recorded_public_key(mem.layout)
        if public is None:
            raise NotFoundError(f"{store} records no signing key: set one up with `refold signing-key {store} --key PATH`")
        click.echo(verifier_key(public))
        return
    cp = mem.checkpoint(size, signed=not unsigned)
    if as_json:
        emit_json(cp.as_json())
    else:
        click.echo(cp.note if cp.note is not None else cp.text(), nl=False)


@main.group()
def proof() -> None:
    """Merkle proofs over the log (RFC 9162): make them from a store, check them without one."""


def _emit_proof(value, as_json: bool, summary: str) -> None:
    if as_json:
        emit_json(value.as_json())
    else:
        click.echo(summary)
        click.echo("(add --json for the proof itself; check it with `refold proof verify PROOF.json "
                   "--checkpoint CHECKPOINT --public-key KEY`)")


@proof.command("inclusion")
@store_argument
@click.option("--seq", type=int, required=True, help="The event's seq (its leaf index).")
@click.option("--size", type=int, help="The tree size to prove against (default: the whole log); use your "
              "checkpoint's size.")
@json_option
def inclusion(store: str, seq: int, size: int | None, as_json: bool) -> None:
    """Prove that event SEQ is in STORE's log (leaf SEQ of the Merkle tree of SIZE leaves)."""
    p = open_store(store).inclusion_proof(seq, size)
    erased = f", erased by {p.erasure_id} (only its commitment is left)" if p.erased else ""
    _emit_proof(p, as_json, f"seq {p.leaf_index} (commitment {p.commitment}){erased} is leaf {p.leaf_index} of the "
                            f"tree of size {p.tree_size}: {len(p.proof)} hash(es) lead to its root")


@proof.command("consistency")
@store_argument
@click.option("--from", "size1", type=int, required=True, help="The older tree size (from a checkpoint you hold).")
@click.option("--to", "size2", type=int, help="The newer tree size (default: the whole log).")
@json_option
def consistency(store: str, size1: int, size2: int | None, as_json: bool) -> None:
    """Prove that STORE's log of size TO extends its log of size FROM (nothing changed, only added)."""
    p = open_store(store).consistency_proof(size1, size2)
    _emit_proof(p, as_json, f"the tree of size {p.size2} extends the tree of size {p.size1}: "
                            f"{len(p.proof)} hash(es) lead from one root to the other")


def _read(path: str, what: str) -> bytes:
    from refold.fold.errors import ValidationError

    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValidationError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None


@proof.command("verify")
@click.argument("proof_file", metavar="PROOF.json", type=click.Path(dir_okay=False))
@click.option("--checkpoint", "checkpoints", multiple=True, required=True, type=click.Path(dir_okay=False),
              help="A signed checkpoint (from `refold checkpoint`); twice for a consistency proof's two sizes.")
@click.option("--public-key", "public_key", required=True, type=click.Path(dir_okay=False),
              help="The operator's key: Ed25519 public key (PEM) or a signed-note verifier key.")
@click.option("--commitment", help="Also require the proven leaf to be this commitment (hex, from the event's row).")
@json_option
def verify_proof(proof_file: str, checkpoints: tuple[str, ...], public_key: str, commitment: str | None,
                 as_json: bool) -> None:
    """Check PROOF.json against signed checkpoints, without the store.

    Exit 0 when the checkpoint's signature and the proof verify; 1 when one does not (one line on
    stderr saying which); 2 when a file cannot be read."""
    from refold.fold.errors import IntegrityError, ValidationError
    from refold.proofs import InclusionProof, parse_proof
    from refold.storage.log.checkpoints import load_verifier, open_checkpoint

    verifier = load_verifier(public_key)
    notes = [(path, _read(path, "checkpoint")) for path in checkpoints]
    data = _read(proof_file, "proof")
    if commitment is not None:
        try:
            wanted = bytes.fromhex(commitment)
        except ValueError:
            wanted = b""
        if len(wanted) != 32:
            raise ValidationError(f"--commitment {commitment[:80]!r} is not a SHA-256 hash in hex (64 digits)")
    try:
        opened = {}
        for path, note in notes:
            try:
                cp = open_checkpoint(note, verifier)
            except IntegrityError as exc:
                raise IntegrityError(f"checkpoint {path}: {exc}") from None
            if cp.size in opened and opened[cp.size].root != cp.root:
                raise IntegrityError(f"two checkpoints name different roots for a tree of size {cp.size}: the log "
                                     "forked (two histories signed with one key)")
            opened[cp.size] = cp
        p = parse_proof(data)
        if isinstance(p, InclusionProof):
            result = _check_inclusion(p, opened, commitment)
        else:
            result = _check_consistency(p, opened)
    except IntegrityError as exc:
        if as_json:
            emit_json({"ok": False, "error": str(exc)})
        click.echo(f"FAILED: {exc}", err=True)
        sys.exit(1)
    origin = next(iter(opened.values())).origin
    result.update(ok=True, origin=origin, key=verifier.fingerprint)
    if as_json:
        emit_json(result)
    else:
        click.echo(f"ok: {result['statement']} (log {origin}, key {verifier.fingerprint[:16]}…)")


def _check_inclusion(p, opened: dict, commitment: str | None) -> dict:
    from refold.proofs import ProofError

    cp = opened.get(p.tree_size)
    if cp is None:
        sizes = ", ".join(map(str, sorted(opened)))
        raise ProofError(f"the proof is for a tree of size {p.tree_size}, the checkpoint for size {sizes}: ask for "
                         f"the proof with --size {sorted(opened)[-1]}")
    if p.root != cp.root:
        raise ProofError(f"the proof's root is not the signed root of the tree of size {p.tree_size}: the proof is "
                         "of another tree")
    if commitment is not None and (p.entry is None or p.entry != bytes.fromhex(commitment)):
        raise ProofError(f"the proven leaf is not commitment {commitment.lower()}: the proof is of another event")
    p.verify(cp.root)
    erased = f" (erased by {p.erasure_id}, as the store says)" if p.erased else ""
    what = f"commitment {p.commitment}" if p.entry is not None else f"leaf hash {p.leaf_hash.hex()}"
    return {"kind": "inclusion", "leaf_index": p.leaf_index, "tree_size": p.tree_size,
            "commitment": p.commitment, "checkpoints": [p.tree_size],
            "statement": f"{what} is seq {p.leaf_index} of the log of {p.tree_size} events{erased}"}


def _check_consistency(p, opened: dict) -> dict:
    from refold.proofs import ProofError

    signed = [size for size in (p.size1, p.size2) if size in opened]
    if not signed:
        raise ProofError(f"the proof is from size {p.size1} to {p.size2}, the checkpoint(s) for size "
                         f"{', '.join(map(str, sorted(opened)))}: pass the checkpoint of size {p.size1} you hold")
    for size, root, name in ((p.size1, p.root1, "root1"), (p.size2, p.root2, "root2")):
        if size in opened and opened[size].root != root:
            raise ProofError(f"the proof's {name} is not the signed root of the tree of size {size}")
    p.verify()
    unsigned = [f"size {s}" for s in (p.size1, p.size2) if s not in opened]
    note = f"; the root of {unsigned[0]} comes from the proof file, not a checkpoint" if unsigned else ""
    return {"kind": "consistency", "size1": p.size1, "size2": p.size2, "checkpoints": signed,
            "statement": f"the log of {p.size2} events extends the log of {p.size1} events{note}"}

"""Retention commands: ``refold retention`` (rules) and ``refold hold`` (legal holds)."""

from __future__ import annotations

import click

from refold.cli.app import emit_jsonl, json_option, main, open_store, store_argument


@main.command()
@store_argument
@click.option("--kind", default=None, help="Event kind the rule applies to (e.g. chat_turn, memory_read).")
@click.option("--tenant", default=None, help="Tenant the rule applies to.")
@click.option("--keep", default=None, metavar="DURATION",
              help="Keep such events this long after recorded_at: 90d, 12h, 4w, 7y (y = 365 days).")
@click.option("--remove", is_flag=True, help="Remove the rule for exactly this --kind/--tenant.")
@json_option
def retention(store: str, kind: str | None, tenant: str | None, keep: str | None, remove: bool,
              as_json: bool) -> None:
    """List STORE's retention rules, or set one (--keep) or remove one (--remove).

    The rules are applied by the scheduled job `python -m refold.jobs.retain STORE` (see
    docs/audit.md); the most specific rule matching an event decides.
    """
    from refold.agent import retention as policy
    from refold.fold.errors import ValidationError

    mem = open_store(store)
    if keep is not None and remove:
        raise ValidationError("--keep and --remove do not go together: set a rule or remove it")
    if keep is not None:
        rule = policy.set_rule(mem, kind=kind, tenant=tenant, keep=keep)
        click.echo(f"rule {rule.name}: keep {rule.keep}", err=as_json)
    elif remove:
        rule = policy.remove_rule(mem, kind=kind, tenant=tenant)
        click.echo(f"removed rule {rule.name} (keep {rule.keep})", err=as_json)
    elif kind is not None or tenant is not None:
        raise ValidationError("--kind/--tenant need --keep DURATION (set a rule) or --remove")
    rules = policy.read_policy(mem).rules
    if as_json:
        emit_jsonl(r.as_json() for r in rules)
        return
    if keep is None and not remove:
        for r in rules:
            click.echo(f"{r.name:<32} keep {r.keep}")
        click.echo(f"{len(rules)} rule(s)")


@main.command()
@store_argument
@click.option("--subject", default=None, help="Opaque subject id to hold (or release).")
@click.option("--tenant", default=None, help="Tenant to hold (or release).")
@click.option("--reason", default=None, help="Why: the case or order (required to place a hold).")
@click.option("--release", is_flag=True, help="Release the hold on --subject or --tenant.")
@json_option
def hold(store: str, subject: str | None, tenant: str | None, reason: str | None, release: bool,
         as_json: bool) -> None:
    """List STORE's legal holds, or place one (--subject/--tenant --reason) or release one.

    Held events are skipped by retention, and `refold erase` refuses a held subject (exit 2).
    """
    from refold.agent import retention as policy
    from refold.fold.errors import ValidationError

    mem = open_store(store)
    if release:
        if reason is not None:
            raise ValidationError("--release takes no --reason")
        h = policy.release_hold(mem, subject=subject, tenant=tenant)
        click.echo(f"released the {h.describe()}", err=as_json)
    elif subject is not None or tenant is not None:
        h = policy.place_hold(mem, subject=subject, tenant=tenant, reason=reason or "")
        click.echo(f"placed a {h.describe()}", err=as_json)
    elif reason is not None:
        raise ValidationError("--reason needs --subject ID or --tenant TENANT")
    holds = policy.read_policy(mem).holds
    if as_json:
        emit_jsonl(h.as_json() for h in holds)
        return
    if not release and subject is None and tenant is None:
        for h in holds:
            click.echo(f"{h.name:<32} since {h.placed_at}  {h.reason}")
        click.echo(f"{len(holds)} hold(s)")

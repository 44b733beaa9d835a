"""``refold job``: the Ray job entry points as refold commands.

Each subcommand is the click command its module in :mod:`refold.jobs` defines, the same one that
``python -m refold.jobs.<name>`` runs (the form ``ray job submit -- ...`` lines use): its flags,
their environment defaults (:mod:`refold.jobs.config`), ONE JSON summary line on stdout, exit 0 /
1 (failure, in the summary) / 2 (bad arguments). The commands live beside their job bodies because
``refold.jobs`` may not import ``refold.cli`` (``cli`` imports ``jobs``; no cycles).
"""

from __future__ import annotations

from refold.cli.app import main
from refold.jobs import erase, project, retain
from refold.jobs import refold as full_refold


@main.group()
def job() -> None:
    """Run a job in this process: project, refold, erase, retain.

    On a cluster, submit the same command: `ray job submit --working-dir . -- python -m
    refold.jobs.project STORE`. Each prints one JSON summary line on stdout.
    """


for _module in (project, full_refold, erase, retain):
    job.add_command(_module.command)

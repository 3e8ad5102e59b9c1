"""``aclpipe devices``: list the backends, whether they load, and their devices; and which
completion host function runs (the compiled C one, or the Python fallback of an install that
had no C compiler)."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from ..backends import KNOWN_BACKENDS, get_backend_class
from ..runtime import completion
from .common import EXIT_OK, say

__all__ = ["HELP", "NAME", "configure", "run"]

NAME = "devices"
HELP = "list backends, whether they are available, and their devices"


def configure(parser: argparse.ArgumentParser) -> None:
    """No options."""
    del parser


def _backend_row(name: str) -> tuple[str, str, str, str]:
    # Any failure, not just LookupError: one broken or half-installed backend must not hide
    # the others, and the listing is where a user goes to find out what is wrong with it.
    try:
        backend_class = get_backend_class(name)
        count = int(backend_class.device_count())
        if count == 0:
            return name, "[yellow]no devices[/]", "0", KNOWN_BACKENDS[name]
        backend = backend_class(0)
        try:
            description = backend.describe()
        finally:
            backend.close()
    except Exception as error:  # noqa: BLE001 (see above)
        return name, "[red]no[/]", "0", f"{type(error).__name__}: {error}"
    return name, "[green]yes[/]", str(count), str(description)


def run(args: argparse.Namespace, console: Console) -> int:
    """Print the table of backends; always exit status 0."""
    table = Table(title="aclpipe backends")
    for column in ("backend", "available", "devices", "description"):
        table.add_column(column, no_wrap=column != "description")
    for name in KNOWN_BACKENDS:
        table.add_row(*_backend_row(name))
    console.print(table)
    if completion.COMPILED:
        say(console, "completion host function: compiled C (no Python on runtime threads)")
    else:
        say(console, "completion host function: Python fallback (the C helper was not built: no C compiler at "
                     "install?); reinstall with a C compiler for the faster one", style="yellow")
    return EXIT_OK

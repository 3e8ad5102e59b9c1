"""The ``aclpipe`` command: ``aclpipe devices``, ``aclpipe selftest [--device sim] [--timing]``.

Each subcommand is a :class:`Command`: a name, a one-line help, a function that adds its
arguments, and a function that runs it and returns the exit status.  Adding one (``run``,
``plan``, ``check``, ``bench``) means writing those two functions, in this file or in a module
of its own (``Command.from_module(module)`` reads ``NAME``, ``HELP``, ``configure``, ``run``),
and listing the command in :data:`COMMANDS`; :func:`main` does the rest.

Exit status: 0 success, 1 the command ran and found failures, 2 bad arguments or an error
before anything ran (printed as one line ``aclpipe: error: ...``, never a traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NoReturn

from rich.console import Console
from rich.table import Table

from .backends import KNOWN_BACKENDS, get_backend_class, parse_device
from .commands import command_modules
from .commands.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, add_command
from .errors import AclpipeError

__all__ = ["COMMANDS", "Command", "build_parser", "main"]


@dataclass(frozen=True)
class Command:
    """One subcommand: ``configure(parser)`` adds its arguments, ``run(args, console)`` returns
    the exit status."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Console], int]

    @classmethod
    def from_module(cls, module: ModuleType) -> Command:
        """The command a module defines with ``NAME``, ``HELP``, ``configure(parser)`` and
        ``run(args, console)`` (the layout of :mod:`aclpipe.commands`)."""
        return cls(module.NAME, module.HELP, module.configure, module.run)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"aclpipe: error: {message} (see '{self.prog} --help')\n")


# -- devices ----------------------------------------------------------------------------------------
def _configure_devices(parser: argparse.ArgumentParser) -> None:
    del parser  # no options


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
            description = backend.describe() if hasattr(backend, "describe") else name
        finally:
            backend.close()
    except Exception as error:  # noqa: BLE001 (see above)
        return name, "[red]no[/]", "0", f"{type(error).__name__}: {error}"
    return name, "[green]yes[/]", str(count), str(description)


def _run_devices(args: argparse.Namespace, console: Console) -> int:
    table = Table(title="aclpipe backends")
    for column in ("backend", "available", "devices", "description"):
        table.add_column(column, no_wrap=column != "description")
    for name in KNOWN_BACKENDS:
        table.add_row(*_backend_row(name))
    console.print(table)
    return EXIT_OK


# -- selftest ---------------------------------------------------------------------------------------
def _configure_selftest(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default=None, help="device to test, e.g. 'sim' or 'ascend:0' "
                                                       "(default: $ACLPIPE_DEVICE, else sim)")
    parser.add_argument("--timing", action="store_true", help="sim only: turn the timing model on")
    parser.add_argument("--no-sanitizer", dest="sanitizer", action="store_false",
                        help="sim only: run without the sanitizer (its checks are then skipped)")


def _device_options(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    if backend == "sim":
        return {"sanitizer": args.sanitizer, "timing": args.timing}
    if args.timing or not args.sanitizer:
        raise ValueError(f"--timing and --no-sanitizer apply to the sim backend only, not {backend!r}")
    return {}


def _run_selftest(args: argparse.Namespace, console: Console) -> int:
    from .runtime import open_device
    from .testing import ConformanceReport, check_backend

    backend, index = parse_device(args.device)
    spec = f"{backend}:{index}"
    options = _device_options(backend, args)
    open_device(spec, **options).close()  # a bad device is a usage error, not ten failed checks
    report = check_backend(lambda: open_device(spec, **options), report=ConformanceReport())
    console.print(report.table())
    return EXIT_OK if report.ok else EXIT_FAILED


COMMANDS: tuple[Command, ...] = (
    Command("devices", "list backends, whether they are available, and their devices",
            _configure_devices, _run_devices),
    Command("selftest", "run the backend conformance checks on a device", _configure_selftest, _run_selftest),
    *(Command.from_module(module) for module in command_modules()),  # run, plan, check, bench
)


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    parser = _Parser(prog="aclpipe", description="Run DAGs of Ascend NPU (aclnn) operators asynchronously.")
    subparsers = parser.add_subparsers(dest="command", metavar="command", required=True)
    for command in commands:
        add_command(subparsers, command.name, command.help, command.configure, command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``aclpipe`` console script; returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit:  # --help, or a usage error already printed as one line
        return exit.code if isinstance(exit.code, int) else EXIT_USAGE
    console = Console()
    try:
        return int(args.run(args, console))
    except (AclpipeError, LookupError, ValueError) as error:
        message = " ".join(str(error).split())
        print(f"aclpipe: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("aclpipe: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

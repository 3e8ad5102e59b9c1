"""The ``aclpipe`` command: every subcommand in one package.

``aclpipe devices``, ``selftest``, ``run``, ``plan``, ``check`` and ``bench`` are each a
module here with ``NAME``, ``HELP``, ``configure(parser)`` (adds its arguments) and
``run(args, console)`` (returns the exit status); :data:`COMMANDS` lists them and
:func:`main` does the rest.  A new subcommand is a new module added to :data:`MODULES`
(or, from outside, ``build_parser((*COMMANDS, Command.from_module(module)))``).

Exit status: 0 success, 1 the command ran and found failures, 2 bad arguments or an error
before anything ran (printed as one line ``aclpipe: error: ...``, never a traceback).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import NoReturn

from rich.console import Console

from ..errors import AclpipeError
from .common import EXIT_USAGE, add_command

__all__ = ["COMMANDS", "MODULES", "Command", "build_parser", "main"]

#: Subcommand modules, in the order ``aclpipe --help`` lists them.
MODULES = ("devices", "selftest", "run", "plan", "check", "bench", "generate")


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
        ``run(args, console)``."""
        return cls(module.NAME, module.HELP, module.configure, module.run)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"aclpipe: error: {message} (see '{self.prog} --help')\n")


COMMANDS: tuple[Command, ...] = tuple(
    Command.from_module(importlib.import_module(f"{__name__}.{name}")) for name in MODULES)


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    """The argument parser with one subparser per command."""
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

"""The ``aclpipe`` subcommands that work on graphs: ``run``, ``plan``, ``check``, ``bench``.

Each is a module with ``NAME``, ``HELP``, ``configure(parser)`` (adds its arguments),
``run(args, console=None) -> int`` (the exit status; failures are printed as one line
``aclpipe: error: ...``, never a traceback) and ``add_parser(subparsers)``.
:mod:`aclpipe.cli` lists them in its command table.
"""

from __future__ import annotations

from types import ModuleType

__all__ = ["MODULES", "command_modules"]

#: Module names under aclpipe.commands, in the order ``aclpipe --help`` lists them.
MODULES = ("run", "plan", "check", "bench")


def command_modules() -> list[ModuleType]:
    """The command modules, imported."""
    import importlib

    return [importlib.import_module(f"{__name__}.{name}") for name in MODULES]

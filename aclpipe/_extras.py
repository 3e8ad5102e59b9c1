"""Optional extras: importing a package that an extra installs names the extra when it is missing.

``pip install aclpipe`` installs what the core needs; ``onnx`` (the ONNX importer), ``plot``
(Gantt charts) and ``ray`` (:mod:`aclpipe.ray`) are extras.  A bare ``ModuleNotFoundError: No
module named 'onnx'`` leaves a newcomer to guess what to install and under which name, so every
import of an extra's package goes through :func:`require` (or :func:`missing_extra` where the
import must stay a module-level statement) and fails with one line that says what needed it and
the command that installs it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

__all__ = ["EXTRAS", "MissingExtraError", "install_hint", "is_installed", "missing_extra", "require"]

#: Package (import name) -> the aclpipe extra that installs it (pyproject.toml
#: ``[project.optional-dependencies]``).
EXTRAS = {"onnx": "onnx", "matplotlib": "plot", "ray": "ray"}


class MissingExtraError(ModuleNotFoundError):
    """An optional package is not installed; the message names the extra that installs it.

    A :class:`ModuleNotFoundError` (so ``except ImportError`` still catches it) whose ``name`` is
    the missing package and ``extra`` the aclpipe extra, or None for a package no extra installs.
    """

    def __init__(self, module: str, purpose: str) -> None:
        top = module.split(".")[0]
        super().__init__(f"{purpose} needs the {top} package, which is not installed: {install_hint(top)}",
                         name=top)
        self.extra = EXTRAS.get(top)


def install_hint(*modules: str) -> str:
    """The one command that installs ``modules``: ``pip install 'aclpipe[onnx,ray]' onnxruntime``.

    Packages of an extra are installed through it (so the versions are aclpipe's); others by name.
    """
    tops = {module.split(".")[0] for module in modules}
    extras = sorted({EXTRAS[top] for top in tops if top in EXTRAS})
    plain = sorted(tops - EXTRAS.keys())
    words = ([f"'aclpipe[{','.join(extras)}]'"] if extras else []) + plain
    return "pip install " + " ".join(words)


def is_installed(module: str) -> bool:
    """Whether ``import module`` would find it, without importing it (``sys.modules[name] = None``,
    which blocks an import, counts as missing)."""
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is missing or blocked
        return False


def _is_missing(error: ModuleNotFoundError, module: str) -> bool:
    """Whether ``error`` says that ``module`` itself (or its top package) is absent, not something
    it imports in turn: a broken installation must show its own error."""
    top = module.split(".")[0]
    return error.name in (module, top)


def missing_extra(error: ModuleNotFoundError, module: str, purpose: str) -> ModuleNotFoundError:
    """The error to raise for ``error`` from ``import module``: a :class:`MissingExtraError` when
    ``module`` is what is missing, else ``error`` unchanged.

    For a module-level import that must stay a statement::

        try:
            import onnx
        except ModuleNotFoundError as error:
            raise missing_extra(error, "onnx", "reading ONNX models") from None
    """
    return MissingExtraError(module, purpose) if _is_missing(error, module) else error


def require(module: str, purpose: str) -> ModuleType:
    """Import and return ``module``; when it is not installed, raise :class:`MissingExtraError`
    naming the extra that installs it.

    Parameters
    ----------
    module
        The import name (``"matplotlib.pyplot"``, ``"onnx"``).
    purpose
        What needs it, as the start of the message (``"drawing a Gantt chart"``).
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        raise missing_extra(error, module, purpose) from None

"""The public surface is what ``__all__`` lists, and every listed name is real and documented
(like anyio's ``test_all_attributes``); the layers import only downwards."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import aclpipe

PACKAGE = Path(aclpipe.__file__).resolve().parent
#: Layers from the top down (ARCHITECTURE.md 2): a module may import only its own layer and those below.
LAYERS = ("ray", "cli", "decode", "pipeline", "eager", "onnx", "trace", "plan", "graph", "testing", "runtime",
          "backends", "ops")
#: The two columns under ``pipeline`` (ARCHITECTURE.md 2.2): the data column never imports the execution column.
DATA_COLUMN = ("onnx", "graph", "plan")
EXECUTION_COLUMN = ("eager", "testing", "runtime", "backends")
#: Modules shared by every layer.
BASE = ("errors", "dtypes", "tensor", "gc_pause")


def _modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(aclpipe.__path__, "aclpipe."):
        if info.name.rsplit(".", 1)[-1] in ("_hostfunc", "_hostfunc_build", "_launch", "_launch_build", "__main__"):
            continue
        names.append(info.name)
    return names


def _import(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as error:  # an optional dependency (onnx) missing here
        pytest.skip(f"{name} needs an optional dependency: {error}")


@pytest.mark.parametrize("name", _modules())
def test_every_exported_name_exists_and_has_a_docstring(name):
    module = _import(name)
    assert module.__doc__ and module.__doc__.strip(), f"{name} has no module docstring"
    for attribute in getattr(module, "__all__", ()):
        value = getattr(module, attribute)  # AttributeError: __all__ lists a name that is not there
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), f"{name}.{attribute} has no docstring"


def test_the_top_level_all_is_complete_and_documented():
    for attribute in aclpipe.__all__:
        value = getattr(aclpipe, attribute)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), f"aclpipe.{attribute} has no docstring"


def test_at_most_six_loose_modules_at_the_top():
    loose = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    assert len(loose) <= 6, loose


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def _imports(path: Path, module: str) -> set[str]:
    """The aclpipe modules ``path`` imports (relative imports resolved), type-checking-only ones too."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            if node.module is None:  # ``from . import several``: the modules named
                found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("aclpipe")}


def test_no_import_goes_up_a_layer():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = "aclpipe." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        own = _layer(module)
        if own is None:
            continue
        for target in _imports(path, module):
            other = _layer(target)
            if other is not None and LAYERS.index(other) < LAYERS.index(own):
                wrong.append(f"{module} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_the_data_column_never_touches_a_device():
    # onnx/ imported eager/ and runtime/ while it held the eager evaluator (now eager/onnx_eval.py).
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = "aclpipe." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        if _layer(module) not in DATA_COLUMN:
            continue
        wrong.extend(f"{module} imports {target}" for target in _imports(path, module)
                     if _layer(target) in EXECUTION_COLUMN)
    assert not wrong, "\n".join(wrong)


def test_the_pipeline_stands_below_its_several_devices_wing():
    # pipeline.py imported replicas.py and stages.py, which import it: a circle, closed when they
    # moved to pipeline/several/ and registered themselves by split (ARCHITECTURE.md 2.1).  Only
    # the package's facade re-exports the wing.
    wrong = []
    for path in sorted((PACKAGE / "pipeline").glob("*.py")):
        module = f"aclpipe.pipeline.{path.stem}"
        if path.stem != "__init__":
            wrong.extend(f"{module} imports {target}" for target in _imports(path, module)
                         if target.startswith("aclpipe.pipeline.several"))
    assert not wrong, "\n".join(wrong)


def _imports_sim_backend(path: Path) -> bool:
    """Whether a module of ``aclpipe/backends/sim/`` imports ``backend.py`` (``from .backend import
    ...``, ``from . import backend`` or absolutely), type-checking-only imports too."""
    facade = "aclpipe.backends.sim.backend"
    if facade in _imports(path, "aclpipe.backends.sim." + path.stem):
        return True
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module in (None, "aclpipe.backends.sim"):
            if any(alias.name == "backend" for alias in node.names):
                return True
    return False


def test_no_part_of_the_simulator_imports_its_facade():
    """ARCHITECTURE.md 3.1: the simulator's parts see the device through ``sim/core.py``'s protocols,
    and only ``sim/__init__.py`` imports ``sim/backend.py`` (which imports them all), so the circle
    it once closed with ``capture``, ``executor``, ``peer`` and ``stream`` stays open."""
    sim = PACKAGE / "backends" / "sim"
    wrong = [path.name for path in sorted(sim.glob("*.py"))
             if path.name not in ("backend.py", "__init__.py") and _imports_sim_backend(path)]
    assert not wrong, (f"these modules of aclpipe/backends/sim/ import backend.py: {wrong}; type against "
                       "sim/core.py's SimCore or SimDevice instead")


def test_every_pipeline_module_and_the_workspaces_have_their_own_test_file():
    tests = Path(__file__).resolve().parent
    missing = []
    for path in sorted((PACKAGE / "pipeline").rglob("*.py")):
        folder = tests / "pipeline" / path.parent.relative_to(PACKAGE / "pipeline")  # several/: tests/pipeline/several/
        if path.stem != "__init__" and not list(folder.glob(f"test_{path.stem}*.py")):
            missing.append(str(path.relative_to(PACKAGE.parent)))
    if not (tests / "runtime" / "test_workspaces.py").exists():
        missing.append("aclpipe/runtime/workspaces")
    assert not missing, f"no test file for {missing}"

"""The real Ascend NPU backend (``"ascend"``): CANN's C API through cffi; see :class:`AscendBackend`.

Importing this package loads nothing: the CANN libraries are found and loaded when a device
is opened (``open_device("ascend:0")``), from ``ACLPIPE_ASCEND_LIB`` or
``$ASCEND_HOME_PATH/lib64``; when they are missing that raises :class:`LookupError` saying
what to install or set.
"""

from typing import TYPE_CHECKING

from .backend import HOST_FUNC_MODES, AscendBackend
from .library import INSTALL_HINT, library_directory, load_library, opapi_libraries

backend_class = AscendBackend

if TYPE_CHECKING:  # the binding implements the backend contract
    from ..protocol import Backend

    _check: type[Backend] = AscendBackend

__all__ = [
           "HOST_FUNC_MODES",
           "INSTALL_HINT",
           "AscendBackend",
           "backend_class",
           "library_directory",
           "load_library",
           "opapi_libraries",
]

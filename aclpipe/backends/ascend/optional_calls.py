"""A family of optional runtime calls of one device (the stream-ordered allocator, conditional
tasks): present when the loaded CANN has every symbol of the family and the product the
feature; otherwise every call is refused with 207000 (feature not supported) before the
runtime is asked, saying what the device lacks."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...errors import error_from_code

if TYPE_CHECKING:
    from .library import CannLibrary
    from .streams import AscendStream

__all__ = ["OptionalCalls"]


class OptionalCalls:
    """The calls of one optional family on one device.

    Parameters
    ----------
    library:
        The loaded CANN libraries.
    index:
        The device.
    enter:
        Makes the device's context current on the calling thread.
    check_stream:
        Refuses a stream of another device, or a destroyed one.
    available:
        Whether the library has the calls and the product the feature.
    """

    #: What a device without the family lacks, and where that is documented (the refusal's text).
    lacking = "these calls"

    def __init__(self, library: CannLibrary, index: int, enter: Callable[[], None],
                 check_stream: Callable[[AscendStream], None], available: bool):
        self.library = library
        self.index = index
        self._enter = enter
        self._check_stream = check_stream
        self.available = available

    def _need(self, call: str) -> Any:
        """The runtime library, with the device's context current; 207000 without the family."""
        if not self.available:
            raise error_from_code(207000, f"{call}: ascend:{self.index} has no {self.lacking}")
        self._enter()
        return self.library.runtime

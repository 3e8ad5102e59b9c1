"""The simulated NPU backend (``"sim"``): see :class:`SimBackend`."""

from typing import TYPE_CHECKING

from .backend import SimBackend
from .engines import ATLAS_A2, SPECS, Cost, DeviceSpec
from .faults import FaultRule

backend_class = SimBackend

if TYPE_CHECKING:  # the simulator implements the whole contract, every optional part included
    from ..protocol import FaultInjection, GraphCapture, Latching, Tracing

    _check: tuple[type[GraphCapture], type[Tracing], type[FaultInjection], type[Latching]] = (
        SimBackend, SimBackend, SimBackend, SimBackend)
    from ..protocol import PeerAccess

    _peers: type[PeerAccess] = SimBackend

__all__ = ["ATLAS_A2", "SPECS", "Cost", "DeviceSpec", "FaultRule", "SimBackend", "backend_class"]

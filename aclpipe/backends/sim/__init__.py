"""The simulated NPU backend (``"sim"``): see :class:`SimBackend`."""

from .backend import SimBackend
from .engines import ATLAS_A2, SPECS, Cost, DeviceSpec
from .faults import FaultRule

backend_class = SimBackend

__all__ = ["SimBackend", "DeviceSpec", "ATLAS_A2", "SPECS", "Cost", "FaultRule", "backend_class"]

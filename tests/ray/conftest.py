"""A local Ray cluster for the tests that need one: two CPUs and two simulated NPUs.

Started once per test module that asks for it (it takes seconds) and shut down after that
module's last test, so no Ray process outlives the tests that need one.  Workers inherit this
process's environment, so they import this checkout of aclpipe and run the simulator with the
sanitizer on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

ray = pytest.importorskip("ray", reason="the Ray tests need the ray extra: pip install 'aclpipe[ray]'")


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    # Ray probes for real NPUs (CANN's python package) when told about "NPU" resources and logs
    # a traceback when there are none; simulated NPUs are what these tests use.
    logging.getLogger("ray._private.accelerators.npu").setLevel(logging.CRITICAL)
    ray.init(num_cpus=2, resources={"NPU": 2}, include_dashboard=False, logging_level="ERROR",
             log_to_driver=False, namespace="aclpipe-tests")
    try:
        yield
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()

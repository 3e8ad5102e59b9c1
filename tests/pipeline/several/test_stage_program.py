"""A signature split into stages: one Program per device, boundaries wired as peer pushes and
waits, every slot of every stage taken together; close frees it all."""

from __future__ import annotations

import numpy as np
from pipeline_graphs import live_device_state, mlp

import aclpipe
from aclpipe.pipeline.several.stage_program import StageProgram


def test_a_stage_program_wires_every_boundary_of_every_slot_and_frees_it_all():
    devices = [aclpipe.open_device("sim:0"), aclpipe.open_device("sim:1")]
    try:
        devices[0].enable_peer_access(devices[1])
        devices[1].enable_peer_access(devices[0])
        before = [live_device_state(device) for device in devices]
        streams = [[device.create_stream() for _ in range(4)] for device in devices]
        constants: list[dict[str, aclpipe.DeviceBuffer]] = [{}, {}]
        graph = mlp()
        key = graph.signature(x=(4, 32))
        program = StageProgram.build(graph, key, devices, streams, constants, depth=2, max_streams=2,
                                     memory_fraction=0.9)
        stages = program.partition.stages
        assert len(program.programs) == 2 and len(program.slots) == 2
        sends = sum(len(stage.sends) for stage in stages)
        assert sends >= 1 and len(program.events) == sends * len(program.slots)  # one event per boundary per slot
        assert all(len(slot.slots) == 2 for slot in program.slots)
        assert sum(row["nodes"] for row in program.describe()) == len(graph.bind(x=(4, 32)).nodes)
        assert sum(len(names) for names in program.graph_outputs) == len(graph.outputs)
        program.close()
        for stage_constants in constants:
            for buffer in stage_constants.values():
                buffer.close()
        for device_streams in streams:
            for stream in device_streams:
                stream.close()
        assert [live_device_state(device) for device in devices] == before
    finally:
        for device in devices:
            device.close()


def test_outputs_of_a_staged_run_match_one_device():
    async def main() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
        async with aclpipe.Pipeline(mlp(), device="sim:0,1", split="stages") as staged:
            split = await staged.run(x=x)
        async with aclpipe.Pipeline(mlp(), device="sim:2") as single:
            whole = await single.run(x=x)
        return split, whole

    import anyio

    split, whole = anyio.run(main)
    np.testing.assert_allclose(split["y"], whole["y"], rtol=1e-5)

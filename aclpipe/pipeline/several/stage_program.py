"""One input signature split into stages: a :class:`Program` per stage device, wired together.

Building (:meth:`StageProgram.build`): bind the graph, cut it (:func:`~aclpipe.plan.partition_graph`,
each device's budget a share of its free memory, ``depth`` slots of activations per stage),
plan each stage's bound graph on its device's streams, upload the stage's constants there
(each device holds only its own stages' weights) and build a :class:`Program` per stage.

Wiring: a *slot* of a stage program is slot ``i`` of every stage, taken and given back
together.  For every value stage ``k`` sends to stage ``j``, slot ``i`` of stage ``k`` copies
it straight into slot ``i`` of stage ``j`` over the peer link (:meth:`Program.push_output`)
and records an event of device ``k``; slot ``i`` of stage ``j`` waits for that event where it
would have copied the value from the host (:meth:`Program.pull_input`).  Enqueueing the
stages in order puts each record before the waits on it.  A slot comes back only once every
stage has passed it, so the next run's copies into it never overtake this run's reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...plan import Plan, make_plan
from ...plan.partition import Partition, boundary_key, partition_graph, stage_graph
from ..program import Program, Slot

if TYPE_CHECKING:
    from ...graph import Graph, Signature
    from ...runtime import Device, DeviceBuffer, Event, Stream
    from ...runtime.workspaces import WorkspaceStrategy

__all__ = ["StageProgram", "StageSlot"]


@dataclass(eq=False)
class StageSlot:
    """Slot ``index`` of every stage's program."""

    index: int
    slots: tuple[Slot, ...]


class StageProgram:
    """The stages of one input signature (see the module docstring)."""

    def __init__(self, partition: Partition, plans: Sequence[Plan], programs: Sequence[Program],
                 events: Sequence[Event], graph_outputs: Sequence[Sequence[str]]):
        self.partition = partition
        self.plans = tuple(plans)
        self.programs = tuple(programs)
        self.events = list(events)
        #: graph outputs each stage copies to the host
        self.graph_outputs = tuple(tuple(names) for names in graph_outputs)
        depth = len(programs[0].slots)
        self.slots = [StageSlot(i, tuple(program.slots[i] for program in programs)) for i in range(depth)]

    @classmethod
    def build(cls, graph: Graph, key: Signature, devices: Sequence[Device],
              streams: Sequence[list[Stream]], constants: Sequence[dict[str, DeviceBuffer]], *, depth: int,
              max_streams: int, memory_fraction: float, reclaimable: Sequence[int] | None = None) -> StageProgram:
        """Cut, plan and prepare ``graph`` for the signature ``key``; ``streams[k]`` and
        ``constants[k]`` are stage ``k``'s device's streams and uploaded constants (shared across
        signatures).  ``reclaimable[k]`` is device memory the caller can free if it must (idle
        programs): the cut may count on it, and an allocation that then fails raises
        :class:`DeviceOutOfMemory` for the caller to free some and try again."""
        bound = graph.bind(**key.bind_arguments())
        extra = reclaimable or [0] * len(devices)
        budgets = [int((device.mem_info().free + more) * memory_fraction) for device, more in zip(devices, extra)]
        partition = partition_graph(bound, budgets, slots=depth)
        plans = [make_plan(stage_graph(bound, partition, k), streams=max_streams) for k in range(len(devices))]
        programs: list[Program] = []
        events: list[Event] = []
        try:
            for k, plan in enumerate(plans):
                for name, array in plan.constants.items():
                    if name not in constants[k]:
                        constants[k][name] = devices[k].upload(np.asarray(array), label=f"constant {name}")
                programs.append(Program(devices[k], plan, constants[k], streams[k], depth))
            _wire(partition, programs, devices, events)
        except BaseException:
            for program in programs:
                program.close()
            for event in events:
                event.close()
            raise
        outputs = [[name for name in plan.outputs if name in graph.outputs] for plan in plans]
        return cls(partition, plans, programs, events, outputs)

    # -- running -----------------------------------------------------------------------------
    def write_inputs(self, slot: StageSlot, arrays: Mapping[str, np.ndarray]) -> None:
        for program, stage_slot in zip(self.programs, slot.slots):
            program.write_inputs(stage_slot, {name: arrays[name] for name in program.plan.inputs if name in arrays})

    async def enqueue(self, slot: StageSlot, run: int, workspaces: Sequence[WorkspaceStrategy]) -> None:
        """Enqueue the run's work stage by stage, in order (a boundary's record before its waits).
        A failure part way raises; the stages before it were enqueued whole, the later ones not
        at all, and the caller completes every stage either way."""
        for program, stage_slot, stage_workspaces in zip(self.programs, slot.slots, workspaces):
            await program.enqueue(stage_slot, run, stage_workspaces)

    def read_outputs(self, slot: StageSlot) -> dict[str, np.ndarray]:
        result: dict[str, np.ndarray] = {}
        for plan, stage_slot, names in zip(self.plans, slot.slots, self.graph_outputs):
            for name in names:
                desc = plan.values[plan.outputs[name]].desc
                result[name] = stage_slot.staging_out[name].numpy(desc.dtype, desc.shape).copy()
        return result

    def run_error(self, slot: StageSlot) -> BaseException | None:
        """The first error a stage's ``done`` event reports for the slot's last run."""
        for program, stage_slot in zip(self.programs, slot.slots):
            error = program.run_error(stage_slot)
            if error is not None:
                return error
        return None

    # -- reporting and closing ---------------------------------------------------------------
    @property
    def executors(self) -> int:
        return sum(len(slot.executors) for program in self.programs for slot in program.slots)

    @property
    def arena_bytes(self) -> int:
        return sum(plan.arena_size * len(self.slots) for plan in self.plans)

    def describe(self) -> list[dict[str, Any]]:
        """Per stage: its nodes, modelled cost, memory estimate and bytes it sends per run."""
        sizes = {name: p.values[name].desc.nbytes for p in self.plans for name in p.values}
        return [{"nodes": len(stage.nodes), "cost_us": stage.cost, "constant_bytes": stage.constant_bytes,
                 "sends_bytes": sum(sizes.get(value, 0) for value, _ in stage.sends)}
                for stage in self.partition.stages]

    def close(self) -> None:
        """Free every stage's program and the boundary events; the streams were synchronized."""
        for program in self.programs:
            program.close()
        for event in self.events:
            event.close()
        self.events.clear()


def _wire(partition: Partition, programs: Sequence[Program], devices: Sequence[Device],
          events: list[Event]) -> None:
    """Turn every boundary of every slot into a push from the sender and a wait at the receiver."""
    for index in range(len(programs[0].slots)):
        for stage in partition.stages:
            sender = programs[stage.index]
            for value, to in stage.sends:
                receiver = programs[to]
                sent = devices[stage.index].create_event()
                events.append(sent)
                target = receiver.address(receiver.slots[index], value)
                sender.push_output(sender.slots[index], boundary_key(value, to), target, sent)
                receiver.pull_input(receiver.slots[index], value, sent)

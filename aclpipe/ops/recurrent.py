"""Recurrent layers: ``LSTM``, ``GRU`` and ``RNN`` over a whole sequence (ONNX's definitions).

Inputs, in ONNX's order (absent optionals are None):

- ``X`` ``[T, B, I]`` (``layout=1``: ``[B, T, I]``); ``W`` ``[D, G*H, I]`` and ``R``
  ``[D, G*H, H]`` with ``G`` gates (LSTM 4: i, o, f, c; GRU 3: z, r, h; RNN 1);
- ``B`` ``[D, 2*G*H]`` (input then recurrence biases), ``sequenceLens`` ``[B]`` (int32 or
  int64), ``initialH`` ``[D, B, H]`` (``layout=1``: ``[B, D, H]``), and for LSTM ``initialC``
  (like ``initialH``) and the peepholes ``P`` ``[D, 3*H]`` (i, o, f).

``D`` is 2 for ``direction="bidirectional"``, else 1 (``"forward"`` or ``"reverse"``).
Outputs: ``Y`` ``[T, D, B, H]`` (``layout=1``: ``[B, T, D, H]``), ``YH`` and (LSTM) ``YC``
like ``initialH``.  Attributes: ``hiddenSize`` (``H``, required), ``direction``,
``activations`` (per direction: LSTM f, g, h; GRU f, g; RNN f; names as ONNX spells them,
defaults Sigmoid/Tanh/Tanh), ``activationAlpha``/``activationBeta`` (consumed in order by the
activations that take them), ``clip`` (pre-activation clipping, None: off), and
``inputForget`` (LSTM: ``f = 1 - i``), ``linearBeforeReset`` (GRU), ``layout``.

A batch entry whose sequence length ``L`` is shorter than ``T`` stops after ``L`` steps (the
reverse direction starts at step ``L - 1``): its later ``Y`` rows are 0 and its final state is
the one after step ``L`` (zeros when ``L`` is 0, as onnxruntime gives).  A length outside
``[0, T]`` fails the launch with 361001.

Phase one sizes the workspace for the input projections of every step (``X @ W^T`` plus the
input bias, for both directions), the states and the gates of one step, all in float32:
``(T*B*D*G*H + (2 + G)*B*H) * 4`` bytes (LSTM: one more ``B*H`` for the cell state).  The kernel
computes there and stores the results once.  Inputs are float32, float16 or bfloat16.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import error_from_code
from ..tensor import TensorDesc
from .base import OpPlan, OpSpec, op_error
from .checks import (
    FLOATS,
    argument,
    compute_view,
    need,
    need_dtype,
    need_output,
    scratch_layout,
    scratch_view,
    store,
)
from .index import INDEX_DTYPES
from .registry import register
from .shape import int_attr
from .smooth import softplus

__all__ = ["ACTIVATIONS", "RecurrentOp"]

Activation = Callable[[np.ndarray], np.ndarray]
#: One direction's recurrence weight R, bias B and (LSTM) peepholes P, in the compute dtype.
_Weights = tuple[np.ndarray, np.ndarray | None, np.ndarray | None]

#: ONNX activation name -> (takes alpha, takes beta, default alpha, default beta, function(alpha, beta)).
ACTIVATIONS: dict[str, tuple[bool, bool, float, float, Callable[[float, float], Activation]]] = {
    "Sigmoid": (False, False, 0.0, 0.0, lambda a, b: lambda x: 1.0 / (1.0 + np.exp(-x))),
    "Tanh": (False, False, 0.0, 0.0, lambda a, b: np.tanh),
    "Relu": (False, False, 0.0, 0.0, lambda a, b: lambda x: np.maximum(x, 0)),
    "Affine": (True, True, 1.0, 0.0, lambda a, b: lambda x: a * x + b),
    "LeakyRelu": (True, False, 0.01, 0.0, lambda a, b: lambda x: np.where(x >= 0, x, a * x)),
    "ThresholdedRelu": (True, False, 1.0, 0.0, lambda a, b: lambda x: np.where(x > a, x, 0)),
    "ScaledTanh": (True, True, 1.0, 1.0, lambda a, b: lambda x: a * np.tanh(b * x)),
    "HardSigmoid": (True, True, 0.2, 0.5, lambda a, b: lambda x: np.clip(a * x + b, 0, 1)),
    "Elu": (True, False, 1.0, 0.0, lambda a, b: lambda x: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0)))),
    "Softsign": (False, False, 0.0, 0.0, lambda a, b: lambda x: x / (1 + np.abs(x))),
    "Softplus": (False, False, 0.0, 0.0, lambda a, b: lambda x: softplus(x, 1.0, np.inf)),
}
_DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}


@dataclass(frozen=True)
class _Cell:
    """What differs between the three layers."""

    gates: int
    functions: int  # activations per direction
    defaults: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


_CELLS = {
    "LSTM": _Cell(4, 3, ("Sigmoid", "Tanh", "Tanh"), ("X", "W", "R", "B", "sequenceLens", "initialH", "initialC", "P"),
                  ("Y", "YH", "YC")),
    "GRU": _Cell(3, 2, ("Sigmoid", "Tanh"), ("X", "W", "R", "B", "sequenceLens", "initialH"), ("Y", "YH")),
    "RNN": _Cell(1, 1, ("Tanh",), ("X", "W", "R", "B", "sequenceLens", "initialH"), ("Y", "YH")),
}


@dataclass(frozen=True)
class _Call:
    x: TensorDesc
    steps: int
    batch: int
    hidden: int
    directions: int
    reverse: bool
    layout: int
    activations: tuple[Activation, ...]
    clip: float | None
    flag: bool  # LSTM inputForget / GRU linearBeforeReset

    def y_shape(self) -> tuple[int, ...]:
        if self.layout:
            return (self.batch, self.steps, self.directions, self.hidden)
        return (self.steps, self.directions, self.batch, self.hidden)

    def state_shape(self) -> tuple[int, ...]:
        if self.layout:
            return (self.batch, self.directions, self.hidden)
        return (self.directions, self.batch, self.hidden)


class RecurrentOp(OpSpec):
    """One of ``LSTM``, ``GRU``, ``RNN``; see the module docs."""

    def __init__(self, name: str):
        self.name = name
        self.cell = _CELLS[name]
        self.inputs = self.cell.inputs
        self.outputs = self.cell.outputs
        self.attrs = {"hiddenSize": None, "direction": "forward", "activations": None, "activationAlpha": None,
                      "activationBeta": None, "clip": None, "layout": 0,
                      **({"inputForget": 0} if name == "LSTM" else {}),
                      **({"linearBeforeReset": 0} if name == "GRU" else {})}

    # -- phase one ---------------------------------------------------------------------------
    def _call(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> _Call:
        op, gates = self.name, self.cell.gates
        x = need(op, "X", argument(inputs, 0))
        need_dtype(op, "X", x, FLOATS)
        if x.ndim != 3:
            raise op_error(op, "X", "3-D [T, B, I] ([B, T, I] with layout=1)", list(x.shape))
        layout = int_attr(op, "layout", attrs.get("layout", 0) or 0)
        if layout not in (0, 1):
            raise op_error(op, "layout", "0 ([T, B, ...]) or 1 ([B, T, ...])", layout)
        steps, batch = (x.shape[1], x.shape[0]) if layout else (x.shape[0], x.shape[1])
        if attrs.get("hiddenSize") is None:
            raise op_error(op, "hiddenSize", "an integer >= 1", "NULL", null=True)
        hidden = int_attr(op, "hiddenSize", attrs.get("hiddenSize"), minimum=1)
        direction = attrs.get("direction", "forward") or "forward"
        if direction not in _DIRECTIONS:
            raise op_error(op, "direction", "'forward', 'reverse' or 'bidirectional'", repr(direction))
        directions = _DIRECTIONS[direction]
        assert hidden is not None
        state = (batch, directions, hidden) if layout else (directions, batch, hidden)
        expected = {"W": (directions, gates * hidden, x.shape[2]), "R": (directions, gates * hidden, hidden),
                    "B": (directions, 2 * gates * hidden), "initialH": state, "initialC": state,
                    "P": (directions, 3 * hidden)}
        for index, name in enumerate(self.inputs[1:], start=1):
            tensor = argument(inputs, index)
            if tensor is None and name in ("W", "R"):
                need(op, name, tensor)
            if tensor is None:
                continue
            if name == "sequenceLens":
                need_dtype(op, name, tensor, INDEX_DTYPES)
                if tensor.shape != (batch,):
                    raise op_error(op, name, f"shape [{batch}] (the batch)", list(tensor.shape))
                continue
            need_dtype(op, name, tensor, {x.dtype})
            if tensor.shape != expected[name]:
                raise op_error(op, name, f"shape {list(expected[name])}", list(tensor.shape))
        clip = attrs.get("clip")
        if clip is not None and (isinstance(clip, bool) or not isinstance(clip, (int, float)) or clip <= 0):
            raise op_error(op, "clip", "a number > 0 (or None: no clipping)", repr(clip))
        flag = attrs.get("inputForget" if op == "LSTM" else "linearBeforeReset", 0) or 0
        return _Call(x, steps, batch, hidden, directions, direction == "reverse", layout,
                     self._activations(attrs, directions), None if clip is None else float(clip), bool(flag))

    def _activations(self, attrs: Mapping[str, Any], directions: int) -> tuple[Activation, ...]:
        names = attrs.get("activations") or list(self.cell.defaults) * directions
        if len(names) != self.cell.functions * directions:
            raise op_error(self.name, "activations", f"{self.cell.functions * directions} names "
                           f"({self.cell.functions} per direction)", list(names))
        alphas = list(attrs.get("activationAlpha") or [])
        betas = list(attrs.get("activationBeta") or [])
        functions = []
        for name in names:
            known = next((key for key in ACTIVATIONS if key.lower() == str(name).lower()), None)
            if known is None:
                raise op_error(self.name, "activations", f"names in {sorted(ACTIVATIONS)}", repr(name))
            takes_alpha, takes_beta, alpha, beta, make = ACTIVATIONS[known]
            alpha = float(alphas.pop(0)) if takes_alpha and alphas else alpha
            beta = float(betas.pop(0)) if takes_beta and betas else beta
            functions.append(make(alpha, beta))
        return tuple(functions)

    def infer(self, inputs: Sequence[TensorDesc | None], attrs: Mapping[str, Any]) -> list[TensorDesc | None]:
        call = self._call(inputs, attrs)
        dtype = call.x.dtype
        states = [TensorDesc.contiguous(call.state_shape(), dtype) for _ in self.outputs[1:]]
        return [TensorDesc.contiguous(call.y_shape(), dtype), *states]

    def prepare(self, inputs: Sequence[TensorDesc | None], outputs: Sequence[TensorDesc | None],
                attrs: Mapping[str, Any]) -> OpPlan:
        call = self._call(inputs, attrs)
        if all(out is None for out in outputs):
            raise op_error(self.name, "Y", "at least one output", "none", null=True)
        for index, name in enumerate(self.outputs):
            out = argument(outputs, index)
            if out is not None:
                need_output(self.name, name, out, call.y_shape() if index == 0 else call.state_shape(), call.x.dtype)
        gates, steps, batch, hidden, directions = self.cell.gates, call.steps, call.batch, call.hidden, call.directions
        regions = [steps * directions * batch * gates * hidden * 4, batch * hidden * 4, batch * gates * hidden * 4]
        if self.name == "LSTM":
            regions.append(batch * hidden * 4)
        workspace_size, offsets = scratch_layout(*regions)
        flops = 2.0 * steps * batch * directions * gates * hidden * (call.x.shape[2] + hidden)
        traffic = float(sum(t.nbytes for t in inputs if t is not None) + 2 * workspace_size)
        return OpPlan(_kernel(self.name, call, offsets), workspace_size, flops, traffic, cube=True,
                      variant=f"{self.name.lower()}-{directions}dir")


# -- phase two ---------------------------------------------------------------------------------
@dataclass
class _Scratch:
    """The workspace regions one launch computes in (float32 views of the workspace bytes)."""

    projections: np.ndarray  # [D, T, B, G*H]: X @ W^T + Wb for every step
    state: np.ndarray  # [B, H]
    gates: np.ndarray  # [B, G*H]: H @ R^T of one step
    cell: np.ndarray | None  # [B, H], LSTM only


def _kernel(op: str, call: _Call, offsets: tuple[int, ...]) -> Any:
    gates, steps, batch, hidden = _CELLS[op].gates, call.steps, call.batch, call.hidden

    def kernel(ins: Sequence[np.ndarray | None], outs: Sequence[np.ndarray | None],
               workspace: np.ndarray | None) -> None:
        x = compute_view(_arg(ins, 0), call.x.dtype)
        lengths = _lengths(op, argument(ins, 4), steps, batch)
        scratch = _Scratch(
            scratch_view(workspace, offsets[0], (call.directions, steps, batch, gates * hidden), np.float32),
            scratch_view(workspace, offsets[1], (batch, hidden), np.float32),
            scratch_view(workspace, offsets[2], (batch, gates * hidden), np.float32),
            scratch_view(workspace, offsets[3], (batch, hidden), np.float32) if op == "LSTM" else None)
        y = np.zeros((steps, call.directions, batch, hidden), np.float32)
        finals: list[list[np.ndarray]] = [[], []]
        empty = (lengths == 0)[:, None]  # onnxruntime reports zeros, not the initial state
        for direction in range(call.directions):
            _run_direction(op, call, ins, x.transpose(1, 0, 2) if call.layout else x, lengths, direction,
                           scratch, y)
            finals[0].append(np.where(empty, 0.0, scratch.state))
            if scratch.cell is not None:
                finals[1].append(np.where(empty, 0.0, scratch.cell))
        _store_outputs(outs, y, finals, call)

    return kernel


def _run_direction(op: str, call: _Call, ins: Sequence[np.ndarray | None], x: np.ndarray, lengths: np.ndarray,
                   direction: int, scratch: _Scratch, y: np.ndarray) -> None:
    """One direction over every step: states end in ``scratch``, outputs in ``y[:, direction]``."""
    gates, hidden = _CELLS[op].gates, call.hidden
    w, r, bias, peephole = (None if a is None else compute_view(a, call.x.dtype)[direction] for a in _params(ins, op))
    assert w is not None and r is not None
    projections = scratch.projections[direction]
    np.matmul(x, w.T, out=projections)
    projections += bias[:gates * hidden] if bias is not None else 0.0
    scratch.state[...] = _initial(ins, 5, call, direction)
    if scratch.cell is not None:
        scratch.cell[...] = _initial(ins, 6, call, direction)
    per_direction = _CELLS[op].functions
    functions = call.activations[direction * per_direction:(direction + 1) * per_direction]
    reverse = call.reverse or direction == 1
    for step in range(call.steps - 1, -1, -1) if reverse else range(call.steps):
        # An entry whose sequence ended keeps its state and outputs zeros (its steps past L).
        active = (step < lengths)[:, None]
        np.matmul(scratch.state, r.T, out=scratch.gates)
        new_state, new_cell = _STEPS[op](projections[step], scratch.gates, scratch.state, scratch.cell,
                                         (r, bias, peephole), functions, call, hidden)
        np.copyto(scratch.state, np.where(active, new_state, scratch.state))
        if scratch.cell is not None and new_cell is not None:
            np.copyto(scratch.cell, np.where(active, new_cell, scratch.cell))
        y[step, direction] = np.where(active, scratch.state, 0.0)


def _arg(values: Sequence[np.ndarray | None], index: int) -> np.ndarray:
    value = argument(values, index)
    assert value is not None
    return np.asarray(value)


def _params(ins: Sequence[np.ndarray | None], op: str) -> list[np.ndarray | None]:
    return [argument(ins, 1), argument(ins, 2), argument(ins, 3), argument(ins, 7) if op == "LSTM" else None]


def _lengths(op: str, lens: np.ndarray | None, steps: int, batch: int) -> np.ndarray:
    if lens is None:
        return np.full(batch, steps, np.int64)
    values = np.asarray(lens, np.int64)
    bad = (values < 0) | (values > steps)
    if bad.any():
        position = int(np.argwhere(bad)[0][0])
        raise error_from_code(361001, f"aclnn{op}: sequenceLens[{position}] = {int(values[position])} is out of "
                                      f"range; lengths must lie in [0, {steps}]", {"op": op})
    return values


def _initial(ins: Sequence[np.ndarray | None], index: int, call: _Call, direction: int) -> np.ndarray | float:
    value = argument(ins, index)
    if value is None:
        return 0.0
    values = compute_view(value, call.x.dtype)
    return np.asarray(values[:, direction] if call.layout else values[direction])


def _clip(values: np.ndarray, clip: float | None) -> np.ndarray:
    return values if clip is None else np.clip(values, -clip, clip)


def _lstm_step(projection: np.ndarray, recurrence: np.ndarray, state: np.ndarray, cell: np.ndarray | None,
               weights: _Weights, functions: Sequence[Activation], call: _Call,
               hidden: int) -> tuple[np.ndarray, np.ndarray | None]:
    assert cell is not None
    _, bias, peephole = weights
    f, g, h = functions
    total = projection + recurrence + (bias[4 * hidden:] if bias is not None else 0.0)
    gate_i, gate_o, gate_f, gate_c = (total[:, k * hidden:(k + 1) * hidden] for k in range(4))
    p_i, p_o, p_f = (peephole[k * hidden:(k + 1) * hidden] if peephole is not None else 0.0 for k in range(3))
    i = f(_clip(gate_i + p_i * cell, call.clip))
    forget = 1.0 - i if call.flag else f(_clip(gate_f + p_f * cell, call.clip))
    new_cell = forget * cell + i * g(_clip(gate_c, call.clip))
    o = f(_clip(gate_o + p_o * new_cell, call.clip))
    return o * h(new_cell), new_cell


def _gru_step(projection: np.ndarray, recurrence: np.ndarray, state: np.ndarray, cell: np.ndarray | None,
              weights: _Weights, functions: Sequence[Activation], call: _Call,
              hidden: int) -> tuple[np.ndarray, np.ndarray | None]:
    r, bias, _ = weights
    f, g = functions
    recurrence_bias = bias[3 * hidden:] if bias is not None else np.zeros(3 * hidden, np.float32)
    z = f(_clip(projection[:, :hidden] + recurrence[:, :hidden] + recurrence_bias[:hidden], call.clip))
    reset = f(_clip(projection[:, hidden:2 * hidden] + recurrence[:, hidden:2 * hidden]
                    + recurrence_bias[hidden:2 * hidden], call.clip))
    if call.flag:  # linear_before_reset: the reset gate scales (H R_h^T + Rb_h)
        candidate = projection[:, 2 * hidden:] + reset * (recurrence[:, 2 * hidden:] + recurrence_bias[2 * hidden:])
    else:
        # The reset gate scales H before it meets R_h: (reset * H) @ R_h^T replaces H @ R_h^T.
        candidate = projection[:, 2 * hidden:] + (reset * state) @ r[2 * hidden:].T + recurrence_bias[2 * hidden:]
    new = g(_clip(candidate, call.clip))
    return (1.0 - z) * new + z * state, None


def _rnn_step(projection: np.ndarray, recurrence: np.ndarray, state: np.ndarray, cell: np.ndarray | None,
              weights: _Weights, functions: Sequence[Activation], call: _Call,
              hidden: int) -> tuple[np.ndarray, np.ndarray | None]:
    bias = weights[1]
    total = projection + recurrence + (bias[hidden:] if bias is not None else 0.0)
    return functions[0](_clip(total, call.clip)), None


_STEPS = {"LSTM": _lstm_step, "GRU": _gru_step, "RNN": _rnn_step}


def _store_outputs(outs: Sequence[np.ndarray | None], y: np.ndarray, finals: list[list[np.ndarray]],
                   call: _Call) -> None:
    if argument(outs, 0) is not None:
        store(_arg(outs, 0), y.transpose(2, 0, 1, 3) if call.layout else y)
    for index, states in enumerate(finals, start=1):
        target = argument(outs, index)
        if target is not None and states:
            stacked = np.stack(states)
            store(target, stacked.transpose(1, 0, 2) if call.layout else stacked)


for _name in _CELLS:
    register(RecurrentOp(_name))

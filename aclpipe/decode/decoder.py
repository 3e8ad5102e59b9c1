"""The Decoder: autoregressive generation with continuous batching over a Pipeline.

.. code-block:: python

    async with aclpipe.Decoder("gpt.onnx", max_batch=16, max_len=512) as decoder:
        async for token in decoder.generate([1, 2, 3], max_new_tokens=32, eos_id=2):
            print(token)

Steps.  Every request is a sequence with a cache slot (:mod:`.cache`).  A step is one run of
the model for a batch of sequences: a *prefill* runs the prompts of the requests that joined
(past empty, prompts right-padded to a length bucket), a *decode* step runs one token for
every running sequence at once.  Requests join and leave between steps: a request that
finished (``max_new_tokens`` or ``eos_id``) or was cancelled gives its slot back at once, and
a prefill alternates with decode steps so that it never holds the running sequences up for
more than one step.

Shapes.  A step's batch is padded to a batch bucket, and its past to a cache bucket (the
smallest that holds its longest sequence; shorter sequences' extra positions and the padded
rows are masked by ``attention_mask``, so every sequence computes exactly what it would
alone).  A prefill runs the joining sequences only; row ``r`` of a decode step is cache
slot ``r`` (:mod:`.cache`), up to the batch bucket that holds the highest slot in use, and a
free slot below it is a masked row that writes only to the scratch slot; before a decode step, sequences in
high slots move down into free ones when that shrinks its batch bucket.  Each
(batch bucket, cache bucket) is one input signature of the pipeline, prepared once and
(where the device captures) captured once; the buckets bound how many there are.

Who runs the steps.  No background task: the callers reading tokens take turns.  One whose
next token is not ready runs the next step (shielded: a step, once started, ends; a caller
cancelled meanwhile leaves its request cancelled after it); the others wait for it.  So the
decoder works under asyncio and trio alike, and from the blocking wrapper's loop thread.

Where the cache lives.  On the device (:mod:`.cache`): each ``Concat(past, new)`` of the
model is rewritten into an in-place write of the new positions into each sequence's slot at
its length (:mod:`.cache_graph`: CANN's ``aclnnInplaceScatterUpdate``), the cache each writes is bound to its
layer's buffer (:meth:`aclpipe.Pipeline.bind_storage`), and a decode step's attention reads
it there.  A step copies its token ids, mask, positions and writes to the device and its
logits back: bytes that grow with the batch, the new tokens and the mask's width, never with
the cache, which never crosses to the host and which no step copies.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Sequence
from typing import Any, Self, cast

import anyio
import anyio.lowlevel
import numpy as np
import onnx

from ..backends import is_device_list
from ..errors import ClosedResourceError, UnsupportedOpError
from ..onnx.importer import load_onnx
from ..onnx.onnx_graph import OnnxGraph
from ..ops.scatter_update import UNSUPPORTED_ON
from ..pipeline import Pipeline
from ..pipeline.affinity import refuse_inside_event_loop
from ..pipeline.sync import blocking_loop
from ..plan import make_plan
from ..runtime import Device, open_device
from .buckets import bucket_for, check_buckets
from .budget import CapturePlan, bucket_use, capture_plan
from .cache import KVCache
from .cache_graph import KV_WRITES, CacheGraph
from .errors import PromptTooLongError
from .kv_pattern import KVLayout, read_kv_layout, step_model
from .request import Generation, Request
from .sampling import Sampler

__all__ = ["Decoder"]

DecoderModel = str | os.PathLike[str] | bytes | onnx.ModelProto | OnnxGraph


class Decoder:
    """Generate tokens from a decoder model, many requests at once.

    Parameters
    ----------
    model:
        An ONNX decoder in the optimum / onnxruntime-genai convention (:mod:`.kv_pattern`): a
        path, bytes, an ``onnx.ModelProto`` or a graph from :func:`aclpipe.load_onnx`.
    device:
        As for :class:`~aclpipe.Pipeline`: a device, a name, None, or several devices (a list,
        ``"sim:0,1"``): then one decoder per device, each request on one of them
        (:class:`~aclpipe.decode.replicas.DecoderReplicas`: a sequence's cache lives on one device).
    max_batch:
        Sequences generated at once (cache slots); more requests wait for a free slot.
    max_len:
        Positions per sequence: prompt plus generated tokens (the last one excepted).
    batch_buckets, cache_buckets:
        Batch sizes and cache lengths steps are padded up to (default: powers of two up to
        ``max_batch``, and from 16 up to ``max_len``); prompts are padded to a cache bucket too.
    streams:
        Compute streams of the pipeline that runs the steps.
    max_programs:
        Prepared step programs kept at once (default: every bucket's, or as many as the device's
        stream, event and memory budget left holds at once: see :mod:`aclpipe.decode.budget`).

    Notes
    -----
    The KV cache lives on the device (:mod:`aclpipe.decode.cache`), appended to in place by
    the steps.  A request whose iterator is dropped
    without being closed keeps its slot until it reaches ``max_new_tokens`` or ``eos_id``:
    close it (``await gen.aclose()``, or ``async with decoder.generate(...) as gen``) to free
    the slot at once.  The async API serves one event loop at a time, like the
    :class:`~aclpipe.Pipeline` beneath it; :meth:`generate_sync` serves any number of threads.
    """

    def __new__(cls, model: DecoderModel, *args: Any, **options: Any) -> Self:
        # Several devices: a decoder per device (the cache lives on one), behind the same API.
        if cls is Decoder and is_device_list(options.get("device")):
            from .replicas import DecoderReplicas

            return cast(Self, object.__new__(DecoderReplicas))
        return object.__new__(cls)

    def __init__(self, model: DecoderModel, *, device: Device | str | Sequence[Device | str] | None = None,
                 max_batch: int = 8, max_len: int = 256, batch_buckets: Sequence[int] | None = None,
                 cache_buckets: Sequence[int] | None = None, streams: int = 2, max_programs: int | None = None):
        for label, value in (("max_batch", max_batch), ("max_len", max_len)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{label} must be a positive int, got {value!r}")
        if not (device is None or isinstance(device, (Device, str))) or is_device_list(device):
            raise ValueError(f"one decoder runs on one device (its KV cache lives there), got {device!r}; "
                             "Decoder(model, device=[...]) makes one per device")
        graph = model if isinstance(model, OnnxGraph) else load_onnx(model)
        self.layout: KVLayout = read_kv_layout(graph.model)
        self.max_batch = max_batch
        self.max_len = max_len
        self.batch_buckets = check_buckets("batch_buckets", batch_buckets, max_batch, 1)
        self.cache_buckets = check_buckets("cache_buckets", cache_buckets, max_len, 16)
        # Steps return the logits only; each Concat(past, new) appends to the cache in place.
        step = load_onnx(step_model(graph.model, self.layout), name=graph.name, limits=graph.limits)
        self.graph = CacheGraph(step, self.layout, slots=max_batch, capacity=KVCache.capacity_for(max_len))
        # Opened here (and closed by aclose) so that the cache and the programs are counted
        # against its budget before the pipeline is made.
        opened = device if isinstance(device, Device) else open_device(device)
        owns_device = opened is not device
        cache: KVCache | None = None
        try:
            _refuse_products_without_the_cache_write(opened)
            cache = KVCache(self.layout, max_batch, max_len, opened)
            if max_programs is None:
                max_programs = self._fitting_programs(self.graph, opened, streams)
            self.pipeline = Pipeline(self.graph, opened, streams=streams, depth=1, max_programs=max_programs)
            for past, cached in self.graph.cache_values.items():
                self.pipeline.bind_storage(cached, cache.buffers[past])
        except BaseException:
            if cache is not None:
                cache.close()
            if owns_device:
                opened.close()
            raise
        self.cache = cache
        self._owned_device = opened if owns_device else None
        self.max_programs = max_programs
        self._waiting: collections.deque[Request] = collections.deque()
        self._running: list[Request] = []
        self._stepping: anyio.Event | None = None
        self._stepping_now: set[int] = set()  # request numbers in the step being run
        self._last_was_prefill = False
        self._requests = 0
        self._closed = False
        self.steps = {"prefill": 0, "decode": 0}
        self.tokens_made = 0
        #: Bytes the steps copied to the device (their inputs) and back (their logits).
        self.copied = {"h2d": 0, "d2h": 0}
        self.moves = 0  # sequences moved down to a lower slot (_compact)

    # -- step programs and the device's budget (decode.budget) -------------------------------------
    def signatures(self) -> list[tuple[str, int, int, int]]:
        """(kind, batch, seq, past) of every step program the buckets allow: prefills of every
        batch bucket and prompt bucket, decode steps of every batch bucket and cache bucket."""
        return ([("prefill", batch, seq, 0) for batch in self.batch_buckets for seq in self.cache_buckets]
                + [("decode", batch, 1, past) for batch in self.batch_buckets for past in self.cache_buckets])

    def input_shapes(self, batch: int, seq: int, past: int) -> dict[str, tuple[int, ...]]:
        """The step's input shapes for a batch of ``batch`` rows of ``seq`` new tokens after ``past``."""
        shapes: dict[str, tuple[int, ...]] = {"input_ids": (batch, seq), "attention_mask": (batch, past + seq),
                                              KV_WRITES: (batch, 2)}
        if self.layout.position_ids:
            shapes["position_ids"] = (batch, seq)
        return shapes

    def _fitting_programs(self, graph: CacheGraph, device: Device, streams: int) -> int:
        """Programs held at once, so that any of them fit the device's budget: counted from the
        largest prefill and decode signatures, which bound the others (same graph, smaller shapes)."""
        signatures = self.signatures()
        bounds = {kind: bucket_use(kind, batch, seq, past, make_plan(graph.bind(**self.input_shapes(batch, seq, past)),
                                                                     streams=streams,
                                                                     external=graph.cache_values.values()),
                                   event_errors=device.capabilities.event_errors)
                  for kind, batch, seq, past in (("prefill", self.max_batch, self.max_len, 0),
                                                 ("decode", self.max_batch, 1, self.max_len))}
        uses = tuple(bounds[kind] for kind, *_ in signatures)
        # The pipeline's own streams (compute, H2D, D2H, one replay) are booked once it is made.
        return min(len(signatures), capture_plan(uses, device, reserved_streams=streams + 3).max_programs)

    def capture_plan(self) -> CapturePlan:
        """Every bucket's program (planned now: the pipeline keeps the plans for preparing) and
        what it holds, against the device's budget left (:mod:`aclpipe.decode.budget`)."""
        device = self.pipeline.device
        uses = tuple(bucket_use(kind, batch, seq, past, self.pipeline.plan_for(**self.input_shapes(batch, seq, past)),
                                event_errors=device.capabilities.event_errors)
                     for kind, batch, seq, past in self.signatures())
        return capture_plan(uses, device)

    def prepare(self) -> None:
        """Prepare (and capture, where the device captures) the step programs up front, up to
        ``max_programs`` of them, decode steps of the largest batches first: the steps they serve
        then run from the first request without phase one or capture on the way."""
        signatures = self.signatures()
        order = sorted(signatures, key=lambda sig: (sig[0] != "decode", -sig[1], sig[3]))
        for _, batch, seq, past in order[:self.max_programs]:
            self.pipeline.prepare(**self.input_shapes(batch, seq, past))

    # -- requests ---------------------------------------------------------------------------
    def generate(self, prompt_ids: Sequence[int] | np.ndarray, max_new_tokens: int, *, eos_id: int | None = None,
                 temperature: float = 0.0, top_k: int | None = None, seed: int | None = None) -> Generation:
        """Start a request; returns an async iterator of its tokens (greedy unless ``temperature``
        > 0, then sampled from the ``top_k`` most likely with a generator seeded by ``seed``).

        Raises
        ------
        PromptTooLongError
            The prompt and ``max_new_tokens`` do not fit in ``max_len`` (nothing started).
        ValueError
            An empty prompt, token ids that are not ints, ``max_new_tokens`` < 1.
        ClosedResourceError
            The decoder is closed.
        """
        if self._closed:
            raise ClosedResourceError("the decoder is closed")
        prompt = _prompt(prompt_ids)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
        if len(prompt) + max_new_tokens - 1 > self.max_len:
            raise PromptTooLongError(len(prompt), max_new_tokens, self.max_len)
        self._requests += 1
        request = Request(self._requests, prompt, max_new_tokens, eos_id, Sampler(temperature, top_k, seed))
        self._waiting.append(request)
        return Generation(self, request)

    @property
    def active(self) -> int:
        """Requests holding a cache slot."""
        return len(self._running)

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot."""
        return len(self._waiting)

    async def _next_token(self, request: Request) -> int | None:
        """The request's next token (None when it has no more), running steps while it waits."""
        while True:
            if request.ready:
                return request.ready.popleft()
            if request.error is not None:
                raise request.error
            if request.done or request.cancelled:
                return None
            if self._closed:
                raise ClosedResourceError("the decoder was closed before the request finished")
            if self._stepping is None:
                await self._lead_step()
            else:
                await self._stepping.wait()

    async def _lead_step(self) -> None:
        event = self._stepping = anyio.Event()
        try:
            if self._waiting:
                # Let the tasks that are ready run first: requests made in the same tick (a
                # burst) then join this prefill together instead of the next one.  Not before a
                # decode step: enqueued at once, it runs while the readers take their tokens.
                await anyio.lowlevel.checkpoint()
            # Once started, a step ends: its sequences' caches and tokens must stay consistent.
            with anyio.CancelScope(shield=True):
                await self._step()
        finally:
            self._stepping = None
            event.set()

    def _cancel(self, request: Request) -> None:
        """Stop a request; its slot comes back now, or when the step that runs it ends."""
        if request.done or request.cancelled:
            return
        request.cancelled = True
        if request in self._waiting:
            self._waiting.remove(request)
        elif request.number not in self._stepping_now:
            self._leave(request)

    def _leave(self, request: Request) -> None:
        request.done = True
        if request.slot is not None:
            self.cache.release(request.slot)
            request.slot = None
        if request in self._running:
            self._running.remove(request)

    # -- steps -------------------------------------------------------------------------------
    async def _step(self) -> None:
        """One prefill (of the requests that can join) or one decode step (of every running one)."""
        if self._waiting and self.cache.free and (not self._running or not self._last_was_prefill):
            joining: list[Request] = []
            while self._waiting and self.cache.free and len(joining) < self.max_batch:
                request = self._waiting.popleft()
                request.slot = self.cache.acquire()
                joining.append(request)
            self._running.extend(joining)
            self._last_was_prefill = True
            self.steps["prefill"] += 1
            await self._run(joining, [request.prompt for request in joining], past_len=0)
        elif self._running:
            self._last_was_prefill = False
            self.steps["decode"] += 1
            self._compact()
            batch = list(self._running)
            lengths = [int(self.cache.lengths[request.slot]) for request in batch if request.slot is not None]
            await self._run(batch, [[request.last_token] for request in batch],
                            past_len=bucket_for(max(lengths), self.cache_buckets))

    def _compact(self) -> None:
        """Move the sequences in the highest slots down into free ones while the running
        sequences fit a smaller batch bucket than the highest slot in use (:meth:`KVCache.move`):
        a decode step's rows are its slots, so this keeps them to the running sequences'."""
        target = bucket_for(len(self._running), self.batch_buckets)
        while bucket_for(self.cache.rows_in_use, self.batch_buckets) > target:
            top = max(self._running, key=lambda request: -1 if request.slot is None else request.slot)
            assert top.slot is not None
            top.slot = self.cache.move(top.slot)
            self.moves += 1

    async def _run(self, batch: list[Request], new_ids: list[list[int]], past_len: int) -> None:
        slots = [request.slot for request in batch if request.slot is not None]
        assert len(slots) == len(batch)
        feeds, rows = self._feeds(slots, new_ids, past_len)
        self._stepping_now = {request.number for request in batch}
        try:
            outputs = await self.pipeline.run(**feeds)
        except Exception as error:  # noqa: BLE001 - the step's requests fail with it; others go on
            for request in batch:
                request.error = error
                self._leave(request)
            return
        finally:
            self._stepping_now = set()
        counts = np.asarray([len(ids) for ids in new_ids], np.int64)
        self.cache.lengths[np.asarray(slots, np.int64)] += counts  # the step wrote them on the device
        logits = outputs["logits"]
        self.copied["h2d"] += sum(array.nbytes for array in feeds.values())
        self.copied["d2h"] += logits.nbytes
        # Each sequence's logits at its last new token; the greedy picks in one call for the batch.
        last = logits[rows, counts - 1]
        greedy = last.argmax(axis=-1)
        for row, request in enumerate(batch):
            if request.cancelled:
                self._leave(request)
                continue
            sampler = request.sampler
            request.take(int(greedy[row]) if sampler.temperature == 0 else sampler.pick(last[row]))
            self.tokens_made += 1
            if request.done:
                self._leave(request)

    def _feeds(self, slots: list[int], new_ids: list[list[int]], past_len: int,
               ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The step's inputs, and the row of each of its sequences.  A prefill's rows are the
        joining sequences, padded to a batch bucket; a decode step's are the cache slots up to
        the batch bucket that holds the highest one in use (its attention reads the cache in
        place: :mod:`.cache_graph`).  Ids are right-padded to a length bucket;
        ``attention_mask`` shows each sequence its own positions (the past it has, then its new
        ones) and every other row its first position only; each sequence writes its new
        positions in its slot at its length (:data:`KV_WRITES`), the other rows to the scratch
        slot at position 0 (the cache write takes no negative index: :mod:`.cache_graph`)."""
        count = len(slots)
        rows = bucket_for(count if past_len == 0 else self.cache.rows_in_use, self.batch_buckets)
        row_of = np.arange(count) if past_len == 0 else np.asarray(slots, np.int64)
        width = max(len(ids) for ids in new_ids)
        width = width if width == 1 else bucket_for(width, self.cache_buckets)
        lengths = self.cache.lengths[np.asarray(slots, np.int64)]
        news = np.array([len(tokens) for tokens in new_ids], np.int64)
        ids = np.zeros((rows, width), np.int64)
        for row, tokens in zip(row_of.tolist(), new_ids):
            ids[row, :len(tokens)] = tokens
        mask = np.zeros((rows, past_len + width), np.int64)
        mask[:, 0] = 1  # no row is all masked
        mask[row_of] = np.arange(past_len + width) < (lengths + news)[:, None]
        positions = np.zeros((rows, width), np.int64)
        positions[row_of] = lengths[:, None] + np.arange(width)
        writes = np.zeros((rows, 2), np.int64)
        writes[:, 0] = self.cache.scratch_slot
        writes[row_of, 0] = slots
        writes[row_of, 1] = lengths
        feeds = {"input_ids": ids, "attention_mask": mask, KV_WRITES: writes}
        if self.layout.position_ids:
            feeds["position_ids"] = positions
        return feeds, row_of

    # -- reporting and closing ---------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Steps run, tokens made, slots in use, and the pipeline's programs (prepared, captured)."""
        pipe = self.pipeline.stats()
        return {"prefill_steps": self.steps["prefill"], "decode_steps": self.steps["decode"],
                "tokens": self.tokens_made, "active": self.active, "waiting": self.waiting,
                "free_slots": self.cache.free, "programs": pipe.signatures, "captured": pipe.captured,
                "starved": pipe.starved, "cache_bytes": self.cache.nbytes, "h2d_bytes": self.copied["h2d"],
                "d2h_bytes": self.copied["d2h"], "moves": self.moves}

    async def aclose(self) -> None:
        """Refuse new requests, fail the unfinished ones, close the pipeline; idempotent."""
        self._closed = True
        for request in [*self._waiting, *self._running]:
            if not request.done:
                request.error = ClosedResourceError("the decoder was closed before the request finished")
            if request in self._running:
                self._leave(request)
        self._waiting.clear()
        try:
            await self.pipeline.aclose()
            # Every run is over: nothing reads the cache any more.  (A cancelled aclose leaves
            # it: the device may still use it, and it goes with the device.)
            self.cache.close()
        finally:
            if self._owned_device is not None:
                self._owned_device.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- the blocking API ------------------------------------------------------------------------
    def generate_sync(self, prompt_ids: Sequence[int] | np.ndarray, max_new_tokens: int, **options: Any) -> list[int]:
        """Every token of one request, from code with no event loop (safe from many threads at
        once: their requests are batched together by one event loop thread)."""
        refuse_inside_event_loop("Decoder.generate_sync")
        loop = blocking_loop(self, "decoder")
        return loop.call(lambda: self.generate(prompt_ids, max_new_tokens, **options).tokens())

    def close(self) -> None:
        """:meth:`aclose` from code with no event loop."""
        refuse_inside_event_loop("Decoder.close")
        blocking_loop(self, "decoder").close_with(self.aclose)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _prompt(prompt_ids: Sequence[int] | np.ndarray) -> list[int]:
    array = np.asarray(prompt_ids)
    if array.ndim != 1 or array.size == 0 or array.dtype.kind not in "iu":
        raise ValueError(f"prompt_ids must be a non-empty 1-d sequence of int token ids, got {array.dtype} "
                         f"of shape {array.shape}")
    return [int(token) for token in array]


def _refuse_products_without_the_cache_write(device: Device) -> None:
    """Refuse, before anything is made, a device whose product has no
    ``aclnnInplaceScatterUpdate`` (the simulator's 310P and 200I/500 A2 specs; on hardware, such
    a CANN lacks the symbol and phase one reports it)."""
    product = getattr(getattr(device.backend, "spec", None), "name", None)
    if product in UNSUPPORTED_ON:
        raise UnsupportedOpError(f"{device.name} is an {product} device: the decoder writes its KV cache with "
                                 "CANN's aclnnInplaceScatterUpdate, which exists on Atlas A2/A3, the 950 series and "
                                 "the Atlas training series only; run the decoder on one of those")

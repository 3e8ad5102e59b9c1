"""One generation request: its state in the decoder, and the async iterator its caller reads."""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Self

from .sampling import Sampler

if TYPE_CHECKING:
    from .decoder import Decoder

__all__ = ["Generation", "Request"]


class Request:
    """What the decoder knows of a request: prompt, limits, its slot and the tokens made so far."""

    def __init__(self, number: int, prompt: list[int], max_new_tokens: int, eos_id: int | None, sampler: Sampler):
        self.number = number
        self.prompt = prompt
        self.max_new_tokens = max_new_tokens
        self.eos_id = eos_id
        self.sampler = sampler
        self.slot: int | None = None
        self.made = 0  # tokens generated
        self.last_token = -1
        self.ready: collections.deque[int] = collections.deque()  # generated, not read yet
        self.done = False  # no more tokens will be made
        self.cancelled = False
        self.error: BaseException | None = None

    def take(self, token: int) -> None:
        self.made += 1
        self.last_token = token
        self.ready.append(token)
        if self.made >= self.max_new_tokens or token == self.eos_id:
            self.done = True


class Generation:
    """The tokens of one request, as an async iterator (``async for token in gen``).

    Closing it (:meth:`aclose`, leaving ``async with``, or cancelling the task that reads it)
    cancels the request: its cache slot is freed at once, or when the step running it ends;
    other requests are unaffected.
    """

    def __init__(self, decoder: Decoder, request: Request):
        self._decoder = decoder
        self._request = request

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> int:
        request = self._request
        if request.cancelled:
            raise StopAsyncIteration
        try:
            token = await self._decoder._next_token(request)
        except BaseException:
            if not request.done:  # cancelled (or failed) while waiting: nobody reads the rest
                self._decoder._cancel(request)
            raise
        if token is None:
            raise StopAsyncIteration
        return token

    async def aclose(self) -> None:
        """Cancel the request if it is still running (idempotent)."""
        self._decoder._cancel(self._request)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def tokens(self) -> list[int]:
        """Every token, once the request is done."""
        return [token async for token in self]

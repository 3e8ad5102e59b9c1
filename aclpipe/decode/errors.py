"""The decoder's own errors."""

from __future__ import annotations

from ..errors import InputError

__all__ = ["PromptTooLongError"]


class PromptTooLongError(InputError):
    """A request whose prompt and new tokens do not fit in a sequence's cache of ``max_len``
    positions: refused when :meth:`~aclpipe.decode.Decoder.generate` is called, before any
    step runs.

    Attributes
    ----------
    prompt_len, max_new_tokens, max_len:
        What was asked for, and what the decoder holds per sequence.
    """

    def __init__(self, prompt_len: int, max_new_tokens: int, max_len: int):
        self.prompt_len = prompt_len
        self.max_new_tokens = max_new_tokens
        self.max_len = max_len
        needed = prompt_len + max_new_tokens - 1
        super().__init__(
            f"a prompt of {prompt_len} tokens with max_new_tokens={max_new_tokens} needs {needed} cache positions; "
            f"the decoder holds max_len={max_len} per sequence: shorten the prompt, ask for fewer tokens, "
            "or open the Decoder with a larger max_len", input="prompt_ids")

    def __reduce__(self) -> tuple[type[PromptTooLongError], tuple[int, int, int]]:
        return (type(self), (self.prompt_len, self.max_new_tokens, self.max_len))

"""``aclpipe generate``: the tokens onnxruntime's greedy decoding makes, and one-line errors."""

from __future__ import annotations

import onnx
import pytest
from decode_reference import reference_greedy

from aclpipe.cli import build_parser


def _generate(argv: list[str]) -> int:
    from rich.console import Console

    args = build_parser().parse_args(["generate", *argv])
    return args.run(args, Console())


def test_generate_prints_the_greedy_tokens_and_the_budget(toy_model, tmp_path, capsys):
    path = tmp_path / "toy.onnx"
    onnx.save(toy_model, str(path))
    assert _generate([str(path), "--prompt-ids", "1,2,3", "--max-new-tokens", "6", "--max-len", "32", "--budget"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("device budget left:") and "at most 4 held at once" in out[0]
    assert out[-1] == ",".join(str(token) for token in reference_greedy(toy_model, [1, 2, 3], 6))


def test_a_prompt_too_long_is_one_line_and_exit_2(toy_model, tmp_path, capsys):
    path = tmp_path / "toy.onnx"
    onnx.save(toy_model, str(path))
    assert _generate([str(path), "--prompt-ids", "1,2,3", "--max-new-tokens", "40", "--max-len", "16"]) == 2
    assert capsys.readouterr().err.startswith("aclpipe: error: a prompt of 3 tokens with max_new_tokens=40")


def test_bad_token_ids_are_a_usage_error():
    with pytest.raises(SystemExit):
        build_parser().parse_args(
            ["generate", "m.onnx", "--prompt-ids", "1,x"])

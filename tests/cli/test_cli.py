"""The ``aclpipe`` command: devices, selftest, and one-line errors with exit status 2."""

from __future__ import annotations

import subprocess
import sys

import pytest
from rich.console import Console

import aclpipe
from aclpipe import cli


def run_main(capsys, *argv):
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_devices_lists_every_backend(capsys):
    status, out, _ = run_main(capsys, "devices")
    assert status == 0
    assert "sim" in out and "ascend" in out and "simulated atlas-a2" in out
    assert "completion host function: compiled C" in out  # the suite runs with the helper built


def test_selftest_on_the_simulator_passes(capsys):
    status, out, _ = run_main(capsys, "selftest", "--device", "sim")
    assert status == 0
    assert "stream_ordering" in out and "sanitizer_race" in out and "failed" in out  # the summary line
    assert "0 failed" in " ".join(out.split())


def test_selftest_without_the_sanitizer_reports_skips(capsys):
    status, out, _ = run_main(capsys, "selftest", "--no-sanitizer", "--timing")
    assert status == 0 and "skipped" in out and "timing x1" in " ".join(out.split())


def test_the_sanitizer_skip_hint_does_not_promise_a_sanitizer_on_hardware():
    import aclpipe.testing as kit

    report = kit.check_backend(lambda: aclpipe.open_device("sim", sanitizer=False))
    details = {row.detail for row in report.skipped if row.name.startswith("sanitizer")}
    assert len(details) == 1
    detail = details.pop()
    # A hardware user must not be sent to an environment variable that cannot help them.
    assert "simulator feature" in detail and "other backends cannot run this check" in detail


def test_selftest_exits_1_when_a_check_fails(capsys, monkeypatch):
    import aclpipe.testing as kit

    def broken(device):
        raise kit.ConformanceFailure("planted failure")

    failing, real = kit.Check("planted", "always fails", broken), kit.check_backend
    monkeypatch.setattr(kit, "check_backend", lambda open_fn, report=None: real(open_fn, report=report,
                                                                                checks=(failing,)))
    status, out, _ = run_main(capsys, "selftest")
    assert status == 1 and "planted failure" in out


@pytest.mark.parametrize("argv, message", [
    (["selftest", "--device", "nosuch"], "no backend named 'nosuch'"),
    (["selftest", "--device", "sim:99"], "sim device 99 does not exist"),
    (["selftest", "--device", "sim:x"], "must be an integer"),
    (["bogus"], "invalid choice: 'bogus'"),
    ([], "required: command"),
    (["devices", "--nope"], "unrecognized arguments: --nope"),
])
def test_bad_arguments_give_one_line_and_exit_2(capsys, argv, message):
    status, out, err = run_main(capsys, *argv)
    assert status == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aclpipe: error: ") and message in lines[0]


def test_help_exits_0(capsys):
    status, out, _ = run_main(capsys, "--help")
    assert status == 0 and "selftest" in out and "devices" in out


def test_module_entry_point_bad_device_has_no_traceback():
    result = subprocess.run([sys.executable, "-m", "aclpipe.cli", "selftest", "--device", "nosuch"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2
    assert result.stderr.startswith("aclpipe: error: ") and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_module_entry_point_devices():
    result = subprocess.run([sys.executable, "-m", "aclpipe.cli", "devices"], capture_output=True, text=True,
                            check=False, timeout=120)
    assert result.returncode == 0 and "sim" in result.stdout


def test_a_command_module_plugs_into_the_parser(capsys):
    import types

    module = types.ModuleType("hello")
    module.NAME, module.HELP = "hello", "say hello"
    module.configure = lambda parser: parser.add_argument("--who", default="world")
    module.run = lambda args, console: console.print(f"hello {args.who}") or 0
    parser = cli.build_parser((*cli.COMMANDS, cli.Command.from_module(module)))
    args = parser.parse_args(["hello", "--who", "npu"])
    assert args.run(args, Console()) == 0
    assert "hello npu" in capsys.readouterr().out


def test_the_docs_synopsis_lists_every_option_of_every_command():
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    synopsis = re.search(r"```text\n(.*?)```", page, flags=re.S).group(1)
    per_command: dict[str, str] = {}
    for line in synopsis.splitlines():
        match = re.match(r"aclpipe (\w+)", line)
        if match:
            current = match.group(1)
        per_command[current] = per_command.get(current, "") + line
    parser = cli.build_parser()
    subparsers = next(action for action in parser._actions if action.dest == "command")
    for name, subparser in subparsers.choices.items():
        options = {option for action in subparser._actions for option in action.option_strings
                   if option not in ("-h", "--help")}
        missing = sorted(option for option in options if option not in per_command.get(name, ""))
        assert not missing, f"README synopsis of 'aclpipe {name}' lacks {missing}"

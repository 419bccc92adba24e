"""The command's table of areas (harness.cli.AREAS) against what each area registers, and a command
that parses with its own area alone."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from harness.cli import AREAS, build_parser


@pytest.mark.parametrize("area", AREAS)
def test_each_area_registers_the_commands_the_table_lists(area: str) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    importlib.import_module(f"harness.cli.{area}").register(sub)
    assert tuple(sub.choices) == AREAS[area]


def _commands(parser: argparse.ArgumentParser) -> tuple[str, ...]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return tuple(action.choices)


def test_the_whole_parser_lists_every_area_in_order() -> None:
    assert _commands(build_parser()) == tuple(c for commands in AREAS.values() for c in commands)
    assert _commands(build_parser("no such command")) == _commands(build_parser())


def test_a_command_parses_with_its_area_alone() -> None:
    """`harness report` builds the report area's parser only: the table's modules (harness.analysis
    and what it imports) stay unloaded, and the arguments parse as with the whole parser."""
    argv = ["report", "--experiment", "x", "--to", "out.html"]
    assert vars(build_parser("report").parse_args(argv)) == vars(build_parser().parse_args(argv))
    code = ("import sys, harness.cli; harness.cli.build_parser('report'); "
            "print(sorted(m for m in ('harness.cli.evaluation', 'harness.analysis', 'harness.config') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

"""Helpers of the one-graph tests (tests/training/test_fused_step.py, test_step_graph.py): a step
compiled with ``torch.compile(fullgraph=True)`` (a graph break raises) by a backend that keeps the
captured graphs and runs them as captured (no code generation: what is checked is the capture),
and the nodes of a graph that need a device value on the host."""

from __future__ import annotations

from typing import Any

import torch


def host_reads(gm: torch.fx.GraphModule) -> list[str]:
    """The nodes of a captured graph that need a device value on the host: ``.item()``,
    ``.tolist()``, ``nonzero``, ``bool(tensor)``, or a value whose shape depends on the data
    (an unbacked symbol, ``u0``)."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    out = []
    for node in gm.graph.nodes:
        value = node.meta.get("example_value")
        if node.op == "call_method" and node.target in ("item", "tolist", "nonzero", "__bool__") or value is not None and free_unbacked_symbols(value):
            out.append(node.format_node())
    return out


def one_graph(fn: Any) -> tuple[Any, list[torch.fx.GraphModule]]:
    """``fn`` compiled with ``fullgraph=True`` by a backend that keeps the captured graphs; returns
    the compiled function and the list of graphs (filled on call)."""
    graphs: list[torch.fx.GraphModule] = []

    def keep(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    return torch.compile(fn, fullgraph=True, backend=keep), graphs


def assert_no_host_read(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` captured as exactly one graph with no host read; returns its output."""
    compiled, graphs = one_graph(fn)
    out = compiled(*args)
    assert len(graphs) == 1, f"{len(graphs)} graphs"
    assert host_reads(graphs[0]) == []
    return out

"""``harness cascade cost``: candidates surviving each exit of a Cascade Transformer and the relative
cost per batch (Soldaini & Moschitti 2020, Sec. 4.3.2 and Table 3).

    harness cascade cost --layers 12 --exits 4,6,8,10,12 --batch 128 --alpha 0.3
    harness cascade cost --layers 12 --alpha 0.3,0.3,0.4,0.5   # one per exit before the last (the paper's form)
    harness cascade cost --layers 12 --alpha 0.4 --rounding nearest  # the paper's printed numbers

Values are parsed and validated as the config keys ``cascade.exits`` and ``cascade.alpha``, so a bad
value is refused with the same one-line message a study file gets.
"""

from __future__ import annotations

import argparse
from typing import Any, TypeVar

from harness.config import CascadeConfig
from harness.errors import ConfigError
from harness.model.cascade_cost import ROUNDINGS, cost_table, plan_from_config
from harness.tracking.store import DEFAULT_STORE

T = TypeVar("T", int, float)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "cascade", help="Cascade Transformer tools (cost of a drop-ratio setting)",
        description="Cascade Transformer (Soldaini & Moschitti 2020) tools.")
    sub = p.add_subparsers(dest="cascade_command", metavar="SUBCOMMAND")
    c = sub.add_parser(
        "cost", help="survivors after each exit and the relative cost per batch",
        description="Print how many candidates each exit scores and drops (floor(alpha_i * k_{i-1}) "
        "of the k_{i-1} that reach it) and the relative cost per batch: "
        "sum_i (rho(i) - rho(i-1)) * k_{i-1} / (layers * batch).",
        epilog="example: harness cascade cost --layers 12 --exits 4,6,8,10,12 --batch 128 --alpha 0.3")
    c.add_argument("--layers", type=int, default=12, help="encoder depth (default 12)")
    c.add_argument("--exits", help="exit layers, 1-based, comma-separated, the last = --layers "
                   "(default: 4,6,8,10,12 scaled to the depth)")
    c.add_argument("--batch", type=int, default=128, help="candidates per query (default 128)")
    c.add_argument("--alpha", action="append", default=[], metavar="A",
                   help="drop ratio in [0, 1): one for every exit, or one per exit before the last "
                   "(the final exit drops nothing; comma-separated or repeated); default 0")
    c.add_argument("--rounding", choices=ROUNDINGS, default="floor",
                   help="floor(alpha*k) as the paper states (default), or nearest as its numbers imply "
                   "(the config key cascade.rounding)")
    c.set_defaults(func=run_cost)
    p.set_defaults(func=lambda args: _help(p))
    e = subparsers.add_parser(
        "export", help="a trained ranker as a folder sentence-transformers and transformers load",
        description="Write the best-dev checkpoint of a seed run (or of a configuration run's best seed by "
        "dev objective) as a model folder: a BertForSequenceClassification with one logit, its tokenizer "
        "and a model card (cascade models: weights, exits and harness loader).",
        epilog="example: harness export 3f2a... --to models/quickstart-baseline")
    e.add_argument("run_id", metavar="RUN_ID", help="MLflow seed run (harness.kind=trial) or configuration run")
    e.add_argument("--to", required=True, metavar="DIR", help="target folder (new or empty)")
    e.add_argument("--tracking-uri", metavar="URI", help=f"MLflow store (default: {DEFAULT_STORE})")
    e.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> int:
    from harness.model.export import export_run, usage
    from harness.tracking.store import default_tracking_uri

    out = export_run(args.run_id, args.to, args.tracking_uri or default_tracking_uri())
    print(f"exported run {args.run_id} to {out}; scores as the run with")
    for line in usage(out):
        print(f"  {line}")
    return 0


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def run_cost(args: argparse.Namespace) -> int:
    exits = None if args.exits is None else _numbers("cascade.exits", [args.exits], int)
    alpha = _numbers("cascade.alpha", args.alpha, float) if args.alpha else (0.0,)
    cfg = CascadeConfig(enabled=True, exits=exits, alpha=alpha, rounding=args.rounding)  # as a study file's
    if args.batch < 1:
        raise ConfigError(f"--batch must be >= 1 candidate, got {args.batch}")
    plan = plan_from_config(cfg, args.layers)
    print(f"{plan.num_layers} layers, exits {','.join(map(str, plan.exits))}, batch {args.batch}, "
          f"rounding {plan.rounding}")
    print(cost_table(plan, args.batch))
    return 0


def _numbers(key: str, values: list[str], kind: type[T]) -> tuple[T, ...]:
    """Comma-separated and/or repeated values as a tuple, refused with the key's name."""
    items = [x.strip() for v in values for x in v.split(",") if x.strip()]
    try:
        return tuple(kind(x) + kind(0) for x in items)  # type: ignore[call-arg]  # + 0: -0.0 is 0.0, as in a study file
    except ValueError:
        raise ConfigError(f"{key} must be a comma-separated list of {kind.__name__}, "
                          f"got {','.join(values)!r}") from None

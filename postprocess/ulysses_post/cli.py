"""The `ulysses-post` command line: summarize, compare, spread, plot, trace, graphs, clocks, soak.

Every expected failure (a missing file, a file that is not a report, an unknown schema
version, an inconsistent report, an unknown case) ends in one line on stderr and exit
code 2, as the app does for bad input; a traceback would mean a bug here.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence

from . import __version__
from .formats import FORMATS
from .report import ReportError, load_report

EXIT_BAD_INPUT = 2


def _positive(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not (x > 0 and math.isfinite(x)):
        raise argparse.ArgumentTypeError(f"must be a positive finite number: {value!r}")
    return x


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ulysses-post",
        description="Summarize, compare and plot ulysses-ipc run reports (HDF5, docs/report.md).")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("summarize", help="per case: stage medians, speedup, parity of every run",
                       description="A table per case: one row per run (transport requested -> used, schedule), "
                                   "the 7 stage medians, layer p10/p90, speedup of the layer median against the "
                                   "case's nccl.baseline run (else its first run), parity and the V/QK overlap.")
    s.add_argument("report", metavar="REPORT")
    s.add_argument("--case", action="append", metavar="NAME", help="only this case (repeatable)")
    s.add_argument("--format", choices=FORMATS, default="table",
                   help="table (default, for people), csv, json (schemas/summary.schema.json) or markdown: one "
                        "row per run")
    s.add_argument("--csv", action="store_const", const="csv", dest="format", help="same as --format csv")
    s.add_argument("--link-gbs", type=_positive, metavar="GB/S",
                   help="the link's rate per direction (e.g. bench_kernels' 'peer 2D copy, both directions'): "
                        "adds each run's scatter against the bound bytes sent / GB/S")

    c = sub.add_parser("compare", help="A/B of two reports: layer medians, ratio, spread of the repeats",
                       description="Per case and run present in both reports: layer median of A and B, the "
                                   "spread (p10..p90) of the per-repeat medians of each, and B/A; runs present "
                                   "in only one report are listed.")
    c.add_argument("a", metavar="A")
    c.add_argument("b", metavar="B")
    c.add_argument("--case", action="append", metavar="NAME", help="only this case (repeatable)")
    c.add_argument("--format", choices=FORMATS, default="table",
                   help="table (default), csv, json (schemas/compare.schema.json) or markdown: one row per run")

    g = sub.add_parser("plot", help="PNG figures: stage bars, per-rank timeline, speedup vs degree",
                       description="Writes DIR/<case>.stages.png and DIR/<case>.timeline.png per case, and "
                                   "DIR/speedup-vs-degree.png when the reports hold cases of two or more "
                                   "Ulysses degrees.")
    g.add_argument("report", metavar="REPORT")
    g.add_argument("-o", "--output", required=True, metavar="DIR", help="directory for the PNG files")
    g.add_argument("--case", action="append", metavar="NAME", help="only this case (repeatable)")
    g.add_argument("--reports", nargs="+", default=[], metavar="R",
                   help="more reports (e.g. other rank counts) for the speedup-vs-degree figure")
    t = sub.add_parser("trace", help="each run's traced layer as Chrome Trace Event JSON (Perfetto UI, chrome://tracing)",
                       description="Writes the traced layer of every run (or of those chosen) in the Chrome Trace "
                                   "Event format: one process per rank for measured and for modelled times, one "
                                   "thread per stream, a slice per op, flows from each epoch write and event "
                                   "record to the waits they release, and the stage spans on their own track.")
    t.add_argument("report", metavar="REPORT")
    t.add_argument("-o", "--output", required=True, metavar="FILE", help="the JSON file to write")
    t.add_argument("--case", action="append", metavar="NAME", help="only this case (repeatable)")
    t.add_argument("--run", action="append", metavar="NAME", help="only this run, e.g. ipc.v-first (repeatable)")
    gr = sub.add_parser("graphs", help="layers replayed as graphs against the same layers op by op (no-graphs)",
                        description="Per run with an op-by-op twin (ablation no-graphs) in the same report: replays, "
                                    "layer medians of both, op-by-op / graphs, rank 0's host enqueue time of both.")
    gr.add_argument("report", metavar="REPORT")
    gr.add_argument("--case", action="append", metavar="NAME", help="only this case (repeatable)")
    gr.add_argument("--format", choices=("table", "csv", "markdown"), default="table")
    sp = sub.add_parser("spread", help="the same run in several reports: each layer median, max/min",
                        description="Per run (case, run name, the same layer, issued the same way: graph replay or "
                                    "op by op) held by two or more reports: the layer median in each, the smallest, "
                                    "the largest and largest / smallest; a summary line per way of issuing. How "
                                    "reproducible a layer time is across sessions of one machine.")
    sp.add_argument("reports", nargs="+", metavar="REPORT")
    sp.add_argument("--case", action="append", metavar="NAME", help="only this case (repeatable)")
    sp.add_argument("--format", choices=FORMATS, default="table")
    ck = sub.add_parser("clocks", help="the GPU's clocks and power through each step of a GPU check",
                        description="Per step of scripts/gpu_check.sh (its logs' stamped lines) and GPU: the busy "
                                    "samples of clocks.csv, the SM clock's median and 10th percentile, as a share "
                                    "of the highest sampled, the power drawn, and the share of busy samples under "
                                    "the software power cap or a slowdown.")
    ck.add_argument("clocks", metavar="CLOCKS.CSV")
    ck.add_argument("logs", nargs="+", metavar="LOG", help="the check's step logs (build-gpu/logs/*.log)")
    ck.add_argument("--busy", type=_positive, default=50.0, metavar="PCT",
                    help="a sample counts while utilization.gpu is at least this (default 50)")
    ck.add_argument("--format", choices=("table", "csv", "markdown"), default="table")
    k = sub.add_parser("soak", help="a soak's verdict: growth of sampled memory/fds after warm-up, timing stability",
                       description="Places what scripts/soak_sample.py sampled beside a run on the report's timed "
                                   "layers, in windows: fails when GPU memory, RSS, fds or threads grow after the "
                                   "warm-up, the layer's p90/p10 or p50 wanders, or parity failed. Exit 1 on FAIL.")
    from .soak import add_arguments

    add_arguments(k)
    return p


def _run(args: argparse.Namespace) -> int:
    if args.command == "soak":
        from .soak import run

        return run(args)
    if args.command == "summarize":
        from .summarize import summarize

        summarize(load_report(args.report), args.case, args.format, link_gbs=args.link_gbs)
    elif args.command == "graphs":
        from .graphs import graphs

        graphs(load_report(args.report), args.case, args.format)
    elif args.command == "clocks":
        from .clocks import write as write_clocks

        write_clocks(args.clocks, args.logs, args.busy, args.format)
    elif args.command == "spread":
        from .spread import write

        if len(args.reports) < 2:
            raise ReportError("spread needs two or more reports")
        write([load_report(r) for r in args.reports], args.case, args.format)
    elif args.command == "compare":
        from .compare import compare

        compare(load_report(args.a), load_report(args.b), args.case, fmt=args.format)
    elif args.command == "trace":
        from .trace import write

        if os.path.isdir(args.output):
            raise ReportError(f"{args.output}: is a directory, expected the JSON file to write")
        n = write(load_report(args.report), args.output, args.case, args.run)
        print(f"wrote {args.output}: the traced layer of {n} run(s); open it in https://ui.perfetto.dev or "
              "chrome://tracing")
    else:
        if os.path.exists(args.output) and not os.path.isdir(args.output):
            raise ReportError(f"{args.output}: exists and is not a directory")
        from .plot import plot  # matplotlib is imported only when drawing

        report = load_report(args.report)
        for path in plot(report, args.output, args.case, [load_report(r) for r in args.reports]):
            print(f"wrote {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if _run(args):
            return 1  # soak: a verdict of FAIL, not bad input
    except ReportError as e:
        print(f"ulysses-post {args.command}: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        # `summarize ... | head`: the reader left. Point stdout at /dev/null so that the
        # interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:  # e.g. the plot directory cannot be created or written
        print(f"ulysses-post {args.command}: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0

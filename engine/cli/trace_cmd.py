"""`swarmscope trace check FILE`, `swarmscope trace compare FILE FILE...` and
`swarmscope trace export FILE --perfetto OUT | --csv OUT`."""
from __future__ import annotations

import sys

from engine.errors import SwarmscopeError, TraceError


def register(subparsers) -> None:
    p = subparsers.add_parser("trace", help="check or export a recorded trace")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = actions.add_parser("check", help="validate every line and print a summary")
    check.add_argument("file")
    check.add_argument("--lenient", action="store_true", help="skip bad lines with a warning")
    check.set_defaults(func=check_cmd)
    compare = actions.add_parser("compare", help="summaries of two or more traces side by side")
    compare.add_argument("files", nargs="+", metavar="file")
    compare.add_argument("--lenient", action="store_true", help="skip bad lines with a warning")
    compare.set_defaults(func=compare_cmd)
    export = actions.add_parser("export", help="export to Perfetto (Chrome trace JSON) or CSV")
    export.add_argument("file")
    target = export.add_mutually_exclusive_group(required=True)
    target.add_argument("--perfetto", metavar="OUT", help="Chrome trace JSON for ui.perfetto.dev")
    target.add_argument("--csv", metavar="OUT", help="one row per step")
    export.add_argument("--lenient", action="store_true", help="skip bad lines with a warning")
    export.set_defaults(func=export_cmd)


def check_cmd(args) -> int:
    from engine.telemetry.summary import format_summary, summarize
    from engine.telemetry.trace_reader import read_trace
    try:
        trace = read_trace(args.file, lenient=args.lenient)
    except SwarmscopeError as exc:
        print(f"swarmscope trace check: {exc}", file=sys.stderr)
        return 2
    for warning in trace.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    s = trace.session
    print(f"{args.file}: ok — model {s.get('model')}, device {s.get('device')}, "
          f"dtype {s.get('dtype')}; {len(trace.steps)} steps, {len(trace.controls)} control "
          f"changes, {len(trace.agents)} agent events")
    if trace.steps:
        print(format_summary(summarize(trace.steps)))
    return 0


def compare_cmd(args) -> int:
    """Each trace's summary in a column, the first the one the others' tokens/s are over."""
    from engine.telemetry.summary import format_comparison, summarize
    from engine.telemetry.trace_reader import read_trace
    try:
        if len(args.files) < 2:
            raise SwarmscopeError("give two traces or more to compare")
        named = []
        for path in args.files:
            trace = read_trace(path, lenient=args.lenient)
            for warning in trace.warnings:
                print(f"warning: {warning}", file=sys.stderr)
            if not trace.steps:
                raise TraceError(path, None, "has no steps to compare")
            named.append((path, summarize(trace.steps)))
    except SwarmscopeError as exc:
        print(f"swarmscope trace compare: {exc}", file=sys.stderr)
        return 2
    print(format_comparison(named))
    return 0


def export_cmd(args) -> int:
    from engine.telemetry.csv_export import write_csv
    from engine.telemetry.perfetto_export import write_perfetto
    from engine.telemetry.trace_reader import read_trace
    from engine.telemetry.trace_writer import same_file
    out = args.perfetto or args.csv
    try:
        if same_file(args.file, out):
            raise TraceError(out, None, "is the trace being exported; writing there would "
                                        "destroy it (choose another output file)")
        trace = read_trace(args.file, lenient=args.lenient)
        for warning in trace.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        if args.perfetto:
            write_perfetto(trace, out)
        else:
            write_csv(trace.steps, out)
    except SwarmscopeError as exc:
        print(f"swarmscope trace export: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0

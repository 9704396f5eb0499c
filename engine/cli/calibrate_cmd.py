"""`swarmscope calibrate`: measure the step-time curve t(N) and the budget T, and cache them."""
from __future__ import annotations

import math
import sys

from engine.cli.options import MODEL_HELP, add_device_options
from engine.errors import SwarmscopeError
from engine.spec.calibration import DEFAULT_CONTEXT


def register(subparsers) -> None:
    p = subparsers.add_parser("calibrate", help="measure t(N) and the speculation budget T")
    p.add_argument("--model", default="default", help=MODEL_HELP)
    add_device_options(p)
    p.add_argument("--eps", type=float, default=0.10, help="T = largest N with t(N) <= (1+eps) t(1)")
    p.add_argument("--context", type=int, metavar="TOKENS",
                   help=f"tokens each timed lane has cached (default {DEFAULT_CONTEXT}, or "
                        "fewer where the model's positions hold no more); attention reads them "
                        "all, so time at your swarm's contexts to see its T")
    p.set_defaults(func=run)


def run(args) -> int:
    from engine.spec.calibration import calibrate_or_load
    from engine.loading import load_model
    say = lambda message, *_: print(message, file=sys.stderr)  # noqa: E731
    try:
        if not 0 <= args.eps < math.inf:
            raise SwarmscopeError("--eps must be a finite number >= 0")
        loaded = load_model(args.model, args.dtype, args.device, progress=say,
                            threads=args.threads)
        result = calibrate_or_load(loaded, eps=args.eps, progress=say, force=True,
                                   context=args.context)
    except SwarmscopeError as exc:
        print(f"swarmscope calibrate: {exc}", file=sys.stderr)
        return 2
    t1 = result.t_ms(1)
    # measured: each point as timed; t(N): the nondecreasing fit the policies plan with
    print(f"{'N':>4}  {'measured':>9}  {'t(N) ms':>9}  {'t(N)/t(1)':>9}")
    for n, ms in result.points:
        print(f"{n:4d}  {ms:9.2f}  {result.t_ms(n):9.2f}  {result.t_ms(n) / t1:9.2f}")
    for b, ms in result.batch_points:
        print(f"B={b:<3d}x1 {ms:8.2f}  {'':9}  {ms / t1:9.2f}")
    if result.decode_points:  # each batch with one lane drafting D: the fit's extra ms per D
        ds = sorted({d for _, d, _ in result.decode_points})
        print("B lanes, one drafting D: extra ms over no drafts  " +
              "  ".join(f"D={d:<3d}" for d in ds))
        for b, _ in result.batch_points:
            print(f"B={b:<3d}" + " " * 42 + "  ".join(
                f"{result.step_ms(b, d) - result.step_ms(b, 0):+5.2f}" for d in ds))
    print(f"budget T = {result.budget} (eps {result.eps:g}, {result.hardware}, {result.model}, "
          f"{result.dtype}; lanes at context {result.context})")
    return 0

#!/usr/bin/env python3
"""PyTorch side of the efa peer benchmarks: prints one JSON object per timed variant.

    torch_bench.py train WORK --data DIR [--threads T] [--variants a,b] [--quick]
    torch_bench.py attention --batch B --heads H --len N --dim D --mask none|causal
                             [--reps R] [--threads T] [--variants a,b]

WORK is one of synthetic-uni, synthetic-bi, instacart-uni, instacart-bi, temp-L1, temp-L2,
temp-L4, temp-L4-lag1, temp-L4-lag2. Training variants: eager-sdpa, eager-explicit,
compile-sdpa, compile-explicit; attention variants: sdpa, explicit, compile-explicit. A variant
that fails (e.g. torch.compile without a working C++ toolchain) prints an object with "error".
Run it pinned (run.py does: taskset -c 0,1 for 2 threads, -c 0 for 1).
"""

import argparse
import json
import os
import sys
import traceback


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("work")
    t.add_argument("--data", default="/work/shared/data")
    t.add_argument("--variants", default=None)
    t.add_argument("--warm-s", type=float, default=1.0)
    t.add_argument("--block-s", type=float, default=1.0)
    t.add_argument("--blocks", type=int, default=3)
    t.add_argument("--quick", action="store_true")
    a = sub.add_parser("attention")
    a.add_argument("--batch", type=int, required=True)
    a.add_argument("--heads", type=int, required=True)
    a.add_argument("--len", type=int, required=True)
    a.add_argument("--dim", type=int, required=True)
    a.add_argument("--mask", choices=("none", "causal"), default="none")
    a.add_argument("--reps", type=int, default=20)
    a.add_argument("--variants", default=None)
    for p in (t, a):
        p.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()

    if args.threads:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(args.threads)
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    import torch
    from efa_torch import bench

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    meta = {"torch": torch.__version__, "threads": torch.get_num_threads(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability()}

    def emit(obj):
        obj.update(meta)
        print(json.dumps(obj), flush=True)

    if args.cmd == "train":
        variants = args.variants.split(",") if args.variants else list(bench.VARIANTS)
        arrays, batch, lr, sample_flops, batch_flops, make = bench.load_work(args.work, args.data, args.quick)
        for v in variants:
            try:
                emit(bench.time_train(args.work, v, arrays, batch, lr, sample_flops, batch_flops,
                                      make, args.warm_s, args.block_s, args.blocks))
            except Exception as e:  # report and go on with the next variant
                traceback.print_exc(file=sys.stderr)
                emit({"kind": "train", "work": args.work, "variant": v, "error": f"{type(e).__name__}: {e}"})
    else:
        variants = args.variants.split(",") if args.variants else list(bench.ATTN_VARIANTS)
        for v in variants:
            try:
                emit(bench.time_attention(v, args.batch, args.heads, args.len, args.dim,
                                          args.mask == "causal", args.reps))
            except Exception as e:
                traceback.print_exc(file=sys.stderr)
                emit({"kind": "attention", "variant": v, "error": f"{type(e).__name__}: {e}"})


if __name__ == "__main__":
    main()

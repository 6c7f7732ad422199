#!/usr/bin/env python3
"""efa against PyTorch on the same models and attention shapes, pinned and interleaved.

Run from the repository root after `cargo build --release -p efa-cli`:

    python3 benches/peers/run.py --efa target/release/efa --python /path/to/venv/bin/python

The driver needs only the standard library; the PyTorch side runs in `--python` (an
interpreter with torch and numpy). For each work item it runs efa's own benchmark
(`efa bench attention … --json`, `efa bench train … --json`) and `torch_bench.py` alternately,
pinned with `taskset` to cores 0..T-1, for `--rounds` rounds (the order of the two flips every
round), and prints the medians as a markdown table, with the machine, the thread count, the
date and the load average. Before the rounds, a selection pass times every PyTorch variant once
(briefly) and the rounds time the fastest (`--all-variants` times every variant in every round
instead; the full-batch temperature models take the variant selected on L = 1 and the lag
models the one selected on lag 1). See README.md beside this file.
"""

import argparse
import datetime
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_BENCH = os.path.join(HERE, "torch_bench.py")

# (key, efa arguments, torch arguments) for the attention shapes; quick sizes after.
ATTENTION = [
    ("attn-b256-none", dict(batch=256, heads=2, len=50, dim=16, mask="none", reps=20)),
    ("attn-b256-causal", dict(batch=256, heads=2, len=50, dim=16, mask="causal", reps=20)),
    ("attn-b8-n512-causal", dict(batch=8, heads=8, len=512, dim=64, mask="causal", reps=10)),
    ("attn-b1-n4096-causal", dict(batch=1, heads=8, len=4096, dim=64, mask="causal", reps=5)),
]
ATTENTION_QUICK = {
    "attn-b256-none": dict(reps=5),
    "attn-b256-causal": dict(reps=5),
    "attn-b8-n512-causal": dict(batch=2, len=256, reps=3),
    "attn-b1-n4096-causal": dict(len=1024, reps=3),
}

# Items whose PyTorch variant is selected on another (cheaper) item of the same architecture
# and recipe: the full-batch temperature models on L = 1, the lag models on lag 1.
SELECT_ON = {"temp-L2": "temp-L1", "temp-L4": "temp-L1", "temp-L4-lag2": "temp-L4-lag1"}

TRAIN = ["synthetic-uni", "synthetic-bi", "instacart-uni", "instacart-bi", "temp-L1", "temp-L2",
         "temp-L4", "temp-L4-lag1", "temp-L4-lag2"]

ROWS = [
    ("attention B256 H2 N50 D16, none, fwd / fwd+bwd", ["attn-b256-none"]),
    ("attention, same shape, causal, fwd / fwd+bwd", ["attn-b256-causal"]),
    ("attention B8 H8 N512 D64 causal, fwd / fwd+bwd", ["attn-b8-n512-causal"]),
    ("attention B1 H8 N4096 D64 causal, fwd / fwd+bwd", ["attn-b1-n4096-causal"]),
    ("training synthetic uni / bi, samples/s", ["synthetic-uni", "synthetic-bi"]),
    ("training Instacart uni / bi, samples/s", ["instacart-uni", "instacart-bi"]),
    ("temperature L=1 / L=2 / L=4 (full batch), samples/s", ["temp-L1", "temp-L2", "temp-L4"]),
    ("temperature L=4, lag 1 / lag 2 (batch 128, 88 / 132 positions), samples/s",
     ["temp-L4-lag1", "temp-L4-lag2"]),
]


def attention_shape(key, quick):
    shape = dict(next(s for k, s in ATTENTION if k == key))
    if quick:
        shape.update(ATTENTION_QUICK[key])
    return shape


def efa_command(efa, key, threads, data, quick):
    t = ["--threads", str(threads), "--json", "--no-baselines"]
    if key.startswith("attn"):
        s = attention_shape(key, quick)
        return [efa, "bench", "attention", "--batch", str(s["batch"]), "--heads", str(s["heads"]),
                "--len", str(s["len"]), "--dim", str(s["dim"]), "--mask", s["mask"], "--backward",
                "--reps", str(s["reps"])] + t
    if key.startswith("synthetic"):
        cmd = [efa, "bench", "train", "synthetic", "--model", "efa", "--direction",
               key.split("-")[1]] + t
        return cmd + (["--users", "2000", "--epochs", "1"] if quick else [])
    if key.startswith("instacart"):
        return [efa, "bench", "train", "instacart", "--data", data, "--model", "efa",
                "--direction", key.split("-")[1], "--epochs", "1" if quick else "2"] + t
    parts = key.split("-")
    layers = parts[1][1:]
    lag = parts[2][3:] if len(parts) > 2 else "0"
    cmd = [efa, "bench", "train", "temperature", "--data", data, "--model", "efa", "--layers",
           layers, "--lag", lag] + t
    if quick or lag != "0":
        cmd += ["--epochs", "1"]
    elif layers == "4":
        cmd += ["--epochs", "3"]
    return cmd


def torch_command(python, key, threads, data, quick, variants, selecting):
    if key.startswith("attn"):
        s = attention_shape(key, quick)
        reps = min(s["reps"], 3) if selecting else s["reps"]
        cmd = [python, TORCH_BENCH, "attention", "--batch", str(s["batch"]), "--heads",
               str(s["heads"]), "--len", str(s["len"]), "--dim", str(s["dim"]), "--mask",
               s["mask"], "--reps", str(reps)]
    else:
        secs = "0.3" if quick else ("0.5" if selecting else "1.0")
        # A full-batch temperature step is a whole epoch (seconds): one timed step per round.
        full_batch = key.startswith("temp") and "lag" not in key
        blocks = "1" if selecting or full_batch else "3"
        cmd = [python, TORCH_BENCH, "train", key, "--data", data, "--warm-s", secs, "--block-s",
               secs, "--blocks", blocks]
        if quick:
            cmd.append("--quick")
    cmd += ["--threads", str(threads)]
    if variants:
        cmd += ["--variants", ",".join(variants)]
    return cmd


def pinned(cmd, threads):
    if shutil.which("taskset") is None:
        return cmd
    cpus = "0" if threads == 1 else f"0-{threads - 1}" if threads > 2 else "0,1"
    return ["taskset", "-c", cpus] + cmd


LOADS = []
OTHERS = []


def busy_jiffies(cpus):
    """Busy time (user, nice, system, irq, softirq, steal) of the given CPUs, in clock ticks."""
    total = 0
    try:
        with open("/proc/stat") as f:
            for line in f:
                name, *vals = line.split()
                if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                    v = [int(x) for x in vals]
                    total += v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)
    except OSError:
        return None
    return total


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_once(cmd, threads):
    """Runs `cmd`; returns (result, share of the pinned CPUs' time used by other processes)."""
    cpus = set(range(threads))
    b0, c0, t0 = busy_jiffies(cpus), children_cpu(), time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    b1, c1, t1 = busy_jiffies(cpus), children_cpu(), time.monotonic()
    if b0 is None or b1 is None:
        return p, float("nan")
    hz = os.sysconf("SC_CLK_TCK")
    busy = (b1 - b0) / hz
    # Less three clock ticks: both counters move in ticks, which matters for short runs.
    others = max(0.0, busy - (c1 - c0) - 3.0 / hz)
    return p, others / max((t1 - t0) * len(cpus), 1e-9)


def wait_quiet(threads, max_others, max_wait, log, window=2.0):
    """Waits (up to `max_wait` seconds) until other processes use at most `max_others` of the
    pinned CPUs over a `window`-second sample; returns the seconds waited."""
    cpus = set(range(threads))
    start = time.monotonic()
    said = False
    while True:
        b0 = busy_jiffies(cpus)
        time.sleep(window)
        b1 = busy_jiffies(cpus)
        if b0 is None or b1 is None:
            return 0.0
        share = (b1 - b0) / os.sysconf("SC_CLK_TCK") / (window * len(cpus))
        waited = time.monotonic() - start
        if share <= max_others or waited >= max_wait:
            if said:
                print(f"    waited {waited:.0f} s for the pinned CPUs (others now {share:.0%})",
                      file=log, flush=True)
            return waited
        if not said:
            print(f"    other processes use {share:.0%} of the pinned CPUs; waiting", file=log, flush=True)
            said = True
        time.sleep(8.0)


def run_json(cmd, log, threads=None, max_others=None, attempts=1, max_wait=0.0):
    """Runs `cmd`, returns the JSON objects of its standard output (one per line). With
    `max_others`, a run during which other processes used more than that share of the pinned
    CPUs is repeated (up to `attempts` runs; the least disturbed is kept). The 1-minute load
    average at the start and the others' share of the kept run go to LOADS and OTHERS."""
    best = None
    for attempt in range(attempts):
        if max_others is not None and max_wait > 0:
            wait_quiet(threads or 1, max_others, max_wait, log)
        LOADS.append(load())
        print(f"  {datetime.datetime.now():%H:%M:%S} (load {LOADS[-1]:.2f}) $ " + " ".join(cmd),
              file=log, flush=True)
        p, others = run_once(cmd, threads or 1)
        if best is None or others < best[1]:
            best = (p, others)
        if max_others is None or not others > max_others:
            break
        print(f"    other processes used {others:.0%} of the pinned CPUs; "
              + ("repeating" if attempt + 1 < attempts else "keeping the least disturbed run"),
              file=log, flush=True)
    p, others = best
    if max_others is not None:
        OTHERS.append(others)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    out = []
    for line in p.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            out.append(json.loads(line))
    if not out:
        raise RuntimeError(f"{' '.join(cmd)} printed no JSON:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return out


def machine():
    info = {"model": "?", "avx512f": False, "avx2": False, "cpus": os.cpu_count()}
    try:
        text = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout
        for line in text.splitlines():
            if line.startswith("Model name:"):
                info["model"] = line.split(":", 1)[1].strip()
            if line.startswith("Flags:"):
                flags = set(line.split(":", 1)[1].split())
                info["avx512f"] = "avx512f" in flags
                info["avx2"] = "avx2" in flags
                info["avx512_bf16"] = "avx512_bf16" in flags
    except OSError:
        pass
    return info


def load():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def metric_keys(key):
    return ("fwd_ms", "fwdbwd_ms") if key.startswith("attn") else ("samples_per_s",)


def median(xs):
    return statistics.median(xs) if xs else None


def fmt_num(x, ms):
    if x is None:
        return "–"
    if ms:
        return f"{x:.3g}" if x < 100 else f"{x:.0f}"
    if x >= 10_000:
        return f"{x / 1000:.3g}k" if x < 1e6 else f"{x / 1e6:.3g}M"
    return f"{x:,.0f}"


def summarise(results, key):
    """Per metric: efa median, PyTorch fastest (variant, median), and round values."""
    r = results.get(key)
    if not r:
        return None
    out = {}
    for m in metric_keys(key):
        efa_vals = [e[m] for e in r["efa"] if m in e]
        by_var = {}
        for t in r["torch"]:
            if "error" in t or m not in t:
                continue
            by_var.setdefault(t["variant"], []).append(t[m])
        meds = {v: median(xs) for v, xs in by_var.items()}
        if not meds or not efa_vals:
            continue
        if m == "samples_per_s":
            best = max(meds, key=meds.get)
        else:
            best = min(meds, key=meds.get)
        out[m] = dict(efa=median(efa_vals), efa_rounds=efa_vals, torch=meds[best], variant=best,
                      torch_rounds=by_var[best], all=meds)
    return out


def table(results, quick):
    lines = ["| work | efa | PyTorch (fastest variant) | efa / PyTorch |", "|---|---|---|---|"]
    for label, keys in ROWS:
        efa_parts, torch_parts, ratio_parts, variants = [], [], [], []
        any_data = False
        for key in keys:
            s = summarise(results, key)
            for m in metric_keys(key):
                if not s or m not in s:
                    efa_parts.append("–")
                    torch_parts.append("–")
                    ratio_parts.append("–")
                    continue
                any_data = True
                v = s[m]
                ms = m.endswith("_ms")
                efa_parts.append(fmt_num(v["efa"], ms))
                torch_parts.append(fmt_num(v["torch"], ms))
                ratio = v["torch"] / v["efa"] if ms else v["efa"] / v["torch"]
                ratio_parts.append(f"{ratio:.2f}")
                variants.append(v["variant"])
        if not any_data:
            continue
        unit = " ms" if keys[0].startswith("attn") else ""
        if quick and keys[0].startswith("attn"):
            s = attention_shape(keys[0], True)
            label += f" [quick: B{s['batch']} H{s['heads']} N{s['len']} D{s['dim']}]"
        uniq = list(dict.fromkeys(variants))
        vtxt = " / ".join(variants) if len(uniq) > 1 else (uniq[0] if uniq else "")
        lines.append(f"| {label} | {' / '.join(efa_parts)}{unit} | {' / '.join(torch_parts)}{unit}"
                     f" ({vtxt}) | {' / '.join(ratio_parts)} |")
    return "\n".join(lines)


def details(results):
    lines = ["| item | metric | efa (rounds) | PyTorch fastest (rounds) | every PyTorch variant (median) |"
             " efa GFLOP/s | PyTorch GFLOP/s | FLOP/sample efa ≈ / PyTorch |",
             "|---|---|---|---|---|---|---|---|"]
    for key in [k for k, _ in ATTENTION] + TRAIN:
        s = summarise(results, key)
        if not s:
            continue
        r = results[key]
        for m in metric_keys(key):
            if m not in s:
                continue
            v = s[m]
            ms = m.endswith("_ms")
            rounds = lambda xs: ", ".join(fmt_num(x, ms) for x in xs)
            allv = "; ".join(f"{k} {fmt_num(x, ms)}" for k, x in sorted(v["all"].items()))
            tor = [t for t in r["torch"] if t.get("variant") == v["variant"] and "error" not in t]
            if key.startswith("attn"):
                g = "fwd_gflops" if m == "fwd_ms" else "fwdbwd_gflops"
                eg = median([e[g] for e in r["efa"] if e.get(g)])
                tg = median([t[g] for t in tor])
                fps = "–"
            else:
                eg = median([e["gflops"] for e in r["efa"]])
                tg = median([t["gflops"] for t in tor])
                efps = median([e["gflops"] * 1e9 / e["samples_per_s"] for e in r["efa"]])
                tfps = median([t["flops_per_sample"] for t in tor])
                fps = f"{efps / 1e6:.3g}M / {tfps / 1e6:.3g}M"
            lines.append(f"| {key} | {m} | {rounds(v['efa_rounds'])} | {v['variant']}: "
                         f"{rounds(v['torch_rounds'])} | {allv} | {eg:.1f} | {tg:.1f} | {fps} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--efa", default="target/release/efa", help="efa binary (default: target/release/efa)")
    ap.add_argument("--python", default=sys.executable,
                    help="Python with torch and numpy for the PyTorch side (default: this one)")
    ap.add_argument("--data", default=os.environ.get("EFA_DATA", "/work/shared/data"),
                    help="data directory holding instacart/ and temperature/")
    ap.add_argument("--threads", default="2", help="1, 2 or a comma list such as 2,1 (default 2)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=None,
                    help="regular expression over item keys: " + ", ".join([k for k, _ in ATTENTION] + TRAIN))
    ap.add_argument("--quick", action="store_true",
                    help="short sizes and timings for a smoke run (numbers are not comparable)")
    ap.add_argument("--all-variants", action="store_true",
                    help="time every PyTorch variant in every round (no selection pass)")
    ap.add_argument("--variants", default=None,
                    help="comma list of PyTorch training variants to consider (default: all)")
    ap.add_argument("--max-others", type=float, default=0.05,
                    help="repeat a timed run during which other processes used more than this share "
                         "of the pinned CPUs (default 0.05; read from /proc/stat)")
    ap.add_argument("--attempts", type=int, default=4,
                    help="most runs per timed measurement under --max-others (default 4)")
    ap.add_argument("--max-wait", type=float, default=600.0,
                    help="before each timed run, wait up to this many seconds for other processes "
                         "to use at most --max-others of the pinned CPUs (default 600; 0: no waiting)")
    ap.add_argument("--json-out", default=None, help="also write every raw result to this file")
    ap.add_argument("--log", default=None, help="write the commands run to this file (default: stderr)")
    args = ap.parse_args()

    efa = args.efa if os.path.sep in args.efa else shutil.which(args.efa) or args.efa
    if not os.path.exists(efa):
        sys.exit(f"efa binary {args.efa} not found; build it with cargo build --release -p efa-cli")
    keys = [k for k, _ in ATTENTION] + TRAIN
    if args.only:
        keys = [k for k in keys if re.search(args.only, k)]
        if not keys:
            sys.exit(f"--only {args.only!r} matches no item")
    rounds = 1 if args.quick and args.rounds == 3 else args.rounds
    log = open(args.log, "a") if args.log else sys.stderr
    info = machine()
    all_out = {"machine": info, "runs": []}
    for threads in [int(t) for t in args.threads.split(",")]:
        started = datetime.datetime.now().astimezone()
        load0 = load()
        print(f"# threads {threads}: {len(keys)} items, {rounds} rounds (load {load0:.2f})", file=log, flush=True)
        train_variants = args.variants.split(",") if args.variants else None
        chosen = {}
        selection = {}
        if not args.all_variants:
            for key in keys:
                leader = SELECT_ON.get(key)
                if leader in chosen:
                    chosen[key] = chosen[leader]
                    print(f"  {key}: selected {', '.join(chosen[key])} (as {leader})", file=log, flush=True)
                    continue
                objs = run_json(pinned(torch_command(args.python, key, threads, args.data, args.quick,
                                                     None if key.startswith("attn") else train_variants,
                                                     True), threads), log, threads,
                                args.max_others, 2, args.max_wait)
                ok = [o for o in objs if "error" not in o]
                selection[key] = objs
                if not ok:
                    raise RuntimeError(f"{key}: every PyTorch variant failed: {objs}")
                if key.startswith("attn"):
                    best = {min(ok, key=lambda o: o["fwd_ms"])["variant"],
                            min(ok, key=lambda o: o["fwdbwd_ms"])["variant"]}
                else:
                    best = {max(ok, key=lambda o: o["samples_per_s"])["variant"]}
                chosen[key] = sorted(best)
                print(f"  {key}: selected {', '.join(chosen[key])}", file=log, flush=True)
        results = {k: {"efa": [], "torch": []} for k in keys}
        LOADS.clear()
        OTHERS.clear()
        for r in range(rounds):
            for key in keys:
                variants = chosen.get(key) or (None if key.startswith("attn") else train_variants)
                jobs = [("efa", pinned(efa_command(efa, key, threads, args.data, args.quick), threads)),
                        ("torch", pinned(torch_command(args.python, key, threads, args.data,
                                                       args.quick, variants, False), threads))]
                if r % 2 == 1:
                    jobs.reverse()
                for side, cmd in jobs:
                    objs = run_json(cmd, log, threads, args.max_others, args.attempts, args.max_wait)
                    results[key][side].extend(objs)
            print(f"# round {r + 1} of {rounds} done (load {load():.2f})", file=log, flush=True)
        load1 = load()
        print()
        print(f"## efa against PyTorch, {threads} thread{'s' if threads > 1 else ''}"
              + (" (QUICK smoke run: sizes and timings are not comparable)" if args.quick else ""))
        print()
        print(f"Machine: {info['model']} ({info['cpus']} CPUs; avx512f {'yes' if info['avx512f'] else 'no'}, "
              f"avx2 {'yes' if info['avx2'] else 'no'}); pinned with taskset to "
              f"{'core 0' if threads == 1 else f'cores 0-{threads - 1}'}; {threads} thread(s) each; "
              f"medians of {rounds} interleaved round(s); {started:%Y-%m-%d %H:%M %Z}; "
              f"1-minute load average {load0:.2f} before, {load1:.2f} after, "
              f"{min(LOADS):.2f}–{max(LOADS):.2f} (median {statistics.median(LOADS):.2f}) at the "
              f"starts of the timed runs, which include this run's own {threads} thread(s); "
              f"other processes used {100 * statistics.median(OTHERS):.1f}% (median) and at most "
              f"{100 * max(OTHERS):.1f}% of the pinned CPUs during the kept runs.")
        tv = next((o.get("torch") for v in results.values() for o in v["torch"] if o.get("torch")), "?")
        cap = next((o.get("cpu_capability") for v in results.values() for o in v["torch"] if o.get("cpu_capability")), "?")
        print(f"PyTorch {tv} (CPU capability {cap}); efa {efa}.")
        print()
        print(table(results, args.quick))
        print()
        print("Ratios: PyTorch time / efa time for attention, efa samples/s / PyTorch samples/s for "
              "training (above 1: efa is faster).")
        print()
        print(details(results))
        sys.stdout.flush()
        all_out["runs"].append({"threads": threads, "started": started.isoformat(), "load_before": load0,
                                "load_after": load1, "loads": list(LOADS), "others": list(OTHERS), "selection": selection, "chosen": chosen,
                                "results": results})
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(all_out, f, indent=1)


if __name__ == "__main__":
    main()

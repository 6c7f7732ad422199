"""Timing of the PyTorch models and attention shapes (run by ``torch_bench.py``).

Training: one step = gather the minibatch, forward (loss), backward, Adam step, as efa's
``train_epoch``. Minibatches are full batches drawn from a shuffled epoch order (a full-batch
model's step is the whole shuffled training set). After warm-up steps (the first includes any
``torch.compile`` compilation), ``blocks`` (3) timed blocks of steps run, each at least
``block_s`` seconds and at least one step; samples/s is the median over blocks and GFLOP/s
the counted FLOPs of all timed steps over their total time.

Adam is PyTorch's (fused on the CPU where available, else foreach) with β1 0.9, β2 0.999 and
Keras's ε placement: ``w ← w − lr·√(1−β2ᵗ)/(1−β1ᵗ)·m/(√v + ε)`` with ε = 1e-7 equals
PyTorch's ``w ← w − lr/(1−β1ᵗ)·m/(√v/√(1−β2ᵗ) + ε')`` when ``ε' = ε/√(1−β2ᵗ)``, so ε' is set
before every step.
"""

import math
import time

import numpy as np
import torch

from . import data, flops, models

VARIANTS = ("eager-sdpa", "eager-explicit", "compile-sdpa", "compile-explicit")
ATTN_VARIANTS = ("sdpa", "explicit", "compile-explicit")

TRAIN_WORKS = ("synthetic-uni", "synthetic-bi", "instacart-uni", "instacart-bi", "temp-L1",
               "temp-L2", "temp-L4", "temp-L4-lag1", "temp-L4-lag2")


def parse_temp(work):
    """``temp-L4-lag2`` → (layers 4, lag 2)."""
    parts = work.split("-")
    layers = int(parts[1][1:])
    lag = int(parts[2][3:]) if len(parts) > 2 else 0
    return layers, lag


def load_work(work, data_dir, quick=False):
    """Training arrays (in the model's argument order), batch size, learning rate, per-sample
    FLOPs (forward + backward), per-batch FLOPs and a model factory ``make(impl, seed)``."""
    if work.startswith("synthetic"):
        uni = work.endswith("uni")
        d = data.synthetic(uni, n_users=2000 if quick else data.N_USERS)
        arrays = [d["movies"], d["values"], d["lengths"], d["pred"], d["target"]]
        f, b = flops.rating_efa(d["width"], d["lengths"])
        make = lambda impl, seed: models.RatingEfa(d["value_rows"], d["width"], impl, seed)
        return arrays, 256, 1e-4, f + b, 0.0, make
    if work.startswith("instacart"):
        uni = work.endswith("uni")
        d = data.instacart(data_dir)
        arrays = [d["tokens"], d["lengths"], d["pred"], d["target"]]
        f, b = flops.item_efa(d["width"], d["lengths"], uni)
        make = lambda impl, seed: models.ItemEfa(d["n_items"], d["width"], uni, impl, seed)
        return arrays, 256, 1e-4, f + b, 0.0, make
    if work.startswith("temp"):
        layers, lag = parse_temp(work)
        d = data.temperature(data_dir, lag)
        arrays = [d["temps"], d["site"], d["lag_id"], d["pred"], d["target"]]
        f, b = flops.temperature_efa(d["width"], len(d["target"]), layers, lag)
        pf, pb = flops.temperature_per_batch(len(d["sites"]))
        make = lambda impl, seed: models.TemperatureEfa(d["sites"], layers, lag, impl, seed)
        batch = 10_000 if lag == 0 else 128
        return arrays, batch, 1e-3, f + b, pf + pb, make
    raise ValueError(f"unknown work {work!r}")


def new_adam(params, lr):
    kw = dict(lr=lr, betas=(0.9, 0.999), eps=1e-7)
    try:
        return torch.optim.Adam(params, fused=True, **kw), "fused"
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(params, foreach=True, **kw), "foreach"


def time_train(work, variant, arrays, batch, lr, sample_flops, batch_flops, make, warm_s,
               block_s, blocks=3, seed=0):
    mode, impl = variant.split("-")
    torch.manual_seed(seed)
    model = make(impl, seed)
    fwd = torch.compile(model) if mode == "compile" else model
    opt, adam_kind = new_adam(list(model.parameters()), lr)
    tensors = [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]
    n = len(arrays[-1])
    bs = min(batch, n)
    rng = np.random.default_rng(seed)
    state = {"order": rng.permutation(n), "pos": 0, "steps": 0}

    def step():
        if state["pos"] + bs > n:
            state["order"], state["pos"] = rng.permutation(n), 0
        idx = state["order"][state["pos"]:state["pos"] + bs]
        state["pos"] += bs
        ti = torch.from_numpy(idx)
        xs = [t.index_select(0, ti) for t in tensors]
        opt.zero_grad(set_to_none=True)
        loss = fwd(*xs)
        loss.backward()
        state["steps"] += 1
        eps = 1e-7 / math.sqrt(1.0 - 0.999 ** state["steps"])
        for g in opt.param_groups:
            g["eps"] = eps
        opt.step()
        return idx, loss

    t0 = time.perf_counter()
    _, loss = step()
    first_s = time.perf_counter() - t0
    # Warm-up: at least one more step and warm_s seconds.
    t0 = time.perf_counter()
    w = 0
    while w < 1 or time.perf_counter() - t0 < warm_s:
        _, loss = step()
        w += 1
    per_step = (time.perf_counter() - t0) / w
    k = max(1, int(math.ceil(block_s / per_step)))
    rates, total_t, total_f = [], 0.0, 0.0
    for _ in range(blocks):
        s, f = 0, 0.0
        t0 = time.perf_counter()
        for _ in range(k):
            idx, loss = step()
            s += len(idx)
            f += float(sample_flops[idx].sum()) + batch_flops
        dt = time.perf_counter() - t0
        rates.append(s / dt)
        total_t += dt
        total_f += f
    loss = float(loss.detach())
    if not math.isfinite(loss):
        raise RuntimeError(f"{work} {variant}: non-finite loss {loss}")
    return {
        "kind": "train", "work": work, "variant": variant, "samples_per_s": float(np.median(rates)),
        "rates": rates, "gflops": total_f / total_t / 1e9,
        "flops_per_sample": float(sample_flops.mean()) + batch_flops / bs,
        "steps_per_block": k, "batch": bs, "train_samples": n, "first_step_s": first_s,
        "adam": adam_kind, "last_loss": loss,
    }


def filled(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) * 2 - 1


def median_ms(reps, f):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(ts))


def time_attention(variant, b, h, n, d, causal, reps):
    q, k, v, g = (filled((b, h, n, d), s) for s in (1, 2, 3, 4))
    impl = "explicit" if variant.endswith("explicit") else "sdpa"

    def core(q, k, v):
        return models.attention_core(q, k, v, impl, causal=causal)

    f = torch.compile(core) if variant.startswith("compile") else core
    t0 = time.perf_counter()

    def fwd():
        with torch.no_grad():
            f(q, k, v)

    qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))

    def fwdbwd():
        out = f(qg, kg, vg)
        torch.autograd.grad(out, (qg, kg, vg), g)

    # As `efa bench attention`: each of the two at least twice and for at least 0.3 s untimed,
    # so the threads are awake and the cores at their steady clock.
    for f_warm in (fwd, fwdbwd):
        t1, calls = time.perf_counter(), 0
        while calls < 2 or time.perf_counter() - t1 < 0.3:
            f_warm()
            calls += 1
    warm_s = time.perf_counter() - t0
    fl = flops.attention(b, h, n, d, causal)
    fwd_ms = median_ms(reps, fwd)
    fwdbwd_ms = median_ms(reps, fwdbwd)
    return {
        "kind": "attention", "variant": variant, "batch": b, "heads": h, "len": n, "dim": d,
        "mask": "causal" if causal else "none", "fwd_ms": fwd_ms, "fwdbwd_ms": fwdbwd_ms,
        "fwd_gflops": fl / (fwd_ms * 1e-3) / 1e9, "fwdbwd_gflops": 3.5 * fl / (fwdbwd_ms * 1e-3) / 1e9,
        "warm_s": warm_s,
    }

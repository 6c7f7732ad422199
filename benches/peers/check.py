#!/usr/bin/env python3
"""Checks that the PyTorch models of efa_torch are the models efa trains. Run with the
torch venv's python from the repository root:

    /path/to/venv/bin/python benches/peers/check.py --efa target/release/efa [--data DIR]

1. Parameters: for every benchmarked model, the tensor names and shapes efa declares (from
   `efa audit … --json`) against the PyTorch model's (its fused q/k/v kernel split back into
   efa's names), in order, and the total count.
2. Same function: efa's own initial weights (an `efa train` run with lr 1e-30, so the saved
   model holds the initial weights) loaded into the PyTorch rating EFA (synthetic architecture,
   uni and bi) and item EFA (Instacart architecture, padding and causal masks); the natural
   parameters η of `efa predict` on the same rows against the PyTorch forward's, max |Δ|.
   (efa's CSV path takes no continuous inputs, so the temperature EFA is checked by 1 and 3.)
3. Initial loss: efa's loss on the first N training samples at initial weights (`efa audit`,
   seeds 0–2) beside the PyTorch model's on the same samples (seeds 0–2; its initialisers are
   Keras's, drawn by another generator, so the values agree in level, not digit for digit).
4. Recipe: the benchmark's Adam (PyTorch's, fused or foreach, with ε' = ε/√(1−β2ᵗ) set before
   each step) against Keras's update w ← w − lr·√(1−β2ᵗ)/(1−β1ᵗ)·m/(√v + ε) written out, in
   float64, over 20 steps on random gradients.
"""

import argparse
import csv
import io
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from efa_torch import bench, data, models  # noqa: E402


def audit(efa, args, batch, seed):
    cmd = [efa, "audit"] + args + ["--model", "efa", "--json", "--batch", str(batch), "--seed", str(seed)]
    # The audit exits non-zero when one of its own finite-difference comparisons fails; its
    # JSON (parameters and loss, which is all this check reads) is printed either way.
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        return json.loads(p.stdout)["models"]
    except (json.JSONDecodeError, KeyError):
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr[-2000:]}")


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        blob = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", info
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(blob[b:e], dtype="<f4").reshape(info["shape"]).copy()
    return out


def load_efa_weights(model, w):
    """Copies efa's named tensors into the PyTorch model (q/k/v kernels concatenated)."""
    sd = {}
    for name, p in model.named_parameters():
        sd[name] = p
    with torch.no_grad():
        for key, p in sd.items():
            parts = key.split(".")
            if "qkv_w" in parts[-1] or "qkv_b" in parts[-1]:
                i = int(parts[1])
                kind = "w" if parts[-1] == "qkv_w" else "b"
                cat = np.concatenate([w[f"block{i}.attn.{x}.{kind}"] for x in "qkv"], axis=-1)
                p.copy_(torch.from_numpy(cat))
            elif parts[-1] in ("o_w", "o_b"):
                i = int(parts[1])
                p.copy_(torch.from_numpy(w[f"block{i}.attn.o.{parts[-1][2]}"]))
            else:
                p.copy_(torch.from_numpy(w[key]))


def efa_train_predict(efa, cfg, rows, tmp):
    """Trains `cfg` with lr 1e-30 for one epoch on `rows` (so the saved weights are the initial
    ones), returns (weights, η per row from `efa predict`)."""
    csv_path = os.path.join(tmp, "d.csv")
    with open(csv_path, "w") as f:
        f.write("seq,order,item,value\n")
        for r in rows:
            f.write(",".join(str(x) for x in r) + "\n")
    cfg_path = os.path.join(tmp, "c.toml")
    with open(cfg_path, "w") as f:
        f.write(cfg)
    out = os.path.join(tmp, "m")
    subprocess.run([efa, "train", "--config", cfg_path, "--data", csv_path, "--valid", csv_path,
                    "--out", out, "--quiet"], check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p = subprocess.run([efa, "predict", "--model", out, "--data", csv_path], check=True,
                       stdout=subprocess.PIPE, text=True)
    rd = list(csv.reader(io.StringIO(p.stdout)))
    head, body = rd[0], rd[1:]
    eta_cols = [i for i, h in enumerate(head) if h.startswith("eta")]
    eta = {}
    for r in body:
        if r[eta_cols[0]] == "":
            continue
        eta[(r[0], int(r[1]))] = np.array([float(r[i]) for i in eta_cols])
    return read_safetensors(os.path.join(out, "model.safetensors")), eta, head


TRAIN_TOML = """
[train]
lr = 1e-30
batch_size = 256
max_epochs = 1
patience = 1
seed = 0
"""


def check_rating_forward(efa, uni, tmp):
    seqs = data.synthetic_sequences(200)
    rows = []
    for u, s in enumerate(seqs):
        for j, (m, r) in enumerate(s):
            rows.append((f"u{u}", j + 1, m, min(max(int(np.trunc(r)), 0), 9)))
    cfg = f"""init_seed = 0
direction = "{'uni' if uni else 'bi'}"
[family]
kind = "gaussian_known_var"
s2 = 1.0
[model.efa]
items = 6
item_dim = 32
values = {{ rows = 12, dim = 32 }}
positions = {{ max_len = 5, only_valid = false }}
layers = 2
heads = 2
key_dim = 16
head_hidden = [32]
out_dim = 1
out_bias = true
direction = "padding"
""" + TRAIN_TOML
    w, eta, _ = efa_train_predict(efa, cfg, rows, tmp)
    model = models.RatingEfa(12, 5, "explicit")
    load_efa_weights(model, w)
    movies, values, lengths, pred, keys = [], [], [], [], []
    for u, s in enumerate(seqs):
        vals = [min(max(int(np.trunc(r)), 0), 9) for _, r in s]
        for t in range(len(s)):
            if uni and t == 0:
                continue
            length = t + 1 if uni else len(s)
            mv = [0] * 5
            vv = [0] * 5
            for j in range(length):
                mv[j] = s[j][0]
                vv[j] = 11 if j == t else vals[j] + 1
            movies.append(mv)
            values.append(vv)
            lengths.append(length)
            pred.append(t)
            keys.append((f"u{u}", t + 1))
    t = torch.tensor
    return compare(model, w, eta, keys, (t(movies), t(values), t(lengths), t(pred)))


def check_item_forward(efa, data_dir, uni, tmp):
    baskets, max_len = data.instacart_baskets(data_dir)
    baskets = baskets[:300]
    rows = []
    for k, b in enumerate(baskets):
        for j, item in enumerate(b):
            rows.append((f"b{k}", j + 1, item, item - 1))
    cfg = f"""init_seed = 0
direction = "{'uni' if uni else 'bi'}"
[family]
kind = "categorical"
k = 63
[model.efa]
items = 65
item_dim = 32
zero_padding = true
positions = {{ max_len = {max_len}, only_valid = true }}
layers = 2
heads = 2
key_dim = 16
out_dim = 63
out_bias = false
direction = "{'causal' if uni else 'padding'}"
""" + TRAIN_TOML
    w, eta, _ = efa_train_predict(efa, cfg, rows, tmp)
    model = models.ItemEfa(63, max_len, uni, "explicit")
    load_efa_weights(model, w)
    tokens, lengths, pred, keys = [], [], [], []
    for k, b in enumerate(baskets):
        for t in range(len(b)):
            if uni and t == 0:
                continue
            length = t + 1 if uni else len(b)
            tok = [0] * max_len
            tok[:length] = b[:length]
            tokens.append(tok)
            lengths.append(length)
            pred.append(t)
            keys.append((f"b{k}", t + 1))

    t = torch.tensor
    return compare(model, w, eta, keys, (t(tokens), t(lengths), t(pred)))


def compare(model, w, eta, keys, inputs):
    """Max |Δη| between `efa predict` and the model's ``eta`` with efa's weights, for both
    attention implementations."""
    names = [n for n, _ in model.logical_params()]
    assert sorted(names) == sorted(w), (sorted(names), sorted(w))
    ref = np.stack([eta[k] for k in keys])
    out = {}
    for impl in ("sdpa", "explicit"):
        model.impl = impl
        with torch.no_grad():
            got = model.eta(*inputs).numpy().reshape(ref.shape)
        out[impl] = float(np.max(np.abs(got - ref)))
    return len(keys), float(np.max(np.abs(ref))), out


def check_adam(steps=20, lr=1e-3):
    """Max |Δw| between the benchmark's Adam and Keras's update written out, in float64 (the
    formulas, without float32 rounding), with and without the per-step ε'."""
    g = torch.Generator().manual_seed(0)
    f64 = torch.float64
    w0 = torch.randn(1000, generator=g, dtype=f64)
    grads = [torch.randn(1000, generator=g, dtype=f64) * 10 ** float(torch.randint(-6, 2, (1,), generator=g))
             for _ in range(steps)]
    w, m, v = w0.clone(), torch.zeros(1000, dtype=f64), torch.zeros(1000, dtype=f64)
    for t, gr in enumerate(grads, 1):
        m = 0.9 * m + 0.1 * gr
        v = 0.999 * v + 0.001 * gr * gr
        w = w - lr * (1 - 0.999 ** t) ** 0.5 / (1 - 0.9 ** t) * m / (v.sqrt() + 1e-7)
    out = {}
    for adjust in (True, False):
        p = torch.nn.Parameter(w0.clone())
        opt, kind = bench.new_adam([p], lr)
        for t, gr in enumerate(grads, 1):
            p.grad = gr.clone()
            if adjust:
                for grp in opt.param_groups:
                    grp["eps"] = 1e-7 / (1 - 0.999 ** t) ** 0.5
            opt.step()
        out[adjust] = float((p.detach() - w).abs().max())
    return kind, out[True], out[False], float((w - w0).abs().max())


MODELS = [
    ("synthetic-uni", ["synthetic", "--direction", "uni"], 256),
    ("synthetic-bi", ["synthetic", "--direction", "bi"], 256),
    ("instacart-uni", ["instacart", "--direction", "uni"], 256),
    ("instacart-bi", ["instacart", "--direction", "bi"], 256),
    ("temp-L1", ["temperature", "--layers", "1"], 6),
    ("temp-L2", ["temperature", "--layers", "2"], 6),
    ("temp-L4", ["temperature", "--layers", "4"], 6),
    ("temp-L4-lag1", ["temperature", "--layers", "4", "--lag", "1"], 6),
    ("temp-L4-lag2", ["temperature", "--layers", "4", "--lag", "2"], 6),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--efa", default="target/release/efa")
    ap.add_argument("--data", default=os.environ.get("EFA_DATA", "/work/shared/data"))
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    ok = True
    print("## 1 and 3: parameters and initial loss (first N training samples, in efa's order)\n")
    print("| model | efa tensors = PyTorch tensors | parameters | N | efa initial loss (seeds) | PyTorch initial loss (seeds) |")
    print("|---|---|---|---|---|---|")
    for work, exp, n in MODELS:
        extra = ["--data", args.data] if exp[0] != "synthetic" else []
        ms = [audit(args.efa, exp + extra, n, s)[0] for s in range(args.seeds)]
        efa_params = [(t["name"], tuple(t["shape"])) for t in ms[0]["params"]["tensors"]]
        arrays, _, _, _, _, make = bench.load_work(work, args.data)
        losses = []
        for s in range(args.seeds):
            model = make("explicit", s)
            with torch.no_grad():
                losses.append(float(model(*[torch.from_numpy(np.ascontiguousarray(a[:n])) for a in arrays])))
        ours = model.logical_params()
        same = ours == efa_params
        ok &= same
        count = sum(int(np.prod(s)) for _, s in efa_params)
        torch_count = sum(p.numel() for p in model.parameters())
        ok &= count == torch_count
        el = ", ".join(f"{m['loss']:.4g}" for m in ms)
        tl = ", ".join(f"{x:.4g}" for x in losses)
        print(f"| {work} | {'yes' if same else 'NO'} ({len(efa_params)}) | {count:,} efa / {torch_count:,} PyTorch | {n} | {el} | {tl} |")
        if not same:
            print(f"efa: {efa_params}\nPyTorch: {ours}", file=sys.stderr)
    print("\n## 2: efa's initial weights in the PyTorch model, η against `efa predict`\n")
    print("| architecture | targets | max |η| | max |Δη| sdpa | max |Δη| explicit |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in (("rating EFA (synthetic), uni: key-length mask", lambda d: check_rating_forward(args.efa, True, d)),
                         ("rating EFA (synthetic), bi", lambda d: check_rating_forward(args.efa, False, d)),
                         ("item EFA (Instacart), causal mask", lambda d: check_item_forward(args.efa, args.data, True, d)),
                         ("item EFA (Instacart), padding mask", lambda d: check_item_forward(args.efa, args.data, False, d))):
            sub = tempfile.mkdtemp(dir=tmp)
            count, scale, diff = fn(sub)
            ok &= max(diff.values()) <= 1e-4 * max(1.0, scale)
            print(f"| {name} | {count} | {scale:.3g} | {diff['sdpa']:.2e} | {diff['explicit']:.2e} |")
    kind, diff, plain, moved = check_adam()
    ok &= diff <= 1e-12
    print(f"\n## 4: Adam with Keras's ε placement\n\nPyTorch Adam ({kind}, float64) with the per-step ε' against "
          f"Keras's update written out, 20 steps on gradients of scale 1e-6 to 10: max |Δw| {diff:.1e} "
          f"(with PyTorch's own ε placement: {plain:.1e}; weights moved up to {moved:.3g}).")
    print("\nall checks passed" if ok else "\nSOME CHECKS FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

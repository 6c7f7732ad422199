"""FLOPs of the PyTorch models, counted by efa's rules (``efa_tape::stats``, ``efa_attn``).

Counted are matrix products and attention only:

* a dense layer on ``m`` rows, ``fan_in → fan_out``: ``2·m·fan_in·fan_out`` forward and twice
  that backward (the input and the kernel gradient), as efa's ``linear`` op counts it;
* attention: ``2·(K + Kv) = 4·K`` per visible (sample, head, query, key) forward — ``QKᵀ`` and
  ``PV`` — and 2.5× that backward (the FlashAttention convention efa uses). Keys hidden by the
  mask are not counted, even where a dense kernel computes them.

Element-wise work, softmax exponentials, layer norms, gathers, the loss and the optimizer are
not counted. The counts are of the work the PyTorch model does as written: every sample runs
every block over its whole (padded) width, so they are larger per sample than efa's own
counts, which only include the work efa's trimmed and shared plans perform.

Each function returns per-sample ``(forward, backward)`` arrays; a batch's FLOPs are their sum
plus the ``per_batch`` term (work done once per minibatch).
"""

import numpy as np


def dense(m, fan_in, fan_out):
    return 2.0 * m * fan_in * fan_out


def attention_pairs_padding(n, lengths, heads):
    """Visible pairs under a key-length mask: every one of the n query rows sees ``length``
    keys."""
    return heads * n * np.asarray(lengths, dtype=np.float64)


def attention_pairs_causal(n, count, heads):
    return np.full(count, heads * n * (n + 1) / 2.0)


def rating_efa(width, lengths, layers=2, d=64, hk=32, heads=2, key_dim=16):
    """The synthetic EFA over ``width`` positions with key-length masks."""
    n = width
    lin = layers * (dense(n, d, 3 * hk) + dense(n, hk, d)) + dense(1, d, 32) + dense(1, 32, 1)
    att = layers * 4.0 * key_dim * attention_pairs_padding(n, lengths, heads)
    return lin + att, 2 * lin + 2.5 * att


def item_efa(width, lengths, uni, n_items=63, layers=2, d=32, hk=32, heads=2, key_dim=16):
    n = width
    lin = layers * (dense(n, d, 3 * hk) + dense(n, hk, d)) + dense(1, d, n_items)
    if uni:
        pairs = attention_pairs_causal(n, len(lengths), heads)
    else:
        pairs = attention_pairs_padding(n, lengths, heads)
    att = layers * 4.0 * key_dim * pairs
    return lin + att, 2 * lin + 2.5 * att


def temperature_efa(width, count, layers, lag, d=32, hidden=128, fuse=64, ffn=64, hk=32,
                    heads=2, key_dim=16):
    n = width
    concat = d * (3 if lag > 0 else 2)
    lin = (dense(n, 1, hidden) + dense(n, hidden, d) + dense(n, concat, fuse) + dense(n, fuse, d)
           + layers * (dense(n, d, 3 * hk) + dense(n, hk, d) + dense(n, d, ffn) + dense(n, ffn, d))
           + dense(1, d, 128) + dense(1, 128, 16) + dense(1, 16, 1))
    # No mask: every query sees all n keys.
    att = np.full(count, layers * 4.0 * key_dim * heads * n * n)
    fwd = np.full(count, lin) + att
    bwd = np.full(count, 2 * lin) + 2.5 * att
    return fwd, bwd


def temperature_per_batch(n_sites=44, features=2, hidden=128, d=32):
    """The site MLP runs once per minibatch on the 44 cities."""
    f = dense(n_sites, features, hidden) + dense(n_sites, hidden, d)
    return f, 2 * f


def attention(b, h, n, d, causal):
    """Forward FLOPs of ``efa bench attention``: ``4·B·H·N²·D`` (none) or
    ``4·B·H·N(N+1)/2·D`` (causal); forward + backward is 3.5× this."""
    pairs = b * h * (n * (n + 1) / 2 if causal else n * n)
    return 4.0 * pairs * d

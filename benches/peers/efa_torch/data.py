"""The training samples of the benchmarked models, built in numpy exactly as efa builds them.

* synthetic (docs/paper.md §2): regenerated from numpy's legacy ``RandomState(42)`` (one
  ``permutation(5)`` then five ``normal(mean, 1)`` draws per user), users 1..7500 train+val,
  the per-sample ``train_test_split(0.25, 42)``; EFA samples with the split frame's MASK value
  and the compact rating table of ``efa_data::samples::CompactRatingTable`` (one row per
  ``trunc(rating)`` key that occurs, key 0 first: padding and |r| < 1 share it);
* Instacart (§5): ``DATA/instacart/baskets_train.csv``, baskets in rank order, orders by id,
  whole baskets split by ``train_test_split(0.25, 42)``; tokens 0 pad, 1..63, 64 = MASK;
* temperature (§6): ``DATA/temperature/{us_cities_fall.csv,cities.csv}``, 44 cities (Arizona,
  Connecticut and South Dakota removed), October days of 2007–2012 for training, the masked
  city's temperature set to 0, then ``lag`` previous days (all visible).

Every function returns plain numpy arrays (int64 / float32) in efa's sample order.
"""

import csv
import math
import os
from collections import defaultdict

import numpy as np

N_USERS = 10_000
MOVIES = 5
TRAINVAL_USERS = 7_500
EXCLUDED_STATES = ("Arizona", "Connecticut", "South Dakota")


def train_test_split(n, seed=42, test_size=0.25):
    """sklearn's split of ``range(n)``: (train, test) index arrays in permuted order."""
    p = np.random.RandomState(seed).permutation(n)
    n_test = int(math.ceil(test_size * n))
    return p[n_test:], p[:n_test]


# --------------------------------------------------------------------------- synthetic


def synthetic_mean(order, j):
    """Mean of the rating at position j of watch order ``order`` (movie ids 1..5)."""
    m = order[j]
    prev = order[j - 1] if j > 0 else None
    if m == 2:
        return 1.0 if 1 in order[:j] else 5.0
    if m == 4 and prev == 3:
        return 1.0
    if m == 3 and prev == 4:
        return 1.0
    if m == 5 and j == len(order) - 1:
        return 5.0
    return 3.0


def synthetic_sequences(n_users=N_USERS):
    """Per-user lists of (movie, rating), users 1..n in order (one global RandomState(42))."""
    rs = np.random.RandomState(42)
    seqs = []
    for _ in range(n_users):
        order = [int(x) + 1 for x in rs.permutation(MOVIES)]
        seq = []
        for j in range(MOVIES):
            seq.append((order[j], float(rs.normal(synthetic_mean(order, j), 1.0))))
        seqs.append(seq)
    return seqs


def synthetic(uni, n_users=N_USERS):
    """Training samples of the synthetic EFA (28,125 with 10,000 users).

    Returns a dict: ``movies`` [S, 5] int64, ``values`` [S, 5] int64 (rating-table rows),
    ``lengths`` [S], ``pred`` [S], ``target`` [S] float32, ``value_rows`` (table size),
    ``width`` 5.
    """
    seqs = synthetic_sequences(n_users)
    cut = TRAINVAL_USERS * n_users // N_USERS
    trainval, test = seqs[:cut], seqs[cut:]
    tv_mask = max(r for s in trainval for _, r in s) + 1.0
    test_mask = max(r for s in test for _, r in s) + 1.0
    keys = {math.trunc(r) for s in seqs for _, r in s} | {math.trunc(tv_mask), math.trunc(test_mask)}
    keys.discard(0)
    table = [0] + sorted(keys)
    row_of = {k: i for i, k in enumerate(table)}
    refs = [(u, p) for u, s in enumerate(trainval) for p in range(len(s))]
    train_idx, _ = train_test_split(len(refs))
    n = len(train_idx)
    movies = np.zeros((n, MOVIES), np.int64)
    values = np.zeros((n, MOVIES), np.int64)
    lengths = np.zeros(n, np.int64)
    pred = np.zeros(n, np.int64)
    target = np.zeros(n, np.float32)
    for i, r in enumerate(train_idx):
        u, idx = refs[r]
        seq = trainval[u]
        length = idx + 1 if uni else len(seq)
        for p in range(length):
            movies[i, p] = seq[p][0]
            rating = tv_mask if p == idx else seq[p][1]
            values[i, p] = row_of[math.trunc(rating)]
        lengths[i] = length
        pred[i] = idx
        target[i] = seq[idx][1]
    return dict(movies=movies, values=values, lengths=lengths, pred=pred, target=target,
                value_rows=len(table), width=MOVIES)


# --------------------------------------------------------------------------- Instacart


def instacart_baskets(data_dir):
    """Training baskets (item lists in rank order) after the basket split, and max_len."""
    d = os.path.join(data_dir, "instacart")
    def read(name):
        orders = defaultdict(list)
        with open(os.path.join(d, name), newline="") as f:
            for row in csv.DictReader(f):
                orders[int(row["order_id"])].append((int(row["rank"]), int(row["product_id"])))
        return [[item for _, item in sorted(orders[o])] for o in sorted(orders)]
    all_train = read("baskets_train.csv")
    test = read("baskets_test.csv")
    tr, va = train_test_split(len(all_train))
    train = [all_train[i] for i in tr]
    val = [all_train[i] for i in va]
    max_len = max(len(b) for b in train + val + test)
    return train, max_len


def instacart(data_dir, n_items=63):
    """Training samples of the item EFA (206,450): ``tokens`` [S, max_len] (MASK = 64 at the
    target), ``lengths``, ``pred``, ``target`` (class = item − 1), ``width``."""
    baskets, max_len = instacart_baskets(data_dir)
    n = sum(len(b) for b in baskets)
    tokens = np.zeros((n, max_len), np.int64)
    lengths = np.zeros(n, np.int64)
    pred = np.zeros(n, np.int64)
    target = np.zeros(n, np.int64)
    i = 0
    for b in baskets:
        for idx in range(len(b)):
            tokens[i, :len(b)] = b
            tokens[i, idx] = n_items + 1
            lengths[i] = len(b)
            pred[i] = idx
            target[i] = b[idx] - 1
            i += 1
    return dict(tokens=tokens, lengths=lengths, pred=pred, target=target, width=max_len,
                n_items=n_items)


# --------------------------------------------------------------------------- temperature


def previous_day(y, m, d):
    if d > 1:
        return y, m, d - 1
    if m > 1:
        days = [31, 29 if (y % 4 == 0 and y % 100 != 0) or y % 400 == 0 else 28, 31, 30, 31,
                30, 31, 31, 30, 31, 30, 31][m - 2]
        return y, m - 1, days
    return y - 1, 12, 31


def temperature(data_dir, lag=0, years=range(2007, 2013)):
    """Training samples of the temperature EFA (8,184 = 186 days × 44 cities).

    ``temps`` [S, 44·(1+lag)] float32 (masked city 0), ``site`` [S, W] (city index of each
    position), ``lag_id`` [S, W], ``pred`` [S] (masked city), ``target`` [S], ``sites``
    [44, 2] (latitude, longitude in degrees), ``width``.
    """
    d = os.path.join(data_dir, "temperature")
    cities = []
    with open(os.path.join(d, "cities.csv"), newline="") as f:
        for row in csv.DictReader(f):
            if row["state"] not in EXCLUDED_STATES:
                cities.append((row["state"], row["city"], float(row["latitude"]),
                               float(row["longitude"])))
    index = {(s, c): i for i, (s, c, _, _) in enumerate(cities)}
    temps = {}
    with open(os.path.join(d, "us_cities_fall.csv"), newline="") as f:
        for row in csv.DictReader(f):
            ci = index.get((row["state"], row["city"]))
            if ci is None:
                continue
            temps[(ci, int(row["year"]), int(row["month"]), int(row["day"]))] = float(row["avg_temp_f"])
    c = len(cities)

    def day(date):
        v = [temps[(ci,) + date] for ci in range(c)]
        if any(x == -99.0 for x in v):
            raise ValueError(f"missing temperature on {date}")
        return v

    rows_t, rows_pred, rows_target = [], [], []
    for y in years:
        for dd in range(1, 32):
            date = (y, 10, dd)
            today = day(date)
            lags = []
            p = date
            for _ in range(lag):
                p = previous_day(*p)
                lags.extend(day(p))
            for i in range(c):
                t = list(today)
                t[i] = 0.0
                rows_t.append(t + lags)
                rows_pred.append(i)
                rows_target.append(today[i])
    w = c * (1 + lag)
    n = len(rows_t)
    return dict(
        temps=np.asarray(rows_t, np.float32),
        site=np.tile(np.arange(w) % c, (n, 1)).astype(np.int64),
        lag_id=np.tile(np.arange(w) // c, (n, 1)).astype(np.int64),
        pred=np.asarray(rows_pred, np.int64),
        target=np.asarray(rows_target, np.float32),
        sites=np.asarray([[la, lo] for _, _, la, lo in cities], np.float32),
        width=w,
        lengths=np.full(n, w, np.int64),
    )

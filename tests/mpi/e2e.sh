#!/usr/bin/env bash
# End-to-end check of multi-process jobs over MPI (run by .ci/run after the test command).
#
# Installs Open MPI when it is missing (Debian: root, or sudo), builds efa with the `mpi`
# feature, then, oversubscribed on however many cores there are:
#   1. trains a user model with 1 process (no MPI) and at np = 1..4; model.safetensors and
#      result.json must be the same bytes;
#   2. runs `efa reproduce synthetic` short, data-parallel and task-parallel, at np = 1..4
#      against one process; results.json must be the same bytes;
#   3. kills one rank mid-run: mpirun must exit non-zero, no temporary file may be left, and
#      the run resumed from its last checkpoint on another number of ranks (3 -> 2, and
#      without MPI) must end with the bytes of the uninterrupted run;
#   4. a build without the feature, started as 2 ranks, must refuse at once.
#
# Usage: tests/mpi/e2e.sh [WORKDIR]   (EFA_MPI_SKIP=1 skips it, e.g. without root.)
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK=${1:-$(mktemp -d /tmp/efa-mpi-e2e.XXXXXX)}
mkdir -p "$WORK"
say() { printf '\n== %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

if [ "${EFA_MPI_SKIP:-}" = 1 ]; then
  echo "EFA_MPI_SKIP=1: MPI end-to-end check skipped"
  exit 0
fi

have_mpi() { # the launcher, the compiler wrapper the bindings probe, and libclang
  command -v mpirun >/dev/null && command -v mpicc >/dev/null &&
    ls /usr/lib/llvm-*/lib/libclang*.so* /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1
}
if ! have_mpi; then
  say "installing Open MPI (openmpi-bin libopenmpi-dev libclang-dev)"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get install -y --no-install-recommends openmpi-bin libopenmpi-dev libclang-dev \
    >"$WORK/apt.log" 2>&1 || {
    $SUDO apt-get update >>"$WORK/apt.log" 2>&1
    $SUDO apt-get install -y --no-install-recommends openmpi-bin libopenmpi-dev libclang-dev \
      >>"$WORK/apt.log" 2>&1
  } || {
    # The check needs an MPI library; a machine that cannot install one cannot run it.
    echo "MPI end-to-end check NOT RUN: could not install Open MPI (log: $WORK/apt.log)"
    exit 0
  }
fi

# Both builds take the workspace's feature set (`--workspace` with an example, so the
# dev-dependencies count as in `cargo test --workspace`, and syn's features are the MPI
# bindings' in both: see crates/efa-mpi/Cargo.toml): the MPI build then compiles only the MPI
# crates and efa-cli on top of what the test command built, not the whole stack again.
BUILD=(cargo build --quiet --profile test --workspace --bin efa --example custom_model)
# The build without MPI (step 4): the one `cargo test --workspace` left in target/debug when
# it is newer than every source, else built here; kept aside before the MPI build replaces it.
PLAIN="$WORK/efa-plain"
newest_source=$(find crates Cargo.toml Cargo.lock -newer target/debug/efa -type f 2>/dev/null | head -1 || true)
if [ -x target/debug/efa ] && [ -z "$newest_source" ]; then
  cp target/debug/efa "$PLAIN"
else
  say "building efa without MPI"
  "${BUILD[@]}"
  cp target/debug/efa "$PLAIN"
fi

say "building efa with --features mpi"
"${BUILD[@]}" --features efa-cli/mpi
EFA="$WORK/efa-mpi"
cp target/debug/efa "$EFA"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# No binding (more ranks than cores), no shared-memory transport warnings, quiet startup.
MPIRUN=(mpirun --oversubscribe --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none)
run_np() {
  local np=$1
  shift
  "${MPIRUN[@]}" -np "$np" "$@"
}

# A user data set large enough for several 128-sample micro-batches per minibatch, so every
# rank gets a share (and at np = 3, 4 the shares are uneven).
DATA="$WORK/data"
mkdir -p "$DATA"
gen() { # gen N SALT > file: N sequences of 2..11 rows of items 1..5 and counts 0..5
  awk -v n="$1" -v salt="$2" 'BEGIN {
    print "seq,order,item,value";
    for (k = 0; k < n; k++) for (o = 0; o < 2 + (k * 7 + salt) % 10; o++)
      printf "s%d,%d,%d,%d\n", k, o, 1 + (k * 3 + o + salt) % 5, (k + 2 * o + salt) % 6;
  }'
}
gen 400 0 >"$DATA/train.csv"
gen 80 1 >"$DATA/valid.csv"
gen 80 2 >"$DATA/test.csv"
cat >"$DATA/model.toml" <<'EOF'
init_seed = 3
direction = "bi"
[family]
kind = "poisson"
[model.efa]
items = 6
item_dim = 8
layers = 1
heads = 2
key_dim = 4
out_dim = 1
out_bias = true
values = { rows = 8, dim = 4 }
positions = { max_len = 12 }
[train]
lr = 0.01
batch_size = 700
max_epochs = 6
patience = 6
seed = 5
eval_batch = 100
EOF
train() { # train OUT [extra args]
  local out=$1
  shift
  "$@" train --config "$DATA/model.toml" --data "$DATA/train.csv" --valid "$DATA/valid.csv" \
    --test "$DATA/test.csv" --out "$out" --threads 1 --quiet
}
same() { # same A B: byte-for-byte equal files
  cmp -s "$1" "$2" || fail "$1 and $2 differ"
}

say "1. efa train: one process against np = 1..4"
train "$WORK/train-solo" "$EFA" >/dev/null
for np in 1 2 3 4; do
  train "$WORK/train-np$np" run_np "$np" "$EFA" >/dev/null
  for f in model.safetensors result.json; do
    same "$WORK/train-solo/$f" "$WORK/train-np$np/$f"
  done
  echo "np=$np: model.safetensors and result.json identical to one process"
done

say "2. efa reproduce synthetic --epochs 2: one process against np = 1..4"
"$EFA" reproduce synthetic --epochs 2 --threads 1 --quiet --out "$WORK/rep-solo" >/dev/null
for np in 1 2 3 4; do
  for how in batches runs auto; do
    run_np "$np" "$EFA" reproduce synthetic --epochs 2 --threads 1 --quiet --distribute "$how" \
      --out "$WORK/rep-np$np-$how" >/dev/null
    same "$WORK/rep-solo/results.json" "$WORK/rep-np$np-$how/results.json"
  done
  echo "np=$np: results.json identical to one process (batches, runs and auto)"
done

say "3. a rank killed mid-run; resume on another number of ranks"
cat "$DATA/model.toml" | sed 's/^max_epochs = 6/max_epochs = 40/; s/^patience = 6/patience = 40/' \
  >"$DATA/long.toml"
long() { # long OUT [launcher...]
  local out=$1
  shift
  "$@" train --config "$DATA/long.toml" --data "$DATA/train.csv" --valid "$DATA/valid.csv" \
    --test "$DATA/test.csv" --out "$out" --threads 1 --quiet "${RESUME[@]}"
}
RESUME=()
long "$WORK/long-solo" "$EFA" >/dev/null
run_np 3 "$EFA" train --config "$DATA/long.toml" --data "$DATA/train.csv" \
  --valid "$DATA/valid.csv" --test "$DATA/test.csv" --out "$WORK/long-killed" --threads 1 \
  --quiet >"$WORK/killed.log" 2>&1 &
MPI_PID=$!
# Wait for the first checkpoint, then kill rank 1 (found by its environment).
for _ in $(seq 3000); do
  [ -e "$WORK/long-killed/checkpoint.safetensors" ] && break
  sleep 0.02
done
victim=""
for env in /proc/[0-9]*/environ; do
  p=${env#/proc/}
  p=${p%/environ}
  [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$EFA" ] || continue
  if tr '\0' '\n' <"$env" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then
    victim=$p
  fi
done
[ -n "$victim" ] || fail "rank 1 not found (the job may have ended already)"
kill -9 "$victim"
if wait "$MPI_PID"; then fail "mpirun exited 0 after a rank was killed"; fi
echo "mpirun exited non-zero after rank 1 was killed:"
grep -i -m 2 "rank\|signal" "$WORK/killed.log" | sed 's/^/  | /'
leftover=$(find "$WORK/long-killed" -name '*.tmp' | wc -l)
[ "$leftover" = 0 ] || fail "temporary files left: $(find "$WORK/long-killed" -name '*.tmp')"
[ -e "$WORK/long-killed/checkpoint.safetensors" ] || fail "no checkpoint to resume from"
[ ! -e "$WORK/long-killed/model.safetensors" ] || fail "the run had ended before the kill"
cp -r "$WORK/long-killed" "$WORK/long-killed-copy"
RESUME=(--resume "$WORK/long-killed")
long "$WORK/long-killed" run_np 2 "$EFA" >/dev/null
RESUME=(--resume "$WORK/long-killed-copy")
long "$WORK/long-killed-copy" "$EFA" >/dev/null
for f in model.safetensors result.json; do
  same "$WORK/long-solo/$f" "$WORK/long-killed/$f"
  same "$WORK/long-solo/$f" "$WORK/long-killed-copy/$f"
done
echo "resumed 3 -> 2 ranks and 3 ranks -> one process: identical to the uninterrupted run"

say "4. a build without MPI started as 2 ranks refuses"
if run_np 2 "$PLAIN" train --config "$DATA/model.toml" \
  --data "$DATA/train.csv" --out "$WORK/refused" >"$WORK/refused.log" 2>&1; then
  fail "a build without MPI ran as 2 ranks"
fi
grep -q -- "--features mpi" "$WORK/refused.log" || fail "no build hint in: $(cat "$WORK/refused.log")"
echo "refused: $(grep -m 1 'features mpi' "$WORK/refused.log" | cut -c1-120)…"

say "MPI end-to-end check passed (work files in $WORK)"

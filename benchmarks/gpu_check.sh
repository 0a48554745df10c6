#!/usr/bin/env bash
# GPU check of proctor's HF backend, float32 and bfloat16, against CPU float32 references, beside
# lm-eval's HFLM (docs/benchmarks.md, "GPU check"; benchmarks/gpu_check.py says what is compared).
#
# Made here:  python benchmarks/gpu_check.py reference && python benchmarks/gpu_check.py pack
# Run there, through the device tool, the same command once per part, back to back (a warm machine
# keeps the first part only 30 s after a call):
#   run(command="bash benchmarks/gpu_check.sh", carry=[".gpu_carry/part1"], timeout_s=600)
#   run(command="bash benchmarks/gpu_check.sh", carry=[".gpu_carry/part2"], timeout_s=600)
# Each call stashes what it carried in $GPU_CHECK_STASH (/tmp/gpu_check). While a part is missing it
# says which and exits 3 within seconds; the call that completes the set rebuilds and checks the GGUF,
# installs the carried wheels and proctor (no index, no dependencies: the image has torch and
# transformers) and runs `gpu_check.py check`, whose table ends the output and whose JSON and log come
# back from $OUT. Extra arguments go to `check` (a smoke test here: --device cpu --items-mmlu 4 ...).
# Exit status: 0 passed, 1 a float32 comparison failed, 3 a part is missing, 124 out of time, else an error.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PY=${GPU_CHECK_PYTHON:-python3}     # unquoted below on purpose: "python -S" is two words
CARRY=${GPU_CHECK_CARRY:-.gpu_carry}
STASH=${GPU_CHECK_STASH:-/tmp/gpu_check}
LIMIT_S=${GPU_CHECK_LIMIT_S:-570}  # the whole script; one run call may take 600 s
LM_EVAL_RESERVE_S=${GPU_CHECK_LM_EVAL_RESERVE_S:-150}  # no lm-eval run starts with less left than this
OUT=${OUT:-$STASH/out}
export PIP_ROOT_USER_ACTION=ignore TQDM_DISABLE=1
mkdir -p "$OUT" "$STASH"

main() {
    echo "== gpu_check.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname): $(nvidia-smi --query-gpu=name,memory.total,driver_version \
        --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi'); $($PY --version 2>&1)"

    local rc=0
    $PY benchmarks/gpu_check.py assemble --carry "$CARRY" --stash "$STASH" || rc=$?
    if [ "$rc" -ne 0 ]; then
        return "$rc"
    fi

    # the carried wheels once per pack (the manifest names them), proctor's source at every call
    local site=$STASH/site stamp
    stamp=$(sha256sum "$STASH/manifest.json" | cut -c1-16)
    if [ ! -f "$site/.installed-$stamp" ]; then
        rm -rf "$site" && mkdir -p "$site"
        $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
            --target "$site" "$STASH"/wheels/*.whl
        touch "$site/.installed-$stamp"
    fi
    # built from a copy, so nothing is written into the checkout
    rm -rf "$STASH/src" "$STASH/site-proctor" && mkdir -p "$STASH/src"
    cp -r pyproject.toml README.md proctor "$STASH/src/"
    find "$STASH/src" -name __pycache__ -prune -exec rm -rf {} +
    local proctor_path=$STASH/site-proctor
    if ! $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --no-build-isolation \
            --disable-pip-version-check --target "$proctor_path" "$STASH/src"; then
        echo "gpu_check.sh: pip could not build proctor here; importing it from its source copy instead"
        proctor_path=$STASH/src
    fi
    echo "installed: $(cd "$site" && ls -d -- *.dist-info | sed 's/\.dist-info$//' | tr '\n' ' ')+ proctor" \
         "($SECONDS s so far)"

    export PYTHONPATH="$proctor_path:$site${PYTHONPATH:+:$PYTHONPATH}"
    export PROCTOR_CACHE_DIR=$STASH/cache HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
           TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error

    local left=$(( LIMIT_S - SECONDS ))
    rc=0
    timeout -k 10 "$left" $PY benchmarks/gpu_check.py check --stash "$STASH" --out "$OUT/gpu_check.json" \
        --budget-s "$(( left - LM_EVAL_RESERVE_S ))" "$@" || rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "gpu_check.sh: check ran out of its $left s; the finished runs are in $OUT/gpu_check.json"
    fi
    return "$rc"
}

main "$@" 2>&1 | tee -a "$OUT/gpu_check.log"

#!/bin/bash
# nvidia_acceptance.sh - on a machine with NVIDIA's OpenCL (and, for the anchors, PyTorch with
# CUDA): builds clflash, runs the device-only test suites, and measures the rows of
# docs/performance/h200.md and docs/ring.md with PyTorch's backends timed in the same run.
#
# Why a script: device time comes in short sessions, and every figure in the docs must carry its
# command and an anchor measured beside it. One command per section, each under its own time
# limit, each writing its log (and JSON where the tool has it) under the output folder, keeps the
# runs the same from one session to the next and makes a lost section cost only its own minutes.
#
#   tools/nvidia_acceptance.sh [--out DIR] [--build DIR] [--torch-sdpa FILE] [--check-debs DIR]
#                              [--limit SECONDS] SECTION...
#
# Sections, in the order given:
#   setup     registers NVIDIA's OpenCL with the ICD loader where no .icd file names it (needs
#             root), unpacks Check from --check-debs where pkg-config lacks it, and builds (Release)
#   tests     ctest's device label (the tensor-core numerics and wgmma) and the forward, backward,
#             features, split_kv, paged_kv and varlen suites on the GPU
#   ring      test_ring under mpirun (2 ranks, both transports), then clflash-ring-bench at 16k
#             tokens per rank, 2 and 4 ranks, causal and not, forward and backward
#   decode    clflash-bench --decode on the decode rows, then tools/torch_decode_bench.py
#   features  clflash-bench --features (forward and backward), then tools/torch_features_bench.py
#   prefill   clflash-bench at n = 4096, batch 4, 16 heads, d = 128 and 64, f16, causal and not:
#             the default plan, nv_mma_forward (CLFLASH_WGMMA=0), then the wgmma forward (its
#             default loop, with cp.async copies instead of TMA, pipelined), then torch_sdpa_bench.py
#   all       every section above
# Without PyTorch (or without --torch-sdpa for prefill) the anchors are skipped and the log says so.
# A section that fails or runs out of time is reported and the next one runs; the exit status is
# the number of sections that failed.
set -u

here=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$here/nvidia-acceptance}
build=$here/build-nvidia
torch_sdpa=""
check_debs=""
limit=480
sections=()
while [ $# -gt 0 ]; do
    case $1 in
        --out) out=$(realpath -m "$2"); shift 2 ;;
        --build) build=$(realpath -m "$2"); shift 2 ;;
        --torch-sdpa) torch_sdpa=$(realpath "$2"); shift 2 ;;
        --check-debs) check_debs=$2; shift 2 ;;
        --limit) limit=$2; shift 2 ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        all) sections+=(setup tests ring decode features prefill); shift ;;
        setup|tests|ring|decode|features|prefill) sections+=("$1"); shift ;;
        *) echo "nvidia_acceptance.sh: unknown argument '$1' (see --help)" >&2; exit 64 ;;
    esac
done
[ ${#sections[@]} -gt 0 ] || { echo "nvidia_acceptance.sh: no section given (see --help)" >&2; exit 64; }
mkdir -p "$out"
export CLFLASH_DEVICE=${CLFLASH_DEVICE:-nvidia}
bench=$build/tools/clflash-bench
have_torch=0
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && have_torch=1

note() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$out/summary.txt"; }

# Runs one command under the time limit, output appended to the section's log.
step() {
    local log=$1; shift
    echo "+ $*" >> "$log"
    timeout "$limit" "$@" >> "$log" 2>&1
    local rc=$?
    [ "$rc" -eq 0 ] || echo "! exit $rc: $*" >> "$log"
    return $rc
}

section_setup() {
    local log=$out/setup.log lib=/usr/local/nvidia/lib64/libnvidia-opencl.so.1
    if [ -e "$lib" ] && ! grep -qs nvidia /etc/OpenCL/vendors/*.icd; then
        mkdir -p /etc/OpenCL/vendors && echo "$lib" > /etc/OpenCL/vendors/nvidia.icd
    fi
    if ! pkg-config --exists check && [ -n "$check_debs" ]; then
        for deb in "$check_debs"/*.deb; do dpkg -x "$deb" /; done
    fi
    command -v clinfo >/dev/null && clinfo -l >> "$log" 2>&1
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >> "$log" 2>&1
    # a copy of a working tree may carry an older .git than its files: the differing files say so
    git -C "$here" log -1 --format='tree of %H (%cd)' >> "$log" 2>&1
    git -C "$here" status --short >> "$log" 2>&1
    step "$log" cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release &&
        step "$log" cmake --build "$build" -j "$(nproc)"
}

section_tests() {
    local log=$out/tests.log
    step "$log" ctest --test-dir "$build" -L device --output-on-failure
    local rc=$?
    step "$log" ctest --test-dir "$build" -R '^(forward|backward|features_.*|split_kv|paged_kv|varlen)$' \
        --output-on-failure -j 2 || rc=1
    return $rc
}

section_ring() {
    local log=$out/ring.log rc=0 mpi=(mpirun --oversubscribe --allow-run-as-root)
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    for transport in shared mpi; do
        CLFLASH_RING_TRANSPORT=$transport step "$log" "${mpi[@]}" -n 2 "$build/tests/test_ring" || rc=1
    done
    for ranks in 2 4; do
        for mask in --no-causal --causal; do
            step "$log" "${mpi[@]}" -n $ranks "$build/tools/clflash-ring-bench" --seq $((16384 * ranks)) \
                --heads 16 --head-dim 128 --dtype f16 $mask --reps 3 --warmup 1 --no-single || rc=1
        done
    done
    return $rc
}

section_decode() {
    local log=$out/decode.log rc=0
    step "$log" "$bench" --decode --heads-q 32 --heads-kv 8 --seq-k 4096,32768,131072 --min-time 0.3 --warmup 3 || rc=1
    step "$log" "$bench" --decode --batch 8 --heads-kv 8 --seq-k 8192 --min-time 0.3 --warmup 3 || rc=1
    step "$log" "$bench" --decode --batch 32 --heads-kv 8 --seq-k 4096 --min-time 0.3 --warmup 3 || rc=1
    step "$log" "$bench" --decode --heads-kv 32 --seq-k 32768 --min-time 0.3 --warmup 3 || rc=1
    step "$log" "$bench" --decode --batch 8 --heads-kv 8 --seq-q 16 --seq-k 8192 --min-time 0.3 --warmup 3 || rc=1
    step "$log" "$bench" --decode --batch 8 --heads-kv 8 --seq-k 8192 --ragged --min-time 0.3 --warmup 3 || rc=1
    if [ $have_torch = 1 ]; then
        (cd "$here/tools" && step "$log" python3 torch_decode_bench.py "$out/torch_decode.json") || rc=1
    else
        echo "PyTorch with CUDA not found: no anchor" >> "$log"
    fi
    return $rc
}

section_features() {
    local log=$out/features.log rc=0
    local cases=plain,causal,causal-window,softcap,alibi,keylens,causal-softcap,bias
    step "$log" "$bench" --features --min-time 0.5 --cases $cases || rc=1
    step "$log" "$bench" --features --backward --min-time 0.3 --warmup 2 --cases $cases || rc=1
    if [ $have_torch = 1 ]; then
        (cd "$here/tools" && step "$log" python3 torch_features_bench.py "$out/torch_features.json" --cases $cases &&
            step "$log" python3 torch_features_bench.py "$out/torch_features_backward.json" --cases $cases --backward) ||
            rc=1
    else
        echo "PyTorch with CUDA not found: no anchor" >> "$log"
    fi
    return $rc
}

section_prefill() {
    local log=$out/prefill.log rc=0
    for d in 128 64; do
        for causal in "" --causal; do
            local args=(--algo flash --seq 4096 --batch 4 --heads $((2048 / d)) --head-dim "$d" --dtype f16 ${causal:+"$causal"}
                        --min-time 0.3 --warmup 1 --no-check)
            step "$log" "$bench" "${args[@]}" || rc=1
            CLFLASH_WGMMA=0 step "$log" "$bench" "${args[@]}" || rc=1
            CLFLASH_WGMMA=1 step "$log" "$bench" "${args[@]}" || rc=1
            CLFLASH_WGMMA=1 step "$log" "$bench" "${args[@]}" --tune nv_wgmma.tma=0 || rc=1
            CLFLASH_WGMMA=1 step "$log" "$bench" "${args[@]}" --tune nv_wgmma.pipeline=1 || rc=1
        done
    done
    if [ $have_torch = 1 ] && [ -n "$torch_sdpa" ]; then
        (cd "$here/tools" && step "$log" python3 "$torch_sdpa" "$out/torch_sdpa.json" --dtype float16 \
            --d 64,128 --n 4096) || rc=1
    else
        echo "no anchor: PyTorch with CUDA missing or --torch-sdpa not given" >> "$log"
    fi
    return $rc
}

failed=0
# shellcheck disable=SC2317 # the section_* functions are called through "section_$s"
for s in "${sections[@]}"; do
    note "section $s: start"
    start=$(date +%s)
    if "section_$s"; then
        note "section $s: ok ($(( $(date +%s) - start )) s)"
    else
        note "section $s: FAILED ($(( $(date +%s) - start )) s; see $out/$s.log)"
        failed=$((failed + 1))
    fi
done
exit $failed

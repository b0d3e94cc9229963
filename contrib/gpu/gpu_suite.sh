#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The GPU suite and GPU benchmarks, on a machine with an NVIDIA GPU and no
# network, from the copy contrib/gpu/gpu_bundle.sh made (.gpu/): run from the
# repository root there. Prints one table per part:
#  1. GPU tests (native cuda_ipc beside cuda_ipc+, bytes checked), in the
#     configurations SPAN_PART1 names (default: defaults given nowiden);
#  2. which protocols UCP selects for device memory (UCX_PROTO_INFO);
#  3. the resolver's view of a VMM range;
#  4. ucx_perftest -m cuda, cuda_ipc vs cuda_ipc+, medians of RUNS;
#  U. the same at UCT level (put/get zcopy), contrib/bench/bench_perftest_uct.sh;
#  5. registering 10,000 sub-buffers of one allocation, twin vs native.
#  6. span-check with its GPU scenarios;
#  7. a PyTorch expandable_segments tensor through the resolver;
#  8. put/get into VMM memory of 32 handles (twin) vs cudaMalloc (native);
#  9. the GPU tests and span-check --fail-slower (a twin row 10x slower
#     fails) again in NIXL's UCX 1.23, same plugin, and the protocol of
#     every device put and get of span-check's GPU scenarios between twins
#     (UCX_PROTO_INFO): any not over cuda_ipc+ fails;
#  P. put/get sweep 4-256 MiB: VMM of 2 and 20 MiB handles (twin) vs
#     cudaMalloc (native), issue 12's table;
#  N. NIXL as the client (contrib/nixl/nixl_check.py --gpu, GPU 0 -> 0 and
#     0 -> 1 where there are two; its KV-cache rows; NIXL's progress thread
#     on and off; span's launches per transfer), where .gpu/nixlpy has
#     contrib/nixl/nixl_bundle.sh's copy of NIXL.
#  F. fresh pairs: ucx_perftest -m cuda -t ucp_get, a new server and client
#     each time, SPAN_FRESH_PAIRS of them (default 50) over the twin with
#     UCX_LOG_LEVEL=debug and 20 natively: the protocol UCP chose for get,
#     and how often cuda_ipc's own NVLink probe found no link;
#  M. every ordered pair of GPUs: the GPU tests' compact cases (cudaMalloc
#     and 16 VMM handles at odd offsets, a PyTorch expandable tensor), bytes
#     and the protocols of every device put/get checked, then put/get GB/s
#     of VMM memory (twin) against cudaMalloc (native), medians of RUNS
#     (SPAN_MATRIX_FROM="2 3": only the pairs from those initiator GPUs);
#  K. many small blocks (KV-cache pages), GPU 0->0 and 0->1: one transfer
#     of 4096 blocks (fewer of 256 KiB and 1 MiB) posted before one flush,
#     cudaMalloc native and twin, VMM twin with and without batches, and
#     the put as one UCP SGL put (UCX 1.22 and later), bytes checked; then
#     ucx_perftest -m cuda put_bw and get at those sizes
#     (SPAN_BLOCKS_PAIRS="0:1": those pairs only; SPAN_BLOCKS_SIZES: those
#     block sizes only; SPAN_BLOCKS_TABLE=n: perftest only;
#     SPAN_BLOCKS_PERFTEST=n: no perftest);
#  D. the CUDA driver calls of UCX's cuda modules during part K's cudaMalloc
#     transfer of 4096 blocks of 16 KiB (contrib/gpu/span_cuda_calls.c),
#     native against the twin, GPU 0->0 and 0->1: the twin adds none;
#  C. NIXL, one initiator on each GPU reading and writing a tensor of the
#     next GPU, all at once, RUNS times (where .gpu/nixlpy exists); what
#     each process left open once its agent is gone, against native.
#  V. UCX releases before 1.22 (1.21, 1.18: .gpu/ucx-<version>, from their
#     wheels), span preloaded, each with its own modules and
#     UCX_MEMTYPE_CACHE=n (with the cache both native and twin fail to map
#     device memory the cache has not seen: "failed to insert region
#     [0x0..0x0]"): the GPU tests' compact cases (cudaMalloc and 16 VMM
#     handles at odd offsets, a PyTorch expandable tensor's second half),
#     GPU 0->0 and, on two GPUs, 0->1, bytes and the RMA lane checked. Only
#     when named;
#  R. on an AMD GPU: rocm_ipc vs rocm_ipc+ (test/rocm/run.sh), with the UCX
#     in $SPAN_UCX_ROCM_PREFIX (a UCX 1.22 installation with its ROCm modules, docs/rocm.md); skipped elsewhere.
# Usage: contrib/gpu/gpu_suite.sh [RUNS [PARTS]], PARTS e.g. 45
# (default 1234U56789PNFMKDCR; V only when named)
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
runs=${1:-5}
parts=${2:-1234U56789PNFMKDCR}
part() { [[ $parts == *$1* ]]; }
gpu=$top/.gpu
export LD_LIBRARY_PATH=$gpu/ucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export UCX_MODULE_DIR=$gpu/span UCX_WARN_UNUSED_ENV_VARS=n
perftest=$gpu/ucx/bin/ucx_perftest
. "$top/contrib/bench/bench_lib.sh"
native=cuda_copy,cuda_ipc,posix
twin=cuda_copy,cuda_ipc+,posix

echo "machine: $(nvidia-smi -L 2>/dev/null | head -1), $(nproc) cores"
# the GPUs this process sees: nvidia-smi lists every GPU of the machine,
# CUDA only those CUDA_VISIBLE_DEVICES names
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    ngpus=$(tr ',' '\n' <<< "$CUDA_VISIBLE_DEVICES" | grep -c .)
else
    ngpus=$(nvidia-smi -L 2>/dev/null | wc -l)
fi
# the logs of this run and the NIXL it unpacks: passes side by side, each
# under its own CUDA_VISIBLE_DEVICES, keep theirs apart
tmp=${SPAN_SUITE_TMP:-/tmp/span_suite${CUDA_VISIBLE_DEVICES:+_${CUDA_VISIBLE_DEVICES//,/_}}}
mkdir -p "$tmp" && echo "logs: $tmp"
# NIXL's python package from contrib/nixl/nixl_bundle.sh's copy, in $tmp/span_nixl
nixl_unpack() {
    rm -rf "$tmp/span_nixl" && mkdir -p "$tmp/span_nixl" &&
        tar -C "$tmp/span_nixl" -xJf "$gpu/nixlpy/nixl.tar.xz"
}
rc=0
# one pass of the GPU tests, a table of its rows: the whole case list GPU
# 0->0 ("same") and, on two GPUs or more, the transfers of every case GPU
# 0->1 ("cross"; part M covers every pair). A case takes seconds, the whole
# list minutes: SPAN_PART1_PASSES="same" or "cross" splits a configuration
# over two lanes or two calls (each about 5 minutes on 4 H100s)
passes=${SPAN_PART1_PASSES:-same cross}
gpu_test() { # LOG, then VAR=VALUE... to set
    # lanes of one configuration's two passes keep logs of their own
    local log=${1%.log}${SPAN_PART1_PASSES:+_${passes// /_}}.log r=0; shift
    : > "$log"
    if [[ $passes == *same* ]]; then
        env "$@" "$gpu/bin/span_gpu_test" >> "$log" 2>&1
        r=$?
    fi
    if [ "$ngpus" -ge 2 ] && [[ $passes == *cross* ]]; then
        env GTEST_FILTER='*put_get/*' "$@" SPAN_PAIR_TARGET_GPU=1 \
            "$gpu/bin/span_gpu_test" >> "$log" 2>&1
        r=$((r | $?))
    fi
    echo '| case | transport | test | UCX settings | GPUs | ops right | bytes wrong | ops failed | RMA lane |'
    echo '|---|---|---|---|---|---|---|---|---|'
    grep '^GPU|' "$log" | sed 's/^GPU|/|/; s/$/ |/'
    grep -E '^GPU suite|FAILED  \]' "$log"
    echo "skipped: $(grep -E '^\[  SKIPPED \] [a-z]' "$log" |
                     sed 's/ (.*//' | sort -u | wc -l) test(s)"
    echo "span_gpu_test exit: $r"
    return $r
}

# the UCX_PROTO_INFO rows of puts and gets from device memory not carried
# by zero-copy over TL (stdin: a log); puts from host memory (the harness
# filling a target) are another transport's
off_tl() {
    proto_rows | grep -E 'by ucp_put.* from cuda/|by ucp_get.* into cuda/' |
        grep -vE "zero-copy ${1//+/\\+}/" || true
}

# the GPU tests' torch_* cases (parts 1, M, V): the target is a PyTorch
# process
if python3 -c 'import torch' 2>/dev/null; then
    export SPAN_GPU_TORCH_TARGET="python3 $top/contrib/gpu/span_torch_target.py $gpu/bin/libspan_pair.so"
fi

if part 1; then
echo
echo "## 1. GPU tests"
[ -n "${SPAN_GPU_TORCH_TARGET:-}" ] || echo "(no torch here: the torch_* cases skip)"
# UCX's defaults (UCP registers device memory from the base of the physical
# allocation that holds a buffer: one VMM handle), then buffers registered
# as given; then, for comparison, the defaults without span's widening of a
# registration of one VMM handle (what the twin did before: expected to fail)
[ "$ngpus" -ge 2 ] &&
    echo "(each pass also with the target on GPU 1: put_get of every case)"
# SPAN_PART1="defaults given nowiden" (the default): which of them run, so
# that a machine of 4 GPUs can run them side by side, each under its own
# CUDA_VISIBLE_DEVICES
part1=${SPAN_PART1:-defaults given nowiden}
if [[ $part1 == *defaults* ]]; then
    echo "### UCX defaults"
    gpu_test $tmp/span_gpu_test.log
    rc=$((rc | $?))
fi
if [[ $part1 == *given* ]]; then
    echo "### UCX_MEMTYPE_REG_WHOLE_ALLOC_TYPES= (buffers registered as given)"
    gpu_test $tmp/span_gpu_test_given.log UCX_MEMTYPE_REG_WHOLE_ALLOC_TYPES=
    rc=$((rc | $?))
fi
if [[ $part1 == *nowiden* ]]; then
    echo "### UCX defaults, UCX_SPAN_VMM_WIDEN=0 (the twin before widening; not counted)"
    gpu_test $tmp/span_gpu_test_nowiden.log UCX_SPAN_VMM_WIDEN=0 GTEST_FILTER='*vmm_16*:*torch*'
fi
fi

part V && {
    echo
    echo "## V. UCX releases before 1.22, span preloaded"
    for dir in "$gpu"/ucx-*; do
        [ -d "$dir/lib" ] || continue
        echo "### UCX ${dir##*/ucx-}"
        # UCX_MODULE_DIR names the release's own modules (cuda, cma): before
        # 1.22 it replaces the directory UCX looks in, and span's holds none.
        # The twins this release lists with span preloaded; where cuda_ipc+
        # is missing, what UCX and span said about it
        info=$tmp/ucx_info_${dir##*/}.log
        env LD_LIBRARY_PATH=$dir/lib UCX_MODULE_DIR="$dir/lib/ucx" \
            LD_PRELOAD="$gpu/span/libuct_span.so.0" UCX_LOG_LEVEL=debug \
            timeout 60 "$dir/bin/ucx_info" -d > "$info" 2>&1
        echo "twins listed: $(grep -oE 'Transport: [a-z_0-9]+\+' "$info" |
                              sed 's/Transport: //' | sort -u | tr '\n' ' ')"
        grep -q 'Transport: cuda_ipc+' "$info" || {
            rc=1
            grep -iE 'span|cuda_ipc' "$info" | grep -v '^#' | head -20
        }
        # without UCX's memtype cache: with it, these releases take device
        # memory the cache has not seen (the driver API's, PyTorch's) for
        # host memory and fail to map it ("failed to insert region
        # [0x0..0x0]"), natively alike (SPAN_V_CACHES="try n" shows it)
        for cache in ${SPAN_V_CACHES:-n}; do
            echo "UCX_MEMTYPE_CACHE=$cache"
            LD_LIBRARY_PATH=$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
                gpu_test "$tmp/span_gpu_test_${dir##*/}_cache_$cache.log" \
                UCX_MODULE_DIR="$dir/lib/ucx" UCX_MEMTYPE_CACHE=$cache \
                LD_PRELOAD="$gpu/span/libuct_span.so.0" \
                GTEST_FILTER='*put_get/malloc_sub_odd*:*put_get/vmm_16_sub_odd*:*put_get/torch_second_half*'
            rc=$((rc | $?))
        done
    done
}

part 7 && {
echo
echo "## 7. A PyTorch expandable_segments tensor, as the resolver sees it"
python3 "$top/contrib/gpu/span_torch_check.py" "$gpu/bin/libspan_resolve.so" 2>&1 |
    grep -v Warning
}

part 6 && {
echo
echo "## 6. span-check (CPU and GPU scenarios)"
UCX_MODULE_DIR=$gpu/span "$gpu/bin/span-check" -s 64 -r 5 2>/dev/null |
    grep -E '^\||no GPU'
echo "(again with UCX_MEMTYPE_REG_WHOLE_ALLOC_TYPES=, GPU scenarios)"
UCX_MEMTYPE_REG_WHOLE_ALLOC_TYPES= UCX_MODULE_DIR=$gpu/span \
    "$gpu/bin/span-check" -s 64 -r 5 2>/dev/null | grep -E '^\| gpu|no GPU'
}

part 8 && {
echo
echo "## 8. Put/get of 256 MiB into VMM memory of 32 handles (twin) vs cudaMalloc (native), GB/s, median of $runs"
echo '| what | put | get |'
echo '|---|---|---|'
for what in "3 32 cuda_copy,cuda_ipc+,posix auto" "1 0 cuda_copy,cuda_ipc,posix auto" \
            "3 32 cuda_copy,cuda_ipc,posix auto" "3 32 cuda_copy,cuda_ipc+,posix y" \
            "1 0 cuda_copy,cuda_ipc,posix y"; do
    set -- $what
    p=() g=()
    for ((r = 0; r < runs; r++)); do
        line=$(UCX_CUDA_IPC_ENABLE_GET_ZCOPY=$4 "$gpu/bin/span_bench_gpu" bw \
               $1 $2 256 10 $3 2>/dev/null | grep '^BW')
        p+=("$(echo "$line" | awk '{print $7}')")
        g+=("$(echo "$line" | awk '{print $9}')")
    done
    printf '| %s %s %s, get zcopy %s | %s | %s |\n' \
        "$(echo "$line" | awk '{print $2}')" $2 $3 $4 \
        "$(printf '%s\n' "${p[@]}" | median)" "$(printf '%s\n' "${g[@]}" | median)"
done
}

part 2 && {
echo
echo "## 2. Protocols UCP selects for cudaMalloc memory (UCX_PROTO_INFO=y)"
echo "(get also with UCX_CUDA_IPC_ENABLE_GET_ZCOPY=y: cuda_ipc turns get off"
echo " unless NVML shows an active NVLink on device 0)"
for tls in $native $twin; do
    for t in ucp_put_bw ucp_get ucp_get:y; do
        getz=${t#*:}; [ "$getz" = "$t" ] && getz=auto
        export UCX_CUDA_IPC_ENABLE_GET_ZCOPY=$getz
        perftest_server env UCX_TLS="$tls" "$perftest" -m cuda ||
            { unset UCX_CUDA_IPC_ENABLE_GET_ZCOPY; continue; }
        UCX_PROTO_INFO=y UCX_TLS=$tls "$perftest" 127.0.0.1 -p "$port" \
            -t "${t%:*}" -m cuda -s $((64 << 20)) -n 4 2>&1 | proto_rows |
            grep -E "by ucp_${t:4:3}" | sed "s/^/$tls ${t%:*} get_zcopy=$getz: /"
        wait
        unset UCX_CUDA_IPC_ENABLE_GET_ZCOPY
    done
done
}

part 3 && {
echo
echo "## 3. Resolver"
"$gpu/bin/span_bench_gpu" units 16
}

part 4 && {
echo
echo "## 4. ucx_perftest -m cuda, 256 MiB, MB/s, median of $runs"
echo '| test | cuda_ipc | cuda_ipc+ | ratio |'
echo '|---|---|---|---|'
for test in ucp_put_bw ucp_get ucp_get:y; do
    getz=${test#*:}; [ "$getz" = "$test" ] && getz=auto
    export UCX_CUDA_IPC_ENABLE_GET_ZCOPY=$getz
    n=() t=()
    for ((r = 0; r < runs; r++)); do
        n+=("$(perftest_bw $native ${test%:*} $((256 << 20)) 50 -m cuda)")
        t+=("$(perftest_bw $twin ${test%:*} $((256 << 20)) 50 -m cuda)")
    done
    unset UCX_CUDA_IPC_ENABLE_GET_ZCOPY
    mn=$(printf '%s\n' "${n[@]}" | median)
    mt=$(printf '%s\n' "${t[@]}" | median)
    printf '| %s (get zcopy %s) | %.1f | %.1f | %.3f |\n' ${test%:*} $getz \
           "$mn" "$mt" "$(awk -v n="$mn" -v t="$mt" 'BEGIN {print t / n}')"
done
}

part U && {
echo
echo "## U. UCT-level ucx_perftest -m cuda, cuda_ipc vs cuda_ipc+, 16 MiB"
# get zcopy on: cuda_ipc's default (auto) offers none on this platform
UCX_CUDA_IPC_ENABLE_GET_ZCOPY=y SPAN_UCX_PREFIX=$gpu/ucx \
    SPAN_PERFTEST_BW_SIZE=$((16 << 20)) SPAN_PERFTEST_BW_ITERS=500 \
    "$top/contrib/bench/bench_perftest_uct.sh" "$runs" cuda_ipc cuda
rc=$((rc | $?))
}

part 5 && {
echo
echo "## 5. Registration of sub-buffers, median of $runs"
echo '| what | cuda_ipc | cuda_ipc+ | ratio |'
echo '|---|---|---|---|'
"$gpu/bin/span_bench_gpu" reg 10000 "$runs"
}
part P && {
echo
echo "## P. Put/get GB/s, the first SIZE of VMM memory of 2 MiB or 20 MiB handles"
echo "## (cuda_ipc+) vs SIZE of cudaMalloc (cuda_ipc), get zcopy on, median of $runs"
echo '| size MiB | op | cudaMalloc native | VMM 2M twin | ratio | VMM 20M twin | ratio |'
echo '|---|---|---|---|---|---|---|'
export UCX_CUDA_IPC_ENABLE_GET_ZCOPY=y
bw_medians() { # bench arguments...: "put get", medians of $runs
    local out=() r
    for ((r = 0; r < runs; r++)); do
        out+=("$("$gpu/bin/span_bench_gpu" bw "$@" 2>/dev/null | grep '^BW')")
    done
    echo "$(printf '%s\n' "${out[@]}" | awk '{print $7}' | median)" \
         "$(printf '%s\n' "${out[@]}" | awk '{print $9}' | median)"
}
for mib in 4 8 16 32 64 128 256; do
    iters=$((mib >= 64 ? 10 : 640 / mib))
    h2=$((mib / 2)) h20=$(((mib + 19) / 20))
    n=($(bw_medians 1 0 "$mib" "$iters" $native))
    t2=($(bw_medians 3 "$h2" "$mib" "$iters" $twin))
    t20=($(bw_medians 3 "$h20" "$mib" "$iters" $twin $((h20 * 20))))
    for i in 0 1; do
        awk -v m="$mib" -v o="$([ $i = 0 ] && echo put || echo get)" \
            -v n="${n[$i]}" -v a="${t2[$i]}" -v b="${t20[$i]}" \
            'BEGIN {printf "| %d | %s | %.1f | %.1f | %.3f | %.1f | %.3f |\n",
                    m, o, n, a, (n > 0) ? a / n : 0, b, (n > 0) ? b / n : 0}'
    done
done
unset UCX_CUDA_IPC_ENABLE_GET_ZCOPY
echo "The ceiling without UCX: cuMemcpy in one process, GB/s (COPY HANDLES MIB ...)"
for what in "8 16" "128 256" "13 260"; do
    "$gpu/bin/span_bench_gpu" copy $what 20 2>&1 | grep '^COPY'
done
}

part 9 && [ -x "$gpu/nixl/bin/span_gpu_test" ] && {
echo
echo "## 9. NIXL's UCX 1.23: the GPU tests and span-check, the same plugin"
# NIXL's libucm_cuda needs libcudart.so.13: PyTorch's CUDA wheels have it
cudart=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))' 2>/dev/null)
(
    export LD_LIBRARY_PATH=$gpu/nixl/lib${cudart:+:$cudart}
    unset SPAN_GPU_TORCH_TARGET # its harness library runs UCX 1.22
    echo "UCX: $(ldd "$gpu/nixl/bin/span_gpu_test" | awk '/libuct/ {print $3}')"
    gpu=$gpu/nixl gpu_test $tmp/span_gpu_test_1_23.log
    r=$?
    "$gpu/nixl/bin/span-check" -s 64 -r "$runs" --fail-slower 2>&1 |
        grep -E '^\||no GPU'
    r=$((r | ${PIPESTATUS[0]}))
    # which protocol carried each device put and get: span-check's GPU
    # scenarios with twins on both sides, UCX_PROTO_INFO=y
    UCX_PROTO_INFO=y "$gpu/nixl/bin/span-check" -s 64 -r "$runs" \
        -g "$twin:$twin" > $tmp/span_check_proto_1_23.log 2>&1
    off=$(off_tl cuda_ipc+ < $tmp/span_check_proto_1_23.log)
    echo "span-check, UCX 1.23, twins on both sides: device ops not over cuda_ipc+: $(grep -c . <<< "$off")"
    [ -z "$off" ] || { sed 's/^/    off: /' <<< "$off" | sort | uniq -c; r=1; }
    exit $r
)
rc=$((rc | $?))
}

part R && {
echo
echo "## R. ROCm: rocm_ipc vs rocm_ipc+ on an AMD GPU"
SPAN_ROCM_RUNTIME=real SPAN_ROCM_TEST=$gpu/bin/span_gpu_rocm_test \
    UCX_MODULE_DIR=$gpu/span "$top/test/rocm/run.sh"
r=$?
[ "$r" -eq 77 ] || rc=$((rc | r))
}

part N && {
echo
echo "## N. NIXL as the client: its UCX backend, native vs twin, PyTorch tensors"
if [ -f "$gpu/nixlpy/nixl.tar.xz" ]; then
    nixl_unpack
    # GPU 0 -> 0, and 0 -> 1 where there are two
    # with NIXL's progress thread (its default) and without; span's engine
    # logs its launches at info
    # and, thread on, NIXL's SGL writes (one UCP SGL put per WRITE: the
    # twin's SGL op, span_sgl.c)
    for g in 0,0 $([ "$ngpus" -ge 2 ] && echo 0,1); do
        for th in on off sgl; do
            echo "### initiator on GPU ${g%,*}, target on GPU ${g#*,}, NIXL's progress thread ${th/sgl/on, NIXL_UCX_SGL_ENABLE=1}"
            NIXL_UCX_SGL_ENABLE=$([ $th = sgl ] && echo 1 || echo 0) \
                PYTHONPATH=$tmp/span_nixl/py UCX_LOG_LEVEL=info python3 \
                "$top/contrib/nixl/nixl_check.py" --gpu --gpus "$g" \
                --runs "$runs" --prog-thread "${th/sgl/on}"
            r=$?
            [ $r -eq 77 ] || rc=$((rc | r))
        done
    done
else
    echo "(no .gpu/nixlpy: contrib/nixl/nixl_bundle.sh makes it)"
fi
}

part F && {
echo
pairs=${SPAN_FRESH_PAIRS:-50}
echo "## F. Fresh pairs: ucx_perftest -m cuda -t ucp_get, 16 MiB, a new server and client each"
echo '| UCX_TLS | UCX_LOG_LEVEL | pairs | get zero-copy over the tested transport | elsewhere | failed | cuda_ipc probe found no NVLink | twin turned get zero-copy on |'
echo '|---|---|---|---|---|---|---|---|'
fresh() { # TLS LOGLEVEL PAIRS TL
    local ok=0 off=0 failed=0 noprobe=0 turned=0 r out
    for ((r = 0; r < $3; r++)); do
        perftest_server env UCX_TLS="$1" "$perftest" -m cuda ||
            { failed=$((failed + 1)); continue; }
        out=$(UCX_LOG_LEVEL=$2 UCX_PROTO_INFO=y UCX_TLS=$1 timeout 60 \
              "$perftest" 127.0.0.1 -p "$port" -t ucp_get -m cuda \
              -s $((16 << 20)) -n 20 2>&1) || failed=$((failed + 1))
        wait
        # grep -q would end the pipe early: pipefail would count a SIGPIPE
        if [ "$(proto_rows <<< "$out" | grep -E 'by ucp_get.*cuda/' |
                grep -cE "zero-copy ${4//+/\\+}/")" -gt 0 ]; then
            ok=$((ok + 1))
        else
            off=$((off + 1))
            echo "$out" > "$tmp/span_fresh_off_$off.log"
            { echo "$out" | proto_rows | grep 'by ucp_get' | head -2
              echo "$out" | grep -iE 'nvml|nvlink|remote end' | sort |
                  uniq -c | head -8; } | sed 's/^/    off: /' >&2
        fi
        grep -q 'get zcopy disabled as no nvlinks' <<< "$out" &&
            noprobe=$((noprobe + 1))
        grep -q 'get zero-copy on: GPU 0 has' <<< "$out" &&
            turned=$((turned + 1))
    done
    echo "| $1 | $2 | $3 | $ok | $off | $failed | $noprobe | $turned |"
    [ $off -eq 0 ] && [ $failed -eq 0 ]
}
# tcp beside: as NIXL's users run it (where get fell to emulation)
fresh cuda_copy,cuda_ipc+,tcp debug "$pairs" cuda_ipc+ || rc=1
fresh cuda_copy,cuda_ipc,tcp debug $((pairs < 20 ? pairs : 20)) cuda_ipc
# cuda_ipc's NVLink probe made to fail every time (contrib/gpu/span_nvml_shim.c):
# the twin must carry get all the same; natively it is emulated
real=$(ldconfig -p | awk '/libnvidia-ml.so.1 / {print $NF; exit}')
if [ -f "$gpu/nvshim/libnvidia-ml.so.1" ] && [ -n "$real" ]; then
    LD_LIBRARY_PATH=$gpu/nvshim:$LD_LIBRARY_PATH SPAN_REAL_NVML=$real \
        fresh cuda_copy,cuda_ipc+,tcp debug 10 cuda_ipc+ || rc=1
    LD_LIBRARY_PATH=$gpu/nvshim:$LD_LIBRARY_PATH SPAN_REAL_NVML=$real \
        fresh cuda_copy,cuda_ipc,tcp debug 5 cuda_ipc
    echo "(the last two rows: cuda_ipc's NVML probe failing, the shim)"
fi
[ -d "$gpu/span_old" ] && UCX_MODULE_DIR=$gpu/span_old \
    fresh cuda_copy,cuda_ipc+,tcp debug "$pairs" cuda_ipc+ &&
    echo "(the last row: the plugin before the fix, in .gpu/span_old)"
}

part M && [ "$ngpus" -ge 2 ] && {
echo
echo "## M. Every ordered pair of $ngpus GPUs: compact cases, then GB/s (median of $runs)"
echo '| initiator -> target | cases right (twin) | device ops not over cuda_ipc+ | cases right (native, reference) | put VMM twin / cudaMalloc native | get VMM twin / cudaMalloc native |'
echo '|---|---|---|---|---|---|'
cases() { echo "*put_get/malloc_sub_odd_$1:*put_get/vmm_16_sub_odd_$1:*put_get/torch_second_half_$1"; }
for i in ${SPAN_MATRIX_FROM:-$(seq 0 $((ngpus - 1)))}; do
    for ((j = 0; j < ngpus; j++)); do
        [ $i -eq $j ] && continue
        log=$tmp/span_matrix_$i$j.log
        SPAN_GPU_DEVICE=$i SPAN_PAIR_TARGET_GPU=$j UCX_PROTO_INFO=y \
            GTEST_FILTER=$(cases twin) \
            "$gpu/bin/span_gpu_test" > "$log" 2>&1
        r=$?
        SPAN_GPU_DEVICE=$i SPAN_PAIR_TARGET_GPU=$j \
            GTEST_FILTER=$(cases native) \
            "$gpu/bin/span_gpu_test" > "$log.native" 2>&1
        off=$(off_tl cuda_ipc+ < "$log" | wc -l)
        twin_ok=$(grep -c '^GPU|.*cuda_ipc+ .* 0 bytes wrong | 0 ops failed' "$log")
        nat_ok=$(grep -c '^GPU|.*cuda_ipc  .* 0 bytes wrong | 0 ops failed' "$log.native")
        p=() g=() np=() ng=()
        for ((r2 = 0; r2 < runs; r2++)); do
            t=$(SPAN_GPU_DEVICE=$i SPAN_PAIR_TARGET_GPU=$j "$gpu/bin/span_bench_gpu" bw \
                3 15 300 10 $twin 2>/dev/null | grep '^BW')
            n=$(SPAN_GPU_DEVICE=$i SPAN_PAIR_TARGET_GPU=$j UCX_CUDA_IPC_ENABLE_GET_ZCOPY=y \
                "$gpu/bin/span_bench_gpu" bw 1 0 300 10 $native 2>/dev/null | grep '^BW')
            p+=("$(echo "$t" | awk '{print $7}')") g+=("$(echo "$t" | awk '{print $9}')")
            np+=("$(echo "$n" | awk '{print $7}')") ng+=("$(echo "$n" | awk '{print $9}')")
        done
        ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f / %.1f = %.3f", a, b, (b > 0) ? a / b : 0}'; }
        echo "| GPU $i -> GPU $j | $twin_ok/3 (exit $r) | $off | $nat_ok/3 | $(ratio "$(printf '%s\n' "${p[@]}" | median)" "$(printf '%s\n' "${np[@]}" | median)") | $(ratio "$(printf '%s\n' "${g[@]}" | median)" "$(printf '%s\n' "${ng[@]}" | median)") |"
        [ "$r" -eq 0 ] && [ "$off" -eq 0 ] && [ "$twin_ok" -eq 3 ] || {
            rc=1; off_tl cuda_ipc+ < "$log" | head -3 | sed 's/^/    off: /'; }
    done
done
}

part K && {
echo
echo "## K. Many small blocks (KV-cache pages): one transfer of COUNT blocks, every other block of the region, posted before one flush; GB/s, median of $runs fresh pairs (5 transfers each)"
echo '| GPUs | block | count | put: cudaMalloc native | cudaMalloc twin | VMM twin | VMM twin, no batches | VMM twin / native | get: cudaMalloc native | cudaMalloc twin | VMM twin | VMM twin, no batches | VMM twin / native | one UCP SGL put: cudaMalloc native | cudaMalloc twin | VMM twin | bytes wrong | posting, us/op of put (get): cudaMalloc native, VMM twin |'
echo '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|'
pairs="0:0"; [ "$ngpus" -ge 2 ] && pairs="0:0 0:1"
[ "${SPAN_BLOCKS_TABLE:-y}" = y ] || pairs= SPAN_BLOCKS_PAIRS=
for pr in ${SPAN_BLOCKS_PAIRS-$pairs}; do
    for block in ${SPAN_BLOCKS_SIZES:-4096 16384 65536 262144 1048576}; do
        count=$(( (64 << 20) / block )); [ $count -gt 4096 ] && count=4096
        declare -A col=(); bad=0
        for cfg in nm:1:0:$native: tm:1:0:$twin: tv:3:64:$twin: tn:3:64:$twin:0; do
            IFS=: read -r name kind handles tls batch <<< "$cfg"
            p=() g=() pp=() pg=() sg=()
            for ((r = 0; r < runs; r++)); do
                out=$(env SPAN_GPU_DEVICE=${pr%:*} \
                      SPAN_PAIR_TARGET_GPU=${pr#*:} \
                      UCX_CUDA_IPC_ENABLE_GET_ZCOPY=y \
                      ${batch:+UCX_SPAN_COPY_BATCH=$batch} \
                      "$gpu/bin/span_bench_gpu" blocks "$kind" "$handles" \
                      "$block" "$count" 5 "$tls" 2>"$tmp/span_blocks.err" |
                      grep '^BLOCKS') || { rc=1; tail -3 "$tmp/span_blocks.err"; }
                p+=("$(echo "$out" | awk '{print $8}')")
                g+=("$(echo "$out" | awk '{print $13}')")
                bad=$((bad + $(echo "$out" | awk '{print $18 + $19 + $28}')))
                sg+=("$(echo "$out" | awk '{print $25}')")
                pp+=("$(echo "$out" | awk '{print $21}')")
                pg+=("$(echo "$out" | awk '{print $22}')")
            done
            col[${name}p]=$(printf '%s\n' "${p[@]}" | median)
            col[${name}g]=$(printf '%s\n' "${g[@]}" | median)
            col[${name}pp]=$(printf '%s\n' "${pp[@]}" | median)
            col[${name}pg]=$(printf '%s\n' "${pg[@]}" | median)
            # -1: UCP failed the SGL put (1.22 has none over cuda_ipc)
            col[${name}s]=$(printf '%s\n' "${sg[@]}" | median |
                            awk '{print ($1 < 0) ? "fails" : $1}')
        done
        r() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", (b > 0) ? a / b : 0}'; }
        echo "| ${pr%:*} -> ${pr#*:} | $block | $count | ${col[nmp]} | ${col[tmp]} | ${col[tvp]} | ${col[tnp]} | $(r "${col[tvp]}" "${col[nmp]}") | ${col[nmg]} | ${col[tmg]} | ${col[tvg]} | ${col[tng]} | $(r "${col[tvg]}" "${col[nmg]}") | ${col[nms]} | ${col[tms]} | ${col[tvs]} | $bad | ${col[nmpp]} (${col[nmpg]}), ${col[tvpp]} (${col[tvpg]}) |"
        [ "$bad" -eq 0 ] || rc=1
    done
done
[ "${SPAN_BLOCKS_PERFTEST:-y}" = y ] && {
echo
echo "ucx_perftest -m cuda (cudaMalloc), MB/s, median of $runs (us/op: size / MB/s)"
echo '| test | size | cuda_ipc | cuda_ipc+ | ratio |'
echo '|---|---|---|---|---|'
for test in ucp_put_bw ucp_get; do
    for size in 8 4096 16384 65536 262144 1048576; do
        n=() t=()
        for ((r = 0; r < runs; r++)); do
            n+=("$(UCX_CUDA_IPC_ENABLE_GET_ZCOPY=y perftest_bw $native $test $size 20000 -m cuda)")
            t+=("$(UCX_CUDA_IPC_ENABLE_GET_ZCOPY=y perftest_bw $twin $test $size 20000 -m cuda)")
        done
        mn=$(printf '%s\n' "${n[@]}" | median)
        mt=$(printf '%s\n' "${t[@]}" | median)
        printf '| %s | %s | %.1f | %.1f | %.3f |\n' $test $size "$mn" "$mt" \
               "$(awk -v n="$mn" -v t="$mt" 'BEGIN {print (n > 0) ? t / n : 0}')"
    done
done
echo
echo "One 8-byte op alone: ucx_perftest -m cuda ucp_put_lat (ping-pong), overall latency in us, median of $runs"
echo '| test | size | cuda_ipc | cuda_ipc+ | twin / native |'
echo '|---|---|---|---|---|'
n=() t=()
for ((r = 0; r < runs; r++)); do
    n+=("$(perftest_col=4 perftest_bw $native ucp_put_lat 8 20000 -m cuda)")
    t+=("$(perftest_col=4 perftest_bw $twin ucp_put_lat 8 20000 -m cuda)")
done
mn=$(printf '%s\n' "${n[@]}" | median)
mt=$(printf '%s\n' "${t[@]}" | median)
printf '| ucp_put_lat | 8 | %.3f | %.3f | %.3f |\n' "$mn" "$mt" \
       "$(awk -v n="$mn" -v t="$mt" 'BEGIN {print (n > 0) ? t / n : 0}')"
}
}

part D && {
echo
echo "## D. CUDA driver calls of UCX's cuda modules in one blocks run (cudaMalloc, 4096 blocks of 16 KiB, 5 transfers and a checked one, put and get; all processes), native vs twin"
pairs="0:0"; [ "$ngpus" -ge 2 ] && pairs="0:0 0:1"
for pr in $pairs; do
    for tls in $native $twin; do
        env SPAN_GPU_DEVICE=${pr%:*} SPAN_PAIR_TARGET_GPU=${pr#*:} \
            UCX_CUDA_IPC_ENABLE_GET_ZCOPY=y \
            LD_PRELOAD="$gpu/bin/libspan_cuda_calls.so" \
            "$gpu/bin/span_bench_gpu" blocks 1 0 16384 4096 5 "$tls" \
            > "$tmp/span_calls.out" 2> "$tmp/span_calls.err" || rc=1
        grep '^BLOCKS' "$tmp/span_calls.out" | awk '{print "GB/s, put and get:", $8, $13}' > "$tmp/span_calls_gbs_$tls"
        awk '$1 == "CUCALLS" {n[$3] += $4} END {for (c in n) print c, n[c]}' \
            "$tmp/span_calls.err" | sort > "$tmp/span_calls_$tls"
    done
    echo "### GPU ${pr%:*} -> ${pr#*:}"
    echo '| driver call | native | twin |'
    echo '|---|---|---|'
    join -a1 -a2 -e 0 -o 0,1.2,2.2 "$tmp/span_calls_$native" \
        "$tmp/span_calls_$twin" | awk '{printf "| %s | %s | %s |\n", $1, $2, $3}'
    echo "native $(cat "$tmp/span_calls_gbs_$native"); twin $(cat "$tmp/span_calls_gbs_$twin")"
done
}

part C && [ "$ngpus" -ge 2 ] && [ -f "$gpu/nixlpy/nixl.tar.xz" ] && {
echo
echo "## C. NIXL, $ngpus initiator/target pairs at once (GPU i reads and writes GPU i+1), $runs times, 300 MiB"
nixl_unpack
echo '| round | pair | nixl_check | twin rows wrong | cold start (ms): expandable twin, cudaMalloc native | left by the twin: expandable; cudaMalloc (fds target/initiator, exports) |'
echo '|---|---|---|---|---|---|'
for ((r = 0; r < runs; r++)); do
    for ((i = 0; i < ngpus; i++)); do
        PYTHONPATH=$tmp/span_nixl/py python3 "$top/contrib/nixl/nixl_check.py" \
            --gpu --runs 1 --gpus $i,$(((i + 1) % ngpus)) \
            > $tmp/span_nixl_c$i.log 2>&1 &
    done
    wait
    for ((i = 0; i < ngpus; i++)); do
        log=$tmp/span_nixl_c$i.log
        v=$(grep '^nixl_check:' "$log")
        bad=$(grep -c '^| gpu .*cuda_ipc+.*FAIL' "$log")
        cold="$(sed -n 's/^- gpu expandable, UCX_TLS=.*cuda_ipc+.*: \([0-9.]*\) ms$/\1/p' "$log") / $(sed -n 's/^- gpu cudaMalloc, UCX_TLS=.*cuda_ipc,.*: \([0-9.]*\) ms$/\1/p' "$log")"
        left=$(sed -n 's/^- gpu \([a-zA-Z]*\), UCX_TLS=.*cuda_ipc+.*: \([-+0-9/]* fds, [0-9]* exports\).*/\1 \2/p' "$log" | paste -sd';' -)
        echo "| $r | GPU $i -> GPU $(((i + 1) % ngpus)) | ${v#nixl_check: } | $bad | $cold | $left |"
        [ "$bad" -eq 0 ] && grep -q 'every twin row right' "$log" || {
            rc=1; grep -E '^\| gpu|^- gpu' "$log" | sed 's/^/    /'; }
    done
done
}
exit $rc

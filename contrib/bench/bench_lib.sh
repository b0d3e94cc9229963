# SPDX-License-Identifier: BSD-3-Clause
# Shared by the benchmark scripts (sourced; needs $perftest).
port=$((20000 + RANDOM % 20000))
median() {
    sort -g | awk '{v[NR] = $1} END {
        if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# overall bandwidth in MB/s of one ucx_perftest client/server pair
# (perftest_col=4: its overall latency in us instead); arguments after the
# fourth go to both (e.g. -m cuda)
perftest_bw() {
    local tls=$1 test=$2 size=$3 iters=$4 out
    shift 4
    port=$((port + 1))
    UCX_TLS=$tls "$perftest" -p "$port" "$@" >/dev/null 2>&1 &
    local server=$!
    sleep 0.3
    out=$(UCX_TLS=$tls "$perftest" 127.0.0.1 -p "$port" -t "$test" \
              -s "$size" -n "$iters" -w $((iters / 10 + 1)) -f "$@" 2>&1) || {
        kill "$server" 2>/dev/null || true
        echo "bench: ucx_perftest $test over $tls failed:" >&2
        echo "$out" >&2
        return 1
    }
    wait "$server"
    echo "$out" | awk -v c="${perftest_col:-6}" 'END {print $c}'
}
# UCX_PROTO_INFO tables as one line per range: "<operation>: <range> <how> <over>"
proto_rows() {
    awk -F'|' '
        NF == 3 && $2 ~ / by ucp_/ { title = $2; gsub(/^ +| +$/, "", title); next }
        title != "" && NF >= 5 && $2 ~ /[0-9]+\.\.[0-9a-z]+/ {
            for (i = 2; i <= 4; ++i) gsub(/^ +| +$/, "", $i)
            print title ": " $2 " " $3 " " $4
        }'
}

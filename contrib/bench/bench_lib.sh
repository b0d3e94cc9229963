# SPDX-License-Identifier: BSD-3-Clause
# Shared by the benchmark scripts (sourced; needs $perftest).
# A TCP port that no socket holds now: the system picks it (python does
# not start with a sanitizer's runtime preloaded: sanitize.sh)
free_port() (
    unset LD_PRELOAD
    python3 -c 'import socket; s = socket.socket(); s.bind(("", 0))
print(s.getsockname()[1])'
)
# Whether process $1 or a child of it (timeout's) listens on TCP port $2.
# In a subshell without the sanitizer's LD_PRELOAD (sanitize.sh): pgrep
# under libasan hung
listens() (
    unset LD_PRELOAD
    local inodes p
    inodes=$(awk -v p="$(printf ':%04X' "$2")" '
        $4 == "0A" && substr($2, length($2) - 4) == p {s = s (s ? "|" : "") $10}
        END {print s}' /proc/net/tcp /proc/net/tcp6 2>/dev/null)
    [ -n "$inodes" ] || return 1
    for p in "$1" $(pgrep -P "$1"); do
        [[ $(ls -l "/proc/$p/fd" 2>/dev/null) =~ socket:\[($inodes)\] ]] &&
            return 0
    done
    return 1
)
# Starts the ucx_perftest server "$@" (without -p) in the background on a
# free port; sets port and server once it listens there, so that the client
# never finds no server or another one. A server that ends first (the port
# was taken meanwhile) is started again on another port, 5 times at most.
perftest_server() {
    local try i log
    log=$(mktemp)
    for try in 1 2 3 4 5; do
        port=$(free_port) || break
        "$@" -p "$port" >"$log" 2>&1 &
        server=$!
        for ((i = 0; i < 600; i++)); do # 60 s
            if listens "$server" "$port"; then
                rm -f "$log"
                return 0
            fi
            kill -0 "$server" 2>/dev/null || break
            sleep 0.1
        done
        kill "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
    done
    echo "bench: no ucx_perftest server listened after $try ports: $*" >&2
    cat "$log" >&2
    rm -f "$log"
    return 1
}
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
    local port server
    perftest_server env UCX_TLS="$tls" "$perftest" "$@" || return 1
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

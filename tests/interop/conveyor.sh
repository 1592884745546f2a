#!/bin/sh
# A second implementation of the Conveyor protocol (docs/protocol.md, version 4), written from the
# document alone in POSIX sh over redis-cli: a producer and a burst worker. The interop tests run
# it against queues that the Python library also uses, to show that the document is enough to
# share a queue. It is test code, not a product: it trusts its inputs.
#
#   conveyor.sh sha SCRIPT                        the SHA1 that SCRIPT LOAD gives the expanded text
#   conveyor.sh enqueue QUEUE ID TASK DATA        prints "outcome state"
#   conveyor.sh enqueue-new QUEUE TASK DATA       a first send with a generated id (§6.1,
#                                                 enqueue_new); prints "ID COUNT"
#   conveyor.sh work QUEUE                        claims and runs jobs until none is ready, then
#                                                 carries the queue's flow hand-offs (§14.5);
#                                                 prints "completed N failed M carried K"
#   conveyor.sh flow QUEUE PID PTASK PDATA CQUEUE CID CTASK CDATA
#                                                 a flow (§14.2): parent PID in QUEUE waits for
#                                                 child CID in CQUEUE; prints both outcomes
# Tasks the worker knows: `echo` (result = data), `fail` (permanent failure). Any other task is
# failed permanently as unknown (§8.5).
#
# Environment: REDIS_CLI (path of redis-cli), REDIS_HOST, REDIS_PORT, LUA_DIR (the scripts),
# PREFIX (default conveyor).
set -eu

CLI="${REDIS_CLI:-redis-cli}"
PREFIX="${PREFIX:-conveyor}"
MAXLEN=10000
LEASE_MS=30000

# One command; an error reply (redis-cli prints it and still exits 0) stops the client.
raw() {
    out=$("$CLI" -h "$REDIS_HOST" -p "$REDIS_PORT" "$@")
    case "$out" in
        ERR*|NOSCRIPT*|WRONGTYPE*|NOPERM*|OOM*) echo "redis: $out" >&2; exit 4 ;;
    esac
    printf '%s\n' "$out"
}

# §7: a `-- @include <name>` line is replaced by the whole text of lua/include/<name>.lua, which
# ends with its own newline, so an empty line follows it; lines joined with \n, a final \n added.
expand() {
    awk -v dir="$LUA_DIR/include" '
        /^-- @include / { f = dir "/" $3 ".lua"; while ((getline line < f) > 0) print line; close(f); print ""; next }
        { print }' "$LUA_DIR/$1.lua"
}

load() {
    expand "$1" | raw -x SCRIPT LOAD
}

# §10: claim the version before the first write, refuse another.
check_version() {
    raw HSETNX "$1meta" version 4 >/dev/null
    v=$(raw HGET "$1meta" version)
    [ "$v" = 4 ] || { echo "queue speaks protocol version $v, not 4" >&2; exit 3; }
}

hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }

# §6.1, one job per call; `opts` holds the options where this client's defaults differ from
# the record defaults (§4.1), and the upsert rules it chooses; the caller chose the id (given).
OPTS="max_stalls=2
max_backoff=60000
timeout=0
result_ttl=600000
u_run_at=0
u_reset=0
given=1"

enqueue() {
    base="$PREFIX:{$1}:"
    check_version "$base"
    sha=$(load enqueue)
    raw EVALSHA "$sha" 9 "$base" "${base}meta" "${base}ready" "${base}scheduled" \
        "${base}marker" "${base}events" "${base}blocked" "${base}completed" "${base}failed" \
        "$MAXLEN" 6 "$2" "$3" "$4" "$(hex 8)" "" "$OPTS" \
        | tr '\n' ' ' | sed 's/ $/\n/'
}

# §6.1 "First sends": a fresh id of 96 random bits (24 hex characters), no options, no index;
# enqueue_new replies with the number of jobs created. (A re-send would go to enqueue.)
enqueue_new() {
    base="$PREFIX:{$1}:"
    check_version "$base"
    sha=$(load enqueue_new)
    id=$(hex 12)
    count=$(raw EVALSHA "$sha" 5 "$base" "${base}meta" "${base}ready" "${base}marker" \
        "${base}events" "$MAXLEN" "$id" "$2" "$3")
    echo "$id $count"
}

# §14.3: one node per flow_add call (id, task, data, idx, opts, parent, on_fail, children).
flow_add() {
    fbase="$PREFIX:{$1}:"
    check_version "$fbase"
    sha=$(load flow_add)
    raw EVALSHA "$sha" 9 "$fbase" "${fbase}meta" "${fbase}ready" "${fbase}scheduled" \
        "${fbase}marker" "${fbase}events" "${fbase}completed" "${fbase}failed" \
        "${fbase}wchildren" "$MAXLEN" 8 "$2" "$3" "$4" "" "given=1" "$5" "" "$6" \
        | tr '\n' ' ' | sed 's/ $/\n/'
}

# §14.2: top-down, the parent (with its pending child) before the child.
flow() {
    echo "$(flow_add "$1" "$2" "$3" "$4" "" "$5/$6"); $(flow_add "$5" "$6" "$7" "$8" "$1/$2" "")"
}

# §14.5: read the outbox one entry at a time (exclusive ranges), apply each hand-off with
# flow_settle on its parent's queue, then delete it. Entries with an `op` (cancellations,
# §14.9) are left to the other workers. A hand-off's payload is one line here (compact JSON).
carry() {
    sha_settle=$(load flow_settle)
    start=-
    carried=0
    while :; do
        entry=$(raw XRANGE "${base}outbox" "$start" + COUNT 1)
        eid=$(printf '%s\n' "$entry" | sed -n 1p)
        [ -n "$eid" ] || break
        start="($eid"
        op="" parent="" child="" outcome="" payload="" policy=""
        n=2
        while name=$(printf '%s\n' "$entry" | sed -n "${n}p"); [ -n "$name" ]; do
            value=$(printf '%s\n' "$entry" | sed -n "$((n + 1))p")
            case "$name" in
                op) op=$value ;; parent) parent=$value ;; child) child=$value ;;
                outcome) outcome=$value ;; payload) payload=$value ;; policy) policy=$value ;;
            esac
            n=$((n + 2))
        done
        [ -z "$op" ] || continue
        pqueue=${parent%%/*}
        pbase="$PREFIX:{$pqueue}:"
        raw EVALSHA "$sha_settle" 9 "$pbase" "${pbase}ready" "${pbase}scheduled" \
            "${pbase}marker" "${pbase}events" "${pbase}completed" "${pbase}failed" \
            "${pbase}wchildren" "${pbase}blocked" \
            "$MAXLEN" "${parent#*/}" "$child" "$outcome" "$payload" "$policy" >/dev/null
        raw XDEL "${base}outbox" "$eid" >/dev/null
        carried=$((carried + 1))
    done
}

# §6.5 / §6.6, one job per call.
complete() {
    raw EVALSHA "$sha_complete" 8 "$base" "${base}active" "${base}completed" "${base}ready" \
        "${base}scheduled" "${base}marker" "${base}events" "${base}blocked" \
        "$MAXLEN" "$1" "$2" "$3" >/dev/null
}

fail() {
    raw EVALSHA "$sha_fail" 8 "$base" "${base}active" "${base}failed" "${base}ready" \
        "${base}scheduled" "${base}marker" "${base}events" "${base}blocked" \
        "$MAXLEN" "$1" "$2" "$3" 1 "" 0 >/dev/null
}

# §6.2 and §8, in burst mode: claim one job at a time (a fresh token per claim) until a claim
# returns none. The reply is read line by line: now, next_due, held, then 17 fields per job
# (data is compact JSON: one line).
work() {
    base="$PREFIX:{$1}:"
    check_version "$base"
    sha_claim=$(load claim)
    sha_complete=$(load complete)
    sha_fail=$(load fail)
    done_n=0
    failed_n=0
    while :; do
        token=$(hex 8)
        reply=$(raw EVALSHA "$sha_claim" 11 "$base" "${base}meta" "${base}ready" \
            "${base}scheduled" "${base}active" "${base}marker" "${base}events" "${base}failed" \
            "${base}groups" "${base}gwait" "${base}gactive" \
            "sh-worker-$$" 1 "$LEASE_MS" "$token" 100 "$MAXLEN" 1)
        id=$(printf '%s\n' "$reply" | sed -n 4p)
        [ -n "$id" ] || break  # no job leased (a nil field at the end prints nothing)
        task=$(printf '%s\n' "$reply" | sed -n 5p)
        data=$(printf '%s\n' "$reply" | sed -n 6p)
        case "$task" in
            echo) complete "$id" "$token" "$data"; done_n=$((done_n + 1)) ;;
            fail) fail "$id" "$token" "failed by the sh worker"; failed_n=$((failed_n + 1)) ;;
            *) fail "$id" "$token" "unknown task '$task'"; failed_n=$((failed_n + 1)) ;;
        esac
    done
    carry
    echo "completed $done_n failed $failed_n carried $carried"
}

cmd="$1"
shift
case "$cmd" in
    sha) load "$1" ;;
    enqueue) enqueue "$@" ;;
    enqueue-new) enqueue_new "$@" ;;
    work) work "$@" ;;
    flow) flow "$@" ;;
    *) echo "unknown command $cmd" >&2; exit 2 ;;
esac

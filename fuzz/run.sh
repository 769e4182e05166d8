#!/usr/bin/env bash
# Builds the fuzz targets and runs each for SECONDS on its committed seeds (fuzz/seeds),
# two at a time; exits non-zero if any target finds a crash, a panic, a timeout over 10 s
# or an allocation over 1.5 GB. CI runs it with a short time; the long campaign is the
# same script with 600 (see fuzz/README.md).
#
#   bash fuzz/run.sh [SECONDS] [TARGET...]     # default 30 s, every target
#
# Toolchain: cargo-fuzz needs nightly compiler flags (-Z sanitizer=address). The script
# uses rustup's nightly toolchain when `rustup toolchain list` shows one, else the stable
# toolchain with RUSTC_BOOTSTRAP=1 (which unlocks the same flags on a stable compiler), and
# installs cargo-fuzz from crates.io when it is missing. New inputs found go to a scratch
# corpus under fuzz/work/ (ignored by git); crashes to fuzz/artifacts/TARGET/.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-30}
shift || true
all=(model_import model_run npy npz idx image engine quantize)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    tc=(+nightly)
    echo "fuzz: nightly toolchain ($(rustc +nightly --version))"
else
    tc=()
    export RUSTC_BOOTSTRAP=1
    echo "fuzz: no nightly toolchain; stable with RUSTC_BOOTSTRAP=1 ($(rustc --version))"
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz"
    cargo install --locked cargo-fuzz
fi

seeds_of() {
    case "$1" in
        model_import | model_run | engine) echo seeds/models ;;
        *) echo "seeds/$1" ;;
    esac
}
dict_of() {
    case "$1" in
        model_import | model_run | engine | quantize) echo seeds/dict/onnx.dict ;;
        *) echo "seeds/dict/$1.dict" ;;
    esac
}
maxlen_of() {
    case "$1" in
        image | npz) echo 16384 ;;
        *) echo 65536 ;;
    esac
}

t0=$(date +%s)
# -O: optimized; -a: debug assertions and overflow checks on, as in the test builds, so an
# arithmetic overflow on hostile sizes is a crash here rather than a silently wrapped shape.
if [ $# -eq 0 ]; then
    cargo "${tc[@]}" fuzz build -O -a # every target in one cargo invocation
else
    for t in "${targets[@]}"; do
        cargo "${tc[@]}" fuzz build -O -a "$t"
    done
fi
echo "fuzz: built in $(($(date +%s) - t0)) s"

run_one() {
    local t=$1 work="work/$1"
    mkdir -p "$work" "artifacts/$t"
    cargo "${tc[@]}" fuzz run -O -a "$t" "$work" "$(seeds_of "$t")" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1536 \
        -max_len="$(maxlen_of "$t")" -dict="$(dict_of "$t")" -print_final_stats=1 \
        >"work/$t.log" 2>&1
}

failed=()
i=0
pids=()
names=()
for t in "${targets[@]}"; do
    run_one "$t" &
    pids+=($!)
    names+=("$t")
    i=$((i + 1))
    # Two at a time (CI and the developer machines have 2 cores).
    if [ $((i % 2)) -eq 0 ] || [ "$i" -eq ${#targets[@]} ]; then
        for k in "${!pids[@]}"; do
            n=${names[$k]}
            if wait "${pids[$k]}"; then
                execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "work/$n.log" | grep -o '[0-9]*$' || echo '?')
                cov=$(grep -o 'cov: [0-9]*' "work/$n.log" | tail -n 1 | grep -o '[0-9]*' || echo '?')
                echo "fuzz: $n ok: $execs executions, $cov coverage edges in ${secs} s"
            else
                echo "fuzz: $n FAILED (log fuzz/work/$n.log):"
                grep -E 'ERROR|panicked|SUMMARY|Test unit written' "work/$n.log" | head -n 20 || true
                tail -n 30 "work/$n.log"
                failed+=("$n")
            fi
        done
        pids=()
        names=()
    fi
done
echo "fuzz: ${#targets[@]} targets in $(($(date +%s) - t0)) s"
echo "fuzz: $((${#targets[@]} - ${#failed[@]})) passed, ${#failed[@]} failed"
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: failing targets: ${failed[*]}"
    exit 1
fi

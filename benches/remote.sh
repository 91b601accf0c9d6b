#!/usr/bin/env bash
# Remote reading against local disk: corpora A (JSONL, 14 MB) and B (Parquet, 16 MB) in moto
# (S3 on loopback), read through the project's fault proxy adding 0, 20 and 100 ms to every
# request, and the same files on local disk. GPT-2, ensure_mixture, best-fit rows of 1024,
# 16 lanes, 32 rows a step, 2 threads, [storage] defaults (8 MiB blocks, prefetch 8).
#
# The corpora are uploaded COPIES times (default 4: 120 MB) under distinct names, and the
# local run reads the same copies. For each: tokens/s over STEPS steps (default 600, about
# 20 M tokens) from a cold cache (a checkpoint after step 50), time to the
# first batch, requests and seconds before the first batch of a fresh start and of a resume
# (each from a cold cache), bytes fetched against the corpus size, requests per step, blocks
# prefetched; and the same run with prefetch off.
#
# Two passes (at 20 ms, 256 KiB blocks): the copies of A by sample weight (so that every lane
# reads by position and the schedule can plan), `passes = 2`, rows in blocks of 256, through a
# block cache of half the corpus, with eviction by next use and by LRU: blocks fetched against
# the corpus's blocks, the share of block reads served by the cache, tokens/s against the same
# run on local disk. The JSON Lines indexes are built beforehand, so that only the passes read.
#
# Vision (at each latency): the captioned photos' Parquet (61 JPEGs, 35 MB, embedded) in
# COPIES copies, captions with their image at 224 px (ViT patches of 14), Qwen2.5's tokenizer,
# best-fit rows of 2048 (2 bins), 8 lanes, 8 rows a step, VISION_STEPS steps (default 20):
# images/s over the whole run, the first batch, bytes fetched against the corpus.
#
#   bash benches/remote.sh        (bash benches/report.sh remote -- bash benches/remote.sh)
#
# Environment: ZEPHON_TESTDATA (default ~/.cache/zephon-testdata), LATENCIES (default "0 20 100"),
# BLOCKS (block sizes, default "8388608 262144": the [storage] default and 256 KiB), COPIES (4),
# STEPS (600), VISION_STEPS (20), PARTS (default "text passes vision": the sections to run).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export ZEPHON_TESTDATA=${ZEPHON_TESTDATA:-$HOME/.cache/zephon-testdata}
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
BIN=$TARGET/release/zephon
(cd "$REPO" && bash scripts/fetch-testdata.sh >/dev/null &&
    cargo build --release -q -p zephon-cli --features remote && cargo build --release -q -p zephon-testkit)
MOTO=$(bash "$REPO/scripts/moto.sh")
DATA=$ZEPHON_TESTDATA

TMP=$(mktemp -d)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; rm -rf "$TMP"' EXIT

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$MOTO" -H 127.0.0.1 -p "$port" >"$TMP/moto.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
COPIES=${COPIES:-4}
STEPS=${STEPS:-600}
for sub in a/jsonl b/parquet images/parquet; do
    mkdir -p "$TMP/local/$sub"
    for k in $(seq "$COPIES"); do
        from=$DATA/corpora/$sub
        [[ $sub == images/parquet ]] && from=$DATA/images/captioned/parquet
        for f in "$from"/*; do ln -s "$f" "$TMP/local/$sub/copy$k-$(basename "$f")"; done
    done
done
"$(dirname "$MOTO")/python" - "http://127.0.0.1:$port" "$TMP/local" <<'PY'
import os, sys, boto3
endpoint, root = sys.argv[1:3]
s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="k", aws_secret_access_key="s",
                  region_name="us-east-1")
s3.create_bucket(Bucket="corpora")
for sub in ("a/jsonl", "b/parquet", "images/parquet"):
    for name in sorted(os.listdir(os.path.join(root, sub))):
        s3.upload_file(os.path.join(root, sub, name), "corpora", f"{sub}/{name}")
PY
export AWS_ACCESS_KEY_ID=zephon-bench AWS_SECRET_ACCESS_KEY=zephon-bench AWS_REGION=us-east-1
CORPUS=$(( COPIES * $(du -cb "$DATA"/corpora/a/jsonl/* "$DATA"/corpora/b/parquet/* | tail -1 | cut -f1) ))

spec() { # spec FILE A B [STORAGE LINES]
    cat >"$1" <<EOF
seed = 5
lanes = 16
rows_per_step = 32
[[dataset]]
name = "a"
path = "$2"
share = 0.5
[[dataset]]
name = "b"
path = "$3"
share = 0.5
[tokenize]
tokenizer = "$DATA/tokenizers/gpt2/tokenizer.json"
eos = "<|endoftext|>"
[ensure_mixture]
slack_tokens = 4096
[pack]
algorithm = "best_fit"
seq_len = 1024
pad_id = 50256
[run]
threads = 2
${4:-}
EOF
}

bytes_in() { find -L "$1" -type f -printf '%s\n' | awk '{ n += $1 } END { print n }'; } # every copy counted

part() { [[ " ${PARTS:-text passes vision} " == *" $1 "* ]]; }

start_proxy() { # start_proxy MS: the fault proxy adding MS ms to every request; sets $endpoint
    coproc PROXY { exec "$TARGET/release/zephon-fault-proxy" "http://127.0.0.1:$port" --latency-ms "$1" 2>/dev/null; }
    PIDS+=($PROXY_PID)
    read -r endpoint <&"${PROXY[0]}"
}

storage_table() { # storage_table NAME [LINE...]: the [storage] table through the proxy, blocks in
    #                 a folder of their own, then LINEs
    printf '[storage]\nendpoint = "%s"\nallow_http = true\npath_style = true\ncache_dir = "%s"\n' "$endpoint" "$TMP/blocks-$1"
    shift
    [[ $# -eq 0 ]] || printf '%s\n' "$@"
}

stop_proxy() {
    kill "$PROXY_PID" 2>/dev/null || true
    wait "$PROXY_PID" 2>/dev/null || true
}

run() { # run NAME SPEC [flags...]: a zephon run with its own cache folder for indexes
    #   (CACHE_NAME: another run's)
    local name=$1 spec=$2
    shift 2
    ZEPHON_CACHE=$TMP/cache-${CACHE_NAME:-$name} "$BIN" run --spec "$spec" --quiet --world-size 1 --rank 0 \
        --report "$TMP/$name.json" "$@" 2>"$TMP/$name.err" || { cat "$TMP/$name.err"; exit 1; }
}

if part text; then
printf '%-24s %10s %9s %8s %12s %12s %11s %10s %12s %11s\n' source "tokens/s" "vs disk" "first s" "first reqs" \
    "resume reqs" "resume s" "reqs/step" "fetched/corp" prefetched
spec "$TMP/local.toml" "$TMP/local/a/jsonl" "$TMP/local/b/parquet"
run local "$TMP/local.toml" --steps "$STEPS" --checkpoint-at 50 --checkpoint-dir "$TMP/ckpt-local"
run local-resume "$TMP/local.toml" --steps 51 --resume-from "$TMP/ckpt-local"
python3 - "$TMP" local "local disk" "$CORPUS" <<'PY'
import json, sys
tmp, name, label, corpus = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
r = json.load(open(f"{tmp}/{name}.json")); z = json.load(open(f"{tmp}/{name}-resume.json"))
print(f"{label:<24} {r['tokens_per_s']:>10.0f} {1:>9.2f} {r['ttfb_s']:>8.2f} {'-':>12} {'-':>12} {z['ttfb_s']:>11.2f} "
      f"{'-':>10} {'-':>12} {'-':>11}")
open(f"{tmp}/local.rate", "w").write(str(r["tokens_per_s"]))
PY

for block in ${BLOCKS:-8388608 262144}; do
for latency in ${LATENCIES:-0 20 100}; do
    for prefetch in 8 0; do
        [[ $prefetch == 0 && $latency != 20 ]] && continue
        start_proxy "$latency"
        tag=b$block-l$latency-p$prefetch
        storage() { storage_table "$1" "prefetch_requests = $prefetch" "block_bytes = $block"; }
        spec "$TMP/$tag.toml" s3://corpora/a/jsonl s3://corpora/b/parquet "$(storage "$tag")"
        spec "$TMP/$tag-first.toml" s3://corpora/a/jsonl s3://corpora/b/parquet "$(storage "$tag-first")"
        spec "$TMP/$tag-resume.toml" s3://corpora/a/jsonl s3://corpora/b/parquet "$(storage "$tag-resume")"
        run "$tag" "$TMP/$tag.toml" --steps "$STEPS" --checkpoint-at 50 --checkpoint-dir "$TMP/ckpt-$tag"
        run "$tag-first" "$TMP/$tag-first.toml" --steps 1
        run "$tag-resume" "$TMP/$tag-resume.toml" --steps 51 --resume-from "$TMP/ckpt-$tag"
        python3 - "$TMP" "$tag" "$((block >> 10)) KiB, $latency ms, pf $prefetch" "$CORPUS" <<'PY'
import json, sys
tmp, tag, label, corpus = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
load = lambda n: json.load(open(f"{tmp}/{n}.json"))
r, f, z = load(tag), load(f"{tag}-first"), load(f"{tag}-resume")
local = float(open(f"{tmp}/local.rate").read())
reqs = lambda x: sum(d["requests"] for d in x["data"]["datasets"])
fetched = sum(d["bytes_fetched"] for d in r["data"]["datasets"])
pre = sum(d.get("prefetched", 0) for d in r["data"]["datasets"])
misses = sum(d["cache_misses"] for d in r["data"]["datasets"])
print(f"{label:<24} {r['tokens_per_s']:>10.0f} {r['tokens_per_s'] / local:>9.2f} {r['ttfb_s']:>8.2f} {reqs(f):>12} "
      f"{reqs(z):>12} {z['ttfb_s']:>11.2f} {reqs(r) / r['steps']:>10.2f} {fetched / corpus:>12.2f} {pre:>5}/{misses:<5}")
PY
        stop_proxy
    done
done
done
fi

if part passes; then
passes_spec() { # passes_spec FILE PATH [STORAGE LINES]
    cat >"$1" <<EOF
seed = 5
lanes = 16
rows_per_step = 32
[[dataset]]
name = "a"
path = "$2"
weight = 1.0
[source]
chunk_size = 64
order = "blocks"
block_size = 256
exhaustion = "stop"
passes = 2
balance = "estimates"
[tokenize]
tokenizer = "$DATA/tokenizers/gpt2/tokenizer.json"
eos = "<|endoftext|>"
[pack]
algorithm = "best_fit"
seq_len = 1024
pad_id = 50256
[run]
threads = 2
${3:-}
EOF
}
A_BYTES=$(bytes_in "$TMP/local/a/jsonl")
BLOCK=262144
echo
echo "Two passes over $COPIES copies of A ($A_BYTES bytes) through a block cache of half of them, 20 ms, 256 KiB blocks:"
printf '%-24s %10s %9s %9s %13s %12s\n' eviction "tokens/s" "vs disk" "run s" "fetched/corp" "cache reads"
passes_spec "$TMP/passes-local.toml" "$TMP/local/a/jsonl"
run passes-local "$TMP/passes-local.toml"
python3 - "$TMP" <<'PY'
import json, sys
r = json.load(open(f"{sys.argv[1]}/passes-local.json"))
print(f"{'local disk':<24} {r['tokens_per_s']:>10.0f} {1:>9.2f} {r['elapsed_s']:>9.1f} {'-':>13} {'-':>12}  ({r['steps']} steps)")
PY
start_proxy 20
for eviction in next_use lru; do
    storage() { storage_table "$1" "block_bytes = $BLOCK" "cache_bytes = $((A_BYTES / 2))" "eviction = \"$eviction\""; }
    passes_spec "$TMP/passes-$eviction-warm.toml" s3://corpora/a/jsonl "$(storage "passes-$eviction-warm")"
    passes_spec "$TMP/passes-$eviction.toml" s3://corpora/a/jsonl "$(storage "passes-$eviction")"
    # Indexes and estimates first, into the index cache the measured run uses.
    CACHE_NAME=passes-$eviction run "passes-$eviction-warm" "$TMP/passes-$eviction-warm.toml" --steps 1
    CACHE_NAME=passes-$eviction run "passes-$eviction" "$TMP/passes-$eviction.toml"
    python3 - "$TMP" "$eviction" "$TMP/local/a/jsonl" "$BLOCK" <<'PY'
import json, math, os, sys
tmp, eviction, local, block = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
r, disk = json.load(open(f"{tmp}/passes-{eviction}.json")), json.load(open(f"{tmp}/passes-local.json"))
blocks = sum(math.ceil(os.path.getsize(os.path.join(local, f)) / block) for f in os.listdir(local))
ds = r["data"]["datasets"]
misses, hits = sum(d["cache_misses"] for d in ds), sum(d["cache_hits"] for d in ds)
assert r["steps"] == disk["steps"], (r["steps"], disk["steps"])
print(f"{eviction:<24} {r['tokens_per_s']:>10.0f} {r['tokens_per_s'] / disk['tokens_per_s']:>9.2f} "
      f"{r['elapsed_s']:>9.1f} {misses / blocks:>13.2f} {100 * hits / max(hits + misses, 1):>11.1f}%")
PY
done
stop_proxy
fi

if part vision; then
vision_spec() { # vision_spec FILE PATH [STORAGE LINES]
    cat >"$1" <<EOF
seed = 5
lanes = 8
rows_per_step = 8
[[dataset]]
name = "captions"
path = "$2"
weight = 1.0
text_field = "caption"
images = "image"
[images]
size = 224
fit = "center_crop"
layout = "vit"
patch = 14
[tokenize]
tokenizer = "$DATA/tokenizers/qwen2_5/tokenizer.json"
eos = "<|endoftext|>"
image_token = "<|image_pad|>"
[pack]
algorithm = "best_fit"
seq_len = 2048
bins = 2
pad_id = 151643
[run]
threads = 2
${3:-}
EOF
}
VISION_STEPS=${VISION_STEPS:-20}
IMG_BYTES=$(bytes_in "$TMP/local/images/parquet")
echo
echo "Vision: $COPIES copies of the captioned photos' Parquet ($IMG_BYTES bytes), $VISION_STEPS steps, 8 MiB blocks:"
printf '%-24s %10s %9s %8s %12s %10s\n' source "images/s" "vs disk" "first s" "fetched/corp" requests
vision_spec "$TMP/vision-local.toml" "$TMP/local/images/parquet"
run vision-local "$TMP/vision-local.toml" --steps "$VISION_STEPS"
for latency in ${LATENCIES:-0 20 100}; do
    start_proxy "$latency"
    vision_spec "$TMP/vision-l$latency.toml" s3://corpora/images/parquet \
        "$(storage_table "vision-$latency")"
    run "vision-l$latency" "$TMP/vision-l$latency.toml" --steps "$VISION_STEPS"
    stop_proxy
done
python3 - "$TMP" "$IMG_BYTES" ${LATENCIES:-0 20 100} <<'PY'
import json, sys
tmp, corpus, latencies = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rate = lambda r: r["images"] / r["elapsed_s"]
disk = json.load(open(f"{tmp}/vision-local.json"))
print(f"{'local disk':<24} {rate(disk):>10.1f} {1:>9.2f} {disk['ttfb_s']:>8.2f} {'-':>12} {'-':>10}")
for ms in latencies:
    r = json.load(open(f"{tmp}/vision-l{ms}.json"))
    ds = r["data"]["datasets"]
    fetched, reqs = sum(d["bytes_fetched"] for d in ds), sum(d["requests"] for d in ds)
    print(f"{f'{ms} ms':<24} {rate(r):>10.1f} {rate(r) / rate(disk):>9.2f} {r['ttfb_s']:>8.2f} {fetched / corpus:>12.2f} {reqs:>10}")
PY
fi

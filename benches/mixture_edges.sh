#!/usr/bin/env bash
# The edges of a mixture on real data: long documents (corpus B, ~3,500 tokens) against
# one-line documents (lines of corpus A, ~16 tokens), token shares 30 / 70, GPT-2, rows of
# 1024, 16 rows per global step.
#
# 1. Token shares at every step with ensure_mixture (slack 4096): the most tokens a dataset
#    ran ahead of its share over STEPS steps, against the bound L × (slack + seq_len), for
#    L = 1, 4, 8, 16, wrap and best-fit, with and without a 64-row shuffle after the packer,
#    over SEEDS seeds.
# 2. One pass under tail = "drop": the tokens left out, against tail = "partial", for
#    redistribute and stop, chunks of 64 samples, 65,536 and 8,192 estimated tokens, 8 lanes,
#    the end shared out by counted row tokens (the default), row sizes and estimates.
# 3. The same loss over SEEDS seeds, by counted row tokens under redistribute, for wrap and
#    best-fit with its open rows at the end kept as they are (`keep_pieces`) or laid out into
#    full rows (`fill_rows`, the default under drop).
# 4. The same with pages of ~17 k tokens instead of corpus B's documents (corpus B
#    concatenated until a page has 50,000 bytes): the end of the stream is long pages only.
# 5. The closed loop at its defaults (chunks of 2,048 estimated tokens, ensure_mixture without
#    a hold cap, best-fit, a 64-row shuffle split across the lanes), repeating data: tokens
#    dropped (0), what ensure_mixture holds at the end, and the worst step's excess over the
#    share against the bound, for corpus B + one-line documents 30 / 70 and corpora A + B
#    50 / 50, at L = 8 (16 rows of 1024 a step, STEPS5 steps), L = 64 (64 rows of 1024,
#    STEPS5 / 4) and L = 1024 (1024 rows of 256, STEPS5 / 16).
#
#   bash benches/mixture_edges.sh [STEPS] [SEEDS]     (default 200 steps, 2 seeds)
#
# Environment: ZEPHON_TESTDATA (default ~/.cache/zephon-testdata), ZEPHON_BIN, PARTS (default
# "1234": which parts to run), STEPS5 (default 3000).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STEPS=${1:-200}
SEEDS=${2:-2}
PARTS=${PARTS:-1234}
DATA=${ZEPHON_TESTDATA:-$HOME/.cache/zephon-testdata}
BIN=${ZEPHON_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/zephon}
(cd "$REPO" && bash scripts/fetch-testdata.sh && cargo build --release -q -p zephon-cli)

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/short"
python3 "$REPO/benches/one_line_docs.py" "$DATA" "$TMP/short/part-0.jsonl"

LONG=${LONG:-$DATA/corpora/b/jsonl}
spec() { # seed lanes algorithm shuffle(0|1) chunks exhaustion tail ensure(0|1) [balance] [end_of_data]
    cat <<SPEC
seed = $1
lanes = $2
rows_per_step = 16
[[dataset]]
name = "long"
path = "$LONG"
share = 0.3
[[dataset]]
name = "short"
path = "$TMP/short"
share = 0.7
[source]
$5
order = "shuffled"
exhaustion = "$6"
passes = 1
balance = "${9:-row_sizes}"
[tokenize]
tokenizer = "$DATA/tokenizers/gpt2/tokenizer.json"
eos = "<|endoftext|>"
$([ "$8" = 1 ] && printf '[ensure_mixture]\nslack_tokens = 4096\n')
[pack]
algorithm = "$3"
seq_len = 1024
pad_id = 50256
${10:+end_of_data = \"${10}\"}
$([ "$4" = 1 ] && printf '[shuffle]\nbuffer = 64\n')
[run]
threads = 2
tail = "$7"
SPEC
}

field() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

# Steps `drop` leaves out against `partial`, one pass under redistribute by counted row tokens,
# 8 lanes, for seeds 1..SEEDS: algorithm chunks [end_of_data].
lost_by_seed() {
    local lost="" seed all kept steps
    for seed in $(seq 1 "$SEEDS"); do
        spec "$seed" 8 "$1" 1 "$2" redistribute partial 0 row_tokens > "$TMP/p.toml"
        spec "$seed" 8 "$1" 1 "$2" redistribute drop 0 row_tokens "${3:-}" > "$TMP/d.toml"
        "$BIN" run --spec "$TMP/p.toml" --quiet --report "$TMP/p.json" 2>/dev/null
        "$BIN" run --spec "$TMP/d.toml" --quiet --report "$TMP/d.json" 2>/dev/null
        all=$(field "$TMP/p.json" "r['tokens']")
        kept=$(field "$TMP/d.json" "r['tokens']")
        steps=$(field "$TMP/d.json" "r['steps']")
        lost="$lost $(python3 -c "print(f'{($all-$kept)/($kept/$steps):.2f}')")"
    done
    echo "$lost"
}

if [[ $PARTS == *1* ]]; then
echo "== worst tokens ahead of the share / bound L x (4096 + 1024), $STEPS steps, seeds 1..$SEEDS"
printf '%-10s %-9s %4s  %s\n' algorithm shuffle L "ratio per seed"
for shuffle in 0 1; do
    for algorithm in wrap best_fit; do
        for lanes in 1 4 8 16; do
            ratios=""
            for seed in $(seq 1 "$SEEDS"); do
                spec "$seed" "$lanes" "$algorithm" "$shuffle" "chunk_size = 64" repeat drop 1 > "$TMP/s.toml"
                "$BIN" run --spec "$TMP/s.toml" --steps "$STEPS" --quiet --report "$TMP/r.json" 2>/dev/null
                worst=$(field "$TMP/r.json" "max(d['max_excess_tokens'] for d in r['shares'])")
                ratios="$ratios $(python3 -c "print(f'{$worst / ($lanes * 5120):.2f}')")"
            done
            printf '%-10s %-9s %4s %s\n' "$algorithm" "$([ $shuffle = 1 ] && echo 64-rows || echo none)" "$lanes" "$ratios"
        done
    done
done

fi
if [[ $PARTS == *2* ]]; then
echo "== one pass, 8 lanes, best-fit, a 64-row shuffle: tokens tail = drop leaves out"
for balance in row_tokens row_sizes estimates; do
for exhaustion in redistribute stop; do
    for chunks in "chunk_size = 64" "chunk_tokens = 65536" "chunk_tokens = 8192"; do
        spec 7 8 best_fit 1 "$chunks" "$exhaustion" partial 0 "$balance" > "$TMP/p.toml"
        spec 7 8 best_fit 1 "$chunks" "$exhaustion" drop 0 "$balance" > "$TMP/d.toml"
        "$BIN" run --spec "$TMP/p.toml" --quiet --report "$TMP/p.json" 2>/dev/null
        "$BIN" run --spec "$TMP/d.toml" --quiet --report "$TMP/d.json" 2>/dev/null
        all=$(field "$TMP/p.json" "r['tokens']")
        kept=$(field "$TMP/d.json" "r['tokens']")
        steps=$(field "$TMP/d.json" "r['steps']")
        python3 -c "all,kept,steps=$all,$kept,$steps; print(f'by $balance, $exhaustion, ${chunks}: {100*(all-kept)/all:.2f} % of {all/1e6:.1f} M tokens = {(all-kept)/(kept/steps):.1f} steps')"
    done
done
done
fi

if [[ $PARTS == *3* ]]; then
echo "== one pass, redistribute, by counted row tokens, over seeds 1..$SEEDS: steps tail = drop leaves out"
for packing in "wrap" "best_fit keep_pieces" "best_fit fill_rows"; do
    read -r algorithm end <<< "$packing"
    for chunks in "chunk_size = 64" "chunk_tokens = 65536" "chunk_tokens = 8192"; do
        printf '%-22s %-22s %s\n' "$packing" "$chunks" "$(lost_by_seed "$algorithm" "$chunks" "$end")"
    done
done
fi

if [[ $PARTS == *5* ]]; then
STEPS5=${STEPS5:-3000}
closed_spec() { # long short share_long lanes rows seq_len
    cat <<SPEC
seed = 21
lanes = $4
rows_per_step = $5
[[dataset]]
name = "long"
path = "$1"
share = $3
[[dataset]]
name = "short"
path = "$2"
share = $(python3 -c "print(round(1 - $3, 6))")
[tokenize]
tokenizer = "$DATA/tokenizers/gpt2/tokenizer.json"
eos = "<|endoftext|>"
[ensure_mixture]
slack_tokens = 4096
[pack]
algorithm = "best_fit"
seq_len = $6
bins_total = $(( $4 * 64 < 4096 ? $4 * 64 : 4096 ))
pad_id = 50256
[shuffle]
buffer_total = $(( $4 > 64 ? $4 : 64 ))
[run]
threads = 2
SPEC
}
echo "== the closed loop at its defaults: dropped, held at the end, worst excess over the share / bound L x (4096 + seq_len)"
printf '%-24s %5s %6s %10s %14s %12s %8s
' mixture L steps "tokens" dropped "held" "worst/bound"
for mix in "B+one-line $DATA/corpora/b/parquet $TMP/short 0.3" "A+B $DATA/corpora/b/parquet $DATA/corpora/a/jsonl 0.5"; do
    read -r name long short share <<< "$mix"
    for shape in "8 16 1024 1" "64 64 1024 4" "1024 1024 256 16"; do
        read -r lanes rows seq div <<< "$shape"
        steps=$(( STEPS5 / div ))
        closed_spec "$long" "$short" "$share" "$lanes" "$rows" "$seq" > "$TMP/c.toml"
        "$BIN" run --spec "$TMP/c.toml" --steps "$steps" --quiet --report "$TMP/c.json" 2>/dev/null
        field "$TMP/c.json" "f\"{'$name':<24} {$lanes:>5} {$steps:>6} {r['tokens']:>10} {sum(d['dropped_tokens'] for d in r['data']['datasets']):>14} {sum(d['held_tokens'] for d in r['data']['datasets']):>12} {max(d['max_excess_tokens'] for d in r['shares']) / ($lanes * (4096 + $seq)):>8.2f}\""
    done
done
fi

[[ $PARTS == *4* ]] || exit 0
mkdir -p "$TMP/pages"
python3 - "$DATA/corpora/b/jsonl" "$TMP/pages/part-0.jsonl" <<'EOF'
import glob, json, sys
page = ""
with open(sys.argv[2], "w") as out:
    for f in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
        for line in open(f):
            page += json.loads(line)["text"] + "\n\n"
            if len(page) >= 50000:
                out.write(json.dumps({"text": page}) + "\n")
                page = ""
EOF
LONG="$TMP/pages"
echo "== pages of ~17 k tokens instead of corpus B's documents, one pass, redistribute, 64-sample chunks: steps tail = drop leaves out"
for algorithm in wrap best_fit; do
    printf '%-10s %s\n' "$algorithm" "$(lost_by_seed "$algorithm" "chunk_size = 64")"
done

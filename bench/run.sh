#!/usr/bin/env bash
# The whole comparison: spirit, Lucene and Tantivy on the same documents and queries, in one run.
#
#   bench/run.sh quick [OUTDIR]   5,000 docs, 10 queries per category, 1 s warm-up (CI smoke test)
#   bench/run.sh full  [OUTDIR]   all 250,029 docs, 100 queries per category, 10 s warm-up, every real-time
#                                 configuration in NRT_ROUNDS (3) rounds, pooled in the report (by hand)
#   bench/run.sh static [OUTDIR]  as full, static configurations only (query speed after a change, ~20 min)
#   bench/run.sh bulk [OUTDIR]    bulk indexing of the whole file with 1 and 2 threads (and 1 and 2 spirit
#                                 shards), spirit against Tantivy and Lucene, end to end, in BULK_ROUNDS (2)
#                                 rounds alternating which engine goes first; the tokenizer alone
#   bench/run.sh interleave [OUTDIR]  spirit's and Tantivy's static query speed under the same machine
#                                 conditions: both indexes built once, then each engine's query loop
#                                 (`spirit-bench loop`, `tantivy-baseline --mode loop`) alternated on one core,
#                                 INTERLEAVE_ROUNDS (8) rounds of INTERLEAVE_SECONDS (1.5) per category and
#                                 engine, for INTERLEAVE_CATEGORIES (issue 4's: the AND, OR and phrase ones;
#                                 ~10 min); medians and their ratio in report.md
#
# Configurations: static index for each engine; windowed real time (queries while the last 20% of the
# documents is ingested) for spirit (real time, no reopen), Lucene NRT-1/10/100/1000/∞ and Tantivy
# NRT-1/10/100/1000; ingest-to-visible latency in every real-time run, open time after a restart in every
# static run, spirit's recovery after kill -9 during a crash-safe ingest, and the machine's own stalls before
# and after the real-time rounds (`spirit-bench stalls`). Results (one JSON per
# configuration, meta.json, report.md, SVG plots) go to OUTDIR (default bench/results/SIZE-DATE). Data: $SPIRIT_DATA or ../shared/data/enwiki beside the repository.
set -euo pipefail
size="${1:-quick}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data="${SPIRIT_DATA:-$root/../shared/data/enwiki}"
docs="$data/enwiki-2015-1k.dev.lines.gz"
tasks="$data/tasks.dev.txt"
[ -f "$docs" ] || { echo "bench/run.sh: $docs not found (set SPIRIT_DATA)" >&2; exit 1; }
case "$size" in
  quick) per_category=10; common=(--max-docs 5000 --queries-per-category 10 --warmup-seconds 1); limit=(--max-docs 5000) ;;
  full|static|bulk) per_category=100; common=(--queries-per-category 100 --warmup-seconds 10); limit=() ;;
  interleave) per_category=100; common=(--queries-per-category 100 --warmup-seconds 1); limit=() ;;
  *) echo "usage: bench/run.sh quick|full|static|bulk|interleave [OUTDIR]" >&2; exit 2 ;;
esac
out="${2:-$root/bench/results/$size-$(date -u +%Y%m%d-%H%M)}"
mkdir -p "$out"

echo "== building (release) =="
(cd "$root" && cargo build --release -q -p spirit-bench)
"$root/bench/baselines/build.sh"

spirit="$root/target/release/spirit-bench"
lucene="$root/bench/lucene/lucene-baseline"
tantivy="$root/bench/tantivy/target/release/tantivy-baseline"
args=(--docs "$docs" --tasks "$tasks" "${common[@]}")

cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
mem="$(free -g | awk '/Mem:/{print $2}')"
commit="$(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"
dirty="$(cd "$root" && git status --porcelain 2>/dev/null | grep -qv '^??' && echo ' (with uncommitted changes)' || true)"
cat > "$out/meta.json" <<JSON
{"date": "$(date -u +%Y-%m-%dT%H:%MZ)", "size": "$size", "machine": "$(nproc) cores, $cpu, ${mem} GiB",
 "commit": "$commit$dirty", "command": "bench/run.sh $size", "data": "$(basename "$docs")"}
JSON

step() { echo "== $1 =="; shift; "$@" 2> >(tail -n 3 >&2); }
if [ "$size" = bulk ]; then
  # BULK_ROUNDS rounds (default 2), each running every engine once, the first engine of a round taking turns:
  # the machine's speed drifts by tens of percent within minutes, and a single pass in a fixed order once
  # put a whole slow stretch on the baselines. The table lists every run; the goals take the best of each.
  rounds="${BULK_ROUNDS:-2}"; runs=()
  for r in $(seq "$rounds"); do
    baselines() {
      for t in 1 2; do
        step "round $r: tantivy bulk, $t threads" "$tantivy" --docs "$docs" --mode bulk --threads "$t" --out "$out/tantivy-bulk-$t-r$r.json"
        step "round $r: lucene bulk, $t threads" "$lucene" --docs "$docs" --mode bulk --threads "$t" --out "$out/lucene-bulk-$t-r$r.json"
        runs+=("$out/tantivy-bulk-$t-r$r.json" "$out/lucene-bulk-$t-r$r.json")
      done
    }
    spirit_round() {
      tok=(--no-tokenizer); [ "$r" = 1 ] && tok=()
      step "round $r: spirit bulk (1, 2 threads x 1, 2 shards)" "$spirit" bulk --docs "$docs" --threads 1,2 \
        --shards 1,2 "${tok[@]}" --json "$out/spirit-bulk-r$r.json" > /dev/null
      runs+=("$out/spirit-bulk-r$r.json")
    }
    if [ $((r % 2)) = 1 ]; then baselines; spirit_round; else spirit_round; baselines; fi
  done
  echo "== report =="
  (IFS=,; "$spirit" bulk --docs "$docs" --report-only --compare "${runs[*]}" --json "$out/bulk.json") > "$out/report.md"
  cat "$out/report.md"
  exit 0
fi
if [ "$size" = interleave ]; then
  cats="${INTERLEAVE_CATEGORIES:-AndHighHigh,AndHighMed,OrHighHigh,OrHighMed,HighPhrase,MedPhrase,LowPhrase}"
  rounds="${INTERLEAVE_ROUNDS:-8}"; secs="${INTERLEAVE_SECONDS:-1.5}"
  step "spirit static (builds the index)" "$spirit" run "${args[@]}" --categories "$cats" --mode static \
    --index-dir "$out/spirit-index" --out "$out/spirit-static.json"
  step "tantivy static (builds the index)" "$tantivy" "${args[@]}" --categories "$cats" --mode static \
    --index-dir "$out/tantivy-index" --out "$out/tantivy-static.json"
  pin=(); command -v taskset > /dev/null && pin=(taskset -c 0)
  : > "$out/loops.jsonl"
  for r in $(seq "$rounds"); do
    echo "== round $r of $rounds =="
    "${pin[@]}" "$spirit" loop --index-dir "$out/spirit-index" --tasks "$tasks" --categories "$cats" \
      --seconds "$secs" | sed "s/^{/{\"round\":$r,/" >> "$out/loops.jsonl"
    "${pin[@]}" "$tantivy" --docs "$docs" --tasks "$tasks" --categories "$cats" --mode loop \
      --index-dir "$out/tantivy-index" --loop-seconds "$secs" --out /dev/null | sed "s/^{/{\"round\":$r,/" >> "$out/loops.jsonl"
  done
  [ -n "${KEEP_INDEXES:-}" ] || rm -rf "$out/spirit-index" "$out/tantivy-index"
  python3 "$root/bench/baselines/interleave_report.py" "$out" "$tasks" > "$out/report.md"
  cat "$out/report.md"
  exit 0
fi
step "spirit static"  "$spirit" run "${args[@]}" --mode static --out "$out/spirit-static.json"
step "lucene static"  "$lucene" "${args[@]}" --mode static --out "$out/lucene-static.json"
step "tantivy static" "$tantivy" "${args[@]}" --mode static --out "$out/tantivy-static.json"
if [ "$size" = static ]; then
  "$spirit" report --dir "$out" > /dev/null
  echo "report: $out/report.md"
  exit 0
fi
# Every real-time configuration in NRT_ROUNDS rounds (full: 3, quick: 1; at most 9), each a whole window on an
# index built afresh, the order reversed every other round; the report pools a configuration's rounds. Round r
# takes each category's queries rotated to start (r-1)/NRT_ROUNDS of the way in (same queries, every engine the
# same order): a configuration that reopens often times only the first few per window, so its rounds time
# different ones.
rounds="${NRT_ROUNDS:-$([ "$size" = full ] && echo 3 || echo 1)}"
[[ "$rounds" =~ ^[1-9]$ ]] || { echo "bench/run.sh: NRT_ROUNDS must be 1..9" >&2; exit 2; }
configs=("spirit 0")
for k in 1 10 100 1000 0; do configs+=("lucene $k"); done
for k in 1 10 100 1000; do configs+=("tantivy $k"); done
# The machine's own stalls (spirit-bench stalls) before and after the real-time rounds: the report prints them
# beside the p99 goal, whose misses on the cheap workloads have been the machine's, not an engine's.
stall_args=(--seconds "$([ "$size" = quick ] && echo 1 || echo 3)")
step "machine stalls (before the real-time rounds)" "$spirit" stalls "${stall_args[@]}" \
  --label "before the real-time rounds" --json "$out/stalls-1-before.json"
for r in $(seq "$rounds"); do
  suffix="$([ "$rounds" = 1 ] || echo "-r$r")"
  round_tasks="$tasks"
  if [ "$r" -gt 1 ]; then
    round_tasks="$out/tasks-r$r.txt"
    python3 "$root/bench/baselines/rotate_tasks.py" "$tasks" "$per_category" $(((r - 1) * per_category / rounds)) > "$round_tasks"
  fi
  args=(--docs "$docs" --tasks "$round_tasks" "${common[@]}")
  order=("${configs[@]}")
  if [ $((r % 2)) = 0 ]; then
    order=(); for ((i = ${#configs[@]} - 1; i >= 0; i--)); do order+=("${configs[i]}"); done
  fi
  for c in "${order[@]}"; do
    read -r engine k <<< "$c"
    round="$([ "$rounds" = 1 ] || echo " (round $r of $rounds)")"
    case "$engine" in
      spirit) step "spirit real-time$round" "$spirit" run "${args[@]}" --mode nrt --out "$out/spirit-nrt$suffix.json" ;;
      lucene) step "lucene NRT-$k$round" "$lucene" "${args[@]}" --mode nrt --reopen-every "$k" --out "$out/lucene-nrt-$k$suffix.json" ;;
      tantivy) step "tantivy NRT-$k$round" "$tantivy" "${args[@]}" --mode nrt --reopen-every "$k" --out "$out/tantivy-nrt-$k$suffix.json" ;;
    esac
  done
done
step "machine stalls (after the real-time rounds)" "$spirit" stalls "${stall_args[@]}" \
  --label "after the real-time rounds" --json "$out/stalls-2-after.json"
step "spirit crash recovery" "$spirit" durability --docs "$docs" "${limit[@]}" --recovery-only \
  --json "$out/spirit-recovery.json"
"$spirit" report --dir "$out" > /dev/null
echo "report: $out/report.md"

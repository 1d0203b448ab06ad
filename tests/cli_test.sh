#!/usr/bin/env bash
# Command-line tests: exit codes (0 ok, 2 bad input or usage), messages that name what was wrong,
# and the outputs of compile / info / demo / run. Usage: cli_test.sh path/to/orthojit
set -u
orthojit=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# shellcheck source=expect.sh
source "$(dirname "${BASH_SOURCE[0]}")/expect.sh"

expect 0 "usage: orthojit <command>" -- "$orthojit" --help
expect 2 "usage: orthojit <command>" -- "$orthojit"
expect 2 "unknown command 'frobnicate'" -- "$orthojit" frobnicate
for command in run compile info demo; do expect 0 "usage: orthojit $command" -- "$orthojit" $command --help; done
expect 0 "orthojit 0." -- "$orthojit" --version

# compile
expect 0 "gemm 2.0315·%3 @ %3 - 4.775·%3" -- "$orthojit" compile --program jordan_ns5 --shape 8x32 --emit ir
expect 0 "oriented(tall input runs transposed)" -- "$orthojit" compile --program jordan_ns5 --shape 32x8
expect 0 "; ---- IR after orient ----" -- "$orthojit" compile --program jordan_ns5 --shape 8x32 --dump-after orient
expect 0 "; ---- IR after plan_buffers ----" -- "$orthojit" compile --program jordan_ns5 --shape 8x32x4 --dump-after all
expect 0 "restarts=[2,3]" -- "$orthojit" compile --program polar_express5 --shape 8x32 --strategy gram --restarts 2,3
expect 0 "fuse_epilogues" -- "$orthojit" compile --list-passes
expect 2 "unknown pass 'nope'" -- "$orthojit" compile --program jordan_ns5 --shape 8x32 --dump-after nope
expect 2 "invalid shape '8x'" -- "$orthojit" compile --program jordan_ns5 --shape 8x
expect 2 "add --backend cpu" -- "$orthojit" compile --program jordan_ns5 --shape 8x32 --emit llvm
expect 0 "JIT-compiled in" -- "$orthojit" compile --program jordan_ns5 --shape 8x32 --emit llvm --backend cpu
expect 0 "define void @orthojit_ukernel_generic_4x8_k8" -- "$orthojit" compile --program jordan_ns5 --shape 8x32 --emit llvm --backend cpu --isa generic
expect 2 "is the CUDA backend's code: add --backend cuda" -- "$orthojit" compile --program jordan_ns5 --shape 8x32 --emit ptx
expect 2 "unknown option --shapes" -- "$orthojit" compile --program jordan_ns5 --shapes 8x32
expect 2 "missing required option --shape" -- "$orthojit" compile --program jordan_ns5
expect 2 "neither a shipped program nor a readable file; shipped programs: cans5, classical," -- "$orthojit" compile --program nosuch --shape 4x4
expect 2 "gram restart at step 7 is outside 1..4" -- "$orthojit" compile --program jordan_ns5 --shape 8x32 --strategy gram --restarts 7
# ... whatever the strategy (with standard or auto they were once accepted and ignored)
expect 2 "gram restart at step 7 is outside 1..4" -- "$orthojit" compile --program jordan_ns5 --shape 8x32 --strategy standard --restarts 7

cat > "$work/bad.oj" <<'OJ'
orthogonalizer bad {
  coefficients jordan repeat 5;
  step {
    X = X @ X;
  }
}
OJ
expect 2 "$work/bad.oj:4:11: error: shapes do not match for '@'" -- "$orthojit" compile --program "$work/bad.oj" --shape 4x8
cat > "$work/xtx.oj" <<'OJ'
orthogonalizer xtx {
  coefficients (1.5, -0.5, 0) repeat 3;
  step {
    X = 1.5 * X - 0.5 * X @ (X.T @ X);
  }
}
OJ
expect 0 "func @xtx" -- "$orthojit" compile --program "$work/xtx.oj" --shape 4x8
expect 2 "$work/xtx.oj:4:5: error: the gram strategy needs every step in the form" -- "$orthojit" compile --program "$work/xtx.oj" --shape 4x8 --strategy gram

# bench
expect 0 "dense-equivalent" -- "$orthojit" bench --program jordan_ns5 --shape 16x64 --repeat 2
expect 0 '"fraction_of_peak"' -- "$orthojit" bench --program jordan_ns5 --shape 16x64x3 --repeat 2 --json --strategy gram
expect 0 "ref" -- "$orthojit" bench --program jordan_ns5 --shape 8x16 --repeat 1 --backend ref --precision f64
# The engine of the bf16 products: named by info, forced by --kernel and reported by bench; a bad name refused.
expect 0 "bf16 kernel: " -- "$orthojit" info
expect 0 '"engine": "fma"' -- "$orthojit" bench --program jordan_ns5 --shape 16x64 --repeat 1 --kernel fma --json
expect 2 "unknown kernel 'tpu'; expected fma, bf16dot or amx" -- "$orthojit" bench --program jordan_ns5 --shape 16x64 --repeat 1 --kernel tpu
# --isa, like --kernel, is the cpu backend's (it was once accepted and ignored on ref)
expect 2 "isa generic is an option of the cpu backend (this run is on ref)" -- "$orthojit" bench --program jordan_ns5 --shape 8x16 --repeat 1 --backend ref --isa generic
# --backend auto (bench's default) runs f64 on the reference interpreter; cpu refuses it, saying why.
expect 0 '"backend": "ref"' -- "$orthojit" bench --program jordan_ns5 --shape 8x16 --repeat 1 --precision f64 --json
expect 0 '"backend": "cpu"' -- "$orthojit" bench --program jordan_ns5 --shape 8x16 --repeat 1 --json
expect 2 "cpu backend runs bf16, f16 and f32 policies" -- "$orthojit" bench --program jordan_ns5 --shape 8x16 --precision f64 --backend cpu
expect 2 "invalid --repeat" -- "$orthojit" bench --program jordan_ns5 --shape 8x16 --repeat x
# The speedup chart (runtime/charts/speedup_chart.py, embedded): a PNG file from Debian's python3.
expect 0 "plot: $work/speedups.png" -- "$orthojit" bench --shape 32x128 --compare --budget 1 --plot "$work/speedups.png"
[[ "$(head -c 4 "$work/speedups.png" | od -An -c | tr -d ' ')" == "211PNG" ]] || { echo "FAIL: bench --compare --plot wrote no PNG"; failures=$((failures + 1)); }

# info and demo
expect 0 "jordan_ns5" -- "$orthojit" info
expect 0 "polar_express5" -- "$orthojit" demo --shape 16x64

# run: errors before any output is written
/usr/bin/python3 - "$work" <<'PY'
import sys, numpy as np
w = sys.argv[1]
rng = np.random.default_rng(0)
np.save(f"{w}/g.npy", rng.standard_normal((8, 24)).astype(np.float32))
np.save(f"{w}/vector.npy", rng.standard_normal(8).astype(np.float32))
np.save(f"{w}/ints.npy", np.arange(12, dtype=np.int32).reshape(3, 4))
PY
expect 0 "" -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/y.npy"
expect 0 "backend cpu" -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/y.npy" --backend cpu --threads 1 --isa generic --verbose
# --output: a symbolic link keeps pointing at its file, which is replaced; a FIFO (like a device)
# is written in place, not replaced by a regular file; a directory is named as one.
ln -s real.npy "$work/link.npy"
expect 0 "" -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/link.npy"
if [[ ! -L $work/link.npy || ! -s $work/real.npy ]]; then echo "FAIL: --output through a symbolic link replaced the link"; failures=$((failures + 1)); fi
mkfifo "$work/fifo"
timeout 60 cat "$work/fifo" > "$work/from-fifo" &  # a bounded reader: a writer that never opens the FIFO must not hang the test
expect 0 "" -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/fifo"
wait
if [[ ! -p $work/fifo ]] || ! cmp -s "$work/from-fifo" "$work/real.npy"; then echo "FAIL: --output to a FIFO did not write through it"; failures=$((failures + 1)); fi
mkdir "$work/outdir"
expect 2 "outdir: is a directory; give the output a file name" -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/outdir"
# --threads beyond kMaxThreads: refused (99999 started that many threads, exhausted the process
# limit and starved the machine's other processes)
expect 2 "invalid --threads '99999'; expected 0 (one per logical core) or 1 to 1024" -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/y.npy" --threads 99999
expect 2 "invalid --threads '1025'" -- "$orthojit" bench --program jordan_ns5 --shape 8x16 --threads 1025
expect 2 "invalid --threads '5000'" -- "$orthojit" tune --shape 8x16 --threads 5000 --out "$work/never.json"
# --out naming a file that is not tuning records (a model config given by mistake): refused before
# tuning, the file as it was (it was replaced with a warning)
echo '{"hidden_size": 64, "num_hidden_layers": 2}' > "$work/config.json"
expect 2 "config.json is not a tuning-records file" -- "$orthojit" tune --shape 8x16 --budget 1 --out "$work/config.json"
if [[ $(cat "$work/config.json") != '{"hidden_size": 64, "num_hidden_layers": 2}' ]]; then echo "FAIL: tune --out replaced a model config"; failures=$((failures + 1)); fi
expect 2 "the records path is empty" -- "$orthojit" tune --shape 8x16 --budget 1 --out ""
expect 2 "unknown ISA 'avx1024'" -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/y.npy" --backend cpu --isa avx1024
[[ -s "$work/y.npy" ]] && echo "ok: output written" || { echo "FAIL: no output file"; failures=$((failures + 1)); }
expect 0 "gram: requested" -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/y.npy" --strategy gram --verbose
expect 0 "no tuning record; heuristic" -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/y.npy" --verbose
# run's default backend is auto (cpu for bf16 storage: where the tuning records' winners run), and
# --verbose names the backend that ran, not "auto" (it once ran the f64 interpreter by default)
expect 0 "backend cpu," -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/y.npy" --verbose
expect 2 "cannot open for reading" -- "$orthojit" run --program jordan_ns5 --input "$work/missing.npy" --output "$work/z.npy"
expect 2 "has 1 dimensions" -- "$orthojit" run --program jordan_ns5 --input "$work/vector.npy" --output "$work/z.npy"
expect 2 "element type '<i4' is not supported" -- "$orthojit" run --program jordan_ns5 --input "$work/ints.npy" --output "$work/z.npy"
expect 2 "backend 'tpu' is not available in this build; available: ref, cpu" -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/z.npy" --backend tpu
expect 2 "--variant is an option of --backend cuda" -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/z.npy" --variant fused-small
# Without a usable CUDA driver (CI, this development machine), --backend cuda says why and exits 2.
if "$orthojit" info | grep -q "^cuda: *unavailable"; then
  expect 2 "--backend cuda: " -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/z.npy" --backend cuda
  expect 2 "--backend cuda: " -- "$orthojit" bench --program jordan_ns5 --shape 64x256 --backend cuda
  expect 2 "--backend cuda: " -- "$orthojit" tune --shape 64x256 --backend cuda
  [[ -e "$work/z.npy" ]] && { echo "FAIL: a failed cuda run left an output file"; failures=$((failures + 1)); }
fi
# The CUDA backend's code needs no GPU: generated CUDA C++ with ptxas's report, and PTX.
if "$orthojit" info | grep -q "^nvrtc:"; then
  expect 0 "0 B spill stores" -- "$orthojit" compile --program jordan_ns5 --shape 64x256x2 --backend cuda --emit cuda --arch sm_80
  expect 0 "triangular" -- "$orthojit" compile --program polar_express5 --shape 256x1024 --backend cuda --emit cuda --strategy gram
  expect 0 "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" -- "$orthojit" compile --program jordan_ns5 --shape 64x256 --backend cuda --emit ptx
  expect 0 ".target sm_80" -- "$orthojit" compile --program jordan_ns5 --shape 64x256 --backend cuda --emit ptx --arch sm_80
  expect 0 "1 launch, " -- "$orthojit" compile --program jordan_ns5 --shape 100x300x4 --backend cuda --emit cuda --variant fused-small
  expect 0 "tile 32x32x32/1x2" -- "$orthojit" compile --program jordan_ns5 --shape 64x256 --backend cuda --emit cuda --variant "generated 32x32x32/1x2"
  expect 2 "add --precision bf16 or f16" -- "$orthojit" compile --program jordan_ns5_f32 --shape 64x256 --backend cuda --emit cuda
  expect 2 "unknown CUDA variant 'fast'" -- "$orthojit" compile --program jordan_ns5 --shape 64x256 --backend cuda --emit cuda --variant fast
  expect 2 "more than the 128" -- "$orthojit" compile --program jordan_ns5 --shape 512x1024 --backend cuda --emit cuda --variant fused-small
  expect 2 "--arch 'sm_70' is not a target" -- "$orthojit" compile --program jordan_ns5 --shape 64x256 --backend cuda --emit ptx --arch sm_70
  expect 2 "--arch and --variant are options of --backend cuda" -- "$orthojit" compile --program jordan_ns5 --shape 64x256 --arch sm_90
fi
expect 2 "unknown precision 'f8'" -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/z.npy" --precision f8
expect 2 "unknown strategy 'fast'" -- "$orthojit" run --program jordan_ns5 --input "$work/g.npy" --output "$work/z.npy" --strategy fast
[[ ! -e "$work/z.npy" ]] && echo "ok: failed runs wrote nothing" || { echo "FAIL: a failed run left $work/z.npy"; failures=$((failures + 1)); }

# plan
expect 0 "straddling a partition boundary" -- "$orthojit" plan --model default --world 4 --stage 2
expect 0 "reduce-scatter gradients" -- "$orthojit" plan --model default --world 3 --stage 3 --mode balanced
expect 0 '"partition_elements"' -- "$orthojit" plan --model default --world 2 --stage 1 --json
expect 2 "--stage must be 1, 2 or 3" -- "$orthojit" plan --model default --world 2 --stage 4
expect 2 "unknown --mode 'fastest'" -- "$orthojit" plan --model default --world 2 --stage 1 --mode fastest
expect 2 "missing required option --world" -- "$orthojit" plan --model default --stage 1
expect 0 "plot: $work/plan.png" -- "$orthojit" plan --model default --world 4 --stage 2 --plot "$work/plan.png"
# an extension matplotlib cannot write: refused before the work (a traceback after it before)
expect 2 "plan.txt has no image extension matplotlib writes" -- "$orthojit" plan --model default --world 4 --stage 2 --plot "$work/plan.txt"
expect 2 "invalid --seed '-1'; expected a whole number from 0 to 18446744073709551615" -- "$orthojit" demo --seed -1
expect 2 "invalid --seed '1.5'" -- "$orthojit" demo --seed 1.5
expect 2 "invalid --seed '99999999999999999999'" -- "$orthojit" demo --seed 99999999999999999999
[[ -s "$work/plan.png" ]] || { echo "FAIL: plan --plot wrote no image"; failures=$((failures + 1)); }
# The chart's path is one argument, whatever it holds (it once went through a shell: a quote broke
# it, and '; cmd' ran cmd), and a chart that cannot be drawn is refused before the work it shows.
expect 0 "plot: $work/it's; touch INJECTED.png" -- "$orthojit" plan --model default --world 2 --stage 1 --plot "$work/it's; touch INJECTED.png"
[[ -s "$work/it's; touch INJECTED.png" && ! -e INJECTED.png ]] || { echo "FAIL: plan --plot with quotes in the path"; failures=$((failures + 1)); }
expect 2 "the folder $work/missing of $work/missing/p.png does not exist" -- "$orthojit" bench --shape 32x128 --compare --budget 60 --plot "$work/missing/p.png"

# tune and bench --model (small shapes and budgets; records in the work directory)
records="$work/records.json"
expect 0 "usage: orthojit tune" -- "$orthojit" tune --help
expect 0 "winner" -- "$orthojit" tune --shape 24x96x2 --program jordan_ns5_f32 --budget 1 --out "$records"
expect 0 "(record)" -- "$orthojit" tune --shape 96x24x2 --program jordan_ns5_f32 --budget 1 --out "$records"   # the transpose shares it
# records written with --out are read by run/bench/the runtime only through ORTHOJIT_TUNING_FILE: said
expect 0 "read these records only with ORTHOJIT_TUNING_FILE=$records" -- "$orthojit" tune --shape 96x24x2 --program jordan_ns5_f32 --budget 1 --out "$records"
expect 0 "1 shape(s) taken from earlier records without timing" -- "$orthojit" tune --shape 96x24x2 --program jordan_ns5_f32 --budget 1 --out "$records"
expect 0 "\"winner\"" -- cat "$records"
# The blocking override for experiments: three or four fields, each checked.
expect 0 "mc=96 kc=128 nc=256" -- env ORTHOJIT_CPU_BLOCKING=96,128,256,0 "$orthojit" bench --program jordan_ns5 --shape 24x96x2 --repeat 1
expect 2 "is not MC,KC,NC[,DIRECT]" -- env ORTHOJIT_CPU_BLOCKING=96,128,256,-1 "$orthojit" bench --program jordan_ns5 --shape 24x96x2 --repeat 1
expect 2 "is not MC,KC,NC[,DIRECT]" -- env ORTHOJIT_CPU_BLOCKING=96,128 "$orthojit" bench --program jordan_ns5 --shape 24x96x2 --repeat 1
expect 0 "tuned: " -- env ORTHOJIT_TUNING_FILE="$records" "$orthojit" bench --program jordan_ns5_f32 --shape 24x96x2 --repeat 1
expect 0 "1 entries, fingerprint matches" -- env ORTHOJIT_TUNING_FILE="$records" "$orthojit" info
printf '{"schema_version": 1, "entries": {' > "$work/broken.json"
expect 0 "unusable" -- env ORTHOJIT_TUNING_FILE="$work/broken.json" "$orthojit" info
expect 2 "--budget must be a positive number" -- "$orthojit" tune --shape 8x32 --budget -3
# tune --restarts (the gram restart search, docs/autotuning.md "Gram restarts")
expect 0 "(auto): max|Q|" -- "$orthojit" tune --shape 16x64 --program deepseek_v4 --precision f16 --restarts auto --budget 1 --out "$work/restarts.json"
expect 0 '"gram_restarts_source": "auto"' -- cat "$work/restarts.json"
expect 2 "--restarts: invalid restarts '7': restart position 7 is outside 1..4: the program has 5 steps" -- "$orthojit" tune --shape 8x32 --restarts 7
expect 2 "'x' is not a step index; expected auto, none, program, or comma-separated step indices in 1..4" -- "$orthojit" tune --shape 8x32 --restarts 2,x
expect 2 "restart position 2 is given twice" -- "$orthojit" tune --shape 8x32 --restarts 2,2
expect 2 "exactly one of --model" -- "$orthojit" tune --budget 3
expect 2 "unknown backend 'gpu'; expected cpu or cuda" -- "$orthojit" tune --shape 8x32 --backend gpu
echo '{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}' > "$work/partial.json"
expect 2 'no "vocab_size"' -- "$orthojit" tune --model "$work/partial.json"
expect 2 "cannot read the model configuration" -- "$orthojit" tune --model "$work/missing.json"
expect 0 "AdamW, not tuned" -- "$orthojit" tune --model "$ORTHOJIT_SOURCE_DIR/examples/models/gpt2-small.json" --budget 0.5 --out "$work/gpt2.json" --program jordan_ns5_f32
expect 0 "gram/std" -- "$orthojit" bench --shape 32x128 --compare --budget 1
expect 0 "\"vendor_speedup\"" -- "$orthojit" bench --model default --budget 2 --json

# memory: optimizer-state bytes, AdamW alone vs Muon + AdamW
models="$ORTHOJIT_SOURCE_DIR/examples/models"
expect 0 "usage: orthojit memory" -- "$orthojit" memory --help
expect 0 "124,439,808 parameters; embeddings tied" -- "$orthojit" memory --model "$models/gpt2-small.json"
expect 0 "34.1% less optimizer state" -- "$orthojit" memory --model "$models/gpt2-small.json" --per-head
expect 0 "lm_head" -- "$orthojit" memory --model "$models/gpt2-small.json" --tied-embeddings no
expect 0 "43.5% less optimizer state" -- "$orthojit" memory --model "$models/llama-3-8b.json"
expect 0 '"reduction_percent"' -- "$orthojit" memory --model "$models/qwen2.5-3b.json" --json
expect 0 "q, k, v biases (Qwen2, per layer)" -- "$orthojit" memory --model "$models/qwen2.5-3b.json"
expect 0 "Muon: hidden matrices" -- "$orthojit" memory --model default
# A deeply nested document is refused before it is parsed: 100000 nested objects overflowed the
# stack when the memory accounting copied the parsed document (rc 139).
/usr/bin/python3 -c 'print("{\"a\":" * 100000 + "1" + "}" * 100000)' > "$work/deep.json"
expect 2 "nested more than 64 levels deep (at byte 320)" -- "$orthojit" memory --model "$work/deep.json"
expect 2 "nested more than 64 levels deep" -- "$orthojit" plan --model "$work/deep.json" --world 2 --stage 1
# Fields of the wrong type: named, exit 2 (an "internal error", exit 1; "yes" was read as untied)
echo '{"model_type": 5, "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 100}' > "$work/typed.json"
expect 2 "typed.json: a field has the wrong type" -- "$orthojit" memory --model "$work/typed.json"
echo '{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 100, "tie_word_embeddings": "yes"}' > "$work/tied.json"
expect 2 '"tie_word_embeddings" must be true or false, got "yes"' -- "$orthojit" memory --model "$work/tied.json"
if "$orthojit" memory --model "$models/llama-3-8b.json" --json | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
s = r["optimizer_state_bytes"]
assert r["parameters"]["total"] == 8030261248, r["parameters"]
assert s["adamw_only"]["total"] == 8 * 8030261248
assert s["hybrid"]["total"] == 4 * r["parameters"]["muon_matrices"] + 8 * (r["parameters"]["adamw_matrices"] + r["parameters"]["one_dimensional"])
assert 40 < r["reduction_percent"] < 50
'; then echo "ok: memory --json is valid JSON with consistent totals"; else echo "FAIL: memory --json"; failures=$((failures + 1)); fi
expect 2 "invalid --tied-embeddings 'maybe'; expected auto, yes or no" -- "$orthojit" memory --model "$models/gpt2-small.json" --tied-embeddings maybe
expect 2 "missing required option --model" -- "$orthojit" memory
expect 2 "cannot read the model configuration" -- "$orthojit" memory --model "$work/missing.json"
expect 2 'no "vocab_size"' -- "$orthojit" memory --model "$work/partial.json"
echo '{"hidden_size": ' > "$work/truncated.json"
expect 2 "is not valid JSON" -- "$orthojit" memory --model "$work/truncated.json"

# convert-state (its conversion is tested in preset_fidelity_test): usage errors name what is wrong
expect 0 "usage: orthojit convert-state" -- "$orthojit" convert-state --help
expect 2 "--momentum-kind 'lerp2' is not ema or sum" -- "$orthojit" convert-state --input "$work/s.safetensors" --output "$work/t.safetensors" --momentum-kind lerp2 --momentum 0.95
expect 2 "--momentum '1.5' is not a number in [0, 1)" -- "$orthojit" convert-state --input "$work/s.safetensors" --output "$work/t.safetensors" --momentum-kind ema --momentum 1.5
expect 2 "s.safetensors" -- "$orthojit" convert-state --input "$work/s.safetensors" --output "$work/t.safetensors" --momentum-kind ema --momentum 0.95
expect 2 "missing required option --momentum" -- "$orthojit" convert-state --input "$work/s.safetensors" --output "$work/t.safetensors" --momentum-kind ema

# inspect-state: state files written here by an independent writer (the safetensors layout and
# the orthojit.sha256 of the data, from the Python standard library).
python3 - "$work" <<'PY'
import hashlib, json, struct, sys
work = sys.argv[1]
def write(name, tensors, metadata, checksum=True, flip=False):
    data, header, at = b"", {}, 0
    for tensor, dtype, shape, payload in tensors:
        header[tensor] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(payload)]}
        data += payload
        at += len(payload)
    meta = dict(metadata)
    if checksum:
        meta["orthojit.sha256"] = hashlib.sha256(data).hexdigest()
    header["__metadata__"] = meta
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    if flip:
        data = data[:-1] + bytes([data[-1] ^ 1])
    with open(f"{work}/{name}", "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text + data)
f32 = lambda n: struct.pack(f"<{n}f", *[0.25 * i for i in range(n)])
meta = {"orthojit.format": "hybrid-optimizer-state/2", "orthojit.preset": "keller", "orthojit.steps_taken": "9", "orthojit.momentum_kind": "ema",
        "orthojit.momentum": "0.95", "orthojit.muon_variant": "muon",
        "orthojit.python.param_groups": json.dumps([{"name": "muon-params", "lr": 0.02, "params": [0]}])}
state = [("w.momentum_buffer", "F32", [2, 3], f32(6)), ("b.exp_avg", "F32", [4], f32(4)), ("b.exp_avg_sq", "F32", [4], f32(4)),
         ("b.step", "I64", [], struct.pack("<q", 7)), ("c.exp_avg", "F32", [5], f32(5)), ("c.exp_avg_sq", "F32", [5], f32(5)),
         ("c.step", "I64", [], struct.pack("<q", 9))]
write("state.safetensors", state, meta)
write("corrupt.safetensors", state, meta, flip=True)
write("old.safetensors", state, meta, checksum=False)
write("weights.safetensors", [("embed.weight", "F32", [2, 2], f32(4))], {})
write("foreign.safetensors", state + [("w.fisher", "F32", [2, 3], f32(6))], meta)
# A state no optimizer could load, with a correct checksum: inspect-state said "verified", exit 0.
bad = dict(meta, **{"orthojit.format": "hybrid-optimizer-state/9", "orthojit.momentum_kind": "bogus", "orthojit.momentum": "nan",
                    "orthojit.steps_taken": "abc"})
write("unloadable.safetensors", [("w.momentum_buffer", "F16", [2, 3], f32(3)), ("b.step", "F64", [], struct.pack("<d", 7.0)),
                                 ("c.step", "I64", [], struct.pack("<q", -4))], bad)
PY
expect 2 "unloadable.safetensors is not an optimizer state orthojit can load:" -- "$orthojit" inspect-state --input "$work/unloadable.safetensors"
for problem in "orthojit.format 'hybrid-optimizer-state/9' is not one this build reads" "orthojit.momentum_kind 'bogus' is not ema or sum" \
               "orthojit.momentum 'nan' is not a number in [0, 1)" "orthojit.steps_taken 'abc' is not a whole number" \
               "'w.momentum_buffer' is F16, expected F32" "'b.step' is F64 of 0 dimension(s), expected one I64" "'c.step' is -4, a negative step count"; do
  expect 2 "$problem" -- "$orthojit" inspect-state --input "$work/unloadable.safetensors"
done
expect 0 "usage: orthojit inspect-state" -- "$orthojit" inspect-state --help
expect 0 "Muon parameters: 1 (6 elements)" -- "$orthojit" inspect-state --input "$work/state.safetensors"
expect 0 "AdamW parameters: 2 (9 elements), steps 7 to 9" -- "$orthojit" inspect-state --input "$work/state.safetensors"
expect 0 "preset keller; 9 steps taken; momentum: ema form, beta 0.95" -- "$orthojit" inspect-state --input "$work/state.safetensors"
expect 0 "param_groups: muon-params (lr 0.02)" -- "$orthojit" inspect-state --input "$work/state.safetensors"
expect 0 ", verified" -- "$orthojit" inspect-state --input "$work/state.safetensors"
expect 0 "    c.step  I64  ()" -- "$orthojit" inspect-state --input "$work/state.safetensors" --tensors
expect 2 "the data is corrupt" -- "$orthojit" inspect-state --input "$work/corrupt.safetensors"
expect 0 "not verified (--no-verify)" -- "$orthojit" inspect-state --input "$work/corrupt.safetensors" --no-verify
expect 0 "checksum: none recorded" -- "$orthojit" inspect-state --input "$work/old.safetensors"
expect 2 "not an orthojit optimizer state (no metadata orthojit.format; it holds 1 tensor(s), the first 'embed.weight')" -- "$orthojit" inspect-state --input "$work/weights.safetensors"
expect 0 "1 tensor(s) of neither kind, e.g. 'w.fisher'" -- "$orthojit" inspect-state --input "$work/foreign.safetensors"
expect 2 "cannot open" -- "$orthojit" inspect-state --input "$work/absent.safetensors"
expect 2 "missing required option --input" -- "$orthojit" inspect-state
# Progress: a line per finished phase on stderr with --progress (the 112 data bytes above, hashed
# in one pass), nothing when stderr is not a terminal and --progress is not given.
expect 0 "verifying $work/state.safetensors: checksum 112 bytes in " -- "$orthojit" inspect-state --input "$work/state.safetensors" --progress
expect 0 "converting $work/state.safetensors: read 112 bytes in " -- "$orthojit" convert-state --input "$work/state.safetensors" --output "$work/sum.safetensors" --momentum-kind sum --momentum 0.95 --progress
expect 0 "converting $work/state.safetensors: sync in " -- "$orthojit" convert-state --input "$work/state.safetensors" --output "$work/sum.safetensors" --momentum-kind sum --momentum 0.95 --progress
# The state records the beta its buffers were made with: another one is refused (the buffers were
# scaled by a wrong factor, and the output recorded the wrong beta); the input as --output too.
expect 2 "records the momentum 0.95 (its buffers were made with it), but --momentum 0.5 was given; convert with --momentum 0.95" -- "$orthojit" convert-state --input "$work/state.safetensors" --output "$work/half.safetensors" --momentum-kind sum --momentum 0.5
if [[ -e $work/half.safetensors ]]; then echo "FAIL: a refused conversion wrote its output"; failures=$((failures + 1)); fi
expect 2 "is the input file" -- "$orthojit" convert-state --input "$work/state.safetensors" --output "$work/state.safetensors" --momentum-kind sum --momentum 0.95
if "$orthojit" inspect-state --input "$work/state.safetensors" 2>&1 >/dev/null | grep -q verifying; then
  echo "FAIL: inspect-state reported progress to a stderr that is not a terminal, without --progress"; failures=$((failures + 1))
else echo "ok: inspect-state is quiet in a log without --progress"; fi
if "$orthojit" inspect-state --input "$work/state.safetensors" --json | python3 -c '
import json, sys
r = json.load(sys.stdin)
assert r["checksum_verified"] is True and r["adam_steps"] == [7, 9], r
assert [m["name"] for m in r["muon"]] == ["w"] and [a["elements"] for a in r["adam"]] == [4, 5], r
assert r["tensors"][0] == {"name": "w.momentum_buffer", "dtype": "F32", "shape": [2, 3]}, r["tensors"][0]
'; then echo "ok: inspect-state --json"; else echo "FAIL: inspect-state --json"; failures=$((failures + 1)); fi

echo "$failures failure(s)"
[[ $failures -eq 0 ]]

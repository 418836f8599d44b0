#!/bin/bash
# Every GPU measurement of issue 41 (~12 minutes on one H200: more than one 10-minute device call), from the
# repository root:
#
#     bash benchmarks/gpu_issue41.sh            # writes $OUT (default gpu-issue41/) : issue41.md, log.txt, tables
#     ONLY=sparse,train,test bash benchmarks/gpu_issue41.sh    # about 6 minutes (H200, 2026-11-28)
#     ONLY=mfu,geometry,eager bash benchmarks/gpu_issue41.sh   # about 6 minutes
#     ONLY=screen bash benchmarks/gpu_issue41.sh               # issue 51: the interventions screen, 8B shape
#
# 1. sparse attention: byte-sparse-8h through FlexAttention vs flash causal SDPA at L 4096, 16384, 65536,
#    forward and backward separately, peak memory, the kernel options used; at L 16384 also the variants the
#    option table was chosen from (default tiles, 64 x 64, 128 x 64, the arithmetic mask_mod; AUTOTUNE=1: autotune);
# 2. sparse vs dense training at seq 8192 (clm, d 768, 8 heads, rotary), each as attnscope train runs it
#    (SPARSE_SEQ=8192,16384,32768: one table per length, the same tokens per step: from which length a pattern pays);
# 3. trainer MFU, bert-base shape, mlm and clm, compiled (the CUDA default) and eager, beside Hugging Face;
# 4. the geometry-logging share of training time at --score-every 100;
# 5. pytest -m gpu (training, sparse, geometry, interventions); last, if time is left, the eager trainer MFU;
# 6. (issue 51) the interventions screen of a Llama-3-8B-shaped model (random bf16 weights): every head x
#    (sym, anti, ablate), then the exact pass of the 11 largest per intervention (about 32 heads), peak memory.
# ONLY picks steps by key: sparse, train, mfu, geometry, test, eager, screen (default all). Each step has its own time limit (T_* variables, seconds) and is skipped once the run passes T_ALL, so the
# earlier tables always come back. Exit 1 (one line on stderr naming them) when a step failed or ran past its
# limit. Packages the machine lacks: put wheels in $WHEELS (installed to a temp dir), e.g. for a Python 3.12 GPU
# machine without gguf and submitit, fetched where there is a network:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl gguf==0.19.0 submitit==1.5.4
set -u
# checked before anything runs: a typo in ONLY or a T_* limit would otherwise skip steps (or fail them) silently,
# on a device whose minutes are counted
KEYS="sparse train test mfu geometry eager screen"
ONLY=$(printf %s "${ONLY:-sparse,train,test,mfu,geometry,eager,screen}" | tr -d ' ')
set -f  # ONLY=* is a bad key, not this folder's file names
for k in ${ONLY//,/ }; do
  case " $KEYS " in *" $k "*) ;; *) echo "gpu_issue41.sh: ONLY takes a comma list of ${KEYS// /, }; not '$k'" >&2; exit 2 ;; esac
done
set +f
[ -n "${ONLY//,/}" ] || { echo "gpu_issue41.sh: ONLY names no step (take some of ${KEYS// /, })" >&2; exit 2; }
for v in T_ALL T_SPARSE T_TRAIN_SPARSE T_MFU T_GEOMETRY T_TEST T_MFU_EAGER T_SCREEN; do
  case ${!v-} in ""|*[!0-9]*) [ -z "${!v-}" ] || { echo "gpu_issue41.sh: $v must be whole seconds, not '${!v}'" >&2; exit 2; } ;; esac
done
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY=${PYTHON:-python3}
OUTD=${OUT:-gpu-issue41}
mkdir -p "$OUTD"
SITE=$(mktemp -d)
trap 'rm -rf "$SITE"' EXIT  # the wheels' temporary install, never anything of the user's
for w in ${WHEELS:-/nonexistent}/*.whl; do
  [ -e "$w" ] && { $PY -m pip install -q --no-index --no-deps --target "$SITE" "$w" >/dev/null 2>&1 || echo "wheel failed: $w"; }
done
export PYTHONPATH=$SITE:$PWD/src
T_ALL=${T_ALL:-500}
ONLY=",$ONLY,"
step() {  # step KEY NAME LIMIT COMMAND...: run when KEY is in ONLY and the run is not past T_ALL; output to the log
  local key=$1 name=$2 limit=$3; shift 3
  case $ONLY in *",$key,"*) ;; *) return ;; esac
  if [ $SECONDS -ge $T_ALL ]; then echo "== $name: skipped (run at ${SECONDS}s, limit ${T_ALL}s)"; return; fi
  echo "== $name ($(date +%T), ${SECONDS}s)"
  timeout "$limit" "$@" 2>&1 | grep -v -E "^ *warnings\.warn|Warning: |DEBUG" | tail -40
  echo "-- $name: exit ${PIPESTATUS[0]} after ${SECONDS}s"
}
{
echo "== env"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2
$PY -c "import torch, attnscope; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'attnscope', attnscope.__file__)"
step sparse "sparse attention" "${T_SPARSE:-120}" $PY benchmarks/sparse_attention_gpu.py --length 4096 --length 16384 \
  --length 65536 --sweep 16384 ${AUTOTUNE:+--sweep-autotune} --gather-max 4096 --repeats 10 \
  --md "$OUTD/sparse_attention.md"
step train "sparse vs dense training" "${T_TRAIN_SPARSE:-150}" $PY benchmarks/training_gpu.py --only sparse --steps 6 \
  --warmup 3 --sparse-seq "${SPARSE_SEQ:-8192}" --md "$OUTD/training_sparse.md"
step mfu "trainer MFU (compiled)" "${T_MFU:-160}" $PY benchmarks/training_gpu.py --only mfu --steps 8 --warmup 3 \
  --md "$OUTD/training_mfu.md"
step geometry "geometry logging" "${T_GEOMETRY:-130}" $PY benchmarks/training_gpu.py --only geometry --md "$OUTD/geometry.md"
step test "pytest -m gpu" "${T_TEST:-100}" $PY -m pytest -q -m gpu -p no:cacheprovider tests/training tests/sparse \
  tests/geometry tests/interventions
step eager "trainer MFU (eager)" "${T_MFU_EAGER:-80}" $PY benchmarks/training_gpu.py --only mfu --no-compile --steps 8 \
  --warmup 3 --md "$OUTD/training_mfu_eager.md"
step screen "interventions screen, llama-3-8b shape" "${T_SCREEN:-300}" $PY benchmarks/interventions_screen.py \
  --shape llama-3-8b --device cuda --exact 11 --append "$OUTD/screen.md"
echo "== done at ${SECONDS}s"
} 2>&1 | tee "$OUTD/log.txt"
{
echo "# Issue 41 measurements ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(date -u +%F))"
echo
for f in sparse_attention training_sparse training_mfu training_mfu_eager geometry screen; do
  [ -f "$OUTD/$f.md" ] && { cat "$OUTD/$f.md"; echo; } || echo "($f: not measured in this run; see log.txt)"
done
echo "## pytest -m gpu"
grep -E "passed|failed|error|skipped" "$OUTD/log.txt" | tail -1
} > "$OUTD/issue41.md"
echo "wrote $OUTD/issue41.md"
failed=$(grep -E "^-- .*: exit [1-9][0-9]* after" "$OUTD/log.txt" | sed -E 's/^-- (.*): exit ([0-9]+) after.*/\1 (exit \2)/' | paste -sd, -)
if [ -n "$failed" ]; then  # the tables that came back are kept; the exit status says that some step did not finish
  echo "gpu_issue41.sh: failed or cut short: $failed" >&2
  exit 1
fi

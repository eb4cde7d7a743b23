#!/usr/bin/env bash
# GPU check (issue 14): NanoGPT vs GPT2LMHeadModel / LlamaForCausalLM and the translator vs MarianMTModel on one CUDA
# GPU, under 8 minutes on an H200; writes gpu_check.md (the table, the two open targets marked met / not met),
# gpu_check.json (figures, ratios, section status) and gpu_check.log. Details: bench/gpu_check.py's docstring.
#
#   bash bench/gpu_check.sh                    # GPU run; results in bench/results/gpu_check/ (git-ignored)
#   bash bench/gpu_check.sh --smoke            # CPU, tiny sizes, the same code path, about a minute
#   bash bench/gpu_check.sh --out DIR          # another output folder; with $OUT set, files are copied there too
#   bash bench/gpu_check.sh --fetch-wheels     # HERE, before a device run: download the transformers wheel to .whl/ (git-ignored)
#   other flags go to gpu_check.py (--budget SECONDS, --sections a,b, --threads N)
#
# Environment: PYTHON (default python3), GPU_CHECK_TIMEOUT (hard limit in seconds for the whole run, default 470).
# nanoformer is imported from this checkout through a temporary shim folder on PYTHONPATH: nothing is installed.
#
# On the lent GPU machine (no network there): its image has torch and transformers, but its transformers (5.17 when
# last read) is older than nanoformer's pin (>=5.24), so carry the wheel. Once, here, in the repository root:
#   bash bench/gpu_check.sh --fetch-wheels
# then one device call (the script installs .whl/*.whl into a temporary folder first):
#   run(command="bash bench/gpu_check.sh", carry=[".whl"], timeout_s=540)
# The table and JSON come back from $OUT; the end of the output shows the table too.
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
OUT_DIR="$REPO/bench/results/gpu_check"
SMOKE=0
FETCH=0
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) SMOKE=1; ARGS+=("$1") ;;
    --out) [ $# -ge 2 ] || { echo "gpu_check: --out needs a folder" >&2; exit 2; }; OUT_DIR="$2"; shift ;;
    --out=*) OUT_DIR="${1#--out=}" ;;
    --fetch-wheels) FETCH=1 ;;
    -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) ARGS+=("$1") ;;
  esac
  shift
done

if [ "$FETCH" = 1 ]; then
  version="$("$PY" -c 'import transformers; print(transformers.__version__)')" || {
    echo "gpu_check: $PY cannot import transformers (use the project's venv: PYTHON=.venv/bin/python)" >&2; exit 2; }
  mkdir -p "$REPO/.whl"
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$REPO/.whl" "transformers==$version" || { echo "gpu_check: pip download failed" >&2; exit 2; }
  ls -la "$REPO/.whl"
  echo "gpu_check: wheels in .whl/ (git-ignored); device call: run(command=\"bash bench/gpu_check.sh\", carry=[\".whl\"], timeout_s=540)"
  exit 0
fi

"$PY" -c 'import torch' 2>/dev/null || { echo "gpu_check: $PY cannot import torch (set PYTHON=...)" >&2; exit 2; }
if [ "$SMOKE" = 0 ] && ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_check: no CUDA device is visible to torch ($PY); run with --smoke for the CPU check" >&2
  exit 2
fi

TMP="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
# Carried wheels (see the header) shadow the image's packages of the same name.
if compgen -G "$REPO/.whl/*.whl" >/dev/null; then
  echo "gpu_check: installing carried wheels: $(cd "$REPO/.whl" && ls *.whl | tr '\n' ' ')"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$TMP/site" \
    "$REPO"/.whl/*.whl || { echo "gpu_check: installing the wheels in .whl/ failed" >&2; exit 3; }
  export PYTHONPATH="$TMP/site${PYTHONPATH:+:$PYTHONPATH}"
fi
# nanoformer's folders as the namespace package `nanoformer`, straight from this checkout.
mkdir -p "$TMP/shim/nanoformer"
for pkg in modeling tokenization training hub; do ln -s "$REPO/$pkg" "$TMP/shim/nanoformer/$pkg"; done
export PYTHONPATH="$TMP/shim${PYTHONPATH:+:$PYTHONPATH}"

mkdir -p "$OUT_DIR" || { echo "gpu_check: cannot create $OUT_DIR" >&2; exit 2; }
LOGS=("$OUT_DIR/gpu_check.log")
if [ -n "${OUT:-}" ] && [ -d "$OUT" ] && [ "$(cd "$OUT" && pwd)" != "$(cd "$OUT_DIR" && pwd)" ]; then
  LOGS+=("$OUT/gpu_check.log")
fi
command -v nvidia-smi >/dev/null && [ "$SMOKE" = 0 ] &&
  nvidia-smi --query-gpu=name,memory.used,memory.total,utilization.gpu,clocks.sm --format=csv 2>&1 | tee "${LOGS[@]}"

PYTHONUNBUFFERED=1 timeout -k 15 "${GPU_CHECK_TIMEOUT:-470}" \
  "$PY" "$REPO/bench/gpu_check.py" --out "$OUT_DIR" "${ARGS[@]}" 2>&1 | tee -a "${LOGS[@]}"
rc=${PIPESTATUS[0]}
[ "$rc" = 124 ] && echo "gpu_check: killed at GPU_CHECK_TIMEOUT=${GPU_CHECK_TIMEOUT:-470}s; partial results in $OUT_DIR" >&2
exit "$rc"

# Sourced by scripts/setup.sh and scripts/lock.sh: install_cpu_torch PYTHON installs requirements/torch.txt's
# torch into PYTHON's environment as a CPU build, unless a torch is there already (a GPU user's is kept).
#  * pip's own configuration may already offer the CPU build (a local wheel or mirror): then plain pip;
#  * else on Linux, PyTorch's CPU wheel index (PyPI's Linux wheels are CUDA builds of several GB);
#  * else (macOS, Windows) PyPI, whose wheels there are CPU builds.
TORCH_INDEX_CPU=${TORCH_INDEX_CPU:-https://download.pytorch.org/whl/cpu}

install_cpu_torch() {
  local py=$1 spec url
  if "$py" -c "import torch" 2>/dev/null; then
    return 0
  fi
  spec=$(grep -v '^#' requirements/torch.txt | head -n 1)
  # the file pip would take, without installing it: a '+cpu' build is what we want
  url=$("$py" -m pip install --dry-run --no-deps --ignore-installed --quiet --report - "$spec" 2>/dev/null \
        | "$py" -c 'import json, sys; print(json.load(sys.stdin)["install"][0]["download_info"]["url"])' 2>/dev/null || true)
  case "$url" in
    *+cpu*|*%2Bcpu*)
      echo "setup: installing $spec (CPU build, from pip's configured sources)" >&2
      "$py" -m pip install -q "$spec" ;;
    *)
      if [ "$(uname -s)" = Linux ]; then
        echo "setup: installing $spec (CPU build, from $TORCH_INDEX_CPU)" >&2
        "$py" -m pip install -q "$spec" --index-url "$TORCH_INDEX_CPU"
      else
        echo "setup: installing $spec (PyPI's build for $(uname -s) is a CPU build)" >&2
        "$py" -m pip install -q "$spec"
      fi ;;
  esac
}

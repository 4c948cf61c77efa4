#!/usr/bin/env bash
# Builds, on the dev VM (no GPU needed: nvcc and PyPI), what kernels/bench/run_mla_flashinfer_h200.sh
# carries to the GPU machine, which has neither FlashInfer nor a network:
#   OUT/fi_pkg.tar.xz     FlashInfer's Python package, its __init__ trimmed to import only `jit`, the
#                         CUDA sources it does not need dropped (its MLA JIT sources kept)
#   OUT/prebuilt.tar.xz   its MLA decode JIT modules (fa3 = sm90 warpgroup MMA, fa2), bf16 q / cache /
#                         output, latent 512 + key 64, built here for sm_90a
#   OUT/apache_tvm_ffi-*.whl  FlashInfer's binding layer for the GPU machine's Python (3.12)
# Importing FlashInfer here needs torch and its CUDA libraries (about 2.5 GB of wheels, kept in
# WORK between runs). Nothing of FlashInfer goes into the repository: OUT is .dev/fi, ignored.
#   tools/kernels/pack_flashinfer_anchor.sh [OUT] [WORK]     (defaults .dev/fi, /tmp/fi-anchor)
set -euo pipefail
out=$(realpath -m "${1:-.dev/fi}")
work=$(realpath -m "${2:-/tmp/fi-anchor}")
fi_version=0.7.4 tvm_version=0.1.12 torch_version=2.11.0
mkdir -p "$out" "$work/wheels" "$work/site"
pip_dl() { python3 -m pip download -q --no-deps -d "$work/wheels" "$@"; }

# Host wheels (this Python): FlashInfer, its binding layer and torch with the CUDA 13 libraries it
# loads at import (the pins are torch 2.11.0's own), and the pure-Python pieces the import needs.
pip_dl "flashinfer-python==$fi_version" "apache-tvm-ffi==$tvm_version" "torch==$torch_version" \
  "nvidia-cublas==13.1.0.3.*" "nvidia-cuda-cupti==13.0.85.*" "nvidia-cuda-nvrtc==13.0.88.*" "nvidia-cufft==12.0.0.61.*" \
  "nvidia-cufile==1.15.1.6.*" "nvidia-curand==10.4.0.35.*" "nvidia-cusolver==12.0.4.66.*" "nvidia-cusparse==12.6.3.3.*" \
  "nvidia-nvjitlink==13.0.88.*" "nvidia-nvtx==13.0.85.*" "nvidia-cuda-runtime==13.0.96.*" "nvidia-cudnn-cu13==9.19.0.56" \
  "nvidia-cusparselt-cu13==0.8.0" "nvidia-nccl-cu13==2.28.9" "nvidia-nvshmem-cu13==3.4.5" "cuda-bindings>=13.0.3,<14" \
  cuda-pathfinder filelock typing-extensions sympy mpmath networkx fsspec jinja2 markupsafe einops ninja numpy packaging \
  requests tqdm tabulate click nvidia-ml-py
python3 -m pip install -q --no-deps --no-compile --upgrade --target "$work/site" "$work"/wheels/*.whl

# The package, trimmed: every Python / JSON / Jinja file (the import chain reaches many modules) but
# no CUDA sources except the MLA ones, which the JIT reads to write its generated sources.
rm -rf "$work/pkg" "$work/trim" && mkdir -p "$work/pkg" "$work/trim"
(cd "$work/pkg" && python3 -m zipfile -e "$work"/wheels/flashinfer_python-"$fi_version"-*.whl .)
(cd "$work/pkg" && {
  find flashinfer \( -name '*.py' -o -name '*.json' -o -name '*.jinja' \) -not -path 'flashinfer/data/*' -not -path 'flashinfer/experimental/*'
  ls flashinfer/data/csrc/batch_mla_*
  echo flashinfer/data/build_utils.py
} | tar -cf - -T - | tar -C "$work/trim" -xf -)
# Both copies import only `jit` (the full __init__ reaches CuTe DSL, cuda-tile and more, which
# neither needs): the trimmed one travels, the full one builds the modules here.
for pkg in "$work/trim" "$work/pkg"; do
  cat >"$pkg/flashinfer/__init__.py" <<'EOF'
# Trimmed for pdserve's anchor harness (kernels/bench/mla_decode_flashinfer.py): only `jit` here.
from .version import __version__ as __version__
from . import jit as jit
EOF
done
tar -C "$work/trim" -cJf "$out/fi_pkg.tar.xz" flashinfer

# The MLA decode modules, built with the full package (its CUTLASS / CCCL headers) for sm_90a.
rm -rf "$work/ws" "$work/prebuilt" && mkdir -p "$work/prebuilt"
for backend in fa3 fa2; do
  PYTHONPATH="$work/pkg:$work/site" FLASHINFER_WORKSPACE_BASE="$work/ws" FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=2 python3 - "$backend" "$work/prebuilt" <<'EOF'
import pathlib, shutil, sys, torch
from flashinfer.jit import gen_batch_mla_module
spec = gen_batch_mla_module(sys.argv[1], torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.int32, 512, 64, False)
spec.build()
dst = pathlib.Path(sys.argv[2]) / spec.name
dst.mkdir(parents=True, exist_ok=True)
shutil.copy(spec.jit_library_path, dst / spec.jit_library_path.name)
print(sys.argv[1], "->", dst)
EOF
done
tar -C "$work" -cJf "$out/prebuilt.tar.xz" prebuilt

# The binding layer for the GPU machine's Python.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 -d "$out" "apache-tvm-ffi==$tvm_version"
ls -la "$out"

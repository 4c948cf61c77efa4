# shellcheck shell=bash
# Sourced, from the checkout root, by every kernels/bench/run_*_h200.sh: the environment a
# device call needs, kept in one place so that no script can forget to keep NVLink multicast off.
#   source kernels/bench/h200_env.sh LIBDIR [SOURCE_PATH ...]
# LIBDIR: the carried shared libraries; they come first on the library path, then NCCL's wheel
# and the CUDA toolkit. SOURCE_PATH: paths the carried binaries were built under; each missing
# one becomes a link to this checkout, so tests that read tests/fixtures there find them.
# Multicast stays off in NCCL, PyTorch and NVSHMEM: on the shared H200 hosts a program using it
# can take the GPUs out of service for everyone (the device notes, KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TMPDIR=/tmp
h200_nccl_dir=$(python3 -c "import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))" 2>/dev/null)
export LD_LIBRARY_PATH="${1:?h200_env.sh: LIBDIR}${h200_nccl_dir:+:$h200_nccl_dir/lib}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
shift
for h200_src in "$@"; do
  [ -e "$h200_src" ] || { mkdir -p "$(dirname "$h200_src")" && ln -s "$PWD" "$h200_src"; }
done
unset h200_nccl_dir h200_src

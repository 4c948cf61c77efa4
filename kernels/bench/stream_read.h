// A read-only stream of contiguous bytes into shared memory (bench reference, not a kernel of the
// engine): the fastest way this tree knows to read N bytes once, so a kernel that must read them
// can be set against what reading alone costs at that size, launch and ramp included.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace pdserve::cuda::bench {

// Reads `bytes` (a multiple of 16) from `src` (16-byte aligned): two CTAs an SM, each streaming its
// contiguous share through a ring of 3 stages of 32 KiB by plain bulk copies (the copy form that
// reached 4.4-4.6 TB/s in mla_decode_bench m18). Returns the launch's error.
cudaError_t launch_stream_read(const void* src, size_t bytes, cudaStream_t stream);

}  // namespace pdserve::cuda::bench

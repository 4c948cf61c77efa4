// A read-only stream of contiguous bytes into shared memory (bench reference, not a kernel of the
// engine): the fastest way this tree knows to read N bytes once, so a kernel that must read them
// can be set against what reading alone costs at that size, launch and ramp included.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace pdserve::cuda::bench {

// How the bytes are read.
enum class StreamReadForm {
  // Two CTAs an SM, each streaming its contiguous share through a ring of 3 stages of 32 KiB by
  // plain bulk copies (the copy form that reached 4.4-4.6 TB/s in mla_decode_bench m18).
  kBulk,
  // 16-byte ld.global.nc.L1::no_allocate loads into registers, the MoE decode kernels' weight load
  // (moe_decode_device.cuh load_stream): 4 CTAs of 8 warps an SM, 4 loads in flight a thread.
  kLdg,
  // The same with the .L2::256B prefetch hint on every load.
  kLdgL2Hint,
};
const char* stream_read_form_name(StreamReadForm form);

// Reads `bytes` (a multiple of 16) from `src` (16-byte aligned) once, computing nothing (a load
// form folds what it read into a value it never stores). Returns the launch's error. pdl: launched
// as a programmatic dependent of the kernel before it, waiting for that kernel before its first
// read (a decode MoE kernel's position after the routing: its launch hidden, its reads not).
cudaError_t launch_stream_read(const void* src, size_t bytes, cudaStream_t stream, StreamReadForm form = StreamReadForm::kBulk,
                               bool pdl = false);

}  // namespace pdserve::cuda::bench

// Test-only device helper of mla_decode_test (the early rings' contract, mla_decode.h
// MlaDecodeWork::new_tokens): a kernel that lets the NEXT kernel in the stream launch at once
// (griddepcontrol.launch_dependents before anything else), sleeps, then writes cache entries and
// q, so a pdl run launched right after it starts while it still has not written them.
#include "mla_decode_test_kernels.h"

#include "common/cuda_check.h"
#include "common/pdl_bulk.cuh"

namespace pdserve::cuda::mla_decode_test {

namespace {

template <typename T>
__global__ void late_writer_kernel(T* cache, const int32_t* dst_entry, const T* src, int n, int entry, float* q, const float* q_src,
                                   int q_n, unsigned spin_ns) {
  pdl_bulk::pdl_trigger();  // the next kernel may launch now, before the writes below
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  } while (t - t0 < spin_ns);
  for (int i = threadIdx.x; i < n * entry; i += blockDim.x)
    cache[static_cast<int64_t>(dst_entry[i / entry]) * entry + i % entry] = src[i];
  for (int i = threadIdx.x; i < q_n; i += blockDim.x) q[i] = q_src[i];
}

}  // namespace

Status late_writer(float* cache, const int32_t* dst_entry, const float* src, int64_t n, int64_t entry, float* q, const float* q_src,
                   int64_t q_n, unsigned spin_ns, cudaStream_t stream) {
  late_writer_kernel<<<1, 256, 0, stream>>>(cache, dst_entry, src, static_cast<int>(n), static_cast<int>(entry), q, q_src,
                                            static_cast<int>(q_n), spin_ns);
  return cuda_status(cudaGetLastError(), "late_writer");
}

Status late_writer(uint16_t* cache, const int32_t* dst_entry, const uint16_t* src, int64_t n, int64_t entry, float* q, const float* q_src,
                   int64_t q_n, unsigned spin_ns, cudaStream_t stream) {
  late_writer_kernel<<<1, 256, 0, stream>>>(cache, dst_entry, src, static_cast<int>(n), static_cast<int>(entry), q, q_src,
                                            static_cast<int>(q_n), spin_ns);
  return cuda_status(cudaGetLastError(), "late_writer (bf16)");
}

}  // namespace pdserve::cuda::mla_decode_test

// The MoE prefill GEMM's bare wgmma main loop (docs/perf.md, "Bare wgmma loop ... (branch
// moepf4)"): kWgmma's tile shapes (two consumer warpgroups a CTA, kBlocks m64 weight blocks a
// warpgroup as the A operand, a token tile of N rows x 128 inputs as B in shared memory in the
// 128-byte swizzle, 8 k16-steps a 128-input chunk, a CTA barrier a chunk), with no global
// loads and, except in the "deq" forms, no dequantisation. It asks what rate the tensor pipe
// reaches under each issue pattern:
//   rs-w1    A from registers (a constant fragment), commit + wait_group 1 after every k-step
//            (kWgmma's pattern);
//   rs-end   the same, one commit a k-step but the only wait at the chunk's end (wait_group 0);
//   rs-g2    A constant, one commit per 2 k-steps, wait_group 1;
//   ss-w1    A from shared memory (descriptors), wait_group 1 a k-step;
//   ss-end   A from shared memory, the only wait at the chunk's end;
//   deq-g1/2/4  A dequantised from MXFP4 words held in registers (kWgmma's dequant_half on
//            every k-step, no loads), one commit per 1 / 2 / 4 k-steps, wait_group 1.
// One CTA an SM, grid = the SM count (a full-GPU run), CUDA events, median of 5 after a warm-up.
// TFLOP/s against the 790 TFLOP/s the MoE prefill figures use as the peak. A benchmark, not a test.
//   wgmma_loop_bench [chunks]   (128-input chunks per CTA, default 1000)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "moe/moe_prefill_device.cuh"
#include "moe/moe_prefill_wgmma.cuh"
#include "moe/moe_prefill_wgmma_ss.cuh"

namespace pdserve::cuda::moe_prefill_detail {
namespace {

constexpr int kThreads = 256;
constexpr int kSmemBytes = 160 * 1024;  // also keeps one CTA an SM

__device__ __forceinline__ uint32_t mix(uint32_t x) {
  x ^= x >> 16, x *= 0x7FEB352Du, x ^= x >> 15, x *= 0x846CA68Bu, x ^= x >> 16;
  return x;
}
// Two bf16 in (-1, 1) (exponent 126 or below), from a hash.
__device__ __forceinline__ uint32_t rand_bf16x2(uint32_t i) {
  const uint32_t h = mix(i * 2654435761u + 12345u);
  return (h & 0x807F807Fu) | 0x3E003E00u;
}

template <bool kSs, bool kDeq, int kG, bool kWaitEnd, int kBlocks, int kN>
__global__ void __launch_bounds__(kThreads, 1) loop_kernel(int chunks, float* out) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) & 1023)) & 1023);
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  constexpr int kHalf = kN * 128;         // 64 inputs x N tokens
  constexpr int kABytes = 2 * 64 * 128;   // one m64 block x 128 inputs
  constexpr int kUsed = 2 * kHalf + 2 * kBlocks * kABytes;
  static_assert(kUsed + 1024 <= kSmemBytes, "shared memory");
  const int tid = threadIdx.x, wg = tid >> 7;
  for (int i = tid; i < kUsed / 4; i += kThreads) reinterpret_cast<uint32_t*>(smem)[i] = rand_bf16x2(i + 7u * blockIdx.x);
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  const uint32_t b_base = base, a_base = base + 2 * kHalf + wg * kBlocks * kABytes;

  float acc[kBlocks][kN / 2];
#pragma unroll
  for (int b = 0; b < kBlocks; ++b)
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) acc[b][i] = 0.0f;
  uint32_t fc[kBlocks][4];  // the constant A fragments
#pragma unroll
  for (int b = 0; b < kBlocks; ++b)
#pragma unroll
    for (int j = 0; j < 4; ++j) fc[b][j] = rand_bf16x2(tid * 16u + b * 4u + j);
  constexpr int kQ = 2 * kBlocks;  // packed quads a chunk, as kWgmma holds them
  uint4 q[kQ];
  uint32_t sc[kQ];
#pragma unroll
  for (int j = 0; j < kQ; ++j) {
    q[j] = make_uint4(mix(tid + 100u * j), mix(tid + 100u * j + 1), mix(tid + 100u * j + 2), mix(tid + 100u * j + 3));
    sc[j] = 0x7E7F7D80u + j;  // scale exponents near 2^0
  }

  wgmma_fence();
  for (int c = 0; c < chunks; ++c) {
    if constexpr (kDeq) {
#pragma unroll
      for (int j = 0; j < kQ; ++j) q[j].x ^= c, q[j].y ^= c << 3, q[j].z ^= c << 6, q[j].w ^= c << 9;  // not hoistable
    }
#pragma unroll
    for (int s0 = 0; s0 < 8; s0 += kG) {
      uint32_t fr[kG][kBlocks][4];
#pragma unroll
      for (int g = 0; g < kG; ++g) {
        const int s = s0 + g, i = s >> 1, h = s & 1;
#pragma unroll
        for (int b = 0; b < kBlocks; ++b) {
          if constexpr (kDeq) {
            uint32_t lo[2], hi[2];
            dequant_half<false>(word_of(q[2 * b], i), (sc[2 * b] >> (8 * i)) & 0xffu, h, lo);
            dequant_half<false>(word_of(q[2 * b + 1], i), (sc[2 * b + 1] >> (8 * i)) & 0xffu, h, hi);
            fr[g][b][0] = lo[0], fr[g][b][1] = hi[0], fr[g][b][2] = lo[1], fr[g][b][3] = hi[1];
          } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) fr[g][b][j] = fc[b][j];
          }
        }
      }
      wgmma_fence();  // every group, as kWgmma does
#pragma unroll
      for (int g = 0; g < kG; ++g) {
        const int s = s0 + g;
        const uint64_t bd = sw128_desc(b_base + (s >> 2) * kHalf + (s & 3) * 32);
#pragma unroll
        for (int b = 0; b < kBlocks; ++b) {
          if constexpr (kSs) {
            wgmma_ss<kN>(acc[b], sw128_desc(a_base + b * kABytes + (s >> 2) * (kABytes / 2) + (s & 3) * 32), bd);
          } else {
            wgmma_rs<kN>(acc[b], fr[g][b], bd);
          }
        }
      }
      wgmma_commit();
      if constexpr (!kWaitEnd) wgmma_wait<1>();
    }
    if constexpr (kWaitEnd) wgmma_wait<0>();
    __syncthreads();  // kWgmma's barrier a chunk
  }
  wgmma_wait<0>();
  float sum = 0.0f;
#pragma unroll
  for (int b = 0; b < kBlocks; ++b)
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) sum += acc[b][i];
  out[blockIdx.x * kThreads + tid] = sum;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

template <bool kSs, bool kDeq, int kG, bool kWaitEnd, int kBlocks, int kN>
void run(const char* name, int sms, int chunks, float* out) {
  auto kernel = loop_kernel<kSs, kDeq, kG, kWaitEnd, kBlocks, kN>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes), "smem attribute");
  cudaFuncAttributes attr{};
  check(cudaFuncGetAttributes(&attr, kernel), "attributes");
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event"), check(cudaEventCreate(&e1), "event");
  kernel<<<sms, kThreads, kSmemBytes>>>(chunks, out);
  check(cudaDeviceSynchronize(), name);
  std::vector<float> ms;
  for (int r = 0; r < 5; ++r) {
    check(cudaEventRecord(e0), "record");
    kernel<<<sms, kThreads, kSmemBytes>>>(chunks, out);
    check(cudaEventRecord(e1), "record");
    check(cudaEventSynchronize(e1), name);
    float t = 0;
    check(cudaEventElapsedTime(&t, e0, e1), "elapsed");
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double flops = 2.0 * sms * double(chunks) * 8 * 2 * kBlocks * 64.0 * kN * 16;
  const double tf = flops / (ms[2] * 1e-3) / 1e12;
  std::printf("%-8s blocks %d N %3d  regs %3d local %3zu B  %8.1f us  %6.1f TFLOP/s  %5.1f%% of 790\n", name, kBlocks, kN, attr.numRegs,
              attr.localSizeBytes, ms[2] * 1e3, tf, 100.0 * tf / 790.0);
  check(cudaEventDestroy(e0), "event"), check(cudaEventDestroy(e1), "event");
}

template <int kBlocks, int kN>
void shape(int sms, int chunks, float* out) {
  run<false, false, 1, false, kBlocks, kN>("rs-w1", sms, chunks, out);
  run<false, false, 1, true, kBlocks, kN>("rs-end", sms, chunks, out);
  run<false, false, 2, false, kBlocks, kN>("rs-g2", sms, chunks, out);
  run<true, false, 1, false, kBlocks, kN>("ss-w1", sms, chunks, out);
  run<true, false, 1, true, kBlocks, kN>("ss-end", sms, chunks, out);
  run<false, true, 1, false, kBlocks, kN>("deq-g1", sms, chunks, out);
  run<false, true, 2, false, kBlocks, kN>("deq-g2", sms, chunks, out);
  run<false, true, 4, false, kBlocks, kN>("deq-g4", sms, chunks, out);
}

}  // namespace
}  // namespace pdserve::cuda::moe_prefill_detail

int main(int argc, char** argv) {
  using namespace pdserve::cuda::moe_prefill_detail;
  const int chunks = argc > 1 ? std::atoi(argv[1]) : 1000;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "device");
  const int sms = prop.multiProcessorCount;
  float* out = nullptr;
  check(cudaMalloc(&out, sizeof(float) * sms * kThreads), "malloc");
  std::printf("%s, %d SMs, grid %d x %d threads, %d chunks of 8 k16-steps a CTA\n", prop.name, sms, sms, kThreads, chunks);
  shape<2, 32>(sms, chunks, out);   // kWgmma's tail tile (an expert's last 1..32 rows)
  shape<2, 128>(sms, chunks, out);  // kWgmma: gate + up blocks (or two down blocks), 128-token tile
  shape<2, 160>(sms, chunks, out);  // kWgmma160
  shape<1, 256>(sms, chunks, out);  // one block, 256 tokens (the same MMA work a k-step as 2 x 128)
  check(cudaFree(out), "free");
  return 0;
}

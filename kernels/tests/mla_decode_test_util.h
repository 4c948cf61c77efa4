// Shared by the split-KV MLA decode tests (mla_decode_test.cpp, mla_decode_bf16_test.cpp): a
// run captured in a CUDA graph and replayed.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "mla/mla_decode.h"
#include "test_util.h"

namespace pdserve::cuda::ktest {

// `w` eagerly once (the kernel's one-time opt-ins), then captured as two steps in a graph and
// replayed twice over NaN-filled outputs (`out`, out_size floats): each replay must match ref.
inline void replay_two_step_graph(const MlaDecodeArgs& a, const MlaDecodeWork& w, cudaStream_t stream, DeviceBuffer<float>& out, int64_t out_size,
                                  const std::vector<float>& ref, const std::string& what, double bound = 2e-5) {
  ASSERT_TRUE(mla_decode_run(a, w, stream).is_ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStream_t cs = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const bool ok1 = mla_decode_run(a, w, cs).is_ok(), ok2 = mla_decode_run(a, w, cs).is_ok();
  ASSERT_EQ(cudaStreamEndCapture(cs, &graph), cudaSuccess);
  ASSERT_TRUE(ok1 && ok2);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(out.upload(std::vector<float>(out_size, NAN)).is_ok());
    ASSERT_EQ(cudaGraphLaunch(exec, cs), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(cs), cudaSuccess);
    EXPECT_LT(nerr(host(out), ref), bound) << what << ", graph replay " << r;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(cs);
}

}  // namespace pdserve::cuda::ktest

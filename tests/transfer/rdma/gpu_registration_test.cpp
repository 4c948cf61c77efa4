#include <gtest/gtest.h>

#include "pdserve/transfer/rdma/gpu_registration.h"

namespace pdserve::transfer::rdma {
namespace {

const std::string kNoDmaBuf = "libcuda.so.1 has no cuMemGetHandleForAddressRange (driver older than CUDA 11.7)";
const std::string kNoPeerMem = "/sys/module/nvidia_peermem does not exist (`modprobe nvidia-peermem`)";

TEST(GpuRegistration, PrefersDmaBufWhereItExists) {
  auto c = choose_gpu_registration({"", ""});
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->path, GpuRegPath::kDmaBuf);
  EXPECT_NE(c->reason.find("nvidia-peermem is loaded too"), std::string::npos) << c->reason;
  c = choose_gpu_registration({"", kNoPeerMem});
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->path, GpuRegPath::kDmaBuf);
  EXPECT_STREQ(gpu_reg_path_name(c->path), "dma-buf");
}

TEST(GpuRegistration, FallsBackToPeerMemAndSaysWhyNotDmaBuf) {
  auto c = choose_gpu_registration({kNoDmaBuf, ""});
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->path, GpuRegPath::kPeerMem);
  EXPECT_NE(c->reason.find("11.7"), std::string::npos) << c->reason;
  EXPECT_STREQ(gpu_reg_path_name(c->path), "nvidia-peermem");
}

TEST(GpuRegistration, NeitherIsOneErrorNamingBothReasonsAndTheFixes) {
  auto c = choose_gpu_registration({kNoDmaBuf, kNoPeerMem});
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kUnavailable);
  const std::string& m = c.status().message();
  EXPECT_NE(m.find("dma-buf: " + kNoDmaBuf), std::string::npos) << m;
  EXPECT_NE(m.find("nvidia-peermem: " + kNoPeerMem), std::string::npos) << m;
  EXPECT_NE(m.find("host memory"), std::string::npos) << m;
}

TEST(GpuRegistration, TheSystemProbeAnswersWithoutCrashing) {
  // Whatever this host has: each way is either available or has a reason, never both.
  const GpuRegProbe p = probe_gpu_registration();
  auto c = choose_gpu_registration(p);
  if (c.is_ok()) {
    EXPECT_FALSE(c->reason.empty());
  } else {
    EXPECT_FALSE(p.dmabuf_missing.empty());
    EXPECT_FALSE(p.peermem_missing.empty());
  }
}

}  // namespace
}  // namespace pdserve::transfer::rdma

// A forward that runs somewhere other than the CPU (the CUDA backend), behind the same batch
// contract as Model::forward (model.h). The implementation owns its device pools (MLA pages,
// KDA state slots), indexed by the same page and slot ids that the host pools hand out; the
// host pools stay for accounting. Which implementations a build has is chosen in CMake:
// make_cuda_forward returns kUnsupported in a build without CUDA.
//
// The device MLA pool holds its entries in CudaForwardOptions::kv_cache_dtype (fp32, or bf16:
// kv_cache_dtype "bfloat16", values rounded to nearest even when written, as on the CPU), which
// must be the host MlaKvPool's dtype: download/upload copy the pool's bytes as they are and
// refuse a host pool of another dtype (TpModelGroup::set_device_forward(s) checks at start).
//
// Disaggregation moves the host pools (the transfer layer registers them), so the engine
// copies a request's cache between the two at the hand-over points: prefill downloads the
// pages a chunk wrote (and the slot, once the prompt is in) before the hooks send them;
// decode uploads the pages and slot prefill filled before its first decode step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pdserve/model/cache_pools.h"
#include "pdserve/model/model.h"

namespace pdserve {

// Which part of a request's cache to copy: MLA pages (every MLA layer) and, when slot >= 0,
// the whole KDA state slot (every KDA layer). Ids are the host pools' ids.
struct CacheRegion {
  std::vector<int32_t> pages;
  int32_t slot = -1;
};

class DeviceForward {
 public:
  virtual ~DeviceForward();
  // Same contract as Model::forward: writes the new tokens' latents into the device pages,
  // advances the device state slots, returns logits on the host.
  virtual Status forward(const ForwardBatch& batch, ForwardOutput* out) = 0;
  virtual std::string describe() const = 0;
  // Device pools -> host pools (same layouts, same ids); returns once the host has the bytes.
  // One batched copy per contiguous run of pages, not one per page.
  virtual Status download(const CacheRegion& region, MlaKvPool& kv, KdaStatePool& state) = 0;
  // Host pools -> device pools; the next forward sees the bytes.
  virtual Status upload(const CacheRegion& region, const MlaKvPool& kv, const KdaStatePool& state) = 0;
  // The element type of the device MLA pool (the host MlaKvPool's must match).
  virtual DType kv_cache_dtype() const { return DType::kF32; }
  // Another node of the instance was lost: aborts this rank's cross-rank collectives so that
  // a forward blocked in one returns (its result is then garbage: the caller reports the
  // loss instead), and later forwards fail. Safe from any thread; idempotent. Default: no
  // collectives, nothing to do.
  virtual void abort_collectives() {}
};

// Runs of consecutive page ids, in order: {first, count} each (the copy unit above).
std::vector<std::pair<int32_t, int32_t>> page_runs(const std::vector<int32_t>& pages);

struct CudaForwardOptions {
  // Decode steps (one new token per sequence) replay a CUDA graph per batch-size bucket;
  // false runs every step eagerly (same numbers, more launches).
  bool graphs = true;
  // Widest block table a decode graph holds (pages of the longest sequence); 0: the pool's
  // page count. Longer sequences run eagerly.
  int64_t graph_max_pages = 0;
  // Decode steps (eager and graphs) run KDA layers through the fused step (kda_decode_step, one
  // launch a layer); false: the per-op slot-table kernels (graphs == eager bit for bit in both).
  bool fused_kda_decode = true;
  // MLA attention runs through the split-KV plan/run kernel (kernels/mla/mla_decode.h) where
  // the shape allows (<= 32 heads a rank); false keeps the one-block-per-head mla_attend_latent.
  bool split_kv_mla = true;
  // Programmatic dependent launches (sm_90) for the decode attention kernels: each starts while
  // the kernel before it drains and waits on the device before reading what that kernel wrote
  // (design.md). The fused KDA step: on (faster at every batch on the H200). The MLA split-KV
  // run + merge: on, with the run's trigger at its end (0.5-2.4 us faster at 12 of 14 shapes,
  // equal at 128 x 16K, 3.6% slower at 32 rows x 16K: perf.md, MLA decode, fifth version).
  bool pdl_kda_decode = true;
  bool pdl_mla_decode = true;
  // The MLA split-KV run in its early form (MlaDecodeRing::kLeanEarly, kernels/mla/mla_decode.h):
  // before its pdl wait each CTA reads its page-table entries and issues the bulk copies of its
  // first tiles, while the q absorb just before it (which then lets it launch at its own start,
  // mla_absorb.h) still runs; only q is read after the wait (MlaDecodeWork::new_tokens 0: every
  // cache entry of the step is written by then; docs/design.md "MLA split-KV decode"). Correct
  // for items of any length, so a decode graph captured on short contexts stays correct as they
  // grow. Same logits as off, bit for bit. Measured on the H200 (perf.md "The early MLA ring in
  // the engine", tiny-k3-mla512): -0.7% a decode step at 8 x 4K and 32 x 1K, batch 1 within the
  // wall-clock noise. false: kLean and the plain absorb (the engine before). Its pre-wait window
  // needs pdl_mla_decode; without pdl the early ring runs kLean's sums with no window.
  bool early_mla_decode = true;
  // true: the MLA split-KV decode merges split rows inside its run (the last CTA of each group
  // of a row's items, through counters the run leaves zeroed): one launch a layer. false (the
  // default): a second, merge kernel, whose launch pdl hides; measured faster on the H200 at
  // every small-batch shape (perf.md, MLA decode, sixth version).
  bool fused_mla_merge = false;
  // Steps with a prefill chunk (some sequence brings > 1 token) run MLA attention through the
  // tensor-core prefill (kernels/mla/mla_prefill.h: expanded K/V, bf16 inputs, fp32 accumulate)
  // where the head dims have a kernel (qk x v = 192 x 128, 32 x 16). Off by default: it trades
  // the backend's fp32 agreement with the CPU (~1e-5) for bf16 rounding (~1e-3, docs/perf.md).
  bool bf16_mla_prefill = false;
  // Prefill runs KDA layers through the chunked tensor-core kernel (kernels/kda/kda_chunk.h)
  // where the shape allows (head_dim 32/64/128, gate bounded below by >= -10); false keeps the
  // token-by-token kda_recurrent.
  bool chunked_kda_prefill = true;
  // The chunked KDA prefill in bf16 mode (KdaChunkArgs::bf16: matmul operands rounded to bf16,
  // fp32 accumulation and state; fla chunk_kda's precision class, ~5e-3 normalised error).
  // Off by default: the default 3xTF32 mode keeps the backend within 1e-4 of the CPU backend.
  bool bf16_kda_prefill = false;
  // The largest prefill step the caller will run (rows, and sequences): the KDA workspace cap
  // grows to one pass of such a step (kda_chunk_plan.h kda_prefill_workspace_cap), so the
  // chunked kernel's one-pass picks apply. 0: the 512 MiB floor only (longer batches split).
  int64_t prefill_step_tokens = 0;
  int64_t prefill_step_seqs = 1;
  // The device MLA pool's element type: the host pools' (RuntimeConfig::kv_cache_dtype). kBF16:
  // half the bytes a token; the latent writes round to nearest even (mla_write_latents_bf16),
  // the decode (split-KV on tensor cores where the shape takes them, else mla_attend_latent) and the
  // tensor-core prefill read the bf16 pages exactly (docs/design.md, "The CUDA backend").
  DType kv_cache_dtype = DType::kF32;
  // MoE experts in the decode layout repacked in the E4M3 bit shuffle (kernels/moe/moe_decode.h
  // Mxfp4DecodeBits::kFp8) where the 64-row E4M3 form takes the layer (backend/moe_decode_bits.h),
  // so the decode steps' experts run on E4M3 warpgroup MMA: at K3's EP32 shapes on the H200
  // 1.03-1.13x the bf16 forms at B 4-256, 0.98-0.99x at B 1-2, and nearer the CPU (normalised error
  // 0.0005-0.0015 against 0.0027-0.0038; docs/perf.md). The prefill grouped GEMM reads only the
  // bf16 shuffle, so on such layers many-row steps run the decode kernels instead: the server sets
  // this for the decode role only (--no-e4m3-moe-decode turns it off there).
  bool e4m3_moe_decode = false;
};

// The whole (unsharded) model on CUDA device 0, pools of the given geometry.
Result<std::unique_ptr<DeviceForward>> make_cuda_forward(std::shared_ptr<const Model> model, int64_t num_pages,
                                                         int64_t page_size, int64_t num_slots, CudaForwardOptions opts = {});
// Whether this machine can hold `pp` stages of `tp` ranks on the GPU (one GPU a rank), before
// any weights are loaded: the refusal names the flags and both counts.
Status check_cuda_devices(int tp, int pp = 1);
// One forward per tensor-parallel rank (shards[r] is rank r's Model): rank r on CUDA device r,
// the ranks joined by NCCL. Refuses, saying so, when the machine has fewer GPUs than ranks or
// NCCL cannot be loaded. The forwards must run concurrently, one thread per rank
// (TpModelGroup::forward does). Decode graphs stay off for now whatever `opts` says: NCCL
// calls inside captured graphs have not been tested here.
Result<std::vector<std::unique_ptr<DeviceForward>>> make_cuda_tp_forwards(const std::vector<std::shared_ptr<const Model>>& shards,
                                                                          int64_t num_pages, int64_t page_size, int64_t num_slots,
                                                                          CudaForwardOptions opts = {});

// One node's ranks of a group that spans nodes: shards[i] is global rank first_rank + i of
// world, on local CUDA device i, joined through the NCCL unique id `group_id` (every node
// calls this at about the same time: the join blocks until all ranks are in).
Result<std::vector<std::unique_ptr<DeviceForward>>> make_cuda_node_tp_forwards(const std::vector<std::shared_ptr<const Model>>& shards,
                                                                               const std::vector<uint8_t>& group_id, int world, int first_rank,
                                                                               int64_t num_pages, int64_t page_size, int64_t num_slots,
                                                                               CudaForwardOptions opts = {});

// Pipeline stages on the GPU (tensor-parallel size 1): stages[s] is stage s's Model (loaded
// with its LayerSpan, so it holds only its layers' weights), on CUDA device s; activations
// pass stage to stage GPU to GPU over NCCL send/recv. The forwards must run concurrently, one
// thread per stage (TpModelGroup::forward does); a failure crosses to the later stages as an
// error code. Refuses, saying so, with fewer GPUs than stages or without NCCL.
Result<std::vector<std::unique_ptr<DeviceForward>>> make_cuda_pp_forwards(const std::vector<std::shared_ptr<const Model>>& stages,
                                                                          int64_t num_pages, int64_t page_size, int64_t num_slots,
                                                                          CudaForwardOptions opts = {});

class StageChannel;  // pipeline.h

// Pipeline stages over NCCL send/recv, stage s on CUDA device s (one TP rank per stage):
// endpoint s for TpModelGroup::set_stage_channels. Each endpoint must be used from one
// thread at a time. kUnsupported without CUDA, too few GPUs, or no NCCL.
Result<std::vector<std::unique_ptr<StageChannel>>> make_nccl_pipeline(int stages);

}  // namespace pdserve

// Internal to the CUDA backend: the per-forward indices and the scratch slots.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cuda_model.h"
#include "mla/mla_decode.h"
#include "mla/mla_prefill.h"

namespace pdserve::cuda {

struct CudaModel::Step {
  const ForwardBatch* batch = nullptr;
  std::vector<int64_t> row_begin;  // per sequence: its first row in the packed [T, hidden] activations
  int64_t rows = 0;
  int64_t max_pages = 0;
  const int32_t* entry = nullptr;       // [T] page * page_size + offset of each new token (device)
  const int32_t* ctx_len = nullptr;     // [T] positions each row attends to, itself included (device)
  const int32_t* page_table = nullptr;  // [T][max_pages] each row's block table (device)
  const int32_t* slots = nullptr;       // decode steps (eager or graph): [T] each row's KDA slot, -1 padding
                                        // (device); null: the per-sequence KDA path over `batch`
  // The split-KV MLA work list of this step, shared by every MLA layer (plan null: the layers
  // use mla_attend_latent); part_o / part_lse are set per layer.
  MlaDecodeWork mla;
  // Prefill steps with bf16_mla_prefill: the tensor-core prefill's plan (device image, null:
  // not used this step) and its sizes; every MLA layer of the step runs it for all rows.
  const int32_t* mla_prefill = nullptr;
  MlaPrefillPlan mla_prefill_host;
  // The chunked KDA prefill's job tables, uploaded by the step's first KDA layer into the
  // workspace; later layers (same batch, only the layer offset differs) reuse them. Mutable:
  // the layers see the step as const, and this only caches what they would upload again.
  struct KdaChunkTables {
    const void* workspace = nullptr;  // null: none uploaded this step
    size_t workspace_bytes = 0;
    std::vector<int64_t> cu;
    std::vector<int32_t> slots;
  };
  mutable KdaChunkTables kda_chunk_tables;
};

// One buffer per purpose, so a pointer taken earlier in a forward stays valid.
enum ScratchSlot : int {
  kIds, kEntry, kCtxLen, kPageTable, kRows,
  kX, kNormed, kBlockOut, kMixed, kBank, kHead, kLogits,
  kMlaQa, kMlaQ, kMlaLat, kMlaRot, kMlaQLat, kMlaQRot, kMlaOLat, kMlaAttn, kMlaGate,
  kKdaQ, kKdaK, kKdaV, kKdaQc, kKdaKc, kKdaVc, kKdaFa, kKdaF, kKdaG, kKdaBeta, kKdaGo, kKdaGa, kKdaO, kKdaSlots,
  kMlpGate, kMlpUp,
  kMoeLogits, kMoeIds, kMoeWeights, kMoeXl, kMoeOffsets, kMoeSorted, kMoePairRow, kMoeXSorted, kMoeAct, kMoeOut, kMoeY,
  kMoeShared,
  kTpGathered,
  kMlaPlan, kMlaPartO, kMlaPartLse, kMlaCounters,
  kMlaPrefillPlan, kMlaPrefillWs,
  kKdaChunkWs,
  kStageHeader, kStageDrain,
};

}  // namespace pdserve::cuda

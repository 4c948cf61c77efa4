// The CUDA backend's layers: MLA, KDA, dense MLP and MoE, each the device twin of its CPU
// function in src/model/{attention_layers,ffn_layers}.cpp (same order of operations).
#include <algorithm>
#include <cmath>
#include <vector>

#include "activation/activation.h"
#include "backend/cuda_step.h"
#include "common/cuda_check.h"
#include "gemm/gemm.h"
#include "glue/glue.h"
#include "kda/kda.h"
#include "kda/kda_chunk.h"
#include "mla/mla.h"
#include "mla/mla_absorb.h"
#include "mla/mla_decode.h"
#include "mla/mla_prefill.h"
#include "moe/moe.h"
#include "moe/moe_prefill.h"
#include "norm/norm.h"
#include "routing/routing.h"

namespace pdserve::cuda {

namespace {

Status linear(const float* x, int64_t rows, const DeviceMat& w, float* y, cudaStream_t s) {
  return matmul_nt(x, rows, w.p, w.rows, w.cols, y, s);
}

}  // namespace

Status CudaModel::mla_layer(const DeviceLayer& l, const Step& st, const float* x, float* out) {
  const ModelConfig& c = cfg_;
  const int64_t T = st.rows, nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim, lat = c.kv_lora_rank, vd = c.v_head_dim;
  const int64_t qd = c.q_head_dim(), nh = l.kv_b.rows / (nope + vd), hd = c.hidden_size;
  const float eps = static_cast<float>(c.mla_lora_norm_eps);
  PDS_ASSIGN_OR_RETURN(float* q, scratch<float>(kMlaQ, T * nh * qd));
  if (c.q_lora_rank > 0) {
    PDS_ASSIGN_OR_RETURN(float* qa, scratch<float>(kMlaQa, T * c.q_lora_rank));
    PDS_RETURN_IF_ERROR(linear(x, T, l.q_a, qa, stream_));
    PDS_RETURN_IF_ERROR(rms_norm(qa, T, c.q_lora_rank, l.q_a_norm, eps, qa, stream_));
    PDS_RETURN_IF_ERROR(linear(qa, T, l.q_b, q, stream_));
  } else {
    PDS_RETURN_IF_ERROR(linear(x, T, l.q, q, stream_));
  }
  // kv_a's rows are [latent | key part]: two products so the latent norm sees contiguous rows.
  PDS_ASSIGN_OR_RETURN(float* kl, scratch<float>(kMlaLat, T * lat));
  PDS_ASSIGN_OR_RETURN(float* kr, scratch<float>(kMlaRot, T * rope));
  PDS_RETURN_IF_ERROR(matmul_nt(x, T, l.kv_a.p, lat, hd, kl, stream_));
  PDS_RETURN_IF_ERROR(matmul_nt(x, T, l.kv_a.p + lat * hd, rope, hd, kr, stream_));
  PDS_RETURN_IF_ERROR(rms_norm(kl, T, lat, l.kv_a_norm, eps, kl, stream_));
  // One of the two is set: the pool's dtype (kv_cache_dtype).
  float* cache = kv_layer_f32(l.pool_layer);
  uint16_t* cache16 = kv_layer_bf16(l.pool_layer);
  // Every new token's entry goes in first: row i then attends over [0, cached_len + i]. A bf16
  // pool stores each value rounded to nearest even (core/dtype.h f32_to_bf16's bits).
  if (cache16) PDS_RETURN_IF_ERROR(mla_write_latents_bf16(kl, kr, T, lat, rope, st.entry, cache16, stream_));
  else PDS_RETURN_IF_ERROR(mla_write_latents(kl, kr, T, lat, rope, st.entry, cache, stream_));

  PDS_ASSIGN_OR_RETURN(float* attn, scratch<float>(kMlaAttn, T * nh * vd));
  if (st.mla_prefill) {
    // Expanded K/V on tensor cores straight from q and the pages (mla_prefill.h).
    MlaPrefillArgs pa;
    pa.q = q, pa.cache = cache, pa.cache_bf16 = cache16, pa.kv_b = l.kv_b.p, pa.heads = nh, pa.nope = nope, pa.rope = rope, pa.v_dim = vd;
    pa.latent_dim = lat, pa.scale = 1.0f / std::sqrt(static_cast<float>(qd)), pa.out = attn;
    const MlaPrefillPlan& p = st.mla_prefill_host;
    PDS_ASSIGN_OR_RETURN(unsigned char* ws, scratch<unsigned char>(kMlaPrefillWs, mla_prefill_workspace_bytes(pa, p.rows, p.ctx_total)));
    PDS_RETURN_IF_ERROR(mla_prefill_run(pa, p, st.mla_prefill, ws, stream_));
    return finish_mla(l, T, x, attn, out);
  }
  PDS_ASSIGN_OR_RETURN(float* q_lat, scratch<float>(kMlaQLat, T * nh * lat));
  PDS_ASSIGN_OR_RETURN(float* q_rot, scratch<float>(kMlaQRot, T * nh * rope));
  // The split-KV run after it, in its early form (early_mla_decode: kLeanEarly, plan_mla), may
  // start while the absorb still runs: the absorb then lets it launch at its own start
  // (mla_absorb.h). Both absorb forms are plain launches, so the absorb starts only once
  // mla_write_latents above (and every kernel before it) has completed.
  // (A bf16 pool plans only where the split-KV decode takes it: plan_mla, split_kv_bf16_ok_.)
  const bool split_kv = st.mla.plan && mla_decode_supported(nh, lat, rope);
  const bool early_run = split_kv && opts_.pdl_mla_decode &&
                         (st.mla.ring == MlaDecodeRing::kLeanEarly || st.mla.ring == MlaDecodeRing::kLeanBlockEarly);
  if (early_run) PDS_RETURN_IF_ERROR(mla_absorb_q_early(q, l.kv_b.p, T, nh, nope, rope, vd, lat, q_lat, q_rot, stream_));
  else PDS_RETURN_IF_ERROR(mla_absorb_q(q, l.kv_b.p, T, nh, nope, rope, vd, lat, q_lat, q_rot, stream_));
  PDS_ASSIGN_OR_RETURN(float* o_lat, scratch<float>(kMlaOLat, T * nh * lat));
  MlaDecodeArgs a;
  a.q_lat = q_lat;
  a.q_rot = q_rot;
  a.cache = cache;
  a.cache_bf16 = cache16;  // the split-KV run's bf16 forms (tensor cores by default: mla_decode.h MlaDecodeBf16Math) or mla_attend_latent's
  a.page_table = st.page_table;
  a.ctx_len = st.ctx_len;
  a.rows = T;
  a.heads = nh;
  a.latent_dim = lat;
  a.rope_dim = rope;
  a.page_size = page_size_;
  a.max_pages = st.max_pages;
  a.scale = 1.0f / std::sqrt(static_cast<float>(qd));
  a.o_lat = o_lat;
  if (split_kv) {
    MlaDecodeWork w = st.mla;
    w.pdl = opts_.pdl_mla_decode;  // the plan is uploaded before the step; q_lat comes from the kernel just before
    w.cache_pages = num_pages_;    // one layer's pages: bounds kLeanPrefetch's pre-wait hints
    // The early rings' stable bound (MlaDecodeWork::new_tokens): 0, nothing but q after the pdl
    // wait, for decode steps and prefill chunks alike. The run's only primary is the absorb, a
    // plain launch that started after mla_write_latents completed (so every cache entry of the
    // step, the new tokens' included, was written and flushed) and that writes only q_lat /
    // q_rot; the run starts after the absorb started, and the page table and the plan were
    // copied from the host before the step's first kernel. Were a kernel that writes the cache
    // ever put between the absorb and the run, or the absorb made a pdl launch, this would have
    // to be the newest tokens a sequence brings (1 for decode, a prefill chunk's length).
    w.new_tokens = 0;
    PDS_ASSIGN_OR_RETURN(w.part_o, scratch<float>(kMlaPartO, w.capacity * nh * lat));
    PDS_ASSIGN_OR_RETURN(w.part_lse, scratch<float>(kMlaPartLse, w.capacity * nh));
    PDS_RETURN_IF_ERROR(mla_decode_run(a, w, stream_));
  } else {
    PDS_RETURN_IF_ERROR(mla_attend_latent(a, stream_));
  }
  PDS_RETURN_IF_ERROR(mla_v_up(o_lat, l.kv_b.p, T, nh, nope, vd, lat, attn, stream_));
  return finish_mla(l, T, x, attn, out);
}

// The per-head values attn [T][heads][v_dim] -> output gate -> o_proj.
Status CudaModel::finish_mla(const DeviceLayer& l, int64_t T, const float* x, float* attn, float* out) {
  const int64_t n = T * l.o.cols;  // o_proj: [hidden][heads * v_dim]
  if (cfg_.mla_output_gate) {
    PDS_ASSIGN_OR_RETURN(float* g, scratch<float>(kMlaGate, n));
    PDS_RETURN_IF_ERROR(linear(x, T, l.gate, g, stream_));
    PDS_RETURN_IF_ERROR(mul_sigmoid(attn, g, n, stream_));
  }
  return linear(attn, T, l.o, out, stream_);
}

Status CudaModel::kda_layer(const DeviceLayer& l, const Step& st, const float* x, float* out) {
  const ModelConfig& c = cfg_;
  const int64_t T = st.rows, H = l.b.rows, D = c.kda_head_dim, P = H * D, K = c.conv_kernel;
  PDS_ASSIGN_OR_RETURN(float* qr, scratch<float>(kKdaQ, T * P));
  PDS_ASSIGN_OR_RETURN(float* kr, scratch<float>(kKdaK, T * P));
  PDS_ASSIGN_OR_RETURN(float* vr, scratch<float>(kKdaV, T * P));
  PDS_ASSIGN_OR_RETURN(float* q, scratch<float>(kKdaQc, T * P));
  PDS_ASSIGN_OR_RETURN(float* k, scratch<float>(kKdaKc, T * P));
  PDS_ASSIGN_OR_RETURN(float* v, scratch<float>(kKdaVc, T * P));
  PDS_RETURN_IF_ERROR(linear(x, T, l.kq, qr, stream_));
  PDS_RETURN_IF_ERROR(linear(x, T, l.kk, kr, stream_));
  PDS_RETURN_IF_ERROR(linear(x, T, l.kv, vr, stream_));
  PDS_ASSIGN_OR_RETURN(float* fa, scratch<float>(kKdaFa, T * l.f_a.rows));
  PDS_ASSIGN_OR_RETURN(float* f, scratch<float>(kKdaF, T * P));
  PDS_ASSIGN_OR_RETURN(float* g, scratch<float>(kKdaG, T * P));
  PDS_ASSIGN_OR_RETURN(float* beta, scratch<float>(kKdaBeta, T * H));
  PDS_ASSIGN_OR_RETURN(float* go, scratch<float>(kKdaGo, T * P));
  PDS_RETURN_IF_ERROR(linear(x, T, l.f_a, fa, stream_));
  PDS_RETURN_IF_ERROR(linear(fa, T, l.f_b, f, stream_));
  // Decode steps (one token per row, the step's slot table in st.slots; graph buckets pad
  // with slot -1): one fused launch does conv, gates, norms, state and output norm.
  const bool fused_decode = opts_.fused_kda_decode && st.slots && (D == 32 || D == 64 || D == 128 || D == 256);
  if (!fused_decode)
    PDS_RETURN_IF_ERROR(kda_gate(f, T, H, D, l.a_log, l.dt_bias, c.has_gate_lower_bound, static_cast<float>(c.gate_lower_bound), g, stream_));
  PDS_RETURN_IF_ERROR(linear(x, T, l.b, beta, stream_));
  if (!fused_decode) PDS_RETURN_IF_ERROR(sigmoid_inplace(beta, T * H, stream_));
  if (c.kda_full_rank_output_gate) {
    PDS_RETURN_IF_ERROR(linear(x, T, l.g, go, stream_));
  } else {
    PDS_ASSIGN_OR_RETURN(float* ga, scratch<float>(kKdaGa, T * l.g_a.rows));
    PDS_RETURN_IF_ERROR(linear(x, T, l.g_a, ga, stream_));
    PDS_RETURN_IF_ERROR(linear(ga, T, l.g_b, go, stream_));
  }
  PDS_ASSIGN_OR_RETURN(float* o, scratch<float>(kKdaO, T * P));
  if (fused_decode) {
    KdaDecodeArgs a;
    a.q_raw = qr, a.k_raw = kr, a.v_raw = vr, a.f = f, a.beta_logit = beta, a.out_gate = go;
    a.conv_q = l.conv_q, a.conv_k = l.conv_k, a.conv_v = l.conv_v, a.a_log = l.a_log, a.dt_bias = l.dt_bias, a.o_norm = l.o_norm;
    a.has_lower_bound = c.has_gate_lower_bound, a.lower_bound = static_cast<float>(c.gate_lower_bound);
    a.norm_eps = static_cast<float>(c.rms_norm_eps);
    a.slots = st.slots, a.state = state_, a.slot_stride = slot_floats_, a.layer_offset = l.pool_layer * kda_layer_floats_;
    a.batch = T, a.heads = H, a.head_dim = D, a.conv_kernel = K, a.out = o;
    a.pdl = opts_.pdl_kda_decode;  // the kernel just before is the gate projection: no slot or state writes
    PDS_RETURN_IF_ERROR(kda_decode_step(a, stream_));
    return linear(o, T, l.ko, out, stream_);
  }
  const int64_t conv_block = P * (K - 1);
  const float qscale = 1.0f / std::sqrt(static_cast<float>(D));
  if (st.slots) {
    // Decode step: every row one token of its own sequence, states through the slot table.
    float* layer = state_ + l.pool_layer * kda_layer_floats_;
    PDS_RETURN_IF_ERROR(causal_conv1d_silu_step(qr, T, P, l.conv_q, K, layer, st.slots, slot_floats_, q, stream_));
    PDS_RETURN_IF_ERROR(causal_conv1d_silu_step(kr, T, P, l.conv_k, K, layer + conv_block, st.slots, slot_floats_, k, stream_));
    PDS_RETURN_IF_ERROR(causal_conv1d_silu_step(vr, T, P, l.conv_v, K, layer + 2 * conv_block, st.slots, slot_floats_, v, stream_));
    PDS_RETURN_IF_ERROR(l2_normalize(q, T * H, D, 1e-6f, qscale, stream_));
    PDS_RETURN_IF_ERROR(l2_normalize(k, T * H, D, 1e-6f, 1.0f, stream_));
    PDS_RETURN_IF_ERROR(kda_recurrent_step(q, k, v, g, beta, T, H, D, layer + kda_conv_floats_, st.slots, slot_floats_, o, stream_));
  }
  // Prefill: conv and norms per sequence (the conv state is per slot), then the recurrence:
  // all sequences in one chunked tensor-core call where the shape allows (rows are packed in
  // sequence order), else the token recurrence per sequence.
  const bool chunked = !st.slots && opts_.chunked_kda_prefill && kda_chunk_supported(D) && c.has_gate_lower_bound &&
                       c.gate_lower_bound >= kKdaChunkMinLogDecay;
  std::vector<int64_t> cu{0};
  std::vector<int32_t> chunk_slots;
  for (size_t s = 0; !st.slots && s < st.batch->seqs.size(); ++s) {
    const SequenceInput& seq = st.batch->seqs[s];
    const int64_t n = static_cast<int64_t>(seq.tokens.size()), r0 = st.row_begin[s];
    float* conv = state_ + seq.state_slot * slot_floats_ + l.pool_layer * kda_layer_floats_;
    float* rec = conv + kda_conv_floats_;
    PDS_RETURN_IF_ERROR(causal_conv1d_silu(qr + r0 * P, n, P, l.conv_q, K, conv, q + r0 * P, stream_));
    PDS_RETURN_IF_ERROR(causal_conv1d_silu(kr + r0 * P, n, P, l.conv_k, K, conv + conv_block, k + r0 * P, stream_));
    PDS_RETURN_IF_ERROR(causal_conv1d_silu(vr + r0 * P, n, P, l.conv_v, K, conv + 2 * conv_block, v + r0 * P, stream_));
    PDS_RETURN_IF_ERROR(l2_normalize(q + r0 * P, n * H, D, 1e-6f, qscale, stream_));
    PDS_RETURN_IF_ERROR(l2_normalize(k + r0 * P, n * H, D, 1e-6f, 1.0f, stream_));
    if (!chunked) {
      PDS_RETURN_IF_ERROR(kda_recurrent(q + r0 * P, k + r0 * P, v + r0 * P, g + r0 * P, beta + r0 * H, n, H, D, rec, o + r0 * P, stream_));
      continue;
    }
    if (r0 != cu.back()) return internal_error("kda_layer: prefill rows are not packed in sequence order");
    cu.push_back(r0 + n);
    chunk_slots.push_back(static_cast<int32_t>(seq.state_slot));
  }
  if (chunked && !chunk_slots.empty()) {
    // Workspace for one pass over the batch, capped at one pass of the largest step the
    // server runs (its token budget and sequence limit; at least 512 MiB): such a step is one
    // pass, where the launcher's one-pass picks apply (kda_chunk_plan.h). Grow-only scratch.
    const int64_t n_seqs = static_cast<int64_t>(chunk_slots.size());
    const size_t ws_cap = kda_prefill_workspace_cap(H, D, opts_.prefill_step_tokens, opts_.prefill_step_seqs);
    const size_t ws_bytes = kda_prefill_workspace_bytes(H, D, kda_chunk_count(cu.data(), n_seqs), ws_cap);
    PDS_ASSIGN_OR_RETURN(float* ws, scratch<float>(kKdaChunkWs, ws_bytes / sizeof(float) + 1));
    KdaChunkArgs a;
    a.q = q, a.k = k, a.v = v, a.g = g, a.beta = beta, a.o = o;
    a.heads = H, a.head_dim = D, a.num_seqs = n_seqs, a.cu_seqlens = cu.data(), a.slots = chunk_slots.data();
    a.state = state_, a.slot_stride = slot_floats_, a.layer_offset = l.pool_layer * kda_layer_floats_ + kda_conv_floats_;
    a.workspace = ws, a.workspace_bytes = ws_bytes;
    a.bf16 = opts_.bf16_kda_prefill;  // opt-in (device_forward.h): fla's precision class, not the CPU's 1e-4
    // Every KDA layer of the step plans the same batch: upload its tables once.
    Step::KdaChunkTables& t = st.kda_chunk_tables;
    a.tables_uploaded = t.workspace == ws && t.workspace_bytes == ws_bytes && t.cu == cu && t.slots == chunk_slots;
    t.workspace = nullptr;  // until this call has succeeded
    PDS_RETURN_IF_ERROR(kda_chunk_prefill(a, stream_));
    t.workspace = ws, t.workspace_bytes = ws_bytes, t.cu = cu, t.slots = chunk_slots;
  }
  PDS_RETURN_IF_ERROR(gated_rms_norm(o, go, T * H, D, l.o_norm, static_cast<float>(c.rms_norm_eps), o, stream_));
  return linear(o, T, l.ko, out, stream_);
}

Status CudaModel::mlp(const DeviceMlp& w, const float* x, int64_t rows, float* out) {
  const int64_t inter = w.gate.rows;
  PDS_ASSIGN_OR_RETURN(float* gate, scratch<float>(kMlpGate, rows * inter));
  PDS_ASSIGN_OR_RETURN(float* up, scratch<float>(kMlpUp, rows * inter));
  PDS_RETURN_IF_ERROR(linear(x, rows, w.gate, gate, stream_));
  PDS_RETURN_IF_ERROR(linear(x, rows, w.up, up, stream_));
  if (cfg_.activation == MlpActivation::kSiTU)
    PDS_RETURN_IF_ERROR(situ_mul(gate, up, rows * inter, static_cast<float>(cfg_.situ_beta), static_cast<float>(cfg_.situ_linear_beta),
                                 gate, stream_));
  else
    PDS_RETURN_IF_ERROR(silu_mul(gate, up, rows * inter, gate, stream_));
  return linear(gate, rows, w.down, out, stream_);
}

// Average routed rows per expert from which the prefill grouped GEMM replaces the decode
// kernels (moe_prefill.h). Measured on the H200 at K3's EP4 shapes (docs/perf.md, "The backend's
// switch to the decode kernels"): the decode kernels' 8-row items make them cheap only while no
// expert passes 8 rows; with a router's spread (random rows) the grouped GEMM is 1.33x faster from
// 4 rows an expert on average and the decode kernels 1.6x faster at 2; the same at an EP32 rank's 28
// experts (1.50x at 4). (Perfectly even rows would put the switch at 9; no router produces them.)
constexpr int64_t kMoePrefillMinRowsPerExpert = 4;

Status CudaModel::moe(const DeviceLayer& l, const float* x, int64_t rows, float* out) {
  const ModelConfig& c = cfg_;
  const int64_t hd = c.hidden_size, lat = c.routed_expert_hidden_size, E = c.num_experts, K = c.num_experts_per_token;
  const int64_t cap = rows * K, inter = c.moe_intermediate_size;
  PDS_ASSIGN_OR_RETURN(float* logits, scratch<float>(kMoeLogits, rows * E));
  PDS_ASSIGN_OR_RETURN(int32_t* ids, scratch<int32_t>(kMoeIds, cap));
  PDS_ASSIGN_OR_RETURN(float* wts, scratch<float>(kMoeWeights, cap));
  PDS_RETURN_IF_ERROR(linear(x, rows, l.router, logits, stream_));
  PDS_RETURN_IF_ERROR(route_sigmoid_topk(logits, l.router_bias, rows, E, K, c.moe_renormalize, static_cast<float>(c.routed_scaling_factor),
                                         ids, wts, stream_));
  const float* xin = x;
  if (c.latent_moe) {
    PDS_ASSIGN_OR_RETURN(float* xl, scratch<float>(kMoeXl, rows * lat));
    PDS_RETURN_IF_ERROR(linear(x, rows, l.latent_down, xl, stream_));
    xin = xl;
  }
  MoePlan plan;
  PDS_ASSIGN_OR_RETURN(plan.offsets, scratch<int32_t>(kMoeOffsets, l.local_experts + 1));
  PDS_ASSIGN_OR_RETURN(plan.sorted_pairs, scratch<int32_t>(kMoeSorted, cap));
  PDS_ASSIGN_OR_RETURN(plan.pair_row, scratch<int32_t>(kMoePairRow, cap));
  PDS_ASSIGN_OR_RETURN(float* x_sorted, scratch<float>(kMoeXSorted, cap * lat));
  PDS_ASSIGN_OR_RETURN(float* act, scratch<float>(kMoeAct, cap * inter));
  PDS_ASSIGN_OR_RETURN(float* out_sorted, scratch<float>(kMoeOut, cap * lat));
  // Many rows per expert (prefill chunks): the grouped GEMM on bf16 activations, which
  // reuses x_sorted's and act's scratch for its bf16 copies (half their size).
  // (moe_prefill_fits: the bf16 shuffle only; e4m3_moe_decode layers run every step on the decode kernels.)
  const bool prefill_gemm = l.quantized && l.decode_layout && rows * K >= kMoePrefillMinRowsPerExpert * E && moe_prefill_fits(l.mxfp4_decode);
  if (prefill_gemm) {
    uint16_t* x16 = reinterpret_cast<uint16_t*>(x_sorted);
    uint16_t* act16 = reinterpret_cast<uint16_t*>(act);
    // A short chunk (few rows an expert on average) takes the two-CTA narrow tiles (moe_prefill.h).
    const MoePrefillKernel kernel = moe_prefill_choice(MoePrefillKernel::kAuto, rows * K / E);
    PDS_RETURN_IF_ERROR(moe_permute_bf16(ids, rows, K, l.expert_begin, l.local_experts, xin, lat, plan, x16, stream_, kernel));
    // The tile queue shares the fused decode kernel's workspace: both run in order on stream_.
    PDS_RETURN_IF_ERROR(
        moe_expert_mlp_prefill(l.mxfp4_decode, plan.offsets, l.local_experts, cap, x16, act16, out_sorted, stream_, moe_queue_, kernel));
  } else {
    PDS_RETURN_IF_ERROR(moe_permute(ids, rows, K, l.expert_begin, l.local_experts, xin, lat, plan, x_sorted, stream_));
    if (l.quantized && l.decode_layout)
      PDS_RETURN_IF_ERROR(moe_expert_mlp_decode(l.mxfp4_decode, plan.offsets, l.local_experts, cap, x_sorted, act, out_sorted, stream_,
                                                MoeDecodeKernel::kAuto, moe_queue_));
    else if (l.quantized)
      PDS_RETURN_IF_ERROR(moe_expert_mlp(l.mxfp4, plan.offsets, l.local_experts, cap, x_sorted, act, out_sorted, stream_));
    else
      PDS_RETURN_IF_ERROR(moe_expert_mlp_dense(l.dense, plan.offsets, l.local_experts, cap, x_sorted, act, out_sorted, stream_));
  }
  float* y = out;
  if (c.latent_moe) {
    PDS_ASSIGN_OR_RETURN(y, scratch<float>(kMoeY, rows * lat));
  }
  PDS_RETURN_IF_ERROR(moe_combine(out_sorted, plan.pair_row, wts, rows, K, lat, y, stream_));
  PDS_RETURN_IF_ERROR(reduce_partial(y, rows * lat));  // each rank combined its own experts' pairs
  if (c.latent_moe) {
    if (c.latent_moe_norm) PDS_RETURN_IF_ERROR(rms_norm(y, rows, lat, l.latent_norm, static_cast<float>(c.rms_norm_eps), y, stream_));
    PDS_RETURN_IF_ERROR(linear(y, rows, l.latent_up, out, stream_));
  }
  if (l.has_shared) {
    PDS_ASSIGN_OR_RETURN(float* sh, scratch<float>(kMoeShared, rows * hd));
    PDS_RETURN_IF_ERROR(mlp(l.shared, x, rows, sh));
    PDS_RETURN_IF_ERROR(reduce_partial(sh, rows * hd));
    PDS_RETURN_IF_ERROR(add_inplace(out, sh, rows * hd, stream_));
  }
  return Status::ok();
}

}  // namespace pdserve::cuda

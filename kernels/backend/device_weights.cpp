#include "backend/device_weights.h"

#include <cuda_runtime.h>

#include <cstring>

#include "backend/moe_decode_bits.h"
#include "common/cuda_check.h"

namespace pdserve::cuda {

DeviceWeights::DeviceWeights(DeviceWeights&& o) noexcept { *this = std::move(o); }

DeviceWeights& DeviceWeights::operator=(DeviceWeights&& o) noexcept {
  if (this == &o) return *this;
  for (void* p : owned_) cudaFree(p);
  embed = o.embed;
  lm_head = o.lm_head;
  final_norm = o.final_norm;
  output_res_score = o.output_res_score;
  layers = std::move(o.layers);
  owned_ = std::move(o.owned_);
  bytes_ = o.bytes_;
  o.owned_.clear();
  o.bytes_ = 0;
  return *this;
}

DeviceWeights::~DeviceWeights() {
  for (void* p : owned_) cudaFree(p);
}

Result<const void*> DeviceWeights::put_bytes(const void* data, size_t n) {
  if (n == 0) return static_cast<const void*>(nullptr);
  void* p = nullptr;
  PDS_RETURN_IF_ERROR(cuda_status(cudaMalloc(&p, n), "cudaMalloc (weights)"));
  owned_.push_back(p);
  bytes_ += n;
  PDS_RETURN_IF_ERROR(cuda_status(cudaMemcpy(p, data, n, cudaMemcpyHostToDevice), "upload (weights)"));
  return static_cast<const void*>(p);
}

Result<const float*> DeviceWeights::put(const std::vector<float>& v) {
  PDS_ASSIGN_OR_RETURN(const void* p, put_bytes(v.data(), v.size() * sizeof(float)));
  return static_cast<const float*>(p);
}

Result<DeviceMat> DeviceWeights::put(const ops::DenseMatrix& m) {
  DeviceMat d;
  PDS_ASSIGN_OR_RETURN(d.p, put(m.data));
  d.rows = m.rows;
  d.cols = m.cols;
  return d;
}

Status DeviceWeights::put_moe(const ModelConfig& c, const MoeWeights& mw, DeviceLayer* dl) {
  PDS_ASSIGN_OR_RETURN(dl->router, put(mw.router));
  PDS_ASSIGN_OR_RETURN(dl->router_bias, put(mw.router_bias));
  dl->expert_begin = mw.expert_begin;
  dl->local_experts = static_cast<int64_t>(mw.experts.size());
  if (dl->local_experts == 0) return invalid_argument("cuda backend: a MoE layer without local experts");
  dl->quantized = mw.experts[0].quantized;
  const MoeActivation act = c.activation == MlpActivation::kSiTU ? MoeActivation::kSiTU : MoeActivation::kSiLU;
  const float beta = static_cast<float>(c.situ_beta), lin = static_cast<float>(c.situ_linear_beta);
  if (dl->quantized) {
    // Stack each projection over the experts: packed [E, rows, cols/2], scales [E, rows, cols/32];
    // where every projection fits the decode layout, repack into it (moe_decode.h).
    const ExpertWeights& e0 = mw.experts[0];
    dl->decode_layout = decode_layout_fits(e0.q1.rows, e0.q1.cols) && decode_layout_fits(e0.q3.rows, e0.q3.cols) &&
                        decode_layout_fits(e0.q2.rows, e0.q2.cols);
    // One shuffle for all three projections (moe_expert_mlp_decode needs them to agree); the scale
    // bytes are scanned only where the E4M3 one is asked for.
    bool scale_above_128 = false;
    if (e4m3_moe_decode_ && dl->decode_layout)
      for (const ExpertWeights& e : mw.experts)
        for (const ops::Mxfp4Matrix* m : {&e.q1, &e.q3, &e.q2})
          if (e.quantized)  // a dense expert here is refused below
            scale_above_128 = scale_above_128 || mxfp4_scales_wide(m->scales, m->rows * m->cols / 32);
    const Mxfp4DecodeBits bits = moe_decode_bits_for(e4m3_moe_decode_, e0.q1.rows, e0.q1.cols, scale_above_128);
    auto stack = [&](auto pick, Mxfp4Experts* out, Mxfp4Decode* dec) -> Status {
      const ops::Mxfp4Matrix& m0 = pick(mw.experts[0]);
      const size_t pb = m0.rows * m0.cols / 2, sb = m0.rows * m0.cols / 32;
      std::vector<uint8_t> packed(pb * mw.experts.size()), scales(sb * mw.experts.size());
      for (size_t e = 0; e < mw.experts.size(); ++e) {
        const ops::Mxfp4Matrix& m = pick(mw.experts[e]);
        if (!mw.experts[e].quantized || m.rows != m0.rows || m.cols != m0.cols)
          return invalid_argument("cuda backend: the experts of a layer differ in format or shape");
        std::memcpy(&packed[e * pb], m.packed, pb);
        std::memcpy(&scales[e * sb], m.scales, sb);
      }
      bool wide = false;
      if (dl->decode_layout) {
        std::vector<uint8_t> rp, rs;
        PDS_ASSIGN_OR_RETURN(wide, mxfp4_repack_decode(packed.data(), scales.data(), static_cast<int64_t>(mw.experts.size()), m0.rows,
                                                       m0.cols, &rp, &rs, bits));
        packed.swap(rp);
        scales.swap(rs);
      }
      PDS_ASSIGN_OR_RETURN(const void* p, put_bytes(packed.data(), packed.size()));
      PDS_ASSIGN_OR_RETURN(const void* s, put_bytes(scales.data(), scales.size()));
      const auto* pu = static_cast<const uint8_t*>(p);
      const auto* su = static_cast<const uint8_t*>(s);
      if (dl->decode_layout) *dec = Mxfp4Decode{pu, su, m0.rows, m0.cols, wide, bits};
      else *out = Mxfp4Experts{pu, su, m0.rows, m0.cols};
      return Status::ok();
    };
    PDS_RETURN_IF_ERROR(
        stack([](const ExpertWeights& e) -> const ops::Mxfp4Matrix& { return e.q1; }, &dl->mxfp4.w1, &dl->mxfp4_decode.w1));
    PDS_RETURN_IF_ERROR(
        stack([](const ExpertWeights& e) -> const ops::Mxfp4Matrix& { return e.q3; }, &dl->mxfp4.w3, &dl->mxfp4_decode.w3));
    PDS_RETURN_IF_ERROR(
        stack([](const ExpertWeights& e) -> const ops::Mxfp4Matrix& { return e.q2; }, &dl->mxfp4.w2, &dl->mxfp4_decode.w2));
    dl->mxfp4_decode.activation = act;
    dl->mxfp4_decode.situ_beta = beta;
    dl->mxfp4_decode.situ_linear_beta = lin;
    if (!dl->decode_layout && (dl->mxfp4.w1.cols % 32 || dl->mxfp4.w1.rows % 32))
      return invalid_argument("cuda backend: MXFP4 expert widths must be multiples of 32");
    dl->mxfp4.activation = act;
    dl->mxfp4.situ_beta = beta;
    dl->mxfp4.situ_linear_beta = lin;
  } else {
    auto stack = [&](auto pick, const float** out) -> Status {
      const ops::DenseMatrix& m0 = pick(mw.experts[0]);
      std::vector<float> all;
      all.reserve(m0.data.size() * mw.experts.size());
      for (const ExpertWeights& e : mw.experts) {
        const ops::DenseMatrix& m = pick(e);
        if (e.quantized || m.rows != m0.rows || m.cols != m0.cols)
          return invalid_argument("cuda backend: the experts of a layer differ in format or shape");
        all.insert(all.end(), m.data.begin(), m.data.end());
      }
      PDS_ASSIGN_OR_RETURN(*out, put(all));
      return Status::ok();
    };
    PDS_RETURN_IF_ERROR(stack([](const ExpertWeights& e) -> const ops::DenseMatrix& { return e.w1; }, &dl->dense.w1));
    PDS_RETURN_IF_ERROR(stack([](const ExpertWeights& e) -> const ops::DenseMatrix& { return e.w3; }, &dl->dense.w3));
    PDS_RETURN_IF_ERROR(stack([](const ExpertWeights& e) -> const ops::DenseMatrix& { return e.w2; }, &dl->dense.w2));
    dl->dense.dim = mw.experts[0].w1.cols;
    dl->dense.inter = mw.experts[0].w1.rows;
    dl->dense.activation = act;
    dl->dense.situ_beta = beta;
    dl->dense.situ_linear_beta = lin;
  }
  dl->has_shared = mw.has_shared;
  if (mw.has_shared) {
    PDS_ASSIGN_OR_RETURN(dl->shared.gate, put(mw.shared.gate));
    PDS_ASSIGN_OR_RETURN(dl->shared.up, put(mw.shared.up));
    PDS_ASSIGN_OR_RETURN(dl->shared.down, put(mw.shared.down));
  }
  PDS_ASSIGN_OR_RETURN(dl->latent_down, put(mw.latent_down));
  PDS_ASSIGN_OR_RETURN(dl->latent_up, put(mw.latent_up));
  PDS_ASSIGN_OR_RETURN(dl->latent_norm, put(mw.latent_norm));
  return Status::ok();
}

Status DeviceWeights::put_layer(const ModelConfig& c, const LayerWeights& lw, DeviceLayer* dl) {
  dl->kind = lw.kind;
  PDS_ASSIGN_OR_RETURN(dl->input_norm, put(lw.input_norm));
  PDS_ASSIGN_OR_RETURN(dl->post_attn_norm, put(lw.post_attn_norm));
  PDS_ASSIGN_OR_RETURN(dl->attn_res_score, put(lw.attn_res_score));
  PDS_ASSIGN_OR_RETURN(dl->mlp_res_score, put(lw.mlp_res_score));
  if (lw.kind == LayerKind::kMla) {
    const MlaWeights& m = lw.mla;
    PDS_ASSIGN_OR_RETURN(dl->q_a, put(m.q_a));
    PDS_ASSIGN_OR_RETURN(dl->q_b, put(m.q_b));
    PDS_ASSIGN_OR_RETURN(dl->q, put(m.q));
    PDS_ASSIGN_OR_RETURN(dl->q_a_norm, put(m.q_a_norm));
    PDS_ASSIGN_OR_RETURN(dl->kv_a, put(m.kv_a));
    PDS_ASSIGN_OR_RETURN(dl->kv_a_norm, put(m.kv_a_norm));
    PDS_ASSIGN_OR_RETURN(dl->kv_b, put(m.kv_b));
    PDS_ASSIGN_OR_RETURN(dl->o, put(m.o));
    PDS_ASSIGN_OR_RETURN(dl->gate, put(m.gate));
  } else {
    const KdaWeights& k = lw.kda;
    PDS_ASSIGN_OR_RETURN(dl->kq, put(k.q));
    PDS_ASSIGN_OR_RETURN(dl->kk, put(k.k));
    PDS_ASSIGN_OR_RETURN(dl->kv, put(k.v));
    PDS_ASSIGN_OR_RETURN(dl->conv_q, put(k.conv_q));
    PDS_ASSIGN_OR_RETURN(dl->conv_k, put(k.conv_k));
    PDS_ASSIGN_OR_RETURN(dl->conv_v, put(k.conv_v));
    PDS_ASSIGN_OR_RETURN(dl->a_log, put(k.a_log));
    PDS_ASSIGN_OR_RETURN(dl->dt_bias, put(k.dt_bias));
    PDS_ASSIGN_OR_RETURN(dl->f_a, put(k.f_a));
    PDS_ASSIGN_OR_RETURN(dl->f_b, put(k.f_b));
    PDS_ASSIGN_OR_RETURN(dl->b, put(k.b));
    PDS_ASSIGN_OR_RETURN(dl->g, put(k.g));
    PDS_ASSIGN_OR_RETURN(dl->g_a, put(k.g_a));
    PDS_ASSIGN_OR_RETURN(dl->g_b, put(k.g_b));
    PDS_ASSIGN_OR_RETURN(dl->o_norm, put(k.o_norm));
    PDS_ASSIGN_OR_RETURN(dl->ko, put(k.o));
  }
  dl->is_moe = lw.is_moe;
  if (lw.is_moe) return put_moe(c, lw.moe, dl);
  PDS_ASSIGN_OR_RETURN(dl->mlp.gate, put(lw.mlp.gate));
  PDS_ASSIGN_OR_RETURN(dl->mlp.up, put(lw.mlp.up));
  PDS_ASSIGN_OR_RETURN(dl->mlp.down, put(lw.mlp.down));
  return Status::ok();
}

Result<DeviceWeights> DeviceWeights::upload(const ModelConfig& c, const ModelWeights& w, const LayerSpan& span, bool e4m3_moe_decode) {
  DeviceWeights d;
  d.e4m3_moe_decode_ = e4m3_moe_decode;
  PDS_ASSIGN_OR_RETURN(d.embed, d.put(w.embed));
  PDS_ASSIGN_OR_RETURN(d.lm_head, d.put(w.lm_head));
  PDS_ASSIGN_OR_RETURN(d.final_norm, d.put(w.final_norm));
  PDS_ASSIGN_OR_RETURN(d.output_res_score, d.put(w.output_res_score));
  int64_t mla = 0, kda = 0;
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& lw = w.layers[i];
    DeviceLayer dl;
    dl.kind = lw.kind;
    dl.is_moe = lw.is_moe;
    if (!span.contains(static_cast<int64_t>(i), c.num_layers)) {  // another stage's layer
      dl.pool_layer = -1;
      d.layers.push_back(dl);
      continue;
    }
    dl.pool_layer = lw.kind == LayerKind::kMla ? mla++ : kda++;
    PDS_RETURN_IF_ERROR(d.put_layer(c, lw, &dl));
    d.layers.push_back(dl);
  }
  return d;
}

}  // namespace pdserve::cuda

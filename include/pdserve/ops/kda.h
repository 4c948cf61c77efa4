// KDA (Kimi Delta Attention), CPU reference in fp32.
//
// Per head, with state S laid out [V][K] (row v holds the keys' channels; the layout the
// transfer moves and fla calls transpose_state_layout), for each token t:
//   S[v][c] *= exp(g_t[c])                      one decay per key channel (g is a log decay)
//   u[v]     = beta_t * (v_t[v] - sum_c S[v][c] k_t[c])
//   S[v][c] += k_t[c] * u[v]
//   o_t[v]   = sum_c S[v][c] q_t[c]
// q and k arrive L2-normalised and q already scaled by head_dim^-0.5.
// Layouts: q, k, g [T][H][D]; v, o [T][H][D]; beta [T][H]; state [H][D][D] ([V][K]).
#pragma once

#include <cstdint>

namespace pdserve::ops {

// Depthwise causal conv (kernel K) then SiLU. x: [T][D] raw projections; weight [D][K] with
// weight[c][K-1] on the current token; state [D][K-1] holds the previous K-1 inputs, oldest
// first, and is updated to the last K-1 inputs.
void causal_conv1d_silu(const float* x, int64_t T, int64_t D, const float* weight, int64_t K, float* state, float* out);

// x <- x * rsqrt(sum(x^2) + eps) per row of `dim`, then times `scale`.
void l2_normalize(float* x, int64_t rows, int64_t dim, float eps, float scale);

// Gates (log decay per channel) from the raw f projection [T][H*D]:
//   lower bound lb < 0 (Kimi-K3): g = lb * sigmoid(exp(A_log[h]) * (f + dt_bias))
//   otherwise (Kimi-Linear):      g = -exp(A_log[h]) * softplus(f + dt_bias)
void kda_gate(const float* f, int64_t T, int64_t H, int64_t D, const float* a_log, const float* dt_bias,
              bool has_lower_bound, float lower_bound, float* g);

// Token-by-token recurrence (the decode step when T == 1).
void kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
                   int64_t T, int64_t H, int64_t D, float* state, float* o);

// The same maths chunk by chunk (the UT/WY form used for prefill): within a chunk of C
// tokens the delta-rule updates are solved as one unit lower-triangular system, and the
// state is touched once per chunk. Equals kda_recurrent up to fp32 rounding.
void kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                 int64_t T, int64_t H, int64_t D, int64_t chunk, float* state, float* o);

}  // namespace pdserve::ops

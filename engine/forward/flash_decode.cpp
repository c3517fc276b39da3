// A decode step's attention on a CPU, as flash-decoding does it: every K/V row read once, in order.
//
// One query position per sequence, its GROUP query heads sharing each kv_head's cache (GQA). For each
// (batch, kv_head): walk the cache in blocks of BLOCK positions; score the block against the group's queries,
// keep a running max and sum of exp (the online softmax), and add the block's V rows, weighted, to the output.
// No score for the whole context is ever written out, and each cache row is read once for all GROUP heads:
// the bytes a decode step must read, and nothing more (engine/forward/flash_decode.py says why it exists).
//
// Built by flash_decode.py with -O3 -march=native -ffast-math -DHEAD_DIM=<head_dim> -DGROUP=<query heads per
// kv_head>: both fixed, the loops over head_dim vectorize and the ones over the group unroll. It registers itself
// with torch as decode_lab::flash_decode_d<HEAD_DIM>_g<GROUP> (the end of this file), so a compiled pass calls it
// from C++, without Python between the kernels.
#include <math.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#if !defined(HEAD_DIM) || !defined(GROUP)
#error "HEAD_DIM and GROUP must be defined"
#endif
#define BLOCK 64
// K and V rows are asked for this many positions ahead of the row being scored, one cache line (16 floats) at a
// time, so many reads are in flight where the loop alone has two. On the Intel Xeon 2-core VM a decode step's
// attention read its cache at ×0.78 a plain sum's rate with no request ahead, ×0.90 with the next block's rows
// asked for at each block's start, ×1.03–1.07 at 32 rows ahead (24: ×1.01, 48 and 64: ×0.98–1.05)
#define AHEAD 32

static inline void ask_ahead(const float* K, const float* V, long t) {  // rows t + AHEAD, prefetched
  for (int d = 0; d < HEAD_DIM; d += 16) {
    __builtin_prefetch(K + (t + AHEAD) * HEAD_DIM + d);
    __builtin_prefetch(V + (t + AHEAD) * HEAD_DIM + d);
  }
}

static inline float exp_nonpositive(float x) {  // e^x for x <= 0 as 2^i * 2^f, |f| <= 1/2: Cephes' exp2f
  x = x < -87.f ? -87.f : x;                     // polynomial (relative error ~2e-7), a loop that vectorizes
  float y = x * 1.44269504088896341f, i = floorf(y + 0.5f), f = y - i;
  float p = f * (((((1.535336188319500e-4f * f + 1.339887440266574e-3f) * f + 9.618437357674640e-3f) * f
                   + 5.550332471162809e-2f) * f + 2.402264791363012e-1f) * f + 6.931472028550421e-1f);
  union { float v; int b; } two_i;
  two_i.b = ((int)i + 127) << 23;
  return (1.f + p) * two_i.v;
}

// s[g][t] = scale * (query head g of the group) . (K row t), for t < n: each K row read once for all GROUP heads;
// as each is scored, the K and V rows AHEAD positions on are asked for (V: the block's own V rows).
//
// A dot product's sum across its lanes costs more than its multiplies: summed one at a time, the scores took
// most of the kernel's time and it could not keep up with the memory (docs/measurements.md). With AVX2, 8 dot
// products are summed together: TIME = 8 / GROUP positions for every head, 8 vectors turned into one vector of
// their 8 sums by a tree of 7 shuffle-and-adds (lane g * TIME + j: head g, position t + j).
static inline void scores(const float* Q, const float* K, const float* V, int n, float scale,
                          float s[GROUP][BLOCK]) {
  int t = 0;
#if defined(__AVX2__) && defined(__FMA__) && HEAD_DIM % 8 == 0 && 8 % GROUP == 0
  enum { TIME = 8 / GROUP, CHUNKS = HEAD_DIM / 8 };
  const __m256 scaled = _mm256_set1_ps(scale);
  for (; t + TIME <= n; t += TIME) {
    __m256 x[8];  // x[g * TIME + j]: head g times K row t + j, lane by lane (8 lanes still to sum)
    for (int j = 0; j < TIME; j++) {
      const float* row = K + (t + j) * HEAD_DIM;
      ask_ahead(K, V, t + j);
      for (int g = 0; g < GROUP; g++) {
        __m256 p = _mm256_mul_ps(_mm256_loadu_ps(Q + g * HEAD_DIM), _mm256_loadu_ps(row));
        for (int c = 1; c < CHUNKS; c++)
          p = _mm256_fmadd_ps(_mm256_loadu_ps(Q + g * HEAD_DIM + 8 * c), _mm256_loadu_ps(row + 8 * c), p);
        x[g * TIME + j] = p;
      }
    }
    __m256 y[4], z[2];
    for (int i = 0; i < 4; i++)  // each 128-bit half: 2 partial sums of x[2i], 2 of x[2i+1]
      y[i] = _mm256_add_ps(_mm256_unpacklo_ps(x[2 * i], x[2 * i + 1]), _mm256_unpackhi_ps(x[2 * i], x[2 * i + 1]));
    for (int i = 0; i < 2; i++)  // each 128-bit half: 1 partial sum of each of x[4i .. 4i+3]
      z[i] = _mm256_add_ps(_mm256_shuffle_ps(y[2 * i], y[2 * i + 1], 0x44),
                           _mm256_shuffle_ps(y[2 * i], y[2 * i + 1], 0xEE));
    const __m256 sums = _mm256_mul_ps(scaled, _mm256_add_ps(_mm256_permute2f128_ps(z[0], z[1], 0x20),
                                                            _mm256_permute2f128_ps(z[0], z[1], 0x31)));
    alignas(32) float lanes[8];  // lane k: the whole sum of x[k]
    _mm256_store_ps(lanes, sums);
    for (int g = 0; g < GROUP; g++)
      for (int j = 0; j < TIME; j++) s[g][t + j] = lanes[g * TIME + j];
  }
#endif
  for (; t < n; t++) {  // the rest (or every position, without AVX2): one dot product at a time
    const float* row = K + t * HEAD_DIM;
    ask_ahead(K, V, t);
    for (int g = 0; g < GROUP; g++) {
      float dot = 0.f;
#pragma omp simd reduction(+ : dot)
      for (int d = 0; d < HEAD_DIM; d++) dot += Q[g * HEAD_DIM + d] * row[d];
      s[g][t] = dot * scale;
    }
  }
}

// q [batch, kv_head, GROUP, HEAD_DIM]; k, v [batch, kv_head, max_len, HEAD_DIM] (a static cache, contiguous);
// out like q. Reads positions 0 .. length-1 of each cache.
static void flash_decode(const float* q, const float* k, const float* v, float* out, int batch, int kv_heads,
                         long max_len, long length, float scale, int threads) {
#pragma omp parallel for collapse(2) num_threads(threads) schedule(static)
  for (int b = 0; b < batch; b++) {
    for (int h = 0; h < kv_heads; h++) {
      const long at = ((long)b * kv_heads + h);
      const float* K = k + at * max_len * HEAD_DIM;
      const float* V = v + at * max_len * HEAD_DIM;
      const float* Q = q + at * GROUP * HEAD_DIM;
      float run_max[GROUP], run_sum[GROUP], acc[GROUP][HEAD_DIM], s[GROUP][BLOCK];
      for (int g = 0; g < GROUP; g++) {
        run_max[g] = -1e30f;  // below any score: the first block's max replaces it
        run_sum[g] = 0.f;
        for (int d = 0; d < HEAD_DIM; d++) acc[g][d] = 0.f;
      }
      for (long start = 0; start < length; start += BLOCK) {
        const int n = (int)(length - start < BLOCK ? length - start : BLOCK);
        scores(Q, K + start * HEAD_DIM, V + start * HEAD_DIM, n, scale, s);  // each K row read once, for all heads
        for (int g = 0; g < GROUP; g++) {  // the online softmax: rescale what came before to the new max
          float m = run_max[g];
          for (int t = 0; t < n; t++) m = s[g][t] > m ? s[g][t] : m;
          const float rescale = exp_nonpositive(run_max[g] - m);
          float sum = 0.f;
#pragma omp simd reduction(+ : sum)
          for (int t = 0; t < n; t++) {
            s[g][t] = exp_nonpositive(s[g][t] - m);
            sum += s[g][t];
          }
          run_sum[g] = run_sum[g] * rescale + sum;
          run_max[g] = m;
          for (int d = 0; d < HEAD_DIM; d++) acc[g][d] *= rescale;
        }
        for (int t = 0; t < n; t++) {  // values: each V row read once, weighted into every head's output
          const float* row = V + (start + t) * HEAD_DIM;
          for (int g = 0; g < GROUP; g++) {
            const float p = s[g][t];
#pragma omp simd
            for (int d = 0; d < HEAD_DIM; d++) acc[g][d] += p * row[d];
          }
        }
      }
      for (int g = 0; g < GROUP; g++)
        for (int d = 0; d < HEAD_DIM; d++) out[(at * GROUP + g) * HEAD_DIM + d] = acc[g][d] / run_sum[g];
    }
  }
}

// ---------------------------------------------------------------- the torch op

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#define OP_NAME_(d, g) "flash_decode_d" #d "_g" #g
#define OP_NAME(d, g) OP_NAME_(d, g)

// q [batch, head, 1, head_dim] against a static cache [batch, kv_head, max_len, head_dim], every sequence at position
// input_pos[0]: the positions up to it (and below kv_len where kv_len > 0); [batch, head, 1, head_dim].
static at::Tensor attend(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                         const at::Tensor& input_pos, int64_t kv_len) {
  TORCH_CHECK(q.scalar_type() == at::kFloat && k_cache.scalar_type() == at::kFloat && q.size(3) == HEAD_DIM &&
              q.size(1) == k_cache.size(1) * GROUP, "flash_decode: an fp32 q and cache of this build's shape");
  const at::Tensor qc = q.contiguous(), kc = k_cache.contiguous(), vc = v_cache.contiguous();
  at::Tensor out = at::empty_like(qc);
  long length = input_pos.to(at::kLong).data_ptr<int64_t>()[0] + 1;
  length = kv_len > 0 && kv_len < length ? kv_len : length;
  flash_decode(qc.data_ptr<float>(), kc.data_ptr<float>(), vc.data_ptr<float>(), out.data_ptr<float>(),
               (int)q.size(0), (int)k_cache.size(1), k_cache.size(2), length, 1.0f / sqrtf((float)HEAD_DIM),
               at::get_num_threads());
  return out;
}

TORCH_LIBRARY_FRAGMENT(decode_lab, m) {
  m.def(OP_NAME(HEAD_DIM, GROUP) "(Tensor q, Tensor k_cache, Tensor v_cache, Tensor input_pos, int kv_len) -> Tensor");
}
TORCH_LIBRARY_IMPL(decode_lab, CPU, m) { m.impl(OP_NAME(HEAD_DIM, GROUP), attend); }

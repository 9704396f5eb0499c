// paged_attention.hip: attention of a ragged verify/decode batch over a paged KV cache.
//
// Versions
//   v1 (this file): one block per (query token, head, context split). Each warp walks every
//       num_warps-th key of the split with an online softmax, its lanes holding head_dim/warpSize
//       accumulators; warps merge through shared memory. When the grid would be too small to fill
//       the device (few lanes, long contexts) the context is split and a second kernel merges the
//       splits (split-K, "flash decoding"). fp32 accumulation for f32/f16/bf16 storage.
//   Not done: a v2 that loads each KV row once per GQA group and lane (all 1 + k_i query tokens
//       and all heads of the group together); v1 rereads it per query row and relies on L2.
//
// Spec: hip_kernels/reference.py::paged_attention (the torch reference is the definition).
// Build: python -m hip_kernels.build --check   (hipcc gfx1030 and nvcc sm_90, no GPU needed)
// Check: hip_kernels/check_gpu.sh on a GPU machine (kernel vs reference, then timings).
#include "portability.h"

#include <math.h>

namespace {

constexpr int kMaxPerLane = 8;  // head_dim <= 8 * warpSize (256 on wave32); checked on the host.
constexpr int kWarpsPerBlock = 4;

// Lane owning packed query row `token`: the last lane whose first row is <= token. Empty lanes
// (q_len 0) share their start with the next lane, so "last" skips them.
__device__ int lane_of_token(const int* cu_q_lens, int num_lanes, int token) {
  int lo = 0, hi = num_lanes - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (cu_q_lens[mid] <= token) lo = mid; else hi = mid - 1;
  }
  return lo;
}

template <typename T>
__global__ void paged_attention_kernel(
    T* __restrict__ out,                 // [num_tokens, num_heads, head_dim]
    float* __restrict__ split_acc,       // [num_splits, num_tokens, num_heads, head_dim]
    float* __restrict__ split_max_sum,   // [num_splits, num_tokens, num_heads, 2]
    const T* __restrict__ q,             // [num_tokens, num_heads, head_dim]
    const T* __restrict__ k_cache,       // [num_blocks, block_size, num_kv_heads, head_dim]
    const T* __restrict__ v_cache,       // [num_blocks, block_size, num_kv_heads, head_dim]
    const int* __restrict__ block_tables,  // [num_lanes, max_blocks]
    const int* __restrict__ cu_q_lens,   // [num_lanes + 1]
    const int* __restrict__ ctx_lens,    // [num_lanes]
    int num_lanes, int num_heads, int num_kv_heads, int head_dim, int block_size,
    int max_blocks, int split_len, float scale) {
  extern __shared__ float smem[];  // [num_warps] max, [num_warps] sum, [num_warps, head_dim] acc
  const int token = blockIdx.x, head = blockIdx.y, split = blockIdx.z;
  const int num_tokens = gridDim.x, num_splits = gridDim.z;
  const int width = warpSize, lane_id = threadIdx.x % width, warp = threadIdx.x / width;
  const int num_warps = blockDim.x / width;

  const int lane = lane_of_token(cu_q_lens, num_lanes, token);
  const int q_len = cu_q_lens[lane + 1] - cu_q_lens[lane];
  const int position = ctx_lens[lane] - q_len + (token - cu_q_lens[lane]);
  const int key_begin = split * split_len;
  const int key_end = min(position + 1, key_begin + split_len);  // causal: keys 0..position
  const int kv_head = head / (num_heads / num_kv_heads);
  const int* table = block_tables + static_cast<size_t>(lane) * max_blocks;

  float qv[kMaxPerLane], acc[kMaxPerLane];
  const T* q_row = q + (static_cast<size_t>(token) * num_heads + head) * head_dim;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane_id + i * width;
    qv[i] = d < head_dim ? ss_to_float(q_row[d]) * scale : 0.f;
    acc[i] = 0.f;
  }

  float running_max = -INFINITY, running_sum = 0.f;
  for (int key = key_begin + warp; key < key_end; key += num_warps) {
    const int block = table[key / block_size];
    const size_t row = (static_cast<size_t>(block) * block_size + key % block_size) * num_kv_heads + kv_head;
    const T* k_row = k_cache + row * head_dim;
    const T* v_row = v_cache + row * head_dim;
    float score = 0.f;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane_id + i * width;
      if (d < head_dim) score += qv[i] * ss_to_float(k_row[d]);
    }
    score = ss_warp_sum(score);
    const float new_max = fmaxf(running_max, score);
    const float rescale = expf(running_max - new_max);  // 0 on the first key (max was -inf)
    const float weight = expf(score - new_max);
    running_sum = running_sum * rescale + weight;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane_id + i * width;
      if (d < head_dim) acc[i] = acc[i] * rescale + weight * ss_to_float(v_row[d]);
    }
    running_max = new_max;
  }

  float* warp_max = smem;
  float* warp_sum = smem + num_warps;
  float* warp_acc = smem + 2 * num_warps;
  if (lane_id == 0) {
    warp_max[warp] = running_max;
    warp_sum[warp] = running_sum;
  }
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane_id + i * width;
    if (d < head_dim) warp_acc[warp * head_dim + d] = acc[i];
  }
  __syncthreads();

  float block_max = -INFINITY;
  for (int w = 0; w < num_warps; ++w) block_max = fmaxf(block_max, warp_max[w]);
  const size_t out_row = static_cast<size_t>(token) * num_heads + head;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float sum = 0.f, value = 0.f;
    if (block_max != -INFINITY) {  // a split past this row's last key saw nothing
      for (int w = 0; w < num_warps; ++w) {
        const float factor = expf(warp_max[w] - block_max);
        sum += warp_sum[w] * factor;
        value += warp_acc[w * head_dim + d] * factor;
      }
    }
    if (num_splits == 1) {
      out[out_row * head_dim + d] = ss_from_float<T>(sum > 0.f ? value / sum : 0.f);
    } else {
      const size_t split_row = static_cast<size_t>(split) * num_tokens * num_heads + out_row;
      split_acc[split_row * head_dim + d] = value;
      if (d == 0) {
        split_max_sum[split_row * 2] = block_max;
        split_max_sum[split_row * 2 + 1] = sum;
      }
    }
  }
}

// Merges the per-split partial softmaxes of one (token, head) row.
template <typename T>
__global__ void merge_splits_kernel(
    T* __restrict__ out,                      // [num_tokens, num_heads, head_dim]
    const float* __restrict__ split_acc,      // [num_splits, num_tokens, num_heads, head_dim]
    const float* __restrict__ split_max_sum,  // [num_splits, num_tokens, num_heads, 2]
    int num_splits, int num_heads, int head_dim) {
  const int num_tokens = gridDim.x;
  const size_t out_row = static_cast<size_t>(blockIdx.x) * num_heads + blockIdx.y;
  const size_t split_stride = static_cast<size_t>(num_tokens) * num_heads;
  float total_max = -INFINITY;
  for (int s = 0; s < num_splits; ++s) total_max = fmaxf(total_max, split_max_sum[(s * split_stride + out_row) * 2]);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float sum = 0.f, value = 0.f;
    for (int s = 0; s < num_splits; ++s) {
      const size_t row = s * split_stride + out_row;
      const float split_max = split_max_sum[row * 2];
      if (split_max == -INFINITY) continue;
      const float factor = expf(split_max - total_max);
      sum += split_max_sum[row * 2 + 1] * factor;
      value += split_acc[row * head_dim + d] * factor;
    }
    out[out_row * head_dim + d] = ss_from_float<T>(sum > 0.f ? value / sum : 0.f);
  }
}

template <typename T>
ss_error_t launch(void* out, float* split_acc, float* split_max_sum, const void* q, const void* k_cache,
                  const void* v_cache, const int* block_tables, const int* cu_q_lens, const int* ctx_lens,
                  int num_tokens, int num_lanes, int num_heads, int num_kv_heads, int head_dim,
                  int block_size, int max_blocks, int num_splits, int split_len, float scale,
                  ss_stream_t stream) {
  int width = 0;
  ss_error_t err = ss_host_warp_size(&width);
  if (err != ss_success) return err;
  const dim3 grid(num_tokens, num_heads, num_splits);
  const dim3 block(kWarpsPerBlock * width);
  const size_t smem = sizeof(float) * kWarpsPerBlock * (2 + head_dim);
  paged_attention_kernel<T><<<grid, block, smem, stream>>>(
      static_cast<T*>(out), split_acc, split_max_sum, static_cast<const T*>(q),
      static_cast<const T*>(k_cache), static_cast<const T*>(v_cache), block_tables, cu_q_lens, ctx_lens,
      num_lanes, num_heads, num_kv_heads, head_dim, block_size, max_blocks, split_len, scale);
  if (num_splits > 1) {
    merge_splits_kernel<T><<<dim3(num_tokens, num_heads), dim3(head_dim < 256 ? head_dim : 256), 0, stream>>>(
        static_cast<T*>(out), split_acc, split_max_sum, num_splits, num_heads, head_dim);
  }
  return ss_get_last_error();
}

}  // namespace

// Layout is checked in Python (hip_kernels/ops.py) before this is called; returns an error code.
extern "C" int ss_paged_attention(
    int dtype, void* out, float* split_acc, float* split_max_sum, const void* q, const void* k_cache,
    const void* v_cache, const int* block_tables, const int* cu_q_lens, const int* ctx_lens,
    int num_tokens, int num_lanes, int num_heads, int num_kv_heads, int head_dim, int block_size,
    int max_blocks, int num_splits, int split_len, float scale, void* stream) {
  if (num_tokens == 0) return ss_success;
  auto s = static_cast<ss_stream_t>(stream);
#define SS_LAUNCH(T)                                                                                  \
  launch<T>(out, split_acc, split_max_sum, q, k_cache, v_cache, block_tables, cu_q_lens, ctx_lens,   \
            num_tokens, num_lanes, num_heads, num_kv_heads, head_dim, block_size, max_blocks,        \
            num_splits, split_len, scale, s)
  switch (dtype) {
    case SS_F32: return SS_LAUNCH(float);
    case SS_F16: return SS_LAUNCH(__half);
    case SS_BF16: return SS_LAUNCH(ss_bf16);
  }
#undef SS_LAUNCH
  return ss_invalid_value;  // unknown dtype code
}

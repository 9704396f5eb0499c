// paged_attention.hip: attention of a ragged verify/decode batch over a paged KV cache.
//
// One block per (row tile, KV head, context split). A row tile is up to kRowsPerBlock query rows
// of one lane that share a KV head: its 1 + k_i tokens times the heads of the GQA group. The block
// streams its keys through shared memory a chunk at a time, so a K/V row is read from memory once
// per tile, not once per query row (the first version did that, and lost to the torch reference
// by up to 3x at long contexts with drafts on an H100). Each warp owns kRowsPerWarp rows with an
// online softmax each, its lanes holding head_dim / warpSize accumulators per row. When the grid
// would be too small to fill the device (few lanes, long contexts) the context is split and a
// second kernel merges the splits (split-K, "flash decoding"). fp32 accumulation for f32/f16/bf16.
//
// Spec: hip_kernels/reference.py::paged_attention (the torch reference is the definition).
// Build: python -m hip_kernels.build --check   (hipcc gfx1030 and nvcc sm_90, no GPU needed)
// Check: hip_kernels/check_gpu.sh on a GPU machine (kernel vs reference, then timings).
#include "portability.h"

#include <math.h>

namespace {

constexpr int kMaxPerLane = 8;  // head_dim <= 8 * warpSize (256 on wave32); checked on the host.
constexpr int kWarpsPerBlock = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kRowsPerBlock = kWarpsPerBlock * kRowsPerWarp;
constexpr int kChunkFloats = 4096;  // keys per chunk x head_dim: 16 KB for K and 16 KB for V

// The lane that row tile `tile` belongs to, and that lane's first tile. Tiles are numbered lane by
// lane, ceil(q_len * group / kRowsPerBlock) per lane. -1 past the last: the grid is an upper bound.
__device__ int lane_of_tile(const int* cu_q_lens, int num_lanes, int group, int tile, int* first_tile) {
  int first = 0;
  for (int lane = 0; lane < num_lanes; ++lane) {
    const int tiles = ((cu_q_lens[lane + 1] - cu_q_lens[lane]) * group + kRowsPerBlock - 1) / kRowsPerBlock;
    if (tile < first + tiles) {
      *first_tile = first;
      return lane;
    }
    first += tiles;
  }
  return -1;
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
    int num_tokens, int num_lanes, int num_heads, int num_kv_heads, int head_dim, int block_size,
    int max_blocks, int split_len, int chunk, float scale) {
  extern __shared__ float smem[];  // [chunk, head_dim] keys, then [chunk, head_dim] values
  float* k_tile = smem;
  float* v_tile = smem + chunk * head_dim;
  const int kv_head = blockIdx.y, split = blockIdx.z, num_splits = gridDim.z;
  const int group = num_heads / num_kv_heads;
  int first_tile = 0;
  const int lane = lane_of_tile(cu_q_lens, num_lanes, group, blockIdx.x, &first_tile);
  if (lane < 0) return;  // the same for the whole block, and before any barrier
  const int width = warpSize, lane_id = threadIdx.x % width, warp = threadIdx.x / width;
  const int q_start = cu_q_lens[lane], q_len = cu_q_lens[lane + 1] - q_start;
  const int first_position = ctx_lens[lane] - q_len;  // the lane's first query token's position
  const int tile_row = (blockIdx.x - first_tile) * kRowsPerBlock;
  const int tile_rows = min(kRowsPerBlock, q_len * group - tile_row);
  // Keys any row of the tile sees: up to its last row's position (causal), within the split.
  const int key_begin = split * split_len;
  const int key_end = min(first_position + (tile_row + tile_rows - 1) / group + 1, key_begin + split_len);
  const int* table = block_tables + static_cast<size_t>(lane) * max_blocks;

  // This warp's rows are the tile's rows warp + m * kWarpsPerBlock. Row r of a lane is its token
  // r / group and head kv_head * group + r % group; position -1 marks no row.
  float qv[kRowsPerWarp][kMaxPerLane], acc[kRowsPerWarp][kMaxPerLane];
  float running_max[kRowsPerWarp], running_sum[kRowsPerWarp];
  int position[kRowsPerWarp];
  size_t out_row[kRowsPerWarp];
#pragma unroll
  for (int m = 0; m < kRowsPerWarp; ++m) {
    const int row = tile_row + warp + m * kWarpsPerBlock;
    const bool real = warp + m * kWarpsPerBlock < tile_rows;
    running_max[m] = -INFINITY;
    running_sum[m] = 0.f;
    position[m] = real ? first_position + row / group : -1;
    out_row[m] = real ? static_cast<size_t>(q_start + row / group) * num_heads + kv_head * group + row % group : 0;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane_id + i * width;
      qv[m][i] = real && d < head_dim ? ss_to_float(q[out_row[m] * head_dim + d]) * scale : 0.f;
      acc[m][i] = 0.f;
    }
  }

  for (int chunk_begin = key_begin; chunk_begin < key_end; chunk_begin += chunk) {
    const int keys = min(chunk, key_end - chunk_begin);
    __syncthreads();  // every warp is done with the previous chunk
    for (int idx = threadIdx.x; idx < keys * head_dim; idx += blockDim.x) {
      const int key = chunk_begin + idx / head_dim, d = idx % head_dim;
      const size_t slot = static_cast<size_t>(table[key / block_size]) * block_size + key % block_size;
      const size_t at = (slot * num_kv_heads + kv_head) * head_dim + d;
      k_tile[idx] = ss_to_float(k_cache[at]);
      v_tile[idx] = ss_to_float(v_cache[at]);
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < kRowsPerWarp; ++m) {
      const int row_keys = min(keys, position[m] + 1 - chunk_begin);  // causal; <= 0 for no row
      for (int j = 0; j < row_keys; ++j) {
        const float* k_row = k_tile + j * head_dim;
        const float* v_row = v_tile + j * head_dim;
        float score = 0.f;
#pragma unroll
        for (int i = 0; i < kMaxPerLane; ++i) {
          const int d = lane_id + i * width;
          if (d < head_dim) score += qv[m][i] * k_row[d];
        }
        score = ss_warp_sum(score);
        const float new_max = fmaxf(running_max[m], score);
        const float rescale = expf(running_max[m] - new_max);  // 0 on the first key (max was -inf)
        const float weight = expf(score - new_max);
        running_sum[m] = running_sum[m] * rescale + weight;
#pragma unroll
        for (int i = 0; i < kMaxPerLane; ++i) {
          const int d = lane_id + i * width;
          if (d < head_dim) acc[m][i] = acc[m][i] * rescale + weight * v_row[d];
        }
        running_max[m] = new_max;
      }
    }
  }

#pragma unroll
  for (int m = 0; m < kRowsPerWarp; ++m) {
    if (position[m] < 0) continue;
    // A split wholly past this row's position saw no key: max -inf, sum 0, which the merge skips.
    const size_t split_row = static_cast<size_t>(split) * num_tokens * num_heads + out_row[m];
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane_id + i * width;
      if (d >= head_dim) continue;
      if (num_splits == 1) {
        out[out_row[m] * head_dim + d] = ss_from_float<T>(running_sum[m] > 0.f ? acc[m][i] / running_sum[m] : 0.f);
      } else {
        split_acc[split_row * head_dim + d] = acc[m][i];
      }
    }
    if (num_splits > 1 && lane_id == 0) {
      split_max_sum[split_row * 2] = running_max[m];
      split_max_sum[split_row * 2 + 1] = running_sum[m];
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
  const int group = num_heads / num_kv_heads;
  const int max_tiles = (num_tokens * group + kRowsPerBlock - 1) / kRowsPerBlock + num_lanes;
  const int chunk = kChunkFloats / head_dim;
  const dim3 grid(max_tiles, num_kv_heads, num_splits);
  const dim3 block(kWarpsPerBlock * width);
  const size_t smem = sizeof(float) * 2 * chunk * head_dim;
  paged_attention_kernel<T><<<grid, block, smem, stream>>>(
      static_cast<T*>(out), split_acc, split_max_sum, static_cast<const T*>(q),
      static_cast<const T*>(k_cache), static_cast<const T*>(v_cache), block_tables, cu_q_lens, ctx_lens,
      num_tokens, num_lanes, num_heads, num_kv_heads, head_dim, block_size, max_blocks, split_len, chunk,
      scale);
  if (num_splits > 1) {
    merge_splits_kernel<T><<<dim3(num_tokens, num_heads), dim3(head_dim < 256 ? head_dim : 256), 0, stream>>>(
        static_cast<T*>(out), split_acc, split_max_sum, num_splits, num_heads, head_dim);
  }
  return ss_get_last_error();
}

}  // namespace

// Query rows per block, for the host's split plan (hip_kernels/ops.py).
extern "C" int ss_paged_attention_rows_per_block() { return kRowsPerBlock; }

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

// paged_attention.hip: attention of a ragged verify/decode batch over a paged KV cache.
//
// One block per (row tile, KV head, context split). A row tile is up to kRowsPerBlock query rows
// of one lane that share a KV head: its 1 + k_i tokens times the heads of the GQA group. Every
// warp of the block holds all the tile's rows and takes every kWarpsPerBlock-th chunk of
// warpSize keys: each lane scores one key against all rows (so a K row is read once per tile, and
// a chunk's softmax needs two warp reductions per row, not two per key), then the chunk's values
// are summed into per-row accumulators, lanes over head_dim. The warps' partial softmaxes merge
// through shared memory. When the grid would be too small to fill the device (few lanes, long
// contexts) the context is split too and a second kernel merges the splits (split-K, "flash
// decoding"). fp32 accumulation for f32/f16/bf16 storage.
//
// Earlier versions, timed on an H100 against the torch reference (check_gpu.sh): one block per
// query row lost by up to 3x at long contexts with drafts (every row reread its keys); one warp
// per row with a warp reduction per key lost by up to 4x (a serial chain per key).
//
// Spec: hip_kernels/reference.py::paged_attention (the torch reference is the definition).
// Build: python -m hip_kernels.build --check   (hipcc gfx1030 and nvcc sm_90, no GPU needed)
// Check: hip_kernels/check_gpu.sh on a GPU machine (kernel vs reference, then timings).
#include "portability.h"

#include <math.h>

namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kRowsPerBlock = 8;

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

// kPerLane: head_dim / warpSize, rounded up to a power of two (the accumulators each lane holds).
template <typename T, int kPerLane>
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
    int max_blocks, int split_len, float scale) {
  // [kRowsPerBlock, q_stride] scaled queries, zero-padded to whole float4s, then per warp and
  // row: max, sum, [head_dim] values.
  extern __shared__ float smem[];
  const int q_stride = (head_dim + 3) / 4 * 4, state_len = head_dim + 2;
  float* q_tile = smem;
  float* warp_state = smem + kRowsPerBlock * q_stride;
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
  // Row r of the tile is the lane's token (tile_row + r) / group, head kv_head * group + its rest.
  auto out_row = [&](int r) {
    const int row = tile_row + r;
    return static_cast<size_t>(q_start + row / group) * num_heads + kv_head * group + row % group;
  };
  auto kv_offset = [&](int key) {
    const size_t slot = static_cast<size_t>(table[key / block_size]) * block_size + key % block_size;
    return (slot * num_kv_heads + kv_head) * head_dim;
  };

  for (int idx = threadIdx.x; idx < kRowsPerBlock * q_stride; idx += blockDim.x) {
    const int r = idx / q_stride, d = idx % q_stride;
    q_tile[idx] = r < tile_rows && d < head_dim ? ss_to_float(q[out_row(r) * head_dim + d]) * scale : 0.f;
  }
  __syncthreads();

  int position[kRowsPerBlock];  // -1: no row
  float row_max[kRowsPerBlock], row_sum[kRowsPerBlock], acc[kRowsPerBlock][kPerLane];
#pragma unroll
  for (int r = 0; r < kRowsPerBlock; ++r) {
    position[r] = r < tile_rows ? first_position + (tile_row + r) / group : -1;
    row_max[r] = -INFINITY;
    row_sum[r] = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[r][i] = 0.f;
  }

  for (int chunk_begin = key_begin + warp * width; chunk_begin < key_end;
       chunk_begin += kWarpsPerBlock * width) {
    const int key = chunk_begin + lane_id, chunk_keys = min(width, key_end - chunk_begin);
    float score[kRowsPerBlock];
#pragma unroll
    for (int r = 0; r < kRowsPerBlock; ++r) score[r] = 0.f;
    if (lane_id < chunk_keys) {
      const T* k_row = k_cache + kv_offset(key);
      for (int d = 0; d < head_dim; d += 4) {  // a head_dim that is no multiple of 4 reads zeros past it
        const float k0 = ss_to_float(k_row[d]), k1 = d + 1 < head_dim ? ss_to_float(k_row[d + 1]) : 0.f;
        const float k2 = d + 2 < head_dim ? ss_to_float(k_row[d + 2]) : 0.f;
        const float k3 = d + 3 < head_dim ? ss_to_float(k_row[d + 3]) : 0.f;
#pragma unroll
        for (int r = 0; r < kRowsPerBlock; ++r) {
          const float4 qd = *reinterpret_cast<const float4*>(q_tile + r * q_stride + d);
          score[r] += qd.x * k0 + qd.y * k1 + qd.z * k2 + qd.w * k3;
        }
      }
    }
    float weight[kRowsPerBlock];  // this lane's key's softmax weight for each row
#pragma unroll
    for (int r = 0; r < kRowsPerBlock; ++r) {
      const float s = lane_id < chunk_keys && key <= position[r] ? score[r] : -INFINITY;
      const float chunk_max = ss_warp_max(s);
      weight[r] = 0.f;
      if (chunk_max == -INFINITY) continue;  // the whole warp: this row sees no key of the chunk
      const float new_max = fmaxf(row_max[r], chunk_max);
      const float rescale = expf(row_max[r] - new_max);  // 0 while the max was -inf
      weight[r] = expf(s - new_max);
      row_sum[r] = row_sum[r] * rescale + ss_warp_sum(weight[r]);
      row_max[r] = new_max;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) acc[r][i] *= rescale;
    }
    for (int j = 0; j < chunk_keys; ++j) {
      const T* v_row = v_cache + kv_offset(chunk_begin + j);
      float v[kPerLane];
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int d = lane_id + i * width;
        v[i] = d < head_dim ? ss_to_float(v_row[d]) : 0.f;
      }
#pragma unroll
      for (int r = 0; r < kRowsPerBlock; ++r) {
        const float w = SS_SHFL(weight[r], j);
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) acc[r][i] += w * v[i];
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerBlock; ++r) {
    float* state = warp_state + (warp * kRowsPerBlock + r) * state_len;
    if (lane_id == 0) {
      state[0] = row_max[r];
      state[1] = row_sum[r];
    }
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane_id + i * width;
      if (d < head_dim) state[2 + d] = acc[r][i];
    }
  }
  __syncthreads();

  // Merge the warps. A row that saw no key in this split keeps max -inf and sum 0 (the merge of
  // splits skips it).
  for (int idx = threadIdx.x; idx < tile_rows * head_dim; idx += blockDim.x) {
    const int r = idx / head_dim, d = idx % head_dim;
    float total_max = -INFINITY;
    for (int w = 0; w < kWarpsPerBlock; ++w) total_max = fmaxf(total_max, warp_state[(w * kRowsPerBlock + r) * state_len]);
    float sum = 0.f, value = 0.f;
    for (int w = 0; w < kWarpsPerBlock && total_max != -INFINITY; ++w) {
      const float* state = warp_state + (w * kRowsPerBlock + r) * state_len;
      if (state[0] == -INFINITY) continue;
      const float factor = expf(state[0] - total_max);
      sum += state[1] * factor;
      value += state[2 + d] * factor;
    }
    if (num_splits == 1) {
      out[out_row(r) * head_dim + d] = ss_from_float<T>(sum > 0.f ? value / sum : 0.f);
    } else {
      const size_t split_row = static_cast<size_t>(split) * num_tokens * num_heads + out_row(r);
      split_acc[split_row * head_dim + d] = value;
      if (d == 0) {
        split_max_sum[split_row * 2] = total_max;
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

template <typename T, int kPerLane>
void launch_rows(void* out, float* split_acc, float* split_max_sum, const void* q, const void* k_cache,
                 const void* v_cache, const int* block_tables, const int* cu_q_lens, const int* ctx_lens,
                 int num_tokens, int num_lanes, int num_heads, int num_kv_heads, int head_dim,
                 int block_size, int max_blocks, int num_splits, int split_len, float scale, int width,
                 ss_stream_t stream) {
  const int max_tiles = (num_tokens * (num_heads / num_kv_heads) + kRowsPerBlock - 1) / kRowsPerBlock + num_lanes;
  const int q_stride = (head_dim + 3) / 4 * 4;
  const size_t smem = sizeof(float) * (kRowsPerBlock * q_stride + kWarpsPerBlock * kRowsPerBlock * (head_dim + 2));
  paged_attention_kernel<T, kPerLane><<<dim3(max_tiles, num_kv_heads, num_splits), dim3(kWarpsPerBlock * width), smem, stream>>>(
      static_cast<T*>(out), split_acc, split_max_sum, static_cast<const T*>(q),
      static_cast<const T*>(k_cache), static_cast<const T*>(v_cache), block_tables, cu_q_lens, ctx_lens,
      num_tokens, num_lanes, num_heads, num_kv_heads, head_dim, block_size, max_blocks, split_len, scale);
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
  const int per_lane = (head_dim + width - 1) / width;  // <= 8, checked on the host
#define SS_LAUNCH_ROWS(N)                                                                              \
  launch_rows<T, N>(out, split_acc, split_max_sum, q, k_cache, v_cache, block_tables, cu_q_lens,      \
                    ctx_lens, num_tokens, num_lanes, num_heads, num_kv_heads, head_dim, block_size,   \
                    max_blocks, num_splits, split_len, scale, width, stream)
  if (per_lane <= 1) SS_LAUNCH_ROWS(1);
  else if (per_lane <= 2) SS_LAUNCH_ROWS(2);
  else if (per_lane <= 4) SS_LAUNCH_ROWS(4);
  else SS_LAUNCH_ROWS(8);
#undef SS_LAUNCH_ROWS
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

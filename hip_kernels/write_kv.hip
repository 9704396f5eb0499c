// write_kv.hip: scatter this step's new K/V rows into the paged cache by slot mapping.
//
// Versions
//   v1 (this file): one block per new token, threads striding over num_kv_heads * head_dim
//       elements of K and V (contiguous rows, so loads and stores coalesce). A negative slot means
//       "no slot" (a padding row) and is skipped, as in the reference.
//
// Spec: hip_kernels/reference.py::write_kv
// Build: python -m hip_kernels.build --check   (hipcc gfx1030 and nvcc sm_90, no GPU needed)
// Check: hip_kernels/check_gpu.sh on a GPU machine.
#include "portability.h"

namespace {

template <typename T>
__global__ void write_kv_kernel(
    const T* __restrict__ k,               // [num_tokens, num_kv_heads, head_dim]
    const T* __restrict__ v,               // [num_tokens, num_kv_heads, head_dim]
    T* __restrict__ k_cache,               // [num_blocks * block_size, num_kv_heads, head_dim]
    T* __restrict__ v_cache,               // [num_blocks * block_size, num_kv_heads, head_dim]
    const int64_t* __restrict__ slot_mapping,  // [num_tokens]
    int row_elems) {                        // num_kv_heads * head_dim
  const int64_t slot = slot_mapping[blockIdx.x];
  if (slot < 0) return;
  const T* k_src = k + static_cast<size_t>(blockIdx.x) * row_elems;
  const T* v_src = v + static_cast<size_t>(blockIdx.x) * row_elems;
  T* k_dst = k_cache + static_cast<size_t>(slot) * row_elems;
  T* v_dst = v_cache + static_cast<size_t>(slot) * row_elems;
  for (int i = threadIdx.x; i < row_elems; i += blockDim.x) {
    k_dst[i] = k_src[i];
    v_dst[i] = v_src[i];
  }
}

template <typename T>
ss_error_t launch(const void* k, const void* v, void* k_cache, void* v_cache, const int64_t* slot_mapping,
                  int num_tokens, int row_elems, ss_stream_t stream) {
  const int threads = row_elems < 256 ? row_elems : 256;
  write_kv_kernel<T><<<num_tokens, threads, 0, stream>>>(
      static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(k_cache), static_cast<T*>(v_cache),
      slot_mapping, row_elems);
  return ss_get_last_error();
}

}  // namespace

// Only the element size matters for a copy, but the dtype code keeps one calling convention.
extern "C" int ss_write_kv(int dtype, const void* k, const void* v, void* k_cache, void* v_cache,
                           const int64_t* slot_mapping, int num_tokens, int row_elems, void* stream) {
  if (num_tokens == 0 || row_elems == 0) return ss_success;
  auto s = static_cast<ss_stream_t>(stream);
  switch (dtype) {
    case SS_F32: return launch<float>(k, v, k_cache, v_cache, slot_mapping, num_tokens, row_elems, s);
    case SS_F16: return launch<__half>(k, v, k_cache, v_cache, slot_mapping, num_tokens, row_elems, s);
    case SS_BF16: return launch<ss_bf16>(k, v, k_cache, v_cache, slot_mapping, num_tokens, row_elems, s);
  }
  return ss_invalid_value;
}

// portability.h: lets one kernel source build with hipcc (ROCm, HIP_PLATFORM=amd) and with nvcc
// (CUDA). Everything a kernel needs from the runtime goes through the ss_* names below, so the
// kernels never spell hip* or cuda* themselves.
//
// Storage types: float, __half (both toolkits ship it) and ss_bf16, our own 16-bit brain float,
// because ROCm 5.2 (Debian's hipcc) has no hip_bf16.h and torch's bf16 is just the top 16 bits of
// an IEEE float. All arithmetic happens in fp32.
#pragma once
#include <stdint.h>

#if defined(__HIP__) || defined(__HIPCC__)
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
typedef hipStream_t ss_stream_t;
typedef hipError_t ss_error_t;
#define ss_success hipSuccess
#define ss_invalid_value hipErrorInvalidValue
#define ss_get_last_error hipGetLastError
#define ss_get_error_name hipGetErrorName
#define ss_get_device hipGetDevice
#define SS_WARP_SIZE_ATTR hipDeviceAttributeWarpSize
#define ss_device_get_attribute hipDeviceGetAttribute
// HIP's shuffle takes the whole wave implicitly (width defaults to warpSize).
#define SS_SHFL_XOR(value, mask) __shfl_xor((value), (mask))
#else
#include <cuda_runtime.h>
#include <cuda_fp16.h>
typedef cudaStream_t ss_stream_t;
typedef cudaError_t ss_error_t;
#define ss_success cudaSuccess
#define ss_invalid_value cudaErrorInvalidValue
#define ss_get_last_error cudaGetLastError
#define ss_get_error_name cudaGetErrorName
#define ss_get_device cudaGetDevice
#define SS_WARP_SIZE_ATTR cudaDevAttrWarpSize
#define ss_device_get_attribute cudaDeviceGetAttribute
#define SS_SHFL_XOR(value, mask) __shfl_xor_sync(0xffffffffu, (value), (mask))
#endif

// dtype codes shared with hip_kernels/library.py (keep in sync).
enum ss_dtype { SS_F32 = 0, SS_F16 = 1, SS_BF16 = 2 };

struct ss_bf16 {
  uint16_t bits;
};

__device__ __forceinline__ float ss_to_float(float x) { return x; }
__device__ __forceinline__ float ss_to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float ss_to_float(ss_bf16 x) {
  return __uint_as_float(static_cast<uint32_t>(x.bits) << 16);
}

template <typename T>
__device__ __forceinline__ T ss_from_float(float x);
template <>
__device__ __forceinline__ float ss_from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half ss_from_float<__half>(float x) { return __float2half(x); }
template <>
__device__ __forceinline__ ss_bf16 ss_from_float<ss_bf16>(float x) {
  // Round to nearest even, as torch does; NaN stays a (quiet) NaN.
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return ss_bf16{static_cast<uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return ss_bf16{static_cast<uint16_t>(u >> 16)};
}

// Sum over the whole warp/wave, whatever its width (32 on RDNA and NVIDIA, 64 on CDNA).
__device__ __forceinline__ float ss_warp_sum(float x) {
  for (int mask = warpSize / 2; mask > 0; mask /= 2) x += SS_SHFL_XOR(x, mask);
  return x;
}

// The launch helpers read the wave width from the device rather than assume it.
static inline ss_error_t ss_host_warp_size(int* width) {
  int device = 0;
  ss_error_t err = ss_get_device(&device);
  if (err != ss_success) return err;
  return ss_device_get_attribute(width, SS_WARP_SIZE_ATTR, device);
}

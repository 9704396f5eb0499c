// verify.hip: per-lane speculative verification on the device, so the host reads back two small
// tensors once per step instead of syncing per lane.
//
// Versions
//   greedy v1: one thread per lane walks its drafts while they equal the target argmax.
//   rejection v1: one block per lane. Thread 0 runs the accept test u * q(x) < p(x) (that is,
//       u < min(1, p/q) without a division) over the lane's drafts; then the block draws the
//       correction from max(p - q, 0) or the bonus from p by inverse CDF on the caller's uniform:
//       per-thread chunk sums, a serial prefix over chunk sums, and the first crossing wins.
//       No draft probabilities (null) means one-hot drafts, as prompt lookup proposes.
//
// Spec: hip_kernels/reference.py::verify_greedy / verify_rejection
// Build: python -m hip_kernels.build --check   (hipcc gfx1030 and nvcc sm_90, no GPU needed)
// Check: hip_kernels/check_gpu.sh on a GPU machine.
#include "portability.h"

namespace {

constexpr int kSampleThreads = 256;

__global__ void verify_greedy_kernel(
    int64_t* __restrict__ accepted,            // [num_lanes]
    int64_t* __restrict__ next_token,          // [num_lanes]
    const int64_t* __restrict__ draft_tokens,  // [total_drafts]
    const int* __restrict__ cu_draft_lens,     // [num_lanes + 1]
    const int64_t* __restrict__ target_argmax, // [total_drafts + num_lanes]
    int num_lanes) {
  const int lane = blockIdx.x * blockDim.x + threadIdx.x;
  if (lane >= num_lanes) return;
  const int first = cu_draft_lens[lane], k = cu_draft_lens[lane + 1] - first;
  const int64_t* target = target_argmax + first + lane;  // this lane's k + 1 rows
  int a = 0;
  while (a < k && draft_tokens[first + a] == target[a]) ++a;
  accepted[lane] = a;
  next_token[lane] = target[a];
}

// Weight of token t in the distribution the final token is drawn from.
__device__ __forceinline__ float sample_weight(const float* p, const float* q, int64_t one_hot, bool residual,
                                               int t) {
  if (!residual) return p[t];
  const float q_t = q != nullptr ? q[t] : (t == one_hot ? 1.f : 0.f);
  return fmaxf(p[t] - q_t, 0.f);
}

__global__ void verify_rejection_kernel(
    int64_t* __restrict__ accepted,              // [num_lanes]
    int64_t* __restrict__ next_token,            // [num_lanes]
    const int64_t* __restrict__ draft_tokens,    // [total_drafts]
    const int* __restrict__ cu_draft_lens,       // [num_lanes + 1]
    const float* __restrict__ draft_probs,       // [total_drafts, vocab] or null (one-hot drafts)
    const float* __restrict__ target_probs,      // [total_drafts + num_lanes, vocab]
    const float* __restrict__ accept_uniforms,   // [total_drafts]
    const float* __restrict__ sample_uniforms,   // [num_lanes]
    int vocab) {
  __shared__ float chunk_prefix[kSampleThreads];
  __shared__ int s_accepted, s_residual, s_token, s_last_positive;
  __shared__ float s_threshold;
  const int lane = blockIdx.x, tid = threadIdx.x;
  const int first = cu_draft_lens[lane], k = cu_draft_lens[lane + 1] - first;
  const size_t target_first = static_cast<size_t>(first) + lane;

  if (tid == 0) {
    int a = 0;
    for (; a < k; ++a) {
      const int64_t x = draft_tokens[first + a];
      const float p = target_probs[(target_first + a) * vocab + x];
      const float q = draft_probs != nullptr ? draft_probs[static_cast<size_t>(first + a) * vocab + x] : 1.f;
      if (!(accept_uniforms[first + a] * q < p)) break;
    }
    s_accepted = a;
    s_residual = a < k;
    s_token = vocab;
    s_last_positive = 0;
    accepted[lane] = a;
  }
  __syncthreads();

  const int a = s_accepted;
  const float* p = target_probs + (target_first + a) * vocab;
  const float* q = (s_residual && draft_probs != nullptr) ? draft_probs + static_cast<size_t>(first + a) * vocab : nullptr;
  const int64_t one_hot = s_residual ? draft_tokens[first + a] : -1;
  const int chunk = (vocab + kSampleThreads - 1) / kSampleThreads;
  const int begin = min(vocab, tid * chunk), end = min(vocab, begin + chunk);

  float chunk_sum = 0.f;
  for (int t = begin; t < end; ++t) chunk_sum += sample_weight(p, q, one_hot, s_residual, t);
  chunk_prefix[tid] = chunk_sum;
  __syncthreads();
  if (tid == 0) {
    float total = 0.f;
    for (int i = 0; i < kSampleThreads; ++i) total += chunk_prefix[i];
    // p == q leaves nothing to correct with; the reference then draws from p as well.
    if (s_residual && !(total > 0.f)) s_residual = 0;
  }
  __syncthreads();
  const bool residual = s_residual;
  if (a < k && !residual) {  // the residual was abandoned: chunk sums of p instead
    chunk_sum = 0.f;
    for (int t = begin; t < end; ++t) chunk_sum += p[t];
    chunk_prefix[tid] = chunk_sum;
    __syncthreads();
  }
  if (tid == 0) {
    float running = 0.f;
    for (int i = 0; i < kSampleThreads; ++i) {
      const float sum = chunk_prefix[i];
      chunk_prefix[i] = running;  // exclusive prefix
      running += sum;
    }
    s_threshold = sample_uniforms[lane] * running;
  }
  __syncthreads();

  float running = chunk_prefix[tid];
  for (int t = begin; t < end; ++t) {
    const float w = sample_weight(p, q, one_hot, residual, t);
    if (w > 0.f) atomicMax(&s_last_positive, t);
    running += w;
    if (w > 0.f && running > s_threshold) {
      atomicMin(&s_token, t);
      break;
    }
  }
  __syncthreads();
  if (tid == 0) next_token[lane] = s_token < vocab ? s_token : s_last_positive;
}

}  // namespace

extern "C" int ss_verify_greedy(int64_t* accepted, int64_t* next_token, const int64_t* draft_tokens,
                                const int* cu_draft_lens, const int64_t* target_argmax, int num_lanes,
                                void* stream) {
  if (num_lanes == 0) return ss_success;
  const int threads = 128;
  verify_greedy_kernel<<<(num_lanes + threads - 1) / threads, threads, 0, static_cast<ss_stream_t>(stream)>>>(
      accepted, next_token, draft_tokens, cu_draft_lens, target_argmax, num_lanes);
  return ss_get_last_error();
}

extern "C" int ss_verify_rejection(int64_t* accepted, int64_t* next_token, const int64_t* draft_tokens,
                                   const int* cu_draft_lens, const float* draft_probs, const float* target_probs,
                                   const float* accept_uniforms, const float* sample_uniforms, int num_lanes,
                                   int vocab, void* stream) {
  if (num_lanes == 0) return ss_success;
  verify_rejection_kernel<<<num_lanes, kSampleThreads, 0, static_cast<ss_stream_t>(stream)>>>(
      accepted, next_token, draft_tokens, cu_draft_lens, draft_probs, target_probs, accept_uniforms,
      sample_uniforms, vocab);
  return ss_get_last_error();
}

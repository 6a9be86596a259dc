// Philox words -> values, with the same transform as the CPU backend; and the fused
// dropout, which draws its own words.
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/philox_state.cuh"
#include "ops/random_transform.hpp"

namespace brrr::kernels {

namespace {
namespace rt = ::brrr::random_transform;

// Element i of a normal draw: the cosine (i even) or sine (i odd) half of its pair's
// Box-Muller draw (random_transform::normal_pair_f32 / _f64, the CPU's arithmetic), from the
// pair's words word(k). Each thread computes its element's pair and keeps one half, so the
// launch stays one thread per element.
template <class T, class Word> __device__ __forceinline__ T normal_element(std::int64_t i, Word&& word) {
  const std::int64_t j = i / 2;
  if constexpr (std::is_same_v<T, double>) {
    double z0, z1;
    rt::normal_pair_f64(word(4 * j), word(4 * j + 1), word(4 * j + 2), word(4 * j + 3), z0, z1);
    return i % 2 == 0 ? z0 : z1;
  } else {
    float z0, z1;
    rt::normal_pair_f32(word(2 * j), word(2 * j + 1), z0, z1);
    return narrow_to<T>(i % 2 == 0 ? z0 : z1);
  }
}

template <class T> __global__ void transform(T* out, const std::uint32_t* w, Distribution dist, std::int64_t low,
                                             std::int64_t high, std::int64_t n) {
  pdl_begin();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(blockDim.x) * gridDim.x) {
    if (dist == Distribution::uniform) {
      if constexpr (std::is_same_v<T, double>) out[i] = rt::uniform53(w[2 * i], w[2 * i + 1]);
      else if constexpr (std::is_same_v<T, float>) out[i] = rt::uniform_bits(w[i], 24);
      else if constexpr (std::is_same_v<T, __half>) out[i] = __float2half_rn(rt::uniform_bits(w[i], 11));
      else if constexpr (std::is_same_v<T, __nv_bfloat16>) out[i] = __float2bfloat16_rn(rt::uniform_bits(w[i], 8));
    } else if (dist == Distribution::normal) {
      if constexpr (is_floating<T>) out[i] = normal_element<T>(i, [&](std::int64_t k) { return w[k]; });
    } else {
      out[i] = narrow_to<T>(rt::integer(w[2 * i], w[2 * i + 1], low, high));
    }
  }
}
// The same values as transform() over cuRAND's words, each word computed here from the
// generator state in device memory (seed_offset[0], seed_offset[1] + extra).
template <class T> __global__ void transform_capturable(T* out, const std::uint64_t* seed_offset, std::uint64_t extra,
                                                        Distribution dist, std::int64_t low, std::int64_t high,
                                                        std::int64_t n) {
  pdl_begin();
  const std::uint64_t seed = seed_offset[0], base = seed_offset[1] + extra;
  auto w = [&](std::int64_t k) { return rt::philox_word(seed, base + static_cast<std::uint64_t>(k)); };
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(blockDim.x) * gridDim.x) {
    if (dist == Distribution::uniform) {
      if constexpr (std::is_same_v<T, double>) out[i] = rt::uniform53(w(2 * i), w(2 * i + 1));
      else if constexpr (std::is_same_v<T, float>) out[i] = rt::uniform_bits(w(i), 24);
      else if constexpr (std::is_same_v<T, __half>) out[i] = __float2half_rn(rt::uniform_bits(w(i), 11));
      else if constexpr (std::is_same_v<T, __nv_bfloat16>) out[i] = __float2bfloat16_rn(rt::uniform_bits(w(i), 8));
    } else if (dist == Distribution::normal) {
      if constexpr (is_floating<T>) out[i] = normal_element<T>(i, w);
    } else {
      out[i] = narrow_to<T>(rt::integer(w(2 * i), w(2 * i + 1), low, high));
    }
  }
}

// Dropout: each thread draws one Philox block (4 words: 4 f32-uniform elements, or 2 f64
// ones) when the offset is block-aligned (it always is: draws advance by whole blocks), else
// word by word. keep = the dtype's 1 / (1 - p). The mask is one byte per element (bool), its
// four bytes stored at once when the group is whole.
template <class T>
__global__ void dropout_kernel(T* __restrict__ out, bool* __restrict__ mask, const T* __restrict__ in, std::int64_t n,
                               AttentionDropout d, T keep) {
  pdl_begin();
  std::uint64_t seed, offset;
  philox_state(d, seed, offset);
  constexpr int per = std::is_same_v<T, double> ? 2 : 4;  // elements per block of 4 words
  const float p32 = static_cast<float>(d.p);
  const std::int64_t groups = (n + per - 1) / per;
  for (std::int64_t j = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; j < groups;
       j += std::int64_t(blockDim.x) * gridDim.x) {
    std::uint32_t c[4];
    const std::uint64_t w0 = offset + 4 * static_cast<std::uint64_t>(j);
    if (w0 % 4 == 0) {
      rt::philox_block(seed, w0 / 4, c);
    } else {
#pragma unroll
      for (int r = 0; r < 4; ++r) c[r] = rt::philox_word(seed, w0 + r);
    }
    bool kept[per];
#pragma unroll
    for (int r = 0; r < per; ++r) {
      if constexpr (std::is_same_v<T, double>) kept[r] = rt::uniform53(c[2 * r], c[2 * r + 1]) >= d.p;
      else kept[r] = rt::uniform_bits(c[r], 24) >= p32;
    }
    const std::int64_t e0 = j * per;
    if constexpr (per == 4) {
      if (e0 + 4 <= n) {  // mask is the allocator's (256-byte aligned) and e0 a multiple of 4
        *reinterpret_cast<uchar4*>(mask + e0) = make_uchar4(kept[0], kept[1], kept[2], kept[3]);
#pragma unroll
        for (int r = 0; r < 4; ++r) out[e0 + r] = narrow_to<T>(load(in[e0 + r]) * load(kept[r] ? keep : narrow_to<T>(0.0)));
        continue;
      }
    }
#pragma unroll
    for (int r = 0; r < per; ++r) {
      const std::int64_t e = e0 + r;
      if (e >= n) break;
      mask[e] = kept[r];
      out[e] = narrow_to<T>(load(in[e]) * load(kept[r] ? keep : narrow_to<T>(0.0)));
    }
  }
}

// grad_in = grad_out * (mask ? keep : 0), four elements per thread.
template <class T>
__global__ void dropout_backward_kernel(T* __restrict__ grad_in, const T* __restrict__ grad_out,
                                        const bool* __restrict__ mask, std::int64_t n, T keep) {
  pdl_begin();
  const std::int64_t groups = (n + 3) / 4;
  for (std::int64_t j = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; j < groups;
       j += std::int64_t(blockDim.x) * gridDim.x) {
    const std::int64_t e0 = j * 4;
    if (e0 + 4 <= n) {
      const uchar4 m = *reinterpret_cast<const uchar4*>(mask + e0);
      const unsigned char ms[4] = {m.x, m.y, m.z, m.w};
#pragma unroll
      for (int r = 0; r < 4; ++r)
        grad_in[e0 + r] = narrow_to<T>(load(grad_out[e0 + r]) * load(ms[r] ? keep : narrow_to<T>(0.0)));
    } else {
      for (std::int64_t e = e0; e < n; ++e)
        grad_in[e] = narrow_to<T>(load(grad_out[e]) * load(mask[e] ? keep : narrow_to<T>(0.0)));
    }
  }
}

__global__ void store_pair(std::uint64_t* dst, std::uint64_t a, std::uint64_t b) {
  pdl_begin();
  dst[0] = a;
  dst[1] = b;
}
}  // namespace

int random_capturable(const Operand& out, const std::uint64_t* seed_offset, std::uint64_t extra, Distribution dist,
                      std::int64_t low, std::int64_t high, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  dispatch(out.dtype, [&]<class T>(T*) {
    launch_pdl(transform_capturable<T>, blocks_for(out.numel), 256, 0, s, static_cast<T*>(out.data), seed_offset, extra,
               dist, low, high, out.numel);
  });
  return static_cast<int>(cudaGetLastError());
}

int dropout(const Operand& out, const Operand& mask, const Operand& in, const AttentionDropout& d, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  int status = static_cast<int>(cudaErrorInvalidValue);
  dispatch(in.dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>) {
      const std::int64_t groups = (in.numel + 3) / 4;
      launch_pdl(dropout_kernel<T>, blocks_for(groups), 256, 0, s, static_cast<T*>(out.data),
                 static_cast<bool*>(mask.data), static_cast<const T*>(in.data), in.numel, d,
                 narrow_to<T>(1.0 / (1.0 - d.p)));
      status = static_cast<int>(cudaGetLastError());
    }
  });
  return status;
}

int dropout_backward(const Operand& grad_in, const Operand& grad_out, const Operand& mask, double p, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  int status = static_cast<int>(cudaErrorInvalidValue);
  dispatch(grad_out.dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>) {
      const std::int64_t groups = (grad_out.numel + 3) / 4;
      launch_pdl(dropout_backward_kernel<T>, blocks_for(groups), 256, 0, s, static_cast<T*>(grad_in.data),
                 static_cast<const T*>(grad_out.data), static_cast<const bool*>(mask.data), grad_out.numel,
                 narrow_to<T>(1.0 / (1.0 - p)));
      status = static_cast<int>(cudaGetLastError());
    }
  });
  return status;
}

int store_u64_pair(std::uint64_t* dst, std::uint64_t a, std::uint64_t b, void* stream) {
  launch_pdl(store_pair, 1, 1, 0, static_cast<cudaStream_t>(stream), dst, a, b);
  return static_cast<int>(cudaGetLastError());
}

int random_transform(const Operand& out, const std::uint32_t* words, Distribution dist, std::int64_t low,
                     std::int64_t high, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  dispatch(out.dtype, [&]<class T>(T*) {
    launch_pdl(transform<T>, blocks_for(out.numel), 256, 0, s, static_cast<T*>(out.data), words, dist, low, high,
               out.numel);
  });
  return static_cast<int>(cudaGetLastError());
}

}  // namespace brrr::kernels

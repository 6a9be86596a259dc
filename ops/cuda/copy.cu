// Strided copy with dtype conversion: the kernel behind clone, contiguous, to(DType), copy_ and
// cat. Contiguous same-dtype copies go to cudaMemcpyAsync; contiguous converting copies take a
// flat loop. Otherwise the dims contiguous in both operands are merged first; what is left as
// rows (the last dim contiguous on both sides, e.g. cat along the last dim, a slice of columns,
// one head's part of a projection) copies row by row, 16 bytes per thread where the row length,
// the row strides and the pointers allow it; a transpose (at most one batch dim left, dst's last
// dim contiguous and src's second-to-last, e.g. `x.t().contiguous()` or a weight copied K-major
// for a TF32 GEMM) goes through 32 x 32 tiles in shared memory, so that both the reads and the
// writes are coalesced; everything else computes both offsets from the row-major index.
#include <cstdint>
#include <utility>

#include "ops/cuda/common.cuh"
#include "ops/cuda/pack.cuh"

namespace brrr::kernels {

namespace {
template <class D, class S> __global__ void copy_contiguous(D* dst, const S* src, std::int64_t n) {
  pdl_begin();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(blockDim.x) * gridDim.x)
    dst[i] = narrow_to<D>(widen(src[i]));
}

// The same conversion V elements per thread (one 16-byte access for the wider side): both
// pointers aligned to V elements, n a multiple of V.
template <class D, class S, int V> __global__ void copy_contiguous_vec(D* dst, const S* src, std::int64_t n) {
  pdl_begin();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n / V;
       i += std::int64_t(blockDim.x) * gridDim.x) {
    const Pack<S, V> in = reinterpret_cast<const Pack<S, V>*>(src)[i];
    Pack<D, V> out;
#pragma unroll
    for (int r = 0; r < V; ++r) out.v[r] = narrow_to<D>(widen(in.v[r]));
    reinterpret_cast<Pack<D, V>*>(dst)[i] = out;
  }
}

template <class D, class S> __global__ void copy_strided(Operand dst, Operand src) {
  pdl_begin();
  D* d = static_cast<D*>(dst.data);
  const S* s = static_cast<const S*>(src.data);
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < dst.numel;
       i += std::int64_t(blockDim.x) * gridDim.x) {
    if constexpr (std::is_same_v<D, S>) d[offset_of(dst, i)] = s[offset_of(src, i)];
    else d[offset_of(dst, i)] = narrow_to<D>(widen(s[offset_of(src, i)]));
  }
}

// [rows, cols] with row strides ds, ss (elements) and unit column strides; V elements per
// thread (cols, ds, ss multiples of V and both pointers aligned to V elements).
template <class D, class S, int V>
__global__ void copy_rows(D* __restrict__ dst, const S* __restrict__ src, std::int64_t rows, std::int64_t cols,
                          std::int64_t ds, std::int64_t ss) {
  pdl_begin();
  const std::int64_t per_row = cols / V, n = rows * per_row;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(blockDim.x) * gridDim.x) {
    std::int64_t r, c;
    if (n <= 0xffffffffll) {
      const auto q = static_cast<std::uint32_t>(i) / static_cast<std::uint32_t>(per_row);
      r = q;
      c = (i - r * per_row) * V;
    } else {
      r = i / per_row;
      c = (i - r * per_row) * V;
    }
    const auto in = *reinterpret_cast<const Pack<S, V>*>(src + r * ss + c);
    Pack<D, V> out;
#pragma unroll
    for (int e = 0; e < V; ++e) {
      if constexpr (std::is_same_v<D, S>) out.v[e] = in.v[e];
      else out.v[e] = narrow_to<D>(widen(in.v[e]));
    }
    *reinterpret_cast<Pack<D, V>*>(dst + r * ds + c) = out;
  }
}

// dst[b][i][j] = src[b][i][j] for i < rows, j < cols, b = blockIdx.z: dst has unit stride along
// j (ds_i, ds_b the others), src along i (ss_j, ss_b). A CTA of 32 x 8 threads moves a 32 x 32
// tile: it reads src's 32 columns of 32 contiguous i (each warp one j), and writes dst's rows
// of 32 contiguous j, through shared memory (pitch 33: the column reads hit 32 banks).
template <class D, class S>
__global__ void __launch_bounds__(256) copy_transpose(D* __restrict__ dst, const S* __restrict__ src, int rows, int cols,
                                                    std::int64_t ds_i, std::int64_t ds_b, std::int64_t ss_j,
                                                    std::int64_t ss_b) {
  pdl_begin();
  __shared__ S tile[32][33];
  const int i0 = static_cast<int>(blockIdx.y) * 32, j0 = static_cast<int>(blockIdx.x) * 32;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  src += static_cast<std::int64_t>(blockIdx.z) * ss_b;
  dst += static_cast<std::int64_t>(blockIdx.z) * ds_b;
#pragma unroll
  for (int r = ty; r < 32; r += 8) {
    const int i = i0 + tx, j = j0 + r;
    if (i < rows && j < cols) tile[r][tx] = src[static_cast<std::int64_t>(j) * ss_j + i];
  }
  __syncthreads();
#pragma unroll
  for (int r = ty; r < 32; r += 8) {
    const int i = i0 + r, j = j0 + tx;
    if (i < rows && j < cols) {
      if constexpr (std::is_same_v<D, S>) dst[static_cast<std::int64_t>(i) * ds_i + j] = tile[tx][r];
      else dst[static_cast<std::int64_t>(i) * ds_i + j] = narrow_to<D>(widen(tile[tx][r]));
    }
  }
}

// Launches copy_rows with the widest V (16 bytes of the wider type, down to 1) the geometry allows.
template <class D, class S>
void launch_rows(const Operand& dst, const Operand& src, std::int64_t rows, std::int64_t cols, std::int64_t ds,
                 std::int64_t ss, cudaStream_t st) {
  constexpr int widest = 16 / (sizeof(D) > sizeof(S) ? sizeof(D) : sizeof(S));
  auto fits = [&](int v) {
    return cols % v == 0 && ds % v == 0 && ss % v == 0 &&
           reinterpret_cast<std::uintptr_t>(dst.data) % (sizeof(D) * v) == 0 &&
           reinterpret_cast<std::uintptr_t>(src.data) % (sizeof(S) * v) == 0;
  };
  auto* d = static_cast<D*>(dst.data);
  auto* s = static_cast<const S*>(src.data);
  if constexpr (widest >= 8) {
    if (fits(8)) {
      launch_pdl(copy_rows<D, S, 8>, blocks_for(rows * cols / 8), 256, 0, st, d, s, rows, cols, ds, ss);
      return;
    }
  }
  if constexpr (widest >= 4) {
    if (fits(4)) {
      launch_pdl(copy_rows<D, S, 4>, blocks_for(rows * cols / 4), 256, 0, st, d, s, rows, cols, ds, ss);
      return;
    }
  }
  if constexpr (widest >= 2) {
    if (fits(2)) {
      launch_pdl(copy_rows<D, S, 2>, blocks_for(rows * cols / 2), 256, 0, st, d, s, rows, cols, ds, ss);
      return;
    }
  }
  launch_pdl(copy_rows<D, S, 1>, blocks_for(rows * cols), 256, 0, st, d, s, rows, cols, ds, ss);
}
}  // namespace

int copy(const Operand& dst_in, const Operand& src_in, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  bool contiguous = is_contiguous(dst_in) && is_contiguous(src_in);
  if (contiguous && dst_in.dtype == src_in.dtype) {
    return static_cast<int>(
        cudaMemcpyAsync(dst_in.data, src_in.data, dst_in.numel * itemsize(dst_in.dtype), cudaMemcpyDeviceToDevice, st));
  }
  Operand dst = dst_in, src = src_in;
  if (!contiguous) {
    Operand* ops[2] = {&dst, &src};
    coalesce(ops);
  }
  // Rows: at most two dims left, the last with unit stride on both sides.
  const bool rows = !contiguous && dst.ndim >= 1 && dst.ndim <= 2 && dst.strides[dst.ndim - 1] == 1 &&
                    src.strides[src.ndim - 1] == 1;
  // A transpose: [batch,] rows, cols with dst unit-strided along cols and src along rows (the
  // last two dims of both swapped first where it is the other way round: the copy is the same).
  const int nd = dst.ndim;
  const bool two_dims = !contiguous && !rows && (nd == 2 || nd == 3);
  if (two_dims && dst.strides[nd - 2] == 1 && src.strides[nd - 1] == 1)
    for (Operand* o : {&dst, &src}) {
      std::swap(o->sizes[nd - 2], o->sizes[nd - 1]);
      std::swap(o->strides[nd - 2], o->strides[nd - 1]);
    }
  const bool transpose = two_dims && dst.strides[nd - 1] == 1 &&
                         src.strides[nd - 2] == 1 && dst.sizes[nd - 2] <= INT32_MAX - 32 &&
                         dst.sizes[nd - 1] <= INT32_MAX - 32 && (nd == 2 || dst.sizes[0] <= 65535) &&
                         (dst.sizes[nd - 2] + 31) / 32 <= 65535;  // (gridDim.y and .z limits)
  dispatch(dst.dtype, [&]<class D>(D*) {
    dispatch(src.dtype, [&]<class S>(S*) {
      constexpr int V = 16 / (sizeof(D) > sizeof(S) ? sizeof(D) : sizeof(S));
      const auto aligned = [](const void* p, std::size_t b) { return reinterpret_cast<std::uintptr_t>(p) % b == 0; };
      if (contiguous && V > 1 && dst.numel % V == 0 && aligned(dst.data, V * sizeof(D)) &&
          aligned(src.data, V * sizeof(S)))
        launch_pdl(copy_contiguous_vec<D, S, V>, blocks_for(dst.numel / V), 256, 0, st, static_cast<D*>(dst.data),
                   static_cast<const S*>(src.data), dst.numel);
      else if (contiguous)
        launch_pdl(copy_contiguous<D, S>, blocks_for(dst.numel), 256, 0, st, static_cast<D*>(dst.data),
                   static_cast<const S*>(src.data), dst.numel);
      else if (rows && dst.ndim == 2)
        launch_rows<D, S>(dst, src, dst.sizes[0], dst.sizes[1], dst.strides[0], src.strides[0], st);
      else if (rows)
        launch_rows<D, S>(dst, src, 1, dst.sizes[0], 0, 0, st);
      else if (transpose) {
        const std::int64_t r = dst.sizes[nd - 2], c = dst.sizes[nd - 1], batch = nd == 3 ? dst.sizes[0] : 1;
        const dim3 grid(static_cast<unsigned>((c + 31) / 32), static_cast<unsigned>((r + 31) / 32),
                        static_cast<unsigned>(batch));
        launch_pdl(copy_transpose<D, S>, grid, dim3(32, 8), 0, st, static_cast<D*>(dst.data),
                   static_cast<const S*>(src.data), static_cast<int>(r), static_cast<int>(c), dst.strides[nd - 2],
                   nd == 3 ? dst.strides[0] : 0, src.strides[nd - 1], nd == 3 ? src.strides[0] : 0);
      }
      else
        launch_pdl(copy_strided<D, S>, blocks_for(dst.numel), 256, 0, st, dst, src);
    });
  });
  return static_cast<int>(cudaGetLastError());
}

}  // namespace brrr::kernels

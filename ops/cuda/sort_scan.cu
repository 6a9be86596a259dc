// CUDA kernels of the scans, the sort and searchsorted, over contiguous [rows, n] operands
// along the last dim (math: ops/scan_sort_math.hpp, shared with the CPU).
//  - cumsum, cumprod, logcumsumexp along rows of at least 1024 elements (or over at most 128
//    rows): a deterministic chunked scan. Each row is cut into chunks of whole tiles (several
//    per row only when there are few rows: enough blocks to fill the GPU); when there are
//    several, one kernel reduces each chunk, and the scan kernel's block for a chunk starts
//    from the reduction of the chunks before it (in a fixed order), then scans its chunk tile
//    by tile (CUB's block load/scan/store), carrying the running value. Fixed orders only, so
//    the result is the same on every run (a decoupled look-back, CUB's DeviceScan, is not for
//    floats). Read twice, written once.
//  - the other scans: CUB's DeviceScan::InclusiveScanByKey with the row as the key (one
//    launch for any rows x n shape), in the accumulate type; 16-bit floats are widened into
//    the workspace first and narrowed after. cummax/cummin indices: a max-scan by key of "this
//    element is the running extreme ? its position : -1".
//  - sort: elements turned into unsigned keys whose order is PyTorch's (NaN largest, -0.0 ==
//    0.0), sorted with their positions by CUB's radix sort (one row) or stable segmented sort
//    (several rows), then the values gathered by position. Both sorts are stable.
//  - searchsorted: one thread per value, a binary search in its row.
#include <cub/block/block_load.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_sort.cuh>
#include <cuda/std/functional>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include "ops/cuda/common.cuh"
#include "ops/scan_sort_math.hpp"

namespace brrr::kernels {

namespace {
namespace sm = ::brrr::scan_math;

std::int64_t length_of(const Operand& t) { return t.ndim == 0 ? 1 : t.sizes[t.ndim - 1]; }

struct RowOf {
  std::int64_t n;
  __host__ __device__ std::int64_t operator()(std::int64_t i) const { return i / n; }
};
struct RowStart {
  std::int64_t n;
  __host__ __device__ std::int64_t operator()(std::int64_t r) const { return r * n; }
};
template <ScanOp OP, class A> struct Combine {
  __device__ A operator()(const A& a, const A& b) const { return sm::combine<OP, A>(a, b); }
};
struct MaxIndex {
  __device__ std::int64_t operator()(std::int64_t a, std::int64_t b) const { return a > b ? a : b; }
};

template <class T, class A> __global__ void widen_kernel(A* out, const T* in, std::int64_t n) {
  pdl_begin();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(blockDim.x) * gridDim.x)
    out[i] = load_acc(in[i]);
}
template <class T, class A> __global__ void narrow_kernel(T* out, const A* in, std::int64_t n) {
  pdl_begin();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += std::int64_t(blockDim.x) * gridDim.x)
    out[i] = narrow_to<T>(in[i]);
}
template <class T, class A>
__global__ void extreme_flags(std::int64_t* flags, const T* x, const A* y, std::int64_t total, std::int64_t n) {
  pdl_begin();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(blockDim.x) * gridDim.x)
    flags[i] = sm::is_running_extreme(load_acc(x[i]), y[i]) ? i % n : -1;
}

std::size_t align256(std::size_t b) { return (b + 255) / 256 * 256; }

template <ScanOp OP, class T> struct ScanPlan {
  using A = accumulate_t<T>;
  static constexpr bool widened = !std::is_same_v<T, A>;
  std::int64_t total, n;
  bool with_indices;
  std::size_t buffer_bytes() const { return widened ? align256(sizeof(A) * total) : 0; }
  std::size_t flags_bytes() const { return with_indices ? align256(sizeof(std::int64_t) * total) : 0; }
  std::size_t cub_bytes() const {
    auto keys = thrust::make_transform_iterator(thrust::counting_iterator<std::int64_t>(0), RowOf{n});
    std::size_t a = 0, b = 0;
    cub::DeviceScan::InclusiveScanByKey(nullptr, a, keys, static_cast<const A*>(nullptr), static_cast<A*>(nullptr),
                                        Combine<OP, A>{}, total, ::cuda::std::equal_to<>{});
    if (with_indices)
      cub::DeviceScan::InclusiveScanByKey(nullptr, b, keys, static_cast<const std::int64_t*>(nullptr),
                                          static_cast<std::int64_t*>(nullptr), MaxIndex{}, total,
                                          ::cuda::std::equal_to<>{});
    return align256(a > b ? a : b);
  }
  std::size_t bytes() const { return buffer_bytes() + flags_bytes() + cub_bytes(); }
};

// ---- the chunked scan (cumsum, cumprod, logcumsumexp; see the top) ----

constexpr int chunk_threads = 256;
template <class A> inline constexpr int chunk_items = sizeof(A) > 4 ? 8 : 16;
constexpr std::int64_t chunked_min_n = 1024;         // rows at least this long
constexpr std::int64_t chunked_max_rows = 128;       // or at most this many rows
constexpr std::int64_t chunked_target_blocks = 1024;  // rows x chunks per row, when rows are few

bool use_chunked(ScanOp op, std::int64_t total, std::int64_t n, bool with_indices) {
  const bool has_identity = op == ScanOp::cumsum || op == ScanOp::cumprod || op == ScanOp::logcumsumexp;
  return !with_indices && has_identity && n > 0 && (n >= chunked_min_n || total / n <= chunked_max_rows);
}

// Chunks of whole tiles, at least two tiles each.
template <class A> struct ChunkPlan {
  std::int64_t rows, n, parts, chunk;
  ChunkPlan(std::int64_t total, std::int64_t n_) : rows(total / n_), n(n_) {
    const std::int64_t tile = std::int64_t(chunk_threads) * chunk_items<A>;
    parts = (chunked_target_blocks + rows - 1) / rows;
    const std::int64_t most = (n + 2 * tile - 1) / (2 * tile);
    if (parts > most) parts = most;
    if (parts < 1) parts = 1;
    chunk = ((n + parts - 1) / parts + tile - 1) / tile * tile;
    parts = (n + chunk - 1) / chunk;
  }
  std::size_t bytes() const { return parts > 1 ? align256(sizeof(A) * rows * parts) : 0; }
};

// totals[row * parts + part] = the combination of chunk `part` of the row (fixed order).
template <ScanOp OP, class T>
__global__ void __launch_bounds__(chunk_threads)
    chunk_total_kernel(accumulate_t<T>* __restrict__ totals, const T* __restrict__ x, std::int64_t n, std::int64_t parts,
                       std::int64_t chunk) {
  pdl_begin();
  using A = accumulate_t<T>;
  using Reduce = cub::BlockReduce<A, chunk_threads>;
  __shared__ typename Reduce::TempStorage tmp;
  const Combine<OP, A> op{};
  const std::int64_t row = blockIdx.x / parts, part = blockIdx.x - row * parts;
  const std::int64_t begin = part * chunk, end = begin + chunk < n ? begin + chunk : n;
  const T* xr = x + row * n;
  constexpr int ilp = 4;  // independent accumulators: loads in flight
  A acc[ilp];
#pragma unroll
  for (int u = 0; u < ilp; ++u) acc[u] = sm::identity<OP, A>();
  for (std::int64_t i0 = begin + threadIdx.x; i0 < end; i0 += std::int64_t(chunk_threads) * ilp) {
#pragma unroll
    for (int u = 0; u < ilp; ++u) {
      const std::int64_t i = i0 + std::int64_t(u) * chunk_threads;
      if (i < end) acc[u] = op(acc[u], load_acc(xr[i]));
    }
  }
  A a = op(op(acc[0], acc[1]), op(acc[2], acc[3]));
  a = Reduce(tmp).Reduce(a, op);
  if (threadIdx.x == 0) totals[blockIdx.x] = a;
}

template <ScanOp OP, class T>
__global__ void __launch_bounds__(chunk_threads)
    chunk_scan_kernel(T* __restrict__ out, const T* __restrict__ x, const accumulate_t<T>* __restrict__ totals,
                      std::int64_t n, std::int64_t parts, std::int64_t chunk) {
  pdl_begin();
  using A = accumulate_t<T>;
  constexpr int items = chunk_items<A>;
  constexpr std::int64_t tile = std::int64_t(chunk_threads) * items;
  using Load = cub::BlockLoad<T, chunk_threads, items, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
  using Store = cub::BlockStore<T, chunk_threads, items, cub::BLOCK_STORE_WARP_TRANSPOSE>;
  using Scan = cub::BlockScan<A, chunk_threads>;
  using Reduce = cub::BlockReduce<A, chunk_threads>;
  __shared__ union {
    typename Load::TempStorage load;
    typename Store::TempStorage store;
    typename Scan::TempStorage scan;
    typename Reduce::TempStorage reduce;
  } tmp;
  __shared__ A carry_in;
  const Combine<OP, A> op{};
  // The last chunks first: chunk_total_kernel read them last, so they are the likeliest to
  // be in L2 still.
  const std::int64_t b = gridDim.x - 1 - static_cast<std::int64_t>(blockIdx.x);
  const std::int64_t row = b / parts, part = b - row * parts;
  // The running value entering this chunk: the chunks before it, combined in a fixed order.
  A carry = sm::identity<OP, A>();
  if (part > 0) {
    A a = sm::identity<OP, A>();
    for (std::int64_t j = threadIdx.x; j < part; j += chunk_threads) a = op(a, totals[row * parts + j]);
    a = Reduce(tmp.reduce).Reduce(a, op);
    if (threadIdx.x == 0) carry_in = a;
    __syncthreads();
    carry = carry_in;
  }
  const T* xr = x + row * n;
  T* yr = out + row * n;
  const std::int64_t begin = part * chunk, end = begin + chunk < n ? begin + chunk : n;
  for (std::int64_t t0 = begin; t0 < end; t0 += tile) {
    const int valid = static_cast<int>(end - t0 < tile ? end - t0 : tile);
    T in[items];
    __syncthreads();  // tmp is reused
    Load(tmp.load).Load(xr + t0, in, valid, narrow_to<T>(0));
    // Each thread's run of `items` consecutive elements, scanned; then the runs' totals.
    A v[items];
    v[0] = load_acc(in[0]);
#pragma unroll
    for (int j = 1; j < items; ++j) v[j] = op(v[j - 1], load_acc(in[j]));
    A before, aggregate;
    __syncthreads();
    Scan(tmp.scan).ExclusiveScan(v[items - 1], before, sm::identity<OP, A>(), op, aggregate);
#pragma unroll
    for (int j = 0; j < items; ++j) in[j] = narrow_to<T>(op(carry, op(before, v[j])));
    __syncthreads();
    Store(tmp.store).Store(yr + t0, in, valid);
    carry = op(carry, aggregate);
  }
}

template <ScanOp OP, class T> cudaError_t chunked_scan(T* out, const T* x, std::int64_t total, std::int64_t n,
                                                       void* workspace, cudaStream_t s) {
  using A = accumulate_t<T>;
  const ChunkPlan<A> p(total, n);
  auto* totals = static_cast<A*>(workspace);
  const auto blocks = static_cast<unsigned>(p.rows * p.parts);
  if (p.parts > 1) launch_pdl(chunk_total_kernel<OP, T>, blocks, chunk_threads, 0, s, totals, x, n, p.parts, p.chunk);
  launch_pdl(chunk_scan_kernel<OP, T>, blocks, chunk_threads, 0, s, out, x, totals, n, p.parts, p.chunk);
  return cudaGetLastError();
}

template <class F> void with_scan_type(ScanOp op, DType dtype, F&& f) {
  with_op(op, [&]<ScanOp OP>() { dispatch(dtype, [&]<class T>(T*) { f.template operator()<OP, T>(); }); });
}

}  // namespace

std::size_t scan_workspace_bytes(ScanOp op, const Operand& in, bool with_indices) {
  std::size_t bytes = 0;
  const std::int64_t n = length_of(in);
  const bool chunked = use_chunked(op, in.numel, n, with_indices);
  with_scan_type(op, in.dtype, [&]<ScanOp OP, class T>() {
    bytes = chunked ? ChunkPlan<accumulate_t<T>>(in.numel, n).bytes() : ScanPlan<OP, T>{in.numel, n, with_indices}.bytes();
  });
  return bytes;
}

int scan(ScanOp op, const Operand& out, const Operand& in, const Operand* indices, void* workspace, std::size_t bytes,
         void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const std::int64_t n = length_of(in), total = in.numel;
  cudaError_t err = cudaSuccess;
  const bool chunked = use_chunked(op, total, n, indices != nullptr);
  with_scan_type(op, in.dtype, [&]<ScanOp OP, class T>() {
    if constexpr (sm::has_identity<OP>) {
      if (chunked) {
        err = chunked_scan<OP, T>(static_cast<T*>(out.data), static_cast<const T*>(in.data), total, n, workspace, s);
        return;
      }
    }
    using Plan = ScanPlan<OP, T>;
    using A = typename Plan::A;
    Plan plan{total, n, indices != nullptr};
    char* ws = static_cast<char*>(workspace);
    A* buffer = Plan::widened ? reinterpret_cast<A*>(ws) : reinterpret_cast<A*>(out.data);
    auto* flags = reinterpret_cast<std::int64_t*>(ws + plan.buffer_bytes());
    void* temp = ws + plan.buffer_bytes() + plan.flags_bytes();
    std::size_t temp_bytes = plan.cub_bytes();
    const T* x = static_cast<const T*>(in.data);
    const A* values_in = reinterpret_cast<const A*>(in.data);
    if constexpr (Plan::widened) {
      launch_pdl(widen_kernel<T, A>, blocks_for(total), 256, 0, s, buffer, x, total);
      values_in = buffer;
    }
    auto keys = thrust::make_transform_iterator(thrust::counting_iterator<std::int64_t>(0), RowOf{n});
    err = cub::DeviceScan::InclusiveScanByKey(temp, temp_bytes, keys, values_in, buffer, Combine<OP, A>{}, total,
                                              ::cuda::std::equal_to<>{}, s);
    if (err != cudaSuccess) return;
    if (indices) {
      launch_pdl(extreme_flags<T, A>, blocks_for(total), 256, 0, s, flags, x, buffer, total, n);
      temp_bytes = plan.cub_bytes();
      err = cub::DeviceScan::InclusiveScanByKey(temp, temp_bytes, keys, flags, static_cast<std::int64_t*>(indices->data),
                                                MaxIndex{}, total, ::cuda::std::equal_to<>{}, s);
      if (err != cudaSuccess) return;
    }
    if constexpr (Plan::widened)
      launch_pdl(narrow_kernel<T, A>, blocks_for(total), 256, 0, s, static_cast<T*>(out.data), buffer, total);
    err = cudaGetLastError();
  });
  (void)bytes;
  return static_cast<int>(err);
}

// ---- sort -------------------------------------------------------------------------------

namespace {

template <class T>
__global__ void make_keys(sm::sort_key_t<T>* keys, std::int64_t* positions, const T* x, std::int64_t total, std::int64_t n) {
  pdl_begin();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(blockDim.x) * gridDim.x) {
    keys[i] = sm::sort_key_of(x[i]);
    positions[i] = i % n;
  }
}

template <class T>
__global__ void gather_sorted(T* values, const std::int64_t* positions, const T* x, std::int64_t total, std::int64_t n) {
  pdl_begin();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(blockDim.x) * gridDim.x)
    values[i] = x[(i / n) * n + positions[i]];
}

template <class T> struct SortPlan {
  using U = sm::sort_key_t<T>;
  std::int64_t total, n;
  std::int64_t rows() const { return n == 0 ? 0 : total / n; }
  std::size_t keys_bytes() const { return align256(sizeof(U) * total); }
  std::size_t positions_bytes() const { return align256(sizeof(std::int64_t) * total); }
  std::size_t cub_bytes(bool descending) const {
    std::size_t b = 0;
    const U* k = nullptr;
    const std::int64_t* v = nullptr;
    auto starts = thrust::make_transform_iterator(thrust::counting_iterator<std::int64_t>(0), RowStart{n});
    if (rows() <= 1) {
      if (descending) cub::DeviceRadixSort::SortPairsDescending(nullptr, b, k, (U*)nullptr, v, (std::int64_t*)nullptr, total);
      else cub::DeviceRadixSort::SortPairs(nullptr, b, k, (U*)nullptr, v, (std::int64_t*)nullptr, total);
    } else if (descending) {
      cub::DeviceSegmentedSort::StableSortPairsDescending(nullptr, b, k, (U*)nullptr, v, (std::int64_t*)nullptr, total,
                                                          rows(), starts, starts + 1);
    } else {
      cub::DeviceSegmentedSort::StableSortPairs(nullptr, b, k, (U*)nullptr, v, (std::int64_t*)nullptr, total, rows(),
                                                starts, starts + 1);
    }
    return align256(b);
  }
  std::size_t bytes(bool descending) const { return 2 * keys_bytes() + positions_bytes() + cub_bytes(descending); }
};

}  // namespace

std::size_t sort_workspace_bytes(const Operand& in, bool descending) {
  std::size_t bytes = 0;
  dispatch(in.dtype, [&]<class T>(T*) { bytes = SortPlan<T>{in.numel, length_of(in)}.bytes(descending); });
  return bytes;
}

int sort(const Operand& values, const Operand& indices, const Operand& in, bool descending, void* workspace,
         std::size_t bytes, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  cudaError_t err = cudaSuccess;
  dispatch(in.dtype, [&]<class T>(T*) {
    using Plan = SortPlan<T>;
    using U = typename Plan::U;
    Plan plan{in.numel, length_of(in)};
    char* ws = static_cast<char*>(workspace);
    U* keys_in = reinterpret_cast<U*>(ws);
    U* keys_out = reinterpret_cast<U*>(ws + plan.keys_bytes());
    auto* positions = reinterpret_cast<std::int64_t*>(ws + 2 * plan.keys_bytes());
    void* temp = ws + 2 * plan.keys_bytes() + plan.positions_bytes();
    std::size_t temp_bytes = plan.cub_bytes(descending);
    auto* out_idx = static_cast<std::int64_t*>(indices.data);
    const T* x = static_cast<const T*>(in.data);
    launch_pdl(make_keys<T>, blocks_for(plan.total), 256, 0, s, keys_in, positions, x, plan.total, plan.n);
    auto starts = thrust::make_transform_iterator(thrust::counting_iterator<std::int64_t>(0), RowStart{plan.n});
    if (plan.rows() <= 1) {
      err = descending ? cub::DeviceRadixSort::SortPairsDescending(temp, temp_bytes, keys_in, keys_out, positions, out_idx,
                                                                   plan.total, 0, int(sizeof(U) * 8), s)
                       : cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, positions, out_idx,
                                                         plan.total, 0, int(sizeof(U) * 8), s);
    } else if (descending) {
      err = cub::DeviceSegmentedSort::StableSortPairsDescending(temp, temp_bytes, keys_in, keys_out, positions, out_idx,
                                                                plan.total, plan.rows(), starts, starts + 1, s);
    } else {
      err = cub::DeviceSegmentedSort::StableSortPairs(temp, temp_bytes, keys_in, keys_out, positions, out_idx, plan.total,
                                                      plan.rows(), starts, starts + 1, s);
    }
    if (err != cudaSuccess) return;
    launch_pdl(gather_sorted<T>, blocks_for(plan.total), 256, 0, s, static_cast<T*>(values.data), out_idx, x,
               plan.total, plan.n);
    err = cudaGetLastError();
  });
  (void)bytes;
  return static_cast<int>(err);
}

// ---- searchsorted -------------------------------------------------------------------------

namespace {
template <class T>
__global__ void searchsorted_kernel(std::int64_t* out, const T* sorted, const T* values, std::int64_t vrows,
                                    std::int64_t m, std::int64_t n, bool broadcast, bool right) {
  pdl_begin();
  const std::int64_t total = vrows * m;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total; i += std::int64_t(blockDim.x) * gridDim.x) {
    const T* row = sorted + (broadcast ? 0 : i / m) * n;
    const auto x = widen(values[i]);
    std::int64_t lo = 0, hi = n;
    while (lo < hi) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      const auto e = widen(row[mid]);
      if (right ? !(x < e) : (e < x)) lo = mid + 1;
      else hi = mid;
    }
    out[i] = lo;
  }
}
}  // namespace

int searchsorted(const Operand& out, const Operand& sorted, const Operand& values, bool right, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const std::int64_t n = length_of(sorted), m = length_of(values);
  const std::int64_t vrows = m == 0 ? 0 : values.numel / m;
  const std::int64_t srows = sorted.ndim >= 2 ? (n == 0 ? sorted.sizes[0] : sorted.numel / n) : 1;
  if (vrows * m == 0) return 0;
  dispatch(sorted.dtype, [&]<class T>(T*) {
    launch_pdl(searchsorted_kernel<T>, blocks_for(vrows * m), 256, 0, s, static_cast<std::int64_t*>(out.data),
               static_cast<const T*>(sorted.data), static_cast<const T*>(values.data), vrows, m, n, srows == 1, right);
  });
  return static_cast<int>(cudaGetLastError());
}

}  // namespace brrr::kernels

// CUDA topk over contiguous [rows, n] along the last dim: the contract's topk, sort's first k
// columns (NaN largest, -0.0 == 0.0, ties by position). Every element gets sort's unsigned key
// (ops/scan_sort_math.hpp), complemented when `largest`, so the k wanted are always the k
// smallest (key, position) pairs. A radix select (8-bit digits, most significant first) finds
// the key prefix of the k-th: each pass counts the elements matching the prefix so far by
// their next digit and keeps the bucket where the running count reaches the number still
// needed; it stops early once that bucket holds exactly the elements still needed. The
// winners are the elements below the prefix and, among those equal to it, the first by
// position (a ballot scan in position order). Each winner's place in the output is the number
// of winners before it in (key, position) order. Counts are integers and that order is total,
// so the result is the same on every run, whatever the atomics' order.
//   - rows path (k <= 256, the row's keys fit in 32 KiB of shared memory): one block per row;
//     the row is read once and every pass runs over shared memory.
//   - passes path (other rows, k <= 1024): each row split over several blocks; per pass a
//     histogram kernel and a one-block-per-row choose kernel, the select state kept in the
//     workspace (nothing read back to the host); then the winners gathered and placed.
//   - sort path (rows of at most 128, or k > 1024): sort_scan.cu's full sort into the
//     workspace, its first k columns copied out.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "ops/cuda/common.cuh"
#include "ops/scan_sort_math.hpp"

namespace brrr::kernels {

namespace {
namespace sm = ::brrr::scan_math;

constexpr int threads = 256;
constexpr int digit_bits = 8;
constexpr int buckets = 1 << digit_bits;  // == threads: one bucket per thread when choosing
static_assert(buckets == threads);
constexpr int unroll = 4;  // loads in flight per thread in the streaming kernels

constexpr std::int64_t sort_path_max_n = 128;
constexpr std::int64_t rows_path_max_k = 256;
constexpr std::int64_t rows_path_max_key_bytes = 32 * 1024;
constexpr std::int64_t passes_path_max_k = 1024;
constexpr std::int64_t passes_target_blocks = 1024;   // per pass, over all rows
constexpr std::int64_t passes_min_chunk = 8 * 1024;  // elements per block at least

template <class T> using key_t = sm::sort_key_t<T>;

__host__ __device__ std::size_t align256(std::size_t b) { return (b + 255) / 256 * 256; }
// Dynamic shared memory sizes are rounded up to 16 bytes: nvcc reads two adjacent 4-byte keys
// of the winners' array with one 8-byte load (LDS.64), which for the last key of an odd k
// reaches 4 bytes past the array (compute-sanitizer reported it at the end of the allocation).
std::size_t smem_size(std::size_t b) { return (b + 15) / 16 * 16; }
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The select key: sort's key, complemented when the largest are wanted.
template <class T> __device__ __forceinline__ key_t<T> select_key(T v, bool largest) {
  const key_t<T> u = sm::sort_key_of(v);
  return largest ? key_t<T>(~u) : u;
}

template <class U> __device__ __forceinline__ unsigned digit_of(U key, int shift) {
  return static_cast<unsigned>(key >> shift) & (buckets - 1);
}

// The bucket where the running count of a pass reaches `need`: thread t holds bucket t's
// count; the one thread whose bucket it is writes {bucket, count before it, its count}.
struct Choice {
  int bucket;
  std::int64_t before, count;
};
template <class C>
__device__ __forceinline__ void choose_bucket(C count, std::int64_t need, typename cub::BlockScan<C, threads>::TempStorage& tmp,
                                              Choice& out) {
  C before;
  cub::BlockScan<C, threads>(tmp).ExclusiveSum(count, before);
  const C want = static_cast<C>(need);
  if (want > before && want <= before + count)
    out = {static_cast<int>(threadIdx.x), static_cast<std::int64_t>(before), static_cast<std::int64_t>(count)};
}

// take(i) for the positions i in [begin, end) where flag(i) holds whose rank among them in
// position order, counted from `base`, is below `limit`. Every thread of the block calls it.
template <class Flag, class Take>
__device__ void take_first_flagged(std::int64_t begin, std::int64_t end, std::int64_t base, std::int64_t limit, Flag flag,
                                   Take take) {
  __shared__ int warp_counts[threads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  std::int64_t running = base;  // the same in every thread
  for (std::int64_t t0 = begin; t0 < end && running < limit; t0 += threads) {
    const std::int64_t i = t0 + threadIdx.x;
    const bool f = i < end && flag(i);
    const unsigned ballot = __ballot_sync(0xffffffffu, f);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < threads / 32; ++w) {
      const int c = warp_counts[w];
      before += w < warp ? c : 0;
      total += c;
    }
    if (f && running + before + __popc(ballot & ((1u << lane) - 1u)) < limit) take(i);
    running += total;
    __syncthreads();  // warp_counts is rewritten by the next tile
  }
}

// Writes winners [w_begin, w_end) of a row to their places: the number of winners (of all k)
// before each in (key, position) order. out_* point at the row's k outputs, xr at its input.
template <class T, class U>
__device__ void place_winners(T* out_values, std::int64_t* out_indices, const T* xr, const U* win_key,
                              const std::int64_t* win_pos, std::int64_t k, std::int64_t w_begin, std::int64_t w_end) {
  for (std::int64_t w = w_begin + threadIdx.x; w < w_end; w += blockDim.x) {
    const U kw = win_key[w];
    const std::int64_t pw = win_pos[w];
    std::int64_t rank = 0;
    for (std::int64_t v = 0; v < k; ++v) {
      const U kv = win_key[v];
      rank += (kv < kw || (kv == kw && win_pos[v] < pw)) ? 1 : 0;
    }
    out_values[rank] = xr[pw];
    out_indices[rank] = pw;
  }
}

// Calls f(i, v) for the elements x[i] (i in [begin, end)) with `unroll` loads in flight.
template <class T, class F>
__device__ __forceinline__ void stream_chunk(const T* __restrict__ xr, std::int64_t begin, std::int64_t end, F&& f) {
  for (std::int64_t i0 = begin + threadIdx.x; i0 < end; i0 += threads * unroll) {
    T v[unroll];
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const std::int64_t i = i0 + std::int64_t(u) * threads;
      if (i < end) v[u] = xr[i];
    }
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const std::int64_t i = i0 + std::int64_t(u) * threads;
      if (i < end) f(i, v[u]);
    }
  }
}

// ---- rows path ----

template <class T> std::size_t rows_smem_bytes(std::int64_t n, std::int64_t k) {
  return smem_size(align256(sizeof(key_t<T>) * n) + sizeof(std::int64_t) * k + sizeof(key_t<T>) * k);
}

template <class T>
__global__ void __launch_bounds__(threads)
    topk_rows_kernel(T* __restrict__ values, std::int64_t* __restrict__ indices, const T* __restrict__ x, std::int64_t n,
                     std::int64_t k, bool largest) {
  pdl_begin();
  using U = key_t<T>;
  using Scan = cub::BlockScan<unsigned, threads>;
  extern __shared__ __align__(16) unsigned char smem[];
  U* keys = reinterpret_cast<U*>(smem);
  auto* win_pos = reinterpret_cast<std::int64_t*>(smem + align256(sizeof(U) * n));
  U* win_key = reinterpret_cast<U*>(win_pos + k);
  __shared__ unsigned hist[buckets];
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ Choice choice;
  __shared__ unsigned taken;

  const std::int64_t row = blockIdx.x;
  const T* xr = x + row * n;
  stream_chunk(xr, 0, n, [&](std::int64_t i, T v) { keys[i] = select_key(v, largest); });
  U prefix = 0, mask = 0;
  std::int64_t need = k, ties = 0;
  for (int shift = static_cast<int>(sizeof(U)) * 8 - digit_bits; shift >= 0; shift -= digit_bits) {
    hist[threadIdx.x] = 0;
    __syncthreads();
    for (std::int64_t i = threadIdx.x; i < n; i += threads) {
      const U key = keys[i];
      if (U(key & mask) == prefix) atomicAdd(&hist[digit_of(key, shift)], 1u);
    }
    __syncthreads();
    choose_bucket<unsigned>(hist[threadIdx.x], need, scan_tmp, choice);
    __syncthreads();
    const Choice c = choice;
    prefix = U(prefix | U(U(c.bucket) << shift));
    mask = U(mask | U(U(buckets - 1) << shift));
    need -= c.before;
    ties = c.count;
    __syncthreads();  // choice is rewritten by the next pass
    if (ties == need) break;
  }
  // The winners: below the prefix, and the first `need` equal to it (all of them when the
  // select stopped early).
  const bool all_ties = ties == need;
  if (threadIdx.x == 0) taken = 0;
  __syncthreads();
  auto put = [&](std::int64_t i) {
    const unsigned slot = atomicAdd(&taken, 1u);
    win_key[slot] = keys[i];
    win_pos[slot] = i;
  };
  for (std::int64_t i = threadIdx.x; i < n; i += threads) {
    const U m = U(keys[i] & mask);
    if (m < prefix || (all_ties && m == prefix)) put(i);
  }
  if (!all_ties)
    take_first_flagged(0, n, 0, need, [&](std::int64_t i) { return U(keys[i] & mask) == prefix; }, put);
  __syncthreads();
  place_winners(values + row * k, indices + row * k, xr, win_key, win_pos, k, 0, k);
}

// ---- passes path ----

// Per row, in the workspace: the select so far.
template <class U> struct SelectState {
  U prefix, mask;
  std::int64_t need;  // winners still to take among the elements matching the prefix
  int done;           // the prefix is final
  int rank_ties;      // done with more elements equal to the prefix than needed
};

template <class T> struct PassesLayout {
  using U = key_t<T>;
  std::int64_t rows, n, k, parts, chunk;
  std::size_t state_bytes() const { return align256(sizeof(SelectState<U>) * rows); }
  std::size_t hist_bytes() const { return align256(sizeof(unsigned long long) * buckets * rows); }
  std::size_t tie_bytes() const { return align256(sizeof(std::int64_t) * rows * parts); }
  std::size_t taken_bytes() const { return align256(sizeof(unsigned) * rows); }
  std::size_t key_bytes() const { return align256(sizeof(U) * rows * k); }
  std::size_t pos_bytes() const { return align256(sizeof(std::int64_t) * rows * k); }
  std::size_t bytes() const { return state_bytes() + hist_bytes() + tie_bytes() + taken_bytes() + key_bytes() + pos_bytes(); }
  struct Parts {
    SelectState<U>* state;
    unsigned long long* hist;
    std::int64_t* tie_base;
    unsigned* taken;
    U* win_key;
    std::int64_t* win_pos;
  };
  Parts parts_of(void* ws) const {
    char* p = static_cast<char*>(ws);
    Parts r;
    r.state = reinterpret_cast<SelectState<U>*>(p);
    p += state_bytes();
    r.hist = reinterpret_cast<unsigned long long*>(p);
    p += hist_bytes();
    r.tie_base = reinterpret_cast<std::int64_t*>(p);
    p += tie_bytes();
    r.taken = reinterpret_cast<unsigned*>(p);
    p += taken_bytes();
    r.win_key = reinterpret_cast<U*>(p);
    p += key_bytes();
    r.win_pos = reinterpret_cast<std::int64_t*>(p);
    return r;
  }
};

template <class U>
__global__ void select_init_kernel(SelectState<U>* state, unsigned long long* hist, unsigned* taken, std::int64_t rows,
                                   std::int64_t k) {
  pdl_begin();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < rows * buckets;
       i += std::int64_t(blockDim.x) * gridDim.x) {
    hist[i] = 0;
    if (i < rows) {
      state[i] = {U(0), U(0), k, 0, 0};
      taken[i] = 0;
    }
  }
}

template <class T>
__global__ void __launch_bounds__(threads)
    select_hist_kernel(const SelectState<key_t<T>>* __restrict__ state, unsigned long long* __restrict__ hist,
                       const T* __restrict__ x, std::int64_t n, std::int64_t parts, std::int64_t chunk, int shift,
                       bool largest) {
  pdl_begin();
  using U = key_t<T>;
  const std::int64_t row = blockIdx.x / parts, part = blockIdx.x - row * parts;
  const SelectState<U> s = state[row];
  if (s.done) return;
  __shared__ unsigned h[buckets];
  h[threadIdx.x] = 0;
  __syncthreads();
  const std::int64_t begin = part * chunk, end = begin + chunk < n ? begin + chunk : n;
  stream_chunk(x + row * n, begin, end, [&](std::int64_t, T v) {
    const U key = select_key(v, largest);
    if (U(key & s.mask) == s.prefix) atomicAdd(&h[digit_of(key, shift)], 1u);
  });
  __syncthreads();
  if (h[threadIdx.x]) atomicAdd(&hist[row * buckets + threadIdx.x], static_cast<unsigned long long>(h[threadIdx.x]));
}

template <class U>
__global__ void __launch_bounds__(threads)
    select_choose_kernel(SelectState<U>* __restrict__ state, unsigned long long* __restrict__ hist, int shift) {
  pdl_begin();
  using Scan = cub::BlockScan<unsigned long long, threads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ Choice choice;
  const std::int64_t row = blockIdx.x;
  SelectState<U> s = state[row];
  if (s.done) return;
  const unsigned long long count = hist[row * buckets + threadIdx.x];
  hist[row * buckets + threadIdx.x] = 0;  // ready for the next pass
  choose_bucket<unsigned long long>(count, s.need, scan_tmp, choice);
  __syncthreads();
  if (threadIdx.x != 0) return;
  const Choice c = choice;
  s.prefix = U(s.prefix | U(U(c.bucket) << shift));
  s.mask = U(s.mask | U(U(buckets - 1) << shift));
  s.need -= c.before;
  const bool all_ties = c.count == s.need;
  s.done = all_ties || shift == 0;
  s.rank_ties = s.done && !all_ties;
  state[row] = s;
}

// Rows whose ties need ranking: each block's count of elements equal to the prefix.
template <class T>
__global__ void __launch_bounds__(threads)
    tie_count_kernel(const SelectState<key_t<T>>* __restrict__ state, std::int64_t* __restrict__ tie_base,
                     const T* __restrict__ x, std::int64_t n, std::int64_t parts, std::int64_t chunk, bool largest) {
  pdl_begin();
  using U = key_t<T>;
  using Reduce = cub::BlockReduce<std::int64_t, threads>;
  __shared__ typename Reduce::TempStorage tmp;
  const std::int64_t row = blockIdx.x / parts, part = blockIdx.x - row * parts;
  const SelectState<U> s = state[row];
  if (!s.rank_ties) return;
  const std::int64_t begin = part * chunk, end = begin + chunk < n ? begin + chunk : n;
  std::int64_t count = 0;
  stream_chunk(x + row * n, begin, end, [&](std::int64_t, T v) {
    count += U(select_key(v, largest) & s.mask) == s.prefix ? 1 : 0;
  });
  count = Reduce(tmp).Sum(count);
  if (threadIdx.x == 0) tie_base[row * parts + part] = count;
}

// Those counts turned into each block's first tie rank (an exclusive scan per row).
template <class U>
__global__ void __launch_bounds__(threads)
    tie_scan_kernel(const SelectState<U>* __restrict__ state, std::int64_t* __restrict__ tie_base, std::int64_t parts) {
  pdl_begin();
  using Scan = cub::BlockScan<std::int64_t, threads>;
  __shared__ typename Scan::TempStorage tmp;
  const std::int64_t row = blockIdx.x;
  if (!state[row].rank_ties) return;
  std::int64_t running = 0;
  for (std::int64_t t0 = 0; t0 < parts; t0 += threads) {
    const std::int64_t i = t0 + threadIdx.x;
    const std::int64_t c = i < parts ? tie_base[row * parts + i] : 0;
    std::int64_t before, total;
    Scan(tmp).ExclusiveSum(c, before, total);
    if (i < parts) tie_base[row * parts + i] = running + before;
    running += total;
    __syncthreads();  // tmp is reused
  }
}

template <class T>
__global__ void __launch_bounds__(threads)
    gather_winners_kernel(const SelectState<key_t<T>>* __restrict__ state, const std::int64_t* __restrict__ tie_base,
                          unsigned* __restrict__ taken, key_t<T>* __restrict__ win_key, std::int64_t* __restrict__ win_pos,
                          const T* __restrict__ x, std::int64_t n, std::int64_t k, std::int64_t parts, std::int64_t chunk,
                          bool largest) {
  pdl_begin();
  using U = key_t<T>;
  const std::int64_t row = blockIdx.x / parts, part = blockIdx.x - row * parts;
  const SelectState<U> s = state[row];
  const std::int64_t begin = part * chunk, end = begin + chunk < n ? begin + chunk : n;
  const T* xr = x + row * n;
  auto put = [&](U key, std::int64_t i) {
    const unsigned slot = atomicAdd(&taken[row], 1u);
    win_key[row * k + slot] = key;
    win_pos[row * k + slot] = i;
  };
  stream_chunk(xr, begin, end, [&](std::int64_t i, T v) {
    const U key = select_key(v, largest);
    const U m = U(key & s.mask);
    if (m < s.prefix || (!s.rank_ties && m == s.prefix)) put(key, i);
  });
  if (s.rank_ties)
    take_first_flagged(
        begin, end, tie_base[row * parts + part], s.need,
        [&](std::int64_t i) { return U(select_key(xr[i], largest) & s.mask) == s.prefix; },
        [&](std::int64_t i) { put(select_key(xr[i], largest), i); });
}

// Grid: rows x ceil(k / threads) blocks; each loads the row's k winners and places its share.
template <class T>
__global__ void __launch_bounds__(threads)
    place_kernel(T* __restrict__ values, std::int64_t* __restrict__ indices, const key_t<T>* __restrict__ win_key,
                 const std::int64_t* __restrict__ win_pos, const T* __restrict__ x, std::int64_t n, std::int64_t k,
                 std::int64_t k_parts) {
  pdl_begin();
  using U = key_t<T>;
  extern __shared__ __align__(16) unsigned char smem[];
  auto* pos = reinterpret_cast<std::int64_t*>(smem);
  U* keys = reinterpret_cast<U*>(pos + k);
  const std::int64_t row = blockIdx.x / k_parts, part = blockIdx.x - row * k_parts;
  for (std::int64_t w = threadIdx.x; w < k; w += threads) {
    keys[w] = win_key[row * k + w];
    pos[w] = win_pos[row * k + w];
  }
  __syncthreads();
  const std::int64_t w_end = (part + 1) * threads < k ? (part + 1) * threads : k;
  place_winners(values + row * k, indices + row * k, x + row * n, keys, pos, k, part * threads, w_end);
}

// ---- sort path ----

template <class T>
__global__ void take_columns_kernel(T* __restrict__ values, std::int64_t* __restrict__ indices, const T* __restrict__ sorted,
                                    const std::int64_t* __restrict__ order, std::int64_t rows, std::int64_t n,
                                    std::int64_t k) {
  pdl_begin();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < rows * k;
       i += std::int64_t(blockDim.x) * gridDim.x) {
    const std::int64_t r = i / k, j = i - r * k;
    values[i] = sorted[r * n + j];
    indices[i] = order[r * n + j];
  }
}

// ---- plan ----

enum class TopkPath { sort, rows, passes };

struct TopkPlan {
  TopkPath path;
  std::int64_t rows, n, k, parts = 1, chunk = 0;
};

template <class T> TopkPlan plan_topk(const Operand& in, std::int64_t k) {
  const std::int64_t n = in.ndim == 0 ? 1 : in.sizes[in.ndim - 1];
  TopkPlan p{TopkPath::sort, n == 0 ? 0 : in.numel / n, n, k};
  if (n <= sort_path_max_n || k > passes_path_max_k) return p;
  if (k <= rows_path_max_k && static_cast<std::int64_t>(sizeof(key_t<T>)) * n <= rows_path_max_key_bytes) {
    p.path = TopkPath::rows;
    return p;
  }
  p.path = TopkPath::passes;
  std::int64_t parts = ceil_div(passes_target_blocks, p.rows);
  const std::int64_t most = ceil_div(n, passes_min_chunk);
  if (parts > most) parts = most;
  const std::int64_t fewest = ceil_div(n, std::int64_t(1) << 30);  // per-block counts stay 32-bit
  if (parts < fewest) parts = fewest;
  if (parts < 1) parts = 1;
  p.chunk = ceil_div(ceil_div(n, parts), threads) * threads;
  p.parts = ceil_div(n, p.chunk);
  return p;
}

// The sort path's pieces: sort_scan.cu's sort with its workspace, then the full sorted rows.
struct SortPathLayout {
  std::size_t sort_bytes, values_bytes, order_bytes;
  std::size_t bytes() const { return sort_bytes + values_bytes + order_bytes; }
};
template <class T> SortPathLayout sort_path_layout(const Operand& in, bool largest) {
  return {align256(sort_workspace_bytes(in, largest)), align256(sizeof(T) * in.numel),
          align256(sizeof(std::int64_t) * in.numel)};
}

}  // namespace

std::size_t topk_workspace_bytes(const Operand& in, std::int64_t k, bool largest) {
  std::size_t bytes = 0;
  dispatch(in.dtype, [&]<class T>(T*) {
    const TopkPlan p = plan_topk<T>(in, k);
    switch (p.path) {
      case TopkPath::sort: bytes = sort_path_layout<T>(in, largest).bytes(); break;
      case TopkPath::rows: bytes = 0; break;
      case TopkPath::passes: bytes = PassesLayout<T>{p.rows, p.n, p.k, p.parts, p.chunk}.bytes(); break;
    }
  });
  return bytes;
}

int topk(const Operand& values, const Operand& indices, const Operand& in, std::int64_t k, bool largest, void* workspace,
         std::size_t bytes, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  cudaError_t err = cudaSuccess;
  dispatch(in.dtype, [&]<class T>(T*) {
    using U = key_t<T>;
    const TopkPlan p = plan_topk<T>(in, k);
    const T* x = static_cast<const T*>(in.data);
    T* out_v = static_cast<T*>(values.data);
    auto* out_i = static_cast<std::int64_t*>(indices.data);
    if (p.rows == 0 || k == 0) return;
    switch (p.path) {
      case TopkPath::sort: {
        const SortPathLayout l = sort_path_layout<T>(in, largest);
        char* ws = static_cast<char*>(workspace);
        Operand sorted = in, order = in;
        sorted.data = ws + l.sort_bytes;
        order.data = ws + l.sort_bytes + l.values_bytes;
        order.dtype = DType::i64;
        const int e = sort(sorted, order, in, largest, ws, l.sort_bytes, stream);
        if (e != 0) {
          err = static_cast<cudaError_t>(e);
          return;
        }
        launch_pdl(take_columns_kernel<T>, blocks_for(p.rows * k), 256, 0, s, out_v, out_i,
                   static_cast<const T*>(sorted.data), static_cast<const std::int64_t*>(order.data), p.rows, p.n, k);
        break;
      }
      case TopkPath::rows:
        launch_pdl(topk_rows_kernel<T>, static_cast<unsigned>(p.rows), threads, rows_smem_bytes<T>(p.n, k), s, out_v,
                   out_i, x, p.n, k, largest);
        break;
      case TopkPath::passes: {
        const PassesLayout<T> l{p.rows, p.n, p.k, p.parts, p.chunk};
        const auto w = l.parts_of(workspace);
        const auto grid = static_cast<unsigned>(p.rows * p.parts);
        launch_pdl(select_init_kernel<U>, blocks_for(p.rows * buckets), 256, 0, s, w.state, w.hist, w.taken, p.rows, k);
        for (int shift = static_cast<int>(sizeof(U)) * 8 - digit_bits; shift >= 0; shift -= digit_bits) {
          launch_pdl(select_hist_kernel<T>, grid, threads, 0, s, w.state, w.hist, x, p.n, p.parts, p.chunk, shift,
                     largest);
          launch_pdl(select_choose_kernel<U>, static_cast<unsigned>(p.rows), threads, 0, s, w.state, w.hist, shift);
        }
        launch_pdl(tie_count_kernel<T>, grid, threads, 0, s, w.state, w.tie_base, x, p.n, p.parts, p.chunk, largest);
        launch_pdl(tie_scan_kernel<U>, static_cast<unsigned>(p.rows), threads, 0, s, w.state, w.tie_base, p.parts);
        launch_pdl(gather_winners_kernel<T>, grid, threads, 0, s, w.state, w.tie_base, w.taken, w.win_key, w.win_pos, x,
                   p.n, k, p.parts, p.chunk, largest);
        const std::int64_t k_parts = ceil_div(k, threads);
        launch_pdl(place_kernel<T>, static_cast<unsigned>(p.rows * k_parts), threads,
                   smem_size((sizeof(std::int64_t) + sizeof(U)) * k), s, out_v, out_i, w.win_key, w.win_pos, x, p.n, k,
                   k_parts);
        break;
      }
    }
    err = cudaGetLastError();
  });
  (void)bytes;
  return static_cast<int>(err);
}

}  // namespace brrr::kernels

// CUDA kernels of the reductions: sum, max, min over a dims bitmask, max/min optionally with
// the index along the one reduced dim.
//
// The host builds a plan: size-1 dims dropped, the kept dims (the output space) and the
// reduced dims (the reduced space) each merged where contiguous. Then one of:
//  - cub::DeviceReduce::Sum for a full sum of a contiguous f32/f64 tensor (bandwidth bound);
//  - the row kernel when the input's fastest dim is reduced: a group of threads (one warp,
//    or the whole 256-thread block for long rows) per output, strided loads along the row,
//    warp shuffles then shared memory;
//  - the column kernel when the fastest dim is kept: a 32 x 8 block, threadIdx.x over 32
//    consecutive outputs (coalesced loads), threadIdx.y over the reduced space, combined in
//    shared memory.
// When there are too few outputs to fill the GPU, the reduced space is split into chunks
// (blockIdx.y); each writes partial results into the workspace and a finalize kernel
// combines them in chunk order. No atomics: results are deterministic run to run.
// Accumulators: f32 for f32/bf16/f16, f64 for f64, int64 for integers and bool. Max/min
// carry (value, index) pairs combined so that the smallest index wins ties and the first
// NaN wins over everything, whatever the order of combination. All indexing is 64-bit.
#include <cub/device/device_reduce.cuh>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "ops/cuda/common.cuh"

namespace brrr::kernels {

namespace {

// ---- the plan ----

struct Plan {
  int nk = 0;  // kept dims, outermost first
  std::int64_t k_sizes[max_dims] = {}, k_in[max_dims] = {}, k_out[max_dims] = {}, k_idx[max_dims] = {};
  int nr = 0;  // reduced dims, outermost first
  std::int64_t r_sizes[max_dims] = {}, r_in[max_dims] = {};
  std::int64_t n_out = 1, n_red = 1;
  bool column = false;  // the fastest-varying input dim is kept
  int group = 32;       // row kernel: threads per output (32 or 256)
  std::int64_t chunks = 1, chunk_len = 1;
  bool use_cub = false;
};

constexpr int block_threads = 256;
constexpr int col_x = 32, col_y = 8;

int sm_count(int device) {
  static std::atomic<int> cache[64];
  if (device < 0 || device >= 64) device = 0;
  int n = cache[device].load();
  if (n <= 0) {
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || n <= 0) n = 132;
    cache[device].store(n);
  }
  return n;
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
std::int64_t abs64(std::int64_t v) { return v < 0 ? -v : v; }

Plan make_plan(ReduceOp op, const Operand& out, const Operand& in, std::uint32_t mask, const Operand* indices,
               int device) {
  Plan p;
  for (int d = 0; d < in.ndim; ++d) {
    std::int64_t size = in.sizes[d];
    bool reduced = (mask >> d) & 1u;
    if (reduced) p.n_red *= size;
    else p.n_out *= size;
    if (size == 1) continue;
    if (reduced) {
      if (p.nr > 0 && p.r_in[p.nr - 1] == in.strides[d] * size) {
        p.r_sizes[p.nr - 1] *= size;
        p.r_in[p.nr - 1] = in.strides[d];
      } else {
        p.r_sizes[p.nr] = size;
        p.r_in[p.nr] = in.strides[d];
        ++p.nr;
      }
    } else {
      std::int64_t is = in.strides[d], os = out.strides[d], xs = indices ? indices->strides[d] : os;
      int k = p.nk - 1;
      if (k >= 0 && p.k_in[k] == is * size && p.k_out[k] == os * size && p.k_idx[k] == xs * size) {
        p.k_sizes[k] *= size;
        p.k_in[k] = is;
        p.k_out[k] = os;
        p.k_idx[k] = xs;
      } else {
        p.k_sizes[p.nk] = size;
        p.k_in[p.nk] = is;
        p.k_out[p.nk] = os;
        p.k_idx[p.nk] = xs;
        ++p.nk;
      }
    }
  }
  if (p.nr == 0) p.column = true;  // nothing (or only size-1 dims) to reduce: a copy
  else if (p.nk == 0) p.column = false;
  else p.column = abs64(p.k_in[p.nk - 1]) < abs64(p.r_in[p.nr - 1]);

  bool f32_or_f64 = in.dtype == DType::f32 || in.dtype == DType::f64;
  p.use_cub = op == ReduceOp::sum && f32_or_f64 && out.dtype == in.dtype && p.nk == 0 && p.nr == 1 && p.r_in[0] == 1 &&
              p.n_red > 0 && indices == nullptr;
  if (p.use_cub) return p;

  const std::int64_t target_blocks = std::int64_t(sm_count(device)) * 8;
  std::int64_t out_blocks, min_len;
  if (p.column) {
    out_blocks = ceil_div(p.n_out, col_x);
    min_len = col_y * 32;  // at least 32 elements per thread and chunk
  } else {
    p.group = p.n_red >= 2048 ? block_threads : 32;
    out_blocks = ceil_div(p.n_out, block_threads / p.group);
    min_len = std::int64_t(p.group) * 16;
  }
  std::int64_t chunks = 1;
  if (out_blocks < target_blocks && p.n_red > min_len) {
    chunks = ceil_div(target_blocks, out_blocks);
    std::int64_t by_len = ceil_div(p.n_red, min_len);
    if (chunks > by_len) chunks = by_len;
    if (chunks > 65535) chunks = 65535;
  }
  p.chunk_len = p.n_red > 0 ? ceil_div(p.n_red, chunks) : 1;
  p.chunks = p.n_red > 0 ? ceil_div(p.n_red, p.chunk_len) : 1;  // every chunk non-empty
  return p;
}

// Accumulators: accumulate_t (f32 for f32/bf16/f16, f64 for f64, int64 for ints and bool).
std::size_t align_up(std::size_t n) { return (n + 255) / 256 * 256; }

// Workspace: CUB's temporary storage, or the chunks' partial values (+ indices).
template <class A> std::size_t partial_bytes(const Plan& p, bool with_index) {
  if (p.chunks <= 1) return 0;
  std::size_t n = static_cast<std::size_t>(p.chunks * p.n_out);
  return align_up(n * sizeof(A)) + (with_index ? align_up(n * sizeof(std::int64_t)) : 0);
}

template <class T> std::size_t cub_bytes(std::int64_t n) {
  std::size_t bytes = 0;
  if (n <= std::int64_t(0xffffffff))
    cub::DeviceReduce::Sum(nullptr, bytes, static_cast<const T*>(nullptr), static_cast<T*>(nullptr),
                           static_cast<std::uint32_t>(n));
  else
    cub::DeviceReduce::Sum(nullptr, bytes, static_cast<const T*>(nullptr), static_cast<T*>(nullptr),
                           static_cast<std::uint64_t>(n));
  return bytes > 0 ? bytes : 1;  // never 0: a null workspace would make the call a size query
}

// ---- device helpers ----

template <class A> struct State {
  A v;
  std::int64_t i;  // max/min: index of v in the reduced space, -1 while empty
};

template <ReduceOp OP, class A> __device__ __forceinline__ State<A> identity() { return {A(0), -1}; }

template <class A> __device__ __forceinline__ bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>) return v != v;
  else return false;
}

// Adds (v, i) into s. For max/min: the first NaN wins, then the extreme, then the smaller
// index on ties: associative and commutative, so any combination order gives the same pair.
template <ReduceOp> inline constexpr bool no_combine_for = false;

template <ReduceOp OP, class A> __device__ __forceinline__ void combine(State<A>& s, A v, std::int64_t i) {
  if constexpr (OP == ReduceOp::sum) {
    s.v += v;
  } else if constexpr (OP == ReduceOp::max || OP == ReduceOp::min) {
    if (i < 0) return;
    bool take;
    if (s.i < 0) {
      take = true;
    } else {
      bool n1 = is_nan(s.v), n2 = is_nan(v);
      if (n1 || n2) take = n2 && (!n1 || i < s.i);
      else if (OP == ReduceOp::max ? v > s.v : v < s.v) take = true;
      else take = v == s.v && i < s.i;
    }
    if (take) {
      s.v = v;
      s.i = i;
    }
  } else {
    static_assert(no_combine_for<OP>, "an op of BRRR_REDUCE_OPS has no combine step in ops/cuda/reduce.cu");
  }
}

template <ReduceOp OP, class A> __device__ __forceinline__ State<A> warp_reduce(State<A> s) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    A v = __shfl_down_sync(0xffffffffu, s.v, off);
    if constexpr (OP == ReduceOp::sum) {
      s.v += v;
    } else {
      long long i = __shfl_down_sync(0xffffffffu, static_cast<long long>(s.i), off);
      combine<OP>(s, v, static_cast<std::int64_t>(i));
    }
  }
  return s;
}

struct Offsets {
  std::int64_t in, out, idx;
};

// Offsets of output number o (row-major over the kept dims).
__device__ __forceinline__ Offsets output_offsets(const Plan& p, std::int64_t o) {
  Offsets r{0, 0, 0};
  for (int d = p.nk - 1; d >= 0; --d) {
    std::int64_t size = p.k_sizes[d];
    std::int64_t c = o % size;
    o /= size;
    r.in += c * p.k_in[d];
    r.out += c * p.k_out[d];
    r.idx += c * p.k_idx[d];
  }
  return r;
}

// Input offset of element r of the reduced space.
__device__ __forceinline__ std::int64_t reduced_offset(const Plan& p, std::int64_t r) {
  if (p.nr == 1) return r * p.r_in[0];
  std::int64_t off = 0;
  for (int d = p.nr - 1; d >= 0; --d) {
    std::int64_t size = p.r_sizes[d];
    off += (r % size) * p.r_in[d];
    r /= size;
  }
  return off;
}

template <class O, class A> __device__ __forceinline__ void write_result(const Plan& p, O* out, std::int64_t* idx,
                                                                        A* part_v, std::int64_t* part_i,
                                                                        std::int64_t o, std::int64_t chunk,
                                                                        const State<A>& s) {
  if (p.chunks > 1) {
    std::int64_t k = chunk * p.n_out + o;
    part_v[k] = s.v;
    if (part_i) part_i[k] = s.i;
  } else {
    Offsets off = output_offsets(p, o);
    out[off.out] = narrow_to<O>(s.v);
    if (idx) idx[off.idx] = s.i;
  }
}

// ---- kernels ----

// Row kernel: `p.group` threads per output (32: one warp; 256: the block).
template <ReduceOp OP, class T, class O>
__global__ void __launch_bounds__(block_threads) reduce_row(Plan p, const T* __restrict__ in, O* out,
                                                            std::int64_t* idx, accumulate_t<T>* part_v,
                                                            std::int64_t* part_i) {
  pdl_begin();
  using A = accumulate_t<T>;
  __shared__ A warp_v[block_threads / 32];
  __shared__ std::int64_t warp_i[block_threads / 32];
  const int group = p.group;
  const int lane = threadIdx.x % group;
  const std::int64_t per_block = block_threads / group;
  const std::int64_t chunk = blockIdx.y;
  const std::int64_t r0 = chunk * p.chunk_len;
  const std::int64_t r1 = r0 + p.chunk_len < p.n_red ? r0 + p.chunk_len : p.n_red;
  // o is uniform within a group, so the whole group runs the same iterations (the block
  // barriers below are reached by every thread when group == block_threads).
  for (std::int64_t o = blockIdx.x * per_block + threadIdx.x / group; o < p.n_out;
       o += std::int64_t(gridDim.x) * per_block) {
    const T* base = in + output_offsets(p, o).in;
    State<A> s = identity<OP, A>();
    std::int64_t r = r0 + lane;
    if (p.nr == 1) {
      const std::int64_t st = p.r_in[0];
      // Four independent loads in flight per thread.
      for (; r + 3 * group < r1; r += 4 * group) {
        A a0 = load_acc(base[r * st]);
        A a1 = load_acc(base[(r + group) * st]);
        A a2 = load_acc(base[(r + 2 * group) * st]);
        A a3 = load_acc(base[(r + 3 * group) * st]);
        if constexpr (OP == ReduceOp::sum) {
          s.v += (a0 + a1) + (a2 + a3);
        } else {
          combine<OP>(s, a0, r);
          combine<OP>(s, a1, r + group);
          combine<OP>(s, a2, r + 2 * group);
          combine<OP>(s, a3, r + 3 * group);
        }
      }
      for (; r < r1; r += group) combine<OP>(s, load_acc(base[r * st]), r);
    } else {
      for (; r < r1; r += group) combine<OP>(s, load_acc(base[reduced_offset(p, r)]), r);
    }
    s = warp_reduce<OP>(s);
    if (group > 32) {
      const int warp = threadIdx.x / 32;
      if (threadIdx.x % 32 == 0) {
        warp_v[warp] = s.v;
        warp_i[warp] = s.i;
      }
      __syncthreads();
      if (warp == 0) {
        s = identity<OP, A>();
        if (threadIdx.x < block_threads / 32) s = State<A>{warp_v[threadIdx.x], warp_i[threadIdx.x]};
        s = warp_reduce<OP>(s);
      }
      __syncthreads();  // warp_v is reused by the next output
    }
    if (lane == 0) write_result(p, out, idx, part_v, part_i, o, chunk, s);
  }
}

// Column kernel: threadIdx.x over 32 consecutive outputs, threadIdx.y over the reduced space.
template <ReduceOp OP, class T, class O>
__global__ void __launch_bounds__(col_x * col_y) reduce_col(Plan p, const T* __restrict__ in, O* out,
                                                            std::int64_t* idx, accumulate_t<T>* part_v,
                                                            std::int64_t* part_i) {
  pdl_begin();
  using A = accumulate_t<T>;
  __shared__ A tile_v[col_y][col_x + 1];
  __shared__ std::int64_t tile_i[col_y][col_x + 1];
  const std::int64_t chunk = blockIdx.y;
  const std::int64_t r0 = chunk * p.chunk_len;
  const std::int64_t r1 = r0 + p.chunk_len < p.n_red ? r0 + p.chunk_len : p.n_red;
  const int tx = threadIdx.x, ty = threadIdx.y;
  // The tile loop is uniform across the block: every thread reaches both barriers.
  for (std::int64_t tile = blockIdx.x; tile * col_x < p.n_out; tile += gridDim.x) {
    const std::int64_t o = tile * col_x + tx;
    State<A> s = identity<OP, A>();
    if (o < p.n_out) {
      const T* base = in + output_offsets(p, o).in;
      if (p.nr <= 1) {
        const std::int64_t st = p.nr == 1 ? p.r_in[0] : 0;
        for (std::int64_t r = r0 + ty; r < r1; r += col_y) combine<OP>(s, load_acc(base[r * st]), r);
      } else {
        for (std::int64_t r = r0 + ty; r < r1; r += col_y) combine<OP>(s, load_acc(base[reduced_offset(p, r)]), r);
      }
    }
    tile_v[ty][tx] = s.v;
    tile_i[ty][tx] = s.i;
    __syncthreads();
    if (ty == 0 && o < p.n_out) {
      State<A> t = identity<OP, A>();
      for (int y = 0; y < col_y; ++y) {
        if constexpr (OP == ReduceOp::sum) t.v += tile_v[y][tx];
        else combine<OP>(t, tile_v[y][tx], tile_i[y][tx]);
      }
      write_result(p, out, idx, part_v, part_i, o, chunk, t);
    }
    __syncthreads();
  }
}

// Combines the chunks' partial results, in chunk order.
template <ReduceOp OP, class O, class A>
__global__ void reduce_finalize(Plan p, O* out, std::int64_t* idx, const A* part_v, const std::int64_t* part_i) {
  pdl_begin();
  for (std::int64_t o = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; o < p.n_out;
       o += std::int64_t(blockDim.x) * gridDim.x) {
    State<A> s = identity<OP, A>();
    for (std::int64_t c = 0; c < p.chunks; ++c) {
      std::int64_t k = c * p.n_out + o;
      if constexpr (OP == ReduceOp::sum) s.v += part_v[k];
      else combine<OP>(s, part_v[k], part_i[k]);
    }
    Offsets off = output_offsets(p, o);
    out[off.out] = narrow_to<O>(s.v);
    if (idx) idx[off.idx] = s.i;
  }
}

template <ReduceOp OP, class T, class O>
cudaError_t launch(const Plan& p, const Operand& out, const Operand& in, const Operand* indices, void* workspace,
                   cudaStream_t stream) {
  using A = accumulate_t<T>;
  const T* x = static_cast<const T*>(in.data);
  O* y = static_cast<O*>(out.data);
  std::int64_t* ix = indices ? static_cast<std::int64_t*>(indices->data) : nullptr;
  A* part_v = nullptr;
  std::int64_t* part_i = nullptr;
  if (p.chunks > 1) {
    std::size_t n = static_cast<std::size_t>(p.chunks * p.n_out);
    part_v = static_cast<A*>(workspace);
    if (OP != ReduceOp::sum) part_i = reinterpret_cast<std::int64_t*>(static_cast<char*>(workspace) + align_up(n * sizeof(A)));
  }
  const std::int64_t grid_cap = 65535LL * 32;
  if (p.column) {
    std::int64_t gx = ceil_div(p.n_out, col_x);
    if (gx > grid_cap) gx = grid_cap;
    dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(p.chunks));
    launch_pdl(reduce_col<OP, T, O>, grid, dim3(col_x, col_y), 0, stream, p, x, y, ix, part_v, part_i);
  } else {
    std::int64_t gx = ceil_div(p.n_out, block_threads / p.group);
    if (gx > grid_cap) gx = grid_cap;
    dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(p.chunks));
    launch_pdl(reduce_row<OP, T, O>, grid, block_threads, 0, stream, p, x, y, ix, part_v, part_i);
  }
  if (p.chunks > 1) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    launch_pdl(reduce_finalize<OP, O, A>, blocks_for(p.n_out), 256, 0, stream, p, y, ix, part_v, part_i);
  }
  return cudaGetLastError();
}

template <class T> cudaError_t cub_sum(const Plan& p, const Operand& out, const Operand& in, void* workspace,
                                       std::size_t bytes, cudaStream_t stream) {
  const T* x = static_cast<const T*>(in.data);
  T* y = static_cast<T*>(out.data);
  if (p.n_red <= std::int64_t(0xffffffff))
    return cub::DeviceReduce::Sum(workspace, bytes, x, y, static_cast<std::uint32_t>(p.n_red), stream);
  return cub::DeviceReduce::Sum(workspace, bytes, x, y, static_cast<std::uint64_t>(p.n_red), stream);
}

// Whether `out`'s dtype is the one this (op, input dtype) writes: sum -> the input's for
// floats (or f32 for bf16/f16: the accumulator, used by mean), i64 for integers and bool;
// max/min -> the input's.
bool valid_out(ReduceOp op, DType in, DType out) {
  if (op != ReduceOp::sum) return out == in;
  switch (in) {
    case DType::f32: case DType::f64: return out == in;
    case DType::bf16: case DType::f16: return out == in || out == DType::f32;
    case DType::i32: case DType::i64: case DType::boolean: return out == DType::i64;
  }
  return false;
}

}  // namespace

std::size_t reduce_workspace_bytes(ReduceOp op, const Operand& out, const Operand& in, std::uint32_t dims_mask,
                                   const Operand* indices, int device) {
  if (out.numel == 0 || !valid_out(op, in.dtype, out.dtype)) return 0;
  Plan p = make_plan(op, out, in, dims_mask, indices, device);
  std::size_t bytes = 0;
  dispatch(in.dtype, [&]<class T>(T*) {
    if (p.use_cub) {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) bytes = cub_bytes<T>(p.n_red);
    } else {
      bytes = partial_bytes<accumulate_t<T>>(p, op != ReduceOp::sum);
    }
  });
  return bytes;
}

int reduce(ReduceOp op, const Operand& out, const Operand& in, std::uint32_t dims_mask, const Operand* indices,
           void* workspace, std::size_t workspace_bytes, int device, void* stream) {
  if (out.numel == 0) return static_cast<int>(cudaSuccess);
  if (!valid_out(op, in.dtype, out.dtype)) return static_cast<int>(cudaErrorInvalidValue);
  if (indices && (op == ReduceOp::sum || indices->dtype != DType::i64)) return static_cast<int>(cudaErrorInvalidValue);
  auto st = static_cast<cudaStream_t>(stream);
  Plan p = make_plan(op, out, in, dims_mask, indices, device);
  if (op != ReduceOp::sum && p.n_red == 0) return static_cast<int>(cudaErrorInvalidValue);
  if (indices && p.nr > 1) return static_cast<int>(cudaErrorInvalidValue);
  cudaError_t status = cudaSuccess;
  dispatch(in.dtype, [&]<class T>(T*) {
    using A = accumulate_t<T>;
    if (p.use_cub) {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        std::size_t need = cub_bytes<T>(p.n_red);
        status = workspace_bytes < need || !workspace
                     ? cudaErrorInvalidValue
                     : cub_sum<T>(p, out, in, workspace, need, st);
      }
      return;
    }
    if (workspace_bytes < partial_bytes<A>(p, op != ReduceOp::sum) || (p.chunks > 1 && !workspace)) {
      status = cudaErrorInvalidValue;
      return;
    }
    with_op(op, [&]<ReduceOp OP>() {
      if constexpr (OP != ReduceOp::sum) status = launch<OP, T, T>(p, out, in, indices, workspace, st);
      else if constexpr (std::is_same_v<A, std::int64_t>) status = launch<OP, T, std::int64_t>(p, out, in, nullptr, workspace, st);
      else if constexpr (is_float16<T>) {
        if (out.dtype == DType::f32) status = launch<OP, T, float>(p, out, in, nullptr, workspace, st);
        else status = launch<OP, T, T>(p, out, in, nullptr, workspace, st);
      } else status = launch<OP, T, T>(p, out, in, nullptr, workspace, st);
    });
  });
  return static_cast<int>(status);
}

}  // namespace brrr::kernels

// CPU kernels of the scans, the sort, topk and searchsorted, over contiguous [rows, n] operands
// along the last dim (the op layer moves the dim last). Math: ops/scan_sort_math.hpp, shared
// with the CUDA kernels.
module;
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "backend/contract.hpp"
#include "ops/scan_sort_math.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

using namespace cpu;
namespace sm = scan_math;

namespace {

// Rows and length of a contiguous operand scanned along its last dim.
void rows_and_length(const Operand& t, std::int64_t& rows, std::int64_t& n) {
  n = t.ndim == 0 ? 1 : t.sizes[t.ndim - 1];
  rows = n == 0 ? 0 : t.numel / n;
}

}  // namespace

void CpuBackend::scan(ScanOp op, const Operand& out, const Operand& in, const Operand* indices) {
  std::int64_t rows = 0, n = 0;
  rows_and_length(in, rows, n);
  with_op(op, [&]<ScanOp OP>() {
    dispatch(in.dtype, [&]<class T>(T*) {
      // In double for every floating dtype (int64 for integers): the sequential order is the
      // worst for rounding (in f32 a million-long logcumsumexp drifts by 1e-2, its tiny
      // increments swamped), and double's error there stays far below one f32 rounding, so
      // the CPU is a reference for the CUDA scans (tests/ops/scan_bound.hpp). PyTorch's CPU
      // scans accumulate float in double too; 16-bit floats get more than f32.
      using A = wide_t<T>;
      const auto* x = static_cast<const T*>(in.data);
      auto* y = static_cast<T*>(out.data);
      auto* idx = indices ? static_cast<std::int64_t*>(indices->data) : nullptr;
      for (std::int64_t r = 0; r < rows; ++r) {
        A acc{};
        std::int64_t at = 0;
        for (std::int64_t j = 0; j < n; ++j) {
          const A v = widen(x[r * n + j]);
          acc = j == 0 ? v : sm::combine<OP, A>(acc, v);
          if (idx) {
            if (sm::is_running_extreme(v, acc)) at = j;
            idx[r * n + j] = at;
          }
          y[r * n + j] = narrow_to<T>(acc);
        }
      }
    });
  });
}

namespace {

// The first k elements of each row in sort's order (NaN largest, -0.0 == 0.0, equal ones by
// position) and their positions, into contiguous [rows, k]: a stable sort when k == n (sort),
// else a partial sort (topk) under the same order made total by the position, so that its
// first k are the stable sort's.
void sorted_rows(const Operand& values, const Operand& indices, const Operand& in, std::int64_t k, bool descending) {
  std::int64_t rows = 0, n = 0;
  rows_and_length(in, rows, n);
  if (k == 0) return;
  dispatch(in.dtype, [&]<class T>(T*) {
    const auto* x = static_cast<const T*>(in.data);
    auto* v = static_cast<T*>(values.data);
    auto* idx = static_cast<std::int64_t*>(indices.data);
    std::vector<std::int64_t> order(static_cast<std::size_t>(n));
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * n;
      // a before b in the sort's direction (the comparison itself makes -0.0 == 0.0).
      auto before = [&](std::int64_t a, std::int64_t b) {
        auto wa = widen(row[a]), wb = widen(row[b]);
        if (descending) std::swap(wa, wb);
        if constexpr (std::is_floating_point_v<decltype(wa)>) {
          if (wa != wa) return false;  // NaN is the largest value (PyTorch)
          if (wb != wb) return true;
        }
        return wa < wb;
      };
      std::iota(order.begin(), order.end(), std::int64_t(0));
      if (k == n) {
        std::stable_sort(order.begin(), order.end(), before);
      } else {
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](std::int64_t a, std::int64_t b) {
          return before(a, b) || (!before(b, a) && a < b);
        });
      }
      for (std::int64_t j = 0; j < k; ++j) {
        idx[r * k + j] = order[static_cast<std::size_t>(j)];
        v[r * k + j] = row[order[static_cast<std::size_t>(j)]];
      }
    }
  });
}

}  // namespace

void CpuBackend::sort(const Operand& values, const Operand& indices, const Operand& in, bool descending) {
  std::int64_t rows = 0, n = 0;
  rows_and_length(in, rows, n);
  sorted_rows(values, indices, in, n, descending);
}

void CpuBackend::topk(const Operand& values, const Operand& indices, const Operand& in, std::int64_t k, bool largest) {
  sorted_rows(values, indices, in, k, largest);
}

void CpuBackend::searchsorted(const Operand& out, const Operand& sorted, const Operand& values, bool right) {
  std::int64_t rows = 0, n = 0, vrows = 0, m = 0;
  rows_and_length(sorted, rows, n);
  rows_and_length(values, vrows, m);
  if (n == 0) rows = sorted.ndim >= 2 ? sorted.sizes[0] : 1;
  dispatch(sorted.dtype, [&]<class T>(T*) {
    const auto* s = static_cast<const T*>(sorted.data);
    const auto* v = static_cast<const T*>(values.data);
    auto* o = static_cast<std::int64_t*>(out.data);
    for (std::int64_t r = 0; r < vrows; ++r) {
      const T* row = s + (rows == 1 ? 0 : r) * n;
      for (std::int64_t j = 0; j < m; ++j) {
        const auto x = widen(v[r * m + j]);
        std::int64_t lo = 0, hi = n;  // first position whose element is >= x (> x when right)
        while (lo < hi) {
          const std::int64_t mid = lo + (hi - lo) / 2;
          const auto e = widen(row[mid]);
          if (right ? !(x < e) : (e < x)) lo = mid + 1;
          else hi = mid;
        }
        o[r * m + j] = lo;
      }
    }
  });
}

}  // namespace brrr::backend

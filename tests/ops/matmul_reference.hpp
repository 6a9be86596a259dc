// matmul by its definition in double, with PyTorch's 1-D and batch-broadcast rules: the
// reference of the CPU and GPU matmul suites. Include after tests/tensor/helpers.hpp (for
// test::numel_of) and `import brrr;`; needs <algorithm>, <cmath> and <vector>.
#pragma once

namespace test {

struct Ref {
  std::vector<double> values;
  Shape shape;
};

/// a (shape as) @ b (shape bs), row-major; absolute: sum of |a||b| instead (the size of the
/// terms, for relative tolerances).
inline Ref ref_matmul(const std::vector<double>& a, Shape as, const std::vector<double>& b, Shape bs,
                      bool absolute = false) {
  bool a_vec = as.size() == 1, b_vec = bs.size() == 1;
  if (a_vec) as.insert(as.begin(), 1);
  if (b_vec) bs.push_back(1);
  std::int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  std::size_t nb = std::max(ab.size(), bb.size());
  ab.insert(ab.begin(), nb - ab.size(), 1);
  bb.insert(bb.begin(), nb - bb.size(), 1);
  Shape batch(nb);
  for (std::size_t d = 0; d < nb; ++d) batch[d] = std::max(ab[d], bb[d]);
  std::int64_t nbatch = numel_of(batch);
  Ref r;
  r.shape = batch;
  if (!a_vec) r.shape.push_back(m);
  if (!b_vec) r.shape.push_back(n);
  r.values.assign(static_cast<std::size_t>(nbatch * m * n), 0.0);
  for (std::int64_t i = 0; i < nbatch; ++i) {
    std::int64_t rem = i, ia = 0, ib = 0, sa = 1, sb = 1;
    for (std::size_t d = nb; d-- > 0;) {
      std::int64_t idx = rem % batch[d];
      rem /= batch[d];
      ia += (ab[d] == 1 ? 0 : idx) * sa;
      ib += (bb[d] == 1 ? 0 : idx) * sb;
      sa *= ab[d];
      sb *= bb[d];
    }
    for (std::int64_t r0 = 0; r0 < m; ++r0)
      for (std::int64_t c = 0; c < n; ++c) {
        double s = 0;
        for (std::int64_t q = 0; q < k; ++q) {
          double x = a[static_cast<std::size_t>((ia * m + r0) * k + q)];
          double y = b[static_cast<std::size_t>((ib * k + q) * n + c)];
          s += absolute ? std::abs(x) * std::abs(y) : x * y;
        }
        r.values[static_cast<std::size_t>((i * m + r0) * n + c)] = s;
      }
  }
  return r;
}

}  // namespace test

// Every collective on every dtype against hand-computed results, for any world size and
// device: the CPU suite (Gloo, world sizes 1-3 through brrr-run) and the GPU suite (NCCL, world
// size 1) run these bodies. Rank r holds x_r[i] = r + 1 + i (i < 5), small whole numbers that
// every dtype (bf16 too) represents exactly, so the expected values are exact.
// Include after <doctest/doctest.h>, `import brrr;` and tests/tensor/helpers.hpp.
#pragma once

namespace dist_cases {

using namespace brrr;
using test::make;
using test::values;

inline constexpr std::int64_t k = 5;

inline std::vector<double> x_of(int r, std::int64_t n = k, double scale = 1) {
  std::vector<double> v;
  for (std::int64_t i = 0; i < n; ++i) v.push_back(scale * (r + 1 + static_cast<double>(i)));
  return v;
}
// bool inputs: rank r holds (r + i) % 2 == 0 (or all true on rank 0 for the and/or cases).
inline std::vector<double> b_of(int r) {
  std::vector<double> v;
  for (std::int64_t i = 0; i < k; ++i) v.push_back((r + i) % 2 == 0 ? 1 : 0);
  return v;
}

inline Tensor input(DType d, int r, Device dev) {
  return make(d, d == DType::boolean ? b_of(r) : x_of(r)).to(dev);
}

// Expected all_reduce of the inputs of ranks 0..n-1.
inline std::vector<double> expected_reduce(DType d, dist::ReduceOp op, int n) {
  std::vector<double> e(k);
  for (std::int64_t i = 0; i < k; ++i) {
    std::vector<double> col;
    for (int r = 0; r < n; ++r) col.push_back(d == DType::boolean ? b_of(r)[i] : x_of(r)[i]);
    double v = col[0];
    for (int r = 1; r < n; ++r) {
      switch (op) {
        case dist::ReduceOp::sum:
        case dist::ReduceOp::avg: v = d == DType::boolean ? (v || col[r]) : v + col[r]; break;
        case dist::ReduceOp::product: v = d == DType::boolean ? (v && col[r]) : v * col[r]; break;
        case dist::ReduceOp::max: v = std::max(v, col[r]); break;
        case dist::ReduceOp::min: v = std::min(v, col[r]); break;
      }
    }
    if (op == dist::ReduceOp::avg) v /= n;
    e[static_cast<std::size_t>(i)] = v;
  }
  return e;
}

inline constexpr dist::ReduceOp all_ops[] = {dist::ReduceOp::sum, dist::ReduceOp::avg, dist::ReduceOp::product,
                                             dist::ReduceOp::max, dist::ReduceOp::min};

inline bool op_allowed(DType d, dist::ReduceOp op) { return op != dist::ReduceOp::avg || is_floating_point(d); }

inline void all_reduce_every_dtype_and_op(Device dev) {
  const int r = dist::rank(), n = dist::world_size();
  for (DType d : test::all_dtypes)
    for (dist::ReduceOp op : all_ops) {
      CAPTURE(to_string(d));
      CAPTURE(dist::to_string(op));
      Tensor t = input(d, r, dev);
      if (!op_allowed(d, op)) {
        CHECK_BRRR_ERROR(dist::all_reduce(t, op), ErrorKind::dtype, "all_reduce", "avg", to_string(d));
        continue;
      }
      std::uint64_t v0 = t.storage().version();
      dist::all_reduce(t, op);
      CHECK(values(t) == expected_reduce(d, op, n));
      CHECK(t.storage().version() > v0);
      CHECK(t.dtype() == d);
    }
}

inline void broadcast_and_reduce_from_every_root(Device dev) {
  const int r = dist::rank(), n = dist::world_size();
  for (DType d : test::all_dtypes)
    for (int root = 0; root < n; ++root) {
      CAPTURE(to_string(d));
      CAPTURE(root);
      Tensor t = input(d, r, dev);
      dist::broadcast(t, root);
      CHECK(values(t) == values(input(d, root, Device::cpu())));

      dist::ReduceOp op = d == DType::boolean ? dist::ReduceOp::product : dist::ReduceOp::sum;
      Tensor u = input(d, r, dev);
      dist::reduce(u, root, op);
      if (r == root) CHECK(values(u) == expected_reduce(d, op, n));
      else CHECK(values(u) == values(input(d, r, Device::cpu())));  // left unchanged
    }
  Tensor f = input(DType::f32, r, dev);
  dist::reduce(f, n - 1, dist::ReduceOp::avg);
  if (r == n - 1) CHECK(values(f) == expected_reduce(DType::f32, dist::ReduceOp::avg, n));
}

inline void all_gather_into_one_tensor_and_a_list(Device dev) {
  const int r = dist::rank(), n = dist::world_size();
  for (DType d : test::all_dtypes) {
    CAPTURE(to_string(d));
    Tensor in = input(d, r, dev);
    std::vector<double> expect;
    for (int q = 0; q < n; ++q) {
      auto v = values(input(d, q, Device::cpu()));
      expect.insert(expect.end(), v.begin(), v.end());
    }
    Tensor flat = full({n * k}, -7, {.dtype = d, .device = dev});
    dist::all_gather(flat, in);
    CHECK(values(flat) == expect);
    Tensor stacked = full({n, k}, -7, {.dtype = d, .device = dev});
    dist::all_gather(stacked, in);
    CHECK(values(stacked) == expect);

    std::vector<Tensor> list;
    for (int q = 0; q < n; ++q) list.push_back(full({k}, -7, {.dtype = d, .device = dev}));
    dist::all_gather(list, in);
    for (int q = 0; q < n; ++q) CHECK(values(list[static_cast<std::size_t>(q)]) == values(input(d, q, Device::cpu())));
  }
}

inline void reduce_scatter_sum_and_avg(Device dev) {
  const int r = dist::rank(), n = dist::world_size();
  for (DType d : test::all_dtypes)
    for (dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::avg, dist::ReduceOp::max}) {
      if (!op_allowed(d, op)) continue;
      CAPTURE(to_string(d));
      CAPTURE(dist::to_string(op));
      // Rank q's input: n blocks of k; block b holds x_q scaled by (b + 1) (bool: b_q).
      std::vector<double> mine;
      for (int b = 0; b < n; ++b) {
        auto v = d == DType::boolean ? b_of(r + b) : x_of(r, k, b + 1);
        mine.insert(mine.end(), v.begin(), v.end());
      }
      Tensor in = make(d, mine, {n * k}).to(dev);
      Tensor out = full({k}, -7, {.dtype = d, .device = dev});
      dist::reduce_scatter(out, in, op);
      std::vector<double> expect(k);
      for (std::int64_t i = 0; i < k; ++i) {
        double acc = op == dist::ReduceOp::max ? -1e300 : 0;
        for (int q = 0; q < n; ++q) {
          double v = d == DType::boolean ? b_of(q + r)[i] : x_of(q, k, r + 1)[i];
          acc = op == dist::ReduceOp::max ? std::max(acc, v) : (d == DType::boolean ? (acc || v) : acc + v);
        }
        expect[static_cast<std::size_t>(i)] = op == dist::ReduceOp::avg ? acc / n : acc;
      }
      CHECK(values(out) == expect);
      CHECK(values(in) == mine);  // the input is not modified
    }
}

inline void all_to_all_equal_and_uneven(Device dev) {
  const int r = dist::rank(), n = dist::world_size();
  for (DType d : test::all_dtypes) {
    CAPTURE(to_string(d));
    // Block j of rank i's input holds 10 i + j (mod 2 for bool), 2 elements per block.
    auto block = [&](int i, int j) { return d == DType::boolean ? double((i + j) % 2) : 10.0 * i + j; };
    std::vector<double> mine, expect;
    for (int j = 0; j < n; ++j)
      for (int e = 0; e < 2; ++e) {
        mine.push_back(block(r, j));
        expect.push_back(block(j, r));
      }
    Tensor in = make(d, mine, {2 * n}).to(dev);
    Tensor out = full({2 * n}, -7, {.dtype = d, .device = dev});
    dist::all_to_all(out, in);
    CHECK(values(out) == expect);

    // Lists: rank i sends i + j + 1 elements to rank j.
    std::vector<Tensor> ins, outs;
    for (int j = 0; j < n; ++j) {
      ins.push_back(full({r + j + 1}, block(r, j), {.dtype = d, .device = dev}));
      outs.push_back(full({j + r + 1}, -7, {.dtype = d, .device = dev}));
    }
    dist::all_to_all(outs, ins);
    for (int j = 0; j < n; ++j)
      CHECK(values(outs[static_cast<std::size_t>(j)]) == std::vector<double>(static_cast<std::size_t>(j + r + 1), block(j, r)));
  }
}

inline void point_to_point_ring(Device dev) {
  const int r = dist::rank(), n = dist::world_size();
  if (n == 1) return;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (DType d : test::all_dtypes) {
    CAPTURE(to_string(d));
    // isend/irecv around the ring: posted in any order, no deadlock.
    Tensor out = input(d, r, dev);
    Tensor in = full({k}, -7, {.dtype = d, .device = dev});
    dist::Work s = dist::isend(out, next);
    dist::Work q = dist::irecv(in, prev);
    q.wait();
    s.wait();
    CHECK(values(in) == values(input(d, prev, Device::cpu())));
  }
  // Blocking send/recv between pairs (0, 1), (2, 3), ...: the lower rank sends first.
  Tensor t = full({3}, r, {.device = dev});
  int peer = r % 2 == 0 ? r + 1 : r - 1;
  if (peer < n) {
    Tensor got = zeros({3}, {.device = dev});
    if (r < peer) {
      dist::send(t, peer);
      dist::recv(got, peer);
    } else {
      dist::recv(got, peer);
      dist::send(t, peer);
    }
    CHECK(values(got) == std::vector<double>(3, peer));
  }
}

inline void async_work_and_order(Device dev) {
  const int r = dist::rank(), n = dist::world_size();
  std::vector<Tensor> ts;
  std::vector<dist::Work> works;
  for (int i = 0; i < 4; ++i) {
    ts.push_back(full({1000}, r + i, {.device = dev}));
    works.push_back(dist::all_reduce(ts.back(), dist::ReduceOp::sum, {.async_op = true}));
  }
  for (auto& w : works) {
    CHECK(w.defined());
    CHECK(w.name().find("all_reduce #") == 0);
  }
  for (auto& w : works) w.wait();
  for (int i = 0; i < 4; ++i)
    CHECK(values(ts[static_cast<std::size_t>(i)]) == std::vector<double>(1000, n * (n - 1) / 2.0 + n * i));
  for (auto& w : works) {
    // After wait() the result is usable in program order; the event may still be pending
    // on a GPU (the wait was device-side), so poll until it reports completion.
    for (int spin = 0; spin < 100000 && !w.is_completed(); ++spin) {
    }
    CHECK(w.is_completed());
  }
  dist::Work none = dist::all_reduce(ts[0]);  // without async_op: nothing to wait for
  CHECK_FALSE(none.defined());
  CHECK(none.is_completed());
}

inline void groups_and_barrier(Device dev) {
  const int r = dist::rank(), n = dist::world_size();
  dist::barrier();
  CHECK(dist::world_group().size() == n);
  CHECK(dist::world_group().rank() == r);
  CHECK(dist::world_group().name() == "world");
  // The last rank and rank 0, in that order: group ranks 0 -> world n-1, 1 -> world 0.
  std::vector<int> members = n > 1 ? std::vector<int>{n - 1, 0} : std::vector<int>{0};
  dist::ProcessGroup g = dist::new_group(members);
  CHECK(g.size() == static_cast<int>(members.size()));
  bool member = r == 0 || r == n - 1;
  CHECK(g.is_member() == member);
  if (member) {
    CHECK(g.rank() == (r == n - 1 ? 0 : 1 % g.size()));
    Tensor t = full({4}, r + 1, {.device = dev});
    dist::all_reduce(t, dist::ReduceOp::sum, {.group = g});
    double expect = n > 1 ? n + 1 : 1;
    CHECK(values(t) == std::vector<double>(4, expect));
    Tensor b = full({2}, r, {.device = dev});
    dist::broadcast(b, 0, {.group = g});  // group rank 0 is world rank n - 1
    CHECK(values(b) == std::vector<double>(2, n - 1));
    dist::barrier({.group = g});
  } else {
    Tensor t = zeros({4}, {.device = dev});
    CHECK_BRRR_ERROR(dist::all_reduce(t, dist::ReduceOp::sum, {.group = g}), ErrorKind::value, "all_reduce",
                     "not a member of " + g.name());
  }
  dist::barrier();
}

inline void argument_errors(Device dev) {
  const int n = dist::world_size();
  Tensor m = zeros({4, 6}, {.device = dev});
  CHECK_BRRR_ERROR(dist::all_reduce(m.t()), ErrorKind::value, "all_reduce", "must be contiguous");
  CHECK_BRRR_ERROR(dist::all_reduce(Tensor()), ErrorKind::value, "all_reduce", "undefined");
  CHECK_BRRR_ERROR(dist::broadcast(m, n), ErrorKind::value, "broadcast", "src " + std::to_string(n), "outside world");
  CHECK_BRRR_ERROR(dist::all_gather(zeros({n * 24 + 1}, {.device = dev}), m), ErrorKind::shape, "all_gather");
  CHECK_BRRR_ERROR(dist::all_gather(zeros({n * 24}, {.dtype = DType::f64, .device = dev}), m), ErrorKind::dtype,
                   "all_gather", "dtype");
  CHECK_BRRR_ERROR(dist::reduce_scatter(zeros({5}, {.device = dev}), m), ErrorKind::shape, "reduce_scatter");
  std::vector<Tensor> short_list(static_cast<std::size_t>(n + 1), zeros({4, 6}, {.device = dev}));
  CHECK_BRRR_ERROR(dist::all_gather(short_list, m), ErrorKind::value, "all_gather", std::to_string(n + 1) + " outputs");
  CHECK_BRRR_ERROR(dist::send(m, dist::rank()), ErrorKind::value, "send", "is this rank");
  CHECK_BRRR_ERROR(dist::recv(m, -1), ErrorKind::value, "recv", "src -1");
  CHECK_BRRR_ERROR(dist::new_group({0, 0}), ErrorKind::value, "new_group", "listed twice");
  CHECK_BRRR_ERROR(dist::new_group({n}), ErrorKind::value, "new_group", "outside the world");
  // Nothing above reached the backend: the ranks are still in step.
  Tensor t = full({2}, 1, {.device = dev});
  dist::all_reduce(t);
  CHECK(values(t) == std::vector<double>(2, n));
}

}  // namespace dist_cases

// Views: every one checked against hand-computed sizes, strides, offsets and element values
// (arange-based literals, and random bases read through the hand-computed layout), views of
// views, zero-size dims, and reshape/contiguous copying only when no view can do.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "helpers.hpp"

using namespace brrr;
using namespace test;

namespace {

using V = std::vector<double>;

/// The elements a layout (sizes, strides, offset) selects from `base` (a storage's contents
/// as a flat vector), row-major: the hand-computed reference for views of random bases.
V gather(const V& base, const Shape& sizes, const Shape& strides, std::int64_t offset) {
  std::int64_t n = 1;
  for (auto s : sizes) n *= s;
  V out;
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t rem = i, at = offset;
    for (std::size_t d = sizes.size(); d-- > 0;) {
      at += (rem % sizes[d]) * strides[d];
      rem /= sizes[d];
    }
    out.push_back(base.at(static_cast<std::size_t>(at)));
  }
  return out;
}

/// Checks a view's metadata against hand-computed values and that it shares `base`'s storage.
#define CHECK_LAYOUT(t, base, sizes_, strides_, offset_)   \
  do {                                                     \
    CHECK((t).shape() == Shape sizes_);                    \
    CHECK((t).strides() == Shape strides_);                \
    CHECK((t).storage_offset() == (offset_));              \
    CHECK((t).storage().is_same((base).storage()));        \
  } while (0)

Tensor ar(std::int64_t n) { return arange(n); }  // i64 0..n-1

}  // namespace

TEST_CASE("contiguous layouts of fresh tensors, including size-0 and size-1 dims") {
  Tensor a = zeros({2, 3, 4});
  CHECK(a.shape() == Shape{2, 3, 4});
  CHECK(a.sizes() == Shape{2, 3, 4});
  CHECK(a.strides() == Shape{12, 4, 1});
  CHECK(a.storage_offset() == 0);
  CHECK(a.numel() == 24);
  CHECK(a.dim() == 3);
  CHECK(a.is_contiguous());
  CHECK(a.size(0) == 2);
  CHECK(a.size(-1) == 4);
  CHECK(a.stride(-2) == 4);
  CHECK(a.stride(0) == 12);
  CHECK(a.layout().numel() == 24);
  CHECK(a.storage().nbytes() == 24 * 4);
  CHECK(a.device() == Device::cpu());
  Tensor s = zeros({});
  CHECK(s.shape().empty());
  CHECK(s.strides().empty());
  CHECK(s.numel() == 1);
  CHECK(s.dim() == 0);
  CHECK(s.is_contiguous());
  // Size-0 and size-1 dims count as 1 in the strides of the dims left of them (PyTorch's rule).
  CHECK(zeros({0, 3}).strides() == Shape{3, 1});
  CHECK(zeros({3, 0}).strides() == Shape{1, 1});
  CHECK(zeros({2, 0, 3}).strides() == Shape{3, 3, 1});
  CHECK(zeros({5, 1, 2}).strides() == Shape{2, 2, 1});
  CHECK(zeros({2, 0, 3}).numel() == 0);
  CHECK(zeros({2, 0, 3}).is_contiguous());
  CHECK(Layout::contiguous({4, 1, 3}).strides == Shape{3, 3, 1});
  CHECK(Layout::contiguous({4, 1, 3}).offset == 0);
  // Layout::is_contiguous by hand.
  CHECK(Layout{{2, 3}, {3, 1}, 5}.is_contiguous());
  CHECK_FALSE(Layout{{2, 3}, {1, 2}, 0}.is_contiguous());
  CHECK(Layout{{2, 1, 3}, {3, 99, 1}, 0}.is_contiguous());  // size-1 dims: any stride
  CHECK_FALSE(Layout{{2, 3}, {0, 1}, 0}.is_contiguous());   // broadcast
  CHECK(Layout{{2, 0}, {7, 9}, 0}.is_contiguous());         // empty
}

TEST_CASE("view and reshape: -1 inference, hand-computed strides, shared storage, values") {
  Tensor x = ar(24);
  Tensor v = x.view({2, 3, 4});
  CHECK_LAYOUT(v, x, ({2, 3, 4}), ({12, 4, 1}), 0);
  CHECK(values(v) == iota(24));
  CHECK_LAYOUT(x.view({-1, 6}), x, ({4, 6}), ({6, 1}), 0);
  CHECK_LAYOUT(x.view({2, -1, 3}), x, ({2, 4, 3}), ({12, 3, 1}), 0);
  CHECK_LAYOUT(v.view({-1}), x, ({24}), ({1}), 0);
  CHECK_LAYOUT(v.view({24, 1}), x, ({24, 1}), ({1, 1}), 0);
  CHECK_LAYOUT(x.reshape({4, -1}), x, ({4, 6}), ({6, 1}), 0);  // a view: same storage
  CHECK(values(x.reshape({4, -1})) == iota(24));
  CHECK(x.storage().use_count() >= 2);  // x and v share it
  // Scalar <-> one element.
  Tensor one = full({1}, 3.5);
  CHECK_LAYOUT(one.view({}), one, ({}), ({}), 0);
  CHECK(one.view({}).item<float>() == 3.5f);
  Tensor two = full({}, 2.0);
  CHECK_LAYOUT(two.view({1, 1}), two, ({1, 1}), ({1, 1}), 0);
  CHECK_LAYOUT(two.reshape({-1}), two, ({1}), ({1}), 0);

  // Every other column of a contiguous [4, 6] is one uniform stride 2: all views work.
  Tensor y = ar(24).view({4, 6}).slice(1, 0, 6, 2);
  CHECK_LAYOUT(y, y, ({4, 3}), ({6, 2}), 0);
  V want_y = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22};
  CHECK(values(y) == want_y);
  CHECK_FALSE(y.is_contiguous());
  CHECK_LAYOUT(y.view({2, 2, 3}), y, ({2, 2, 3}), ({12, 6, 2}), 0);
  CHECK_LAYOUT(y.view({4, 3, 1}), y, ({4, 3, 1}), ({6, 2, 2}), 0);
  CHECK_LAYOUT(y.view({12}), y, ({12}), ({2}), 0);
  CHECK_LAYOUT(y.reshape({12}), y, ({12}), ({2}), 0);
  CHECK(values(y.view({12})) == want_y);

  // The middle 4 of 6 columns: rows can be split, but not merged with each other.
  Tensor q = ar(24).view({4, 6}).slice(1, 1, 5);
  CHECK_LAYOUT(q, q, ({4, 4}), ({6, 1}), 1);
  V want_q = {1, 2, 3, 4, 7, 8, 9, 10, 13, 14, 15, 16, 19, 20, 21, 22};
  CHECK(values(q) == want_q);
  CHECK_LAYOUT(q.view({2, 2, 4}), q, ({2, 2, 4}), ({12, 6, 1}), 1);
  CHECK_LAYOUT(q.view({4, 2, 2}), q, ({4, 2, 2}), ({6, 2, 1}), 1);
  CHECK(values(q.view({4, 2, 2})) == want_q);
  CHECK_THROWS_AS((void)q.view({16}), Error);
  CHECK_THROWS_AS((void)q.view({8, 2}), Error);
  // reshape copies, and only then.
  Tensor flat = q.reshape({16});
  CHECK(flat.shape() == Shape{16});
  CHECK(flat.strides() == Shape{1});
  CHECK(flat.storage_offset() == 0);
  CHECK_FALSE(flat.storage().is_same(q.storage()));
  CHECK(flat.is_contiguous());
  CHECK(values(flat) == want_q);
  CHECK(q.reshape({2, 2, 4}).storage().is_same(q.storage()));
  Tensor q82 = q.reshape({8, 2});
  CHECK_FALSE(q82.storage().is_same(q.storage()));
  CHECK(q82.strides() == Shape{2, 1});
  CHECK(values(q82) == want_q);

  // Random base, to make sure values are not arange coincidences.
  Tensor r = rand({4, 6});
  V rv = values(r);
  CHECK(values(r.view({3, 8})) == rv);
  CHECK(values(r.reshape({2, 3, -1})) == rv);
  CHECK(r.reshape({2, 3, -1}).shape() == Shape{2, 3, 4});
  CHECK(values(r.t().reshape({24})) == gather(rv, {6, 4}, {1, 6}, 0));
}

TEST_CASE("permute, transpose and t: strides and values") {
  Tensor x = ar(24).view({2, 3, 4});
  Tensor p = x.permute({2, 0, 1});
  CHECK_LAYOUT(p, x, ({4, 2, 3}), ({1, 12, 4}), 0);
  CHECK_FALSE(p.is_contiguous());
  CHECK(values(p) == V{0, 4, 8, 12, 16, 20, 1, 5, 9, 13, 17, 21, 2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23});
  CHECK_LAYOUT(x.permute({-1, 0, 1}), x, ({4, 2, 3}), ({1, 12, 4}), 0);
  CHECK_LAYOUT(x.permute({0, 1, 2}), x, ({2, 3, 4}), ({12, 4, 1}), 0);
  // The inverse permutation gives back the original layout.
  Tensor back = p.permute({1, 2, 0});
  CHECK_LAYOUT(back, x, ({2, 3, 4}), ({12, 4, 1}), 0);
  CHECK(back.is_contiguous());
  CHECK(values(back) == iota(24));

  CHECK_LAYOUT(x.transpose(0, 2), x, ({4, 3, 2}), ({1, 4, 12}), 0);
  CHECK_LAYOUT(x.transpose(-1, -2), x, ({2, 4, 3}), ({12, 1, 4}), 0);
  CHECK(values(x.transpose(-1, -2)) ==
        V{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, 12, 16, 20, 13, 17, 21, 14, 18, 22, 15, 19, 23});
  CHECK_LAYOUT(x.transpose(1, 1), x, ({2, 3, 4}), ({12, 4, 1}), 0);

  Tensor m = ar(6).view({2, 3});
  CHECK_LAYOUT(m.t(), m, ({3, 2}), ({1, 3}), 0);
  CHECK(values(m.t()) == V{0, 3, 1, 4, 2, 5});
  CHECK_LAYOUT(m.t().t(), m, ({2, 3}), ({3, 1}), 0);
  Tensor five = ar(5);
  CHECK_LAYOUT(five.t(), five, ({5}), ({1}), 0);
  Tensor s = full({}, 4.0);
  CHECK(s.t().shape().empty());
  CHECK(s.transpose(0, -1).shape().empty());
  CHECK(s.permute({}).item<float>() == 4.0f);

  // Random 4-d base through the hand-computed layout.
  Tensor r = randn({2, 3, 4, 5});
  V rv = values(r);
  Tensor rp = r.permute({3, 1, 0, 2});
  CHECK_LAYOUT(rp, r, ({5, 3, 2, 4}), ({1, 20, 60, 5}), 0);
  CHECK(values(rp) == gather(rv, {5, 3, 2, 4}, {1, 20, 60, 5}, 0));
}

TEST_CASE("slice: bounds, negative indices, clamping, steps") {
  Tensor x = ar(10);
  CHECK_LAYOUT(x.slice(0, 2, 8), x, ({6}), ({1}), 2);
  CHECK(values(x.slice(0, 2, 8)) == V{2, 3, 4, 5, 6, 7});
  CHECK_LAYOUT(x.slice(0, 1, 9, 3), x, ({3}), ({3}), 1);
  CHECK(values(x.slice(0, 1, 9, 3)) == V{1, 4, 7});
  CHECK_LAYOUT(x.slice(0, -3, 10), x, ({3}), ({1}), 7);
  CHECK(values(x.slice(0, -3, 10)) == V{7, 8, 9});
  CHECK(values(x.slice(0, 2, -2)) == V{2, 3, 4, 5, 6, 7});
  CHECK(values(x.slice(0, -100, 3)) == V{0, 1, 2});         // start clamps to 0
  CHECK(values(x.slice(0, 5, 100)) == V{5, 6, 7, 8, 9});    // end clamps to 10
  CHECK(values(x.slice(0, -100, 100, 4)) == V{0, 4, 8});
  CHECK(values(x.slice(0, 0, 10, 4)) == V{0, 4, 8});        // ceil(10 / 4) = 3
  CHECK(values(x.slice(0, 0, 10, 20)) == V{0});
  CHECK(values(x.slice(0, 9, 10, 5)) == V{9});
  // Empty results: end before start, start past the end.
  CHECK(x.slice(0, 8, 2).shape() == Shape{0});
  CHECK(x.slice(0, -1, -5).shape() == Shape{0});
  CHECK(x.slice(0, 50, 60).shape() == Shape{0});
  CHECK(values(x.slice(0, 8, 2)).empty());

  Tensor m = ar(20).view({4, 5});
  CHECK_LAYOUT(m.slice(1, 1, 5, 2), m, ({4, 2}), ({5, 2}), 1);
  CHECK(values(m.slice(1, 1, 5, 2)) == V{1, 3, 6, 8, 11, 13, 16, 18});
  CHECK_LAYOUT(m.slice(0, -2, 4), m, ({2, 5}), ({5, 1}), 10);
  CHECK(values(m.slice(0, -2, 4)) == iota(10, 10));
  CHECK(m.slice(0, -2, 4).is_contiguous());  // whole rows: contiguous with an offset
  CHECK_LAYOUT(m.slice(-1, -2, 5), m, ({4, 2}), ({5, 1}), 3);
  CHECK(values(m.slice(-1, -2, 5)) == V{3, 4, 8, 9, 13, 14, 18, 19});
  CHECK_LAYOUT(m.slice(0, 0, 4, 3), m, ({2, 5}), ({15, 1}), 0);
  CHECK(values(m.slice(0, 0, 4, 3)) == V{0, 1, 2, 3, 4, 15, 16, 17, 18, 19});
  // data_ptr moves by offset * itemsize.
  auto* base = static_cast<char*>(m.data_ptr());
  CHECK(static_cast<char*>(m.slice(1, 3, 5).data_ptr()) == base + 3 * 8);
}

TEST_CASE("narrow and select") {
  Tensor m = ar(20).view({4, 5});
  CHECK_LAYOUT(m.narrow(0, 1, 2), m, ({2, 5}), ({5, 1}), 5);
  CHECK(values(m.narrow(0, 1, 2)) == iota(10, 5));
  CHECK_LAYOUT(m.narrow(1, -3, 2), m, ({4, 2}), ({5, 1}), 2);
  CHECK(values(m.narrow(1, -3, 2)) == V{2, 3, 7, 8, 12, 13, 17, 18});
  CHECK_LAYOUT(m.narrow(-1, 4, 1), m, ({4, 1}), ({5, 1}), 4);
  CHECK(values(m.narrow(-1, 4, 1)) == V{4, 9, 14, 19});
  CHECK(m.narrow(1, 5, 0).shape() == Shape{4, 0});  // empty at the very end is allowed
  CHECK(m.narrow(0, 0, 4).is_contiguous());

  CHECK_LAYOUT(m.select(0, 2), m, ({5}), ({1}), 10);
  CHECK(values(m.select(0, 2)) == iota(5, 10));
  CHECK_LAYOUT(m.select(1, -1), m, ({4}), ({5}), 4);
  CHECK(values(m.select(1, -1)) == V{4, 9, 14, 19});
  CHECK_LAYOUT(m.select(-2, -4), m, ({5}), ({1}), 0);
  Tensor x = ar(24).view({2, 3, 4});
  CHECK_LAYOUT(x.select(1, 2), x, ({2, 4}), ({12, 1}), 8);
  CHECK(values(x.select(1, 2)) == V{8, 9, 10, 11, 20, 21, 22, 23});
  CHECK_LAYOUT(x.select(2, 3), x, ({2, 3}), ({12, 4}), 3);
  CHECK(values(x.select(2, 3)) == V{3, 7, 11, 15, 19, 23});
  // Down to 0-d.
  Tensor e = ar(3).select(0, 1);
  CHECK(e.shape().empty());
  CHECK(e.storage_offset() == 1);
  CHECK(e.item<std::int64_t>() == 1);
  CHECK(x.select(0, 1).select(0, 2).select(0, 3).item<std::int64_t>() == 23);

  Tensor r = rand({3, 4, 5}, {.dtype = DType::f64});
  V rv = values(r);
  CHECK_LAYOUT(r.select(0, -1), r, ({4, 5}), ({5, 1}), 40);
  CHECK(values(r.select(0, -1)) == gather(rv, {4, 5}, {5, 1}, 40));
  CHECK_LAYOUT(r.narrow(2, 1, 3).select(1, 2), r, ({3, 3}), ({20, 1}), 11);
  CHECK(values(r.narrow(2, 1, 3).select(1, 2)) == gather(rv, {3, 3}, {20, 1}, 11));
}

TEST_CASE("expand and broadcast_to: stride 0, new leading dims, -1, zero sizes") {
  Tensor a = ar(3).view({3, 1});
  Tensor e = a.expand({3, 4});
  CHECK_LAYOUT(e, a, ({3, 4}), ({1, 0}), 0);
  CHECK_FALSE(e.is_contiguous());
  CHECK(values(e) == V{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2});
  CHECK_LAYOUT(a.expand({2, 3, 4}), a, ({2, 3, 4}), ({0, 1, 0}), 0);
  CHECK_LAYOUT(a.expand({-1, 4}), a, ({3, 4}), ({1, 0}), 0);
  CHECK_LAYOUT(a.expand({3, 1}), a, ({3, 1}), ({1, 1}), 0);
  Tensor b = ar(4);
  CHECK_LAYOUT(b.expand({3, 4}), b, ({3, 4}), ({0, 1}), 0);
  CHECK(values(b.expand({3, 4})) == V{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3});
  CHECK_LAYOUT(b.broadcast_to({2, 1, 4}), b, ({2, 1, 4}), ({0, 0, 1}), 0);
  CHECK(values(b.broadcast_to({2, 1, 4})) == V{0, 1, 2, 3, 0, 1, 2, 3});
  Tensor s = full({}, 7.0);
  CHECK_LAYOUT(s.expand({2, 3}), s, ({2, 3}), ({0, 0}), 0);
  CHECK(values(s.expand({2, 3})) == V(6, 7.0));
  // A view with an offset keeps it.
  Tensor row = ar(12).view({3, 4}).select(0, 2).unsqueeze(0);  // [1, 4] at offset 8
  CHECK(row.strides() == Shape{4, 1});
  CHECK_LAYOUT(row.expand({2, 4}), row, ({2, 4}), ({0, 1}), 8);
  CHECK(values(row.expand({2, 4})) == V{8, 9, 10, 11, 8, 9, 10, 11});
  // Zero sizes: a size-1 dim may expand to 0; new leading dims may be 0.
  Tensor z13 = zeros({1, 3});
  CHECK_LAYOUT(z13.expand({0, 3}), z13, ({0, 3}), ({0, 1}), 0);
  CHECK(zeros({1, 3}).expand({0, 3}).numel() == 0);
  CHECK(values(zeros({1, 3}).expand({0, 3})).empty());
  CHECK(zeros({0, 1}).expand({0, 5}).strides() == Shape{1, 0});
  CHECK(a.expand({0, 3, 2}).shape() == Shape{0, 3, 2});
  // Random base.
  Tensor r = randn({4, 1, 3});
  V rv = values(r);
  CHECK_LAYOUT(r.expand({2, 4, 5, 3}), r, ({2, 4, 5, 3}), ({0, 3, 0, 1}), 0);
  CHECK(values(r.expand({2, 4, 5, 3})) == gather(rv, {2, 4, 5, 3}, {0, 3, 0, 1}, 0));
  // contiguous() of a broadcast materialises it.
  Tensor c = e.contiguous();
  CHECK(c.strides() == Shape{4, 1});
  CHECK_FALSE(c.storage().is_same(a.storage()));
  CHECK(values(c) == values(e));
}

TEST_CASE("squeeze, unsqueeze and flatten") {
  Tensor z = ar(6).view({1, 2, 1, 3});
  CHECK(z.strides() == Shape{6, 3, 3, 1});
  CHECK_LAYOUT(z.squeeze(), z, ({2, 3}), ({3, 1}), 0);
  CHECK_LAYOUT(z.squeeze(0), z, ({2, 1, 3}), ({3, 3, 1}), 0);
  CHECK_LAYOUT(z.squeeze(1), z, ({1, 2, 1, 3}), ({6, 3, 3, 1}), 0);  // size 2: unchanged
  CHECK_LAYOUT(z.squeeze(-2), z, ({1, 2, 3}), ({6, 3, 1}), 0);
  CHECK(values(z.squeeze()) == iota(6));
  CHECK(full({}, 2.0).squeeze().shape().empty());
  CHECK(full({}, 2.0).squeeze(0).shape().empty());
  CHECK(full({1, 1}, 2.0).squeeze().shape().empty());
  CHECK(full({1, 1}, 2.0).squeeze().item<float>() == 2.0f);

  Tensor m = ar(6).view({2, 3});
  CHECK_LAYOUT(m.unsqueeze(0), m, ({1, 2, 3}), ({6, 3, 1}), 0);
  CHECK_LAYOUT(m.unsqueeze(1), m, ({2, 1, 3}), ({3, 3, 1}), 0);
  CHECK_LAYOUT(m.unsqueeze(2), m, ({2, 3, 1}), ({3, 1, 1}), 0);
  CHECK_LAYOUT(m.unsqueeze(-1), m, ({2, 3, 1}), ({3, 1, 1}), 0);
  CHECK_LAYOUT(m.unsqueeze(-3), m, ({1, 2, 3}), ({6, 3, 1}), 0);
  CHECK(m.unsqueeze(1).is_contiguous());
  // On a transposed view the new dim's stride is size * stride of the dim it precedes.
  Tensor t = m.t();  // [3, 2] strides [1, 3]
  CHECK_LAYOUT(t.unsqueeze(1), m, ({3, 1, 2}), ({1, 6, 3}), 0);
  CHECK(values(t.unsqueeze(1)) == V{0, 3, 1, 4, 2, 5});
  Tensor s1 = full({}, 1.0);
  CHECK_LAYOUT(s1.unsqueeze(0), s1, ({1}), ({1}), 0);
  CHECK(m.unsqueeze(1).squeeze(1).strides() == Shape{3, 1});

  Tensor x = ar(24).view({2, 3, 4});
  CHECK_LAYOUT(x.flatten(), x, ({24}), ({1}), 0);
  CHECK_LAYOUT(x.flatten(1), x, ({2, 12}), ({12, 1}), 0);
  CHECK_LAYOUT(x.flatten(0, 1), x, ({6, 4}), ({4, 1}), 0);
  CHECK_LAYOUT(x.flatten(-2, -1), x, ({2, 12}), ({12, 1}), 0);
  CHECK_LAYOUT(x.flatten(1, 1), x, ({2, 3, 4}), ({12, 4, 1}), 0);
  CHECK(values(x.flatten(0, 1)) == iota(24));
  // Permuted: merging dims 1..2 is a view ([4, 2, 3] strides [1, 12, 4]: 12 == 3 * 4)...
  Tensor p = x.permute({2, 0, 1});
  CHECK_LAYOUT(p.flatten(1, 2), x, ({4, 6}), ({1, 4}), 0);
  CHECK(values(p.flatten(1, 2)) == values(p));
  // ...merging dims 0..1 is not (1 != 2 * 12): a copy with the same values.
  Tensor pf = p.flatten(0, 1);
  CHECK(pf.shape() == Shape{8, 3});
  CHECK(pf.strides() == Shape{3, 1});
  CHECK_FALSE(pf.storage().is_same(x.storage()));
  CHECK(values(pf) == values(p));
  CHECK(values(p.flatten()) == values(p));
  CHECK(full({}, 5.0).flatten().shape() == Shape{1});
  CHECK(full({}, 5.0).flatten().item<float>() == 5.0f);
}

TEST_CASE("as_strided: explicit layouts over the storage, offsets are absolute") {
  Tensor base = ar(12);
  Tensor w = base.as_strided({3, 3}, {1, 1}, 2);  // sliding windows
  CHECK_LAYOUT(w, base, ({3, 3}), ({1, 1}), 2);
  CHECK(values(w) == V{2, 3, 4, 3, 4, 5, 4, 5, 6});
  CHECK(values(base.as_strided({2, 2}, {0, 3}, 1)) == V{1, 4, 1, 4});
  CHECK(values(base.as_strided({2, 3}, {1, 4}, 0)) == V{0, 4, 8, 1, 5, 9});
  CHECK(values(base.as_strided({}, {}, 11)) == V{11});
  CHECK(base.as_strided({0}, {1}, 12).numel() == 0);  // empty at the end: allowed
  // The offset counts from the storage start, not from the view's own offset.
  Tensor tail = base.slice(0, 5, 12);
  CHECK(values(tail.as_strided({2}, {2}, 0)) == V{0, 2});
  // The whole storage, exactly.
  CHECK(values(base.as_strided({12}, {1}, 0)) == iota(12));
  CHECK(values(base.as_strided({4, 3}, {3, 1}, 0).t()) == V{0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11});
}

TEST_CASE("contiguous(): the same tensor when contiguous, a row-major copy otherwise") {
  Tensor x = rand({3, 4});
  CHECK(x.contiguous().is_same(x));
  Tensor rows = x.slice(0, 1, 3);  // offset 4, contiguous
  CHECK(rows.is_contiguous());
  CHECK(rows.contiguous().is_same(rows));
  Tensor cols = x.slice(1, 1, 3);
  CHECK_FALSE(cols.is_contiguous());
  Tensor cc = cols.contiguous();
  CHECK_FALSE(cc.storage().is_same(x.storage()));
  CHECK(cc.strides() == Shape{2, 1});
  CHECK(cc.storage_offset() == 0);
  CHECK(cc.is_contiguous());
  CHECK(values(cc) == gather(values(x), {3, 2}, {4, 1}, 1));
  Tensor tc = x.t().contiguous();
  CHECK(tc.shape() == Shape{4, 3});
  CHECK(tc.strides() == Shape{3, 1});
  CHECK(values(tc) == gather(values(x), {4, 3}, {1, 4}, 0));
  // A size-1 dim with an odd stride is still contiguous: no copy.
  Tensor odd = x.select(1, 2).unsqueeze(1);  // [3, 1] strides [4, 1]... the size-1 stride is free
  Tensor one_row = x.narrow(0, 2, 1);        // [1, 4] strides [4, 1] offset 8
  CHECK(one_row.contiguous().is_same(one_row));
  CHECK_FALSE(odd.is_contiguous());          // stride 4 on a size-3 dim
  // clone() always copies, into row-major order.
  Tensor cl = x.t().clone();
  CHECK(cl.strides() == Shape{3, 1});
  CHECK_FALSE(cl.storage().is_same(x.storage()));
  CHECK(values(cl) == values(x.t()));
  Tensor cl2 = x.clone();
  CHECK_FALSE(cl2.storage().is_same(x.storage()));
  CHECK(values(cl2) == values(x));
}

TEST_CASE("views of views: transpose -> slice -> select / view fails -> reshape copies") {
  Tensor x = ar(24).view({2, 3, 4});
  Tensor y = x.transpose(0, 2);
  CHECK_LAYOUT(y, x, ({4, 3, 2}), ({1, 4, 12}), 0);
  Tensor z = y.slice(1, 1, 3);
  CHECK_LAYOUT(z, x, ({4, 2, 2}), ({1, 4, 12}), 4);
  V want_z = {4, 16, 8, 20, 5, 17, 9, 21, 6, 18, 10, 22, 7, 19, 11, 23};
  CHECK(values(z) == want_z);
  CHECK_LAYOUT(z.select(0, 2), x, ({2, 2}), ({4, 12}), 6);
  CHECK(values(z.select(0, 2)) == V{6, 18, 10, 22});
  // Splitting dim 0 is a view; merging anything is not.
  CHECK_LAYOUT(z.view({2, 2, 2, 2}), x, ({2, 2, 2, 2}), ({2, 1, 4, 12}), 4);
  CHECK(values(z.view({2, 2, 2, 2})) == want_z);
  CHECK(z.reshape({2, 2, 2, 2}).storage().is_same(x.storage()));
  CHECK_THROWS_AS((void)z.view({16}), Error);
  CHECK_THROWS_AS((void)z.view({4, 4}), Error);
  Tensor zr = z.reshape({16});
  CHECK(zr.strides() == Shape{1});
  CHECK_FALSE(zr.storage().is_same(x.storage()));
  CHECK(values(zr) == want_z);
  Tensor zr2 = z.reshape({4, 4});
  CHECK(zr2.strides() == Shape{4, 1});
  CHECK(values(zr2) == want_z);

  // slice with a step -> unsqueeze -> expand -> select.
  Tensor s = x.slice(2, 1, 4, 2);
  CHECK_LAYOUT(s, x, ({2, 3, 2}), ({12, 4, 2}), 1);
  CHECK(values(s) == V{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23});
  Tensor e = s.unsqueeze(0).expand({2, 2, 3, 2});
  CHECK_LAYOUT(e, x, ({2, 2, 3, 2}), ({0, 12, 4, 2}), 1);
  Tensor es = e.select(3, 1);
  CHECK_LAYOUT(es, x, ({2, 2, 3}), ({0, 12, 4}), 3);
  CHECK(values(es) == V{3, 7, 11, 15, 19, 23, 3, 7, 11, 15, 19, 23});
  CHECK_THROWS_AS((void)es.view({12}), Error);
  CHECK(values(es.reshape({12})) == V{3, 7, 11, 15, 19, 23, 3, 7, 11, 15, 19, 23});
  // A broadcast dim may be split and kept as a view.
  CHECK_LAYOUT(es.view({1, 2, 6}).squeeze(0), x, ({2, 6}), ({0, 4}), 3);

  // Views share storage: writing through one is seen by the others.
  Tensor w = ar(12).view({3, 4});
  Tensor col = w.t().select(0, 1);  // column 1: [1, 5, 9]
  CHECK(values(col) == V{1, 5, 9});
  col.fill_(-1);
  CHECK(values(w) == V{0, -1, 2, 3, 4, -1, 6, 7, 8, -1, 10, 11});
  w.slice(0, 1, 3).slice(1, 2, 4).fill_(100);
  CHECK(values(w) == V{0, -1, 2, 3, 4, -1, 100, 100, 8, -1, 100, 100});

  // A random base through a chain of five views.
  Tensor r = rand({3, 4, 5});
  V rv = values(r);
  Tensor chain = r.permute({1, 2, 0}).slice(1, 1, 5, 2).select(0, 3).unsqueeze(0).expand({2, 2, 3});
  // permute: [4,5,3] (5,1,20); slice: [4,2,3] (5,2,20) @1; select(0,3): [2,3] (2,20) @16;
  // unsqueeze(0): [1,2,3] (4,2,20); expand: [2,2,3] (0,2,20) @16.
  CHECK_LAYOUT(chain, r, ({2, 2, 3}), ({0, 2, 20}), 16);
  CHECK(values(chain) == gather(rv, {2, 2, 3}, {0, 2, 20}, 16));
  CHECK(values(chain.contiguous()) == gather(rv, {2, 2, 3}, {0, 2, 20}, 16));
}

TEST_CASE("zero-size dims through every view") {
  Tensor z = zeros({0, 3});
  CHECK(z.numel() == 0);
  CHECK(z.nbytes() == 0);
  CHECK(z.is_contiguous());
  CHECK(values(z).empty());
  CHECK(z.to_host<float>().empty());
  CHECK_LAYOUT(z.view({3, 0}), z, ({3, 0}), ({1, 1}), 0);
  CHECK_LAYOUT(z.view({-1}), z, ({0}), ({1}), 0);
  CHECK_LAYOUT(z.view({2, 0, 5}), z, ({2, 0, 5}), ({5, 5, 1}), 0);
  CHECK_LAYOUT(z.reshape({0, 5, 2}), z, ({0, 5, 2}), ({10, 2, 1}), 0);
  CHECK_LAYOUT(z.t(), z, ({3, 0}), ({1, 3}), 0);
  CHECK_LAYOUT(z.unsqueeze(1), z, ({0, 1, 3}), ({3, 3, 1}), 0);
  CHECK_LAYOUT(z.flatten(), z, ({0}), ({1}), 0);
  CHECK(z.contiguous().is_same(z));
  CHECK(z.t().contiguous().is_same(z.t()) == false);  // a new handle, still no copy needed...
  CHECK(z.t().contiguous().storage().is_same(z.storage()));  // ...so the same storage
  CHECK(z.clone().shape() == Shape{0, 3});
  CHECK(z.to(DType::f64).shape() == Shape{0, 3});
  CHECK(z.to(DType::f64).dtype() == DType::f64);

  // Slicing to empty.
  Tensor m = ar(12).view({3, 4});
  Tensor e = m.slice(1, 4, 10);
  CHECK_LAYOUT(e, m, ({3, 0}), ({4, 1}), 4);
  CHECK(values(e).empty());
  CHECK(e.t().shape() == Shape{0, 3});
  CHECK(e.contiguous().numel() == 0);
  CHECK(m.slice(0, 2, 1).shape() == Shape{0, 4});
  CHECK(ar(5).slice(0, 3, 3).shape() == Shape{0});
  CHECK(m.narrow(0, 3, 0).shape() == Shape{0, 4});
  CHECK(values(m.slice(0, 2, 1).reshape({-1})).empty());

  // Expanding, permuting, selecting around zero sizes.
  Tensor z13 = zeros({1, 3});
  CHECK_LAYOUT(z13.expand({0, 3}), z13, ({0, 3}), ({0, 1}), 0);
  Tensor z3 = zeros({2, 0, 3});
  CHECK(z3.strides() == Shape{3, 3, 1});
  CHECK_LAYOUT(z3.permute({2, 0, 1}), z3, ({3, 2, 0}), ({1, 3, 3}), 0);
  CHECK_LAYOUT(z3.select(0, 1), z3, ({0, 3}), ({3, 1}), 3);
  CHECK_LAYOUT(z3.select(2, 2), z3, ({2, 0}), ({3, 3}), 2);
  CHECK(z3.flatten().shape() == Shape{0});
  CHECK(z3.flatten(1).shape() == Shape{2, 0});
  CHECK(z3.squeeze().shape() == Shape{2, 0, 3});
  CHECK(zeros({1, 0, 1}).squeeze().shape() == Shape{0});
  CHECK(zeros({0}).unsqueeze(0).shape() == Shape{1, 0});
  CHECK(z3.narrow(2, 1, 2).shape() == Shape{2, 0, 2});
  CHECK(z3.expand({4, 2, 0, 3}).strides() == Shape{0, 3, 3, 1});
  CHECK(values(z3.expand({4, 2, 0, 3})).empty());
  CHECK(empty({0}).storage().nbytes() == 0);
  CHECK(arange(0).numel() == 0);
}

TEST_CASE("copies of permuted and sliced layouts: the row path equals the element walk") {
  // Rows of >= 16 contiguous elements on both sides go row by row over the pool
  // (ops/cpu/backend_cpu.cpp); every element must land where the index arithmetic says.
  const int before = get_num_threads();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    Tensor src = ar(4 * 37 * 40).view({4, 37, 40});
    Tensor p = src.permute({1, 0, 2}).contiguous();  // [37, 4, 40]
    std::vector<double> v = values(p), s = values(src);
    bool same = true;
    for (std::int64_t i = 0; i < 37; ++i)
      for (std::int64_t j = 0; j < 4; ++j)
        for (std::int64_t k = 0; k < 40; ++k)
          same = same && v[static_cast<std::size_t>((i * 4 + j) * 40 + k)] == s[static_cast<std::size_t>((j * 37 + i) * 40 + k)];
    CHECK(same);
    // Into a strided destination with a dtype change (i64 -> f64); a sliced source.
    Tensor dst = zeros({37, 8, 40}, {.dtype = DType::f64});
    dst.narrow(1, 2, 4).copy_(src.permute({1, 0, 2}));
    CHECK(values(dst.narrow(1, 2, 4).contiguous()) == v);
    CHECK(values(dst.narrow(1, 0, 2)) == std::vector<double>(37 * 2 * 40, 0.0));
    Tensor half_rows = src.narrow(2, 3, 20).contiguous();
    std::vector<double> h = values(half_rows);
    CHECK(h[0] == s[3]);
    CHECK(h[static_cast<std::size_t>(20 * 37 * 4 - 1)] == s[static_cast<std::size_t>(4 * 37 * 40 - 40 + 22)]);
    // A copy into itself (same layout) leaves the values.
    Tensor self = ar(64).view({4, 16});
    self.copy_(self);
    CHECK(values(self) == values(ar(64)));
  }
  set_num_threads(before);
}

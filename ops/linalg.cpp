// Linear algebra made of matmul, views and reductions: mm, bmm, addmm, baddbmm, addcmul,
// addcdiv, outer, linear, tensordot, einsum (lowered to permutes, reshapes and one batched
// matmul per pair of operands), prod, norm / matrix_norm (2, -2 and "nuc" from linalg_svdvals,
// ops/linalg_svd.cpp), cdist. Compositions: their
// gradients come from the ops'.
module;
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
module brrr.ops;
import brrr.tensor;
import brrr.backend;

#include "ops/autocast.hpp"

namespace brrr {

using namespace ops_detail;

Tensor mm(const Tensor& a, const Tensor& b) {
  BRRR_AUTOCAST(lower_precision, mm, a, b);
  require_defined("mm", a);
  require_defined("mm", b, "mat2");
  if (a.dim() != 2 || b.dim() != 2)
    throw Error::shape_mismatch("mm", a.shape(), b.shape(), "must both be 2-D (use matmul for other ranks)");
  return matmul(a, b);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  BRRR_AUTOCAST(lower_precision, bmm, a, b);
  require_defined("bmm", a);
  require_defined("bmm", b, "mat2");
  if (a.dim() != 3 || b.dim() != 3 || a.size(0) != b.size(0))
    throw Error::shape_mismatch("bmm", a.shape(), b.shape(), "must both be 3-D with one batch size");
  return matmul(a, b);
}

namespace {

// Whether x [..., K] @ w [K, N] (+ bias [N]) can be one fused GEMM over x's rows
// (ops_detail::linear_2d): x and w defined, w 2-D with x's K, a 1-D bias of size N (or, where
// `bias_optional`, none), one floating dtype, one device. Anything else takes the composite,
// whose errors stay as they were.
bool fusable(const Tensor& x, const Tensor& w, const Tensor& bias, bool bias_optional = false) {
  if (!x.defined() || !w.defined() || (!bias.defined() && !bias_optional)) return false;
  if (x.dim() < 1 || w.dim() != 2 || x.size(-1) != w.size(0)) return false;
  if (!is_floating_point(x.dtype()) || w.dtype() != x.dtype() || w.device() != x.device()) return false;
  if (!bias.defined()) return true;
  return bias.dim() == 1 && bias.size(0) == w.size(1) && bias.dtype() == x.dtype() && bias.device() == x.device();
}

// addmm's input as a 1-D bias: [n] itself, [1, n] viewed as [n]; undefined otherwise.
Tensor as_row(const Tensor& input) {
  if (!input.defined()) return {};
  if (input.dim() == 1) return input;
  if (input.dim() == 2 && input.size(0) == 1) return input.reshape({input.size(1)});
  return {};
}

}  // namespace

Tensor addmm(const Tensor& input, const Tensor& mat1, const Tensor& mat2, double beta, double alpha) {
  BRRR_AUTOCAST(lower_precision, addmm, input, mat1, mat2, beta, alpha);
  if (beta == 1 && alpha == 1) {
    NvtxRange range("addmm");
    Tensor row = as_row(input);
    if (mat1.dim() == 2 && fusable(mat1, mat2, row)) return ops_detail::linear_2d(mat1, mat2, row);
  }
  Tensor p = mm(mat1, mat2);
  if (alpha != 1) p = mul(p, alpha);
  if (beta == 0) return p;  // input ignored (NaN in it does not propagate), as PyTorch
  return add(beta == 1 ? input : mul(input, beta), p);
}

Tensor baddbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, double beta, double alpha) {
  BRRR_AUTOCAST(lower_precision, baddbmm, input, batch1, batch2, beta, alpha);
  Tensor p = bmm(batch1, batch2);
  if (alpha != 1) p = mul(p, alpha);
  if (beta == 0) return p;
  return add(beta == 1 ? input : mul(input, beta), p);
}

Tensor addcmul(const Tensor& input, const Tensor& tensor1, const Tensor& tensor2, double value) {
  return add(input, mul(mul(tensor1, tensor2), value));
}

Tensor addcdiv(const Tensor& input, const Tensor& tensor1, const Tensor& tensor2, double value) {
  return add(input, mul(div(tensor1, tensor2), value));
}

Tensor outer(const Tensor& a, const Tensor& b) {
  require_defined("outer", a);
  require_defined("outer", b, "vec2");
  if (a.dim() != 1 || b.dim() != 1) throw Error::shape_mismatch("outer", a.shape(), b.shape(), "must both be 1-D");
  return mul(a.unsqueeze(1), b.unsqueeze(0));
}

namespace {

// linear under autocast as one node (ops_detail::linear_autocast): a 2-D weight, each operand
// f32 or the autocast dtype, shapes agreeing, one device; anything else takes the casts.
bool autocast_fusable(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const DType low = autocast::dtype();
  if (low != DType::bf16 && low != DType::f16) return false;
  const auto ok = [low](const Tensor& t) { return t.dtype() == DType::f32 || t.dtype() == low; };
  if (!x.defined() || !w.defined() || x.dim() < 1 || w.dim() != 2 || x.size(-1) != w.size(1) || !ok(x) || !ok(w))
    return false;
  if (is_wrapped_number(x) || is_wrapped_number(w) || w.device() != x.device()) return false;
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != w.size(0) || !ok(bias) || bias.device() != x.device()))
    return false;
  return true;
}

}  // namespace

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  if (autocast::is_enabled() && autocast_fusable(input, weight, bias)) {
    // One node for the casts and the GEMM, whose backward writes f32 gradients directly.
    NvtxRange range("linear");
    const DType low = autocast::dtype();
    AutocastGuard off(low, false);
    Shape lead(input.shape().begin(), input.shape().end() - 1);
    std::int64_t rows = 1;  // (not reshape's -1: it cannot infer a size beside a 0 dim)
    for (std::int64_t s : lead) rows *= s;
    Tensor x = input.dim() == 2 ? input : input.reshape({rows, weight.size(1)});
    Tensor y = ops_detail::linear_autocast(x, weight, bias, low);
    lead.push_back(weight.size(0));
    return input.dim() == 2 ? y : y.view(lead);
  }
  BRRR_AUTOCAST(lower_precision, linear, input, weight, bias);
  NvtxRange range("linear");
  require_defined("linear", input);
  require_defined("linear", weight, "weight");
  if (weight.dim() != 2 && weight.dim() != 1)
    throw Error(ErrorKind::shape, "linear: weight must be [out, in] or [in], got " + describe(weight));
  if (weight.dim() == 2 && fusable(input, weight.t(), bias, true)) {
    // input [..., in] as rows [M, in]: one GEMM with the bias fused (if any), reshaped back;
    // one node, whose weight gradient runs on the side stream (ops_detail::linear_grads).
    Shape lead(input.shape().begin(), input.shape().end() - 1);
    std::int64_t rows = 1;
    for (std::int64_t s : lead) rows *= s;
    Tensor x = input.dim() == 2 ? input : input.reshape({rows, weight.size(1)});
    Tensor y = ops_detail::linear_2d(x, weight.t(), bias);
    lead.push_back(weight.size(0));
    return input.dim() == 2 ? y : y.view(lead);
  }
  Tensor y = matmul(input, weight.dim() == 2 ? weight.t() : weight);
  return bias.defined() ? add(y, bias) : y;
}

Tensor tensordot(const Tensor& a, const Tensor& b, const std::vector<std::int64_t>& dims_a,
                 const std::vector<std::int64_t>& dims_b) {
  NvtxRange range("tensordot");
  require_defined("tensordot", a);
  require_defined("tensordot", b, "other");
  if (dims_a.size() != dims_b.size())
    throw Error(ErrorKind::value, "tensordot: dims_a and dims_b must have the same length");
  std::vector<bool> ca(static_cast<std::size_t>(a.dim()), false), cb(static_cast<std::size_t>(b.dim()), false);
  Shape pa_contract, pb_contract;
  std::int64_t k = 1;
  for (std::size_t i = 0; i < dims_a.size(); ++i) {
    const std::int64_t da = wrap_dim("tensordot", dims_a[i], a.dim(), a.shape());
    const std::int64_t db = wrap_dim("tensordot", dims_b[i], b.dim(), b.shape());
    if (a.size(da) != b.size(db))
      throw Error::shape_mismatch("tensordot", a.shape(), b.shape(), "contract dims of different sizes (" +
                                                                       std::to_string(a.size(da)) + " vs " +
                                                                       std::to_string(b.size(db)) + ")");
    ca[static_cast<std::size_t>(da)] = cb[static_cast<std::size_t>(db)] = true;
    pa_contract.push_back(da);
    pb_contract.push_back(db);
    k *= a.size(da);
  }
  // a as [free_a, k], b as [k, free_b], one matmul.
  Shape pa, pb, out;
  std::int64_t m = 1, n = 1;
  for (std::int64_t d = 0; d < a.dim(); ++d)
    if (!ca[static_cast<std::size_t>(d)]) pa.push_back(d), out.push_back(a.size(d)), m *= a.size(d);
  pa.insert(pa.end(), pa_contract.begin(), pa_contract.end());
  pb = pb_contract;
  for (std::int64_t d = 0; d < b.dim(); ++d)
    if (!cb[static_cast<std::size_t>(d)]) pb.push_back(d), out.push_back(b.size(d)), n *= b.size(d);
  Tensor r = matmul(a.permute(pa).reshape({m, k}), b.permute(pb).reshape({k, n}));
  return r.reshape(out);
}

Tensor tensordot(const Tensor& a, const Tensor& b, std::int64_t dims) {
  require_defined("tensordot", a);
  require_defined("tensordot", b, "other");
  if (dims < 0 || dims > std::min(a.dim(), b.dim())) throw Error::bad_value("tensordot", "dims", static_cast<double>(dims), "in [0, min(ndim)]");
  std::vector<std::int64_t> da, db;
  for (std::int64_t i = 0; i < dims; ++i) da.push_back(a.dim() - dims + i), db.push_back(i);
  return tensordot(a, b, da, db);
}

namespace {

// One einsum operand: its tensor with one dim per distinct letter (repeated letters taken as
// the diagonal), and those letters.
struct Term {
  Tensor t;
  std::string letters;
};

Term normalise(Tensor t, std::string letters) {
  for (std::size_t i = 0; i < letters.size(); ++i)
    for (std::size_t j = i + 1; j < letters.size(); ++j)
      if (letters[i] == letters[j]) {  // x_ii -> diagonal, moved to position i
        const std::int64_t di = static_cast<std::int64_t>(i), dj = static_cast<std::int64_t>(j);
        if (t.size(di) != t.size(dj))  // PyTorch: "subscript i is repeated for operand 0 but the sizes don't match"
          throw Error(ErrorKind::shape, std::string("einsum: the letter '") + letters[i] + "' is repeated in an operand " +
                                            "but labels dims of sizes " + std::to_string(t.size(di)) + " and " +
                                            std::to_string(t.size(dj)) + " (operand " + describe(t) + ")");
        Tensor dg = diagonal(t, 0, static_cast<std::int64_t>(i), static_cast<std::int64_t>(j));
        letters.erase(j, 1);
        t = movedim(dg, -1, static_cast<std::int64_t>(i));
        return normalise(t, letters);
      }
  return {t, letters};
}

// Sums away the letters of `x` that neither `other` nor `keep` needs.
Term sum_unused(Term x, const std::string& other, const std::string& keep) {
  std::vector<std::int64_t> dims;
  std::string left;
  for (std::size_t i = 0; i < x.letters.size(); ++i) {
    const char c = x.letters[i];
    if (other.find(c) == std::string::npos && keep.find(c) == std::string::npos) dims.push_back(static_cast<std::int64_t>(i));
    else left += c;
  }
  if (dims.empty()) return x;
  return {sum(x.t, dims), left};
}

// The product of two terms over `keep` (the letters wanted afterwards): batch letters (in
// both and kept), contracted letters (in both, not kept), free letters; one batched matmul.
Term contract(Term a, Term b, const std::string& keep) {
  a = sum_unused(a, b.letters, keep);
  b = sum_unused(b, a.letters, keep);
  std::string batch, con, fa, fb;
  for (char c : a.letters) {
    const bool in_b = b.letters.find(c) != std::string::npos, kept = keep.find(c) != std::string::npos;
    if (in_b && kept) batch += c;
    else if (in_b) con += c;
    else fa += c;
  }
  for (char c : b.letters)
    if (a.letters.find(c) == std::string::npos) fb += c;
  auto perm_of = [](const Term& t, const std::string& order) {
    Shape p;
    for (char c : order) p.push_back(static_cast<std::int64_t>(t.letters.find(c)));
    return p;
  };
  auto size_of = [](const Term& t, const std::string& ls) {
    std::int64_t n = 1;
    for (char c : ls) n *= t.t.size(static_cast<std::int64_t>(t.letters.find(c)));
    return n;
  };
  // Sizes must agree (broadcasting of size-1 dims between operands is not supported).
  for (char c : batch + con) {
    const std::int64_t sa = a.t.size(static_cast<std::int64_t>(a.letters.find(c)));
    const std::int64_t sb = b.t.size(static_cast<std::int64_t>(b.letters.find(c)));
    if (sa != sb)
      throw Error::shape_mismatch("einsum", a.t.shape(), b.t.shape(), std::string("disagree on the size of '") + c + "'");
  }
  const std::int64_t B = size_of(a, batch), K = size_of(a, con), M = size_of(a, fa), N = size_of(b, fb);
  Tensor ta = a.t.permute(perm_of(a, batch + fa + con)).reshape({B, M, K});
  Tensor tb = b.t.permute(perm_of(b, batch + con + fb)).reshape({B, K, N});
  Shape out;
  for (char c : batch) out.push_back(a.t.size(static_cast<std::int64_t>(a.letters.find(c))));
  for (char c : fa) out.push_back(a.t.size(static_cast<std::int64_t>(a.letters.find(c))));
  for (char c : fb) out.push_back(b.t.size(static_cast<std::int64_t>(b.letters.find(c))));
  return {matmul(ta, tb).reshape(out), batch + fa + fb};
}

// Ellipses: in each term "..." stands for the operand's dims that no letter names; they are
// aligned to the right across the operands and broadcast as in PyTorch (a size-1 or missing
// dim takes the other operands' size). Each ellipsis dim gets a letter the equation does not
// use, so that the rest of einsum sees letters only; a size-1 ellipsis dim that broadcasts is
// squeezed away (an operand without a letter is constant along it). `output` gets the
// ellipsis letters where it has "...", first when it is implicit (PyTorch's order), none
// otherwise (they are summed). Returns the operands to use.
std::vector<Tensor> expand_ellipses(const std::string& equation, std::vector<std::string>& terms,
                                    std::string& output, bool implicit, const std::vector<Tensor>& operands) {
  const std::string dots = "...";
  std::vector<Tensor> ops = operands;
  std::int64_t e = 0;  // ellipsis dims: the most any operand has
  std::vector<std::int64_t> ell(terms.size(), -1);
  for (std::size_t i = 0; i < terms.size(); ++i) {
    const std::size_t at = terms[i].find(dots);
    if (at == std::string::npos) continue;
    if (terms[i].find(dots, at + 1) != std::string::npos || terms[i].find('.', at + 3) != std::string::npos)
      throw Error(ErrorKind::value, "einsum: operand " + std::to_string(i) + " of \"" + equation + "\" has more than one ellipsis");
    require_defined("einsum", ops[i]);
    ell[i] = ops[i].dim() - static_cast<std::int64_t>(terms[i].size() - 3);
    if (ell[i] < 0)
      throw Error(ErrorKind::shape, "einsum: operand " + std::to_string(i) + " has " + std::to_string(ops[i].dim()) +
                                        " dims, fewer than the letters of \"" + terms[i] + "\"");
    e = std::max(e, ell[i]);
  }
  if (output.find(dots) != std::string::npos && output.find(dots, output.find(dots) + 3) != std::string::npos)
    throw Error(ErrorKind::value, "einsum: the output of \"" + equation + "\" has more than one ellipsis");
  std::string fresh;  // letters the equation does not use, one per ellipsis dim
  for (char c = 'A'; c <= 'z' && static_cast<std::int64_t>(fresh.size()) < e; ++c)
    if (std::isalpha(static_cast<unsigned char>(c)) && equation.find(c) == std::string::npos) fresh += c;
  if (static_cast<std::int64_t>(fresh.size()) < e)
    throw Error(ErrorKind::value, "einsum: \"" + equation + "\" leaves too few letters for its ellipsis dims");
  // The size of each ellipsis dim over all operands (right-aligned), checked to broadcast.
  std::vector<std::int64_t> size(static_cast<std::size_t>(e), 1);
  for (std::size_t i = 0; i < terms.size(); ++i)
    for (std::int64_t p = 0; p < ell[i]; ++p) {
      const std::int64_t n = ops[i].size(static_cast<std::int64_t>(terms[i].find(dots)) + p);
      std::int64_t& target = size[static_cast<std::size_t>(e - ell[i] + p)];
      if (n != 1 && target != 1 && n != target)
        throw Error(ErrorKind::shape, "einsum: the ellipsis dims of operand " + std::to_string(i) + " (" +
                                          to_string(ops[i].shape()) + ") do not broadcast with the other operands'");
      if (n != 1) target = n;
    }
  for (std::size_t i = 0; i < terms.size(); ++i) {
    if (ell[i] < 0) continue;
    const std::size_t at = terms[i].find(dots);
    std::string letters = fresh.substr(static_cast<std::size_t>(e - ell[i]));
    for (std::int64_t p = ell[i] - 1; p >= 0; --p)  // from the right: earlier dims keep their index
      if (ops[i].size(static_cast<std::int64_t>(at) + p) == 1 && size[static_cast<std::size_t>(e - ell[i] + p)] != 1) {
        ops[i] = ops[i].squeeze(static_cast<std::int64_t>(at) + p);
        letters.erase(static_cast<std::size_t>(p), 1);
      }
    terms[i].replace(at, 3, letters);
  }
  if (const std::size_t at = output.find(dots); at != std::string::npos) output.replace(at, 3, fresh);
  else if (implicit) output = fresh + output;
  return ops;
}

}  // namespace

Tensor einsum(const std::string& equation, const std::vector<Tensor>& given) {
  NvtxRange range("einsum");
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  const std::size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (std::size_t s = 0;;) {
    const std::size_t comma = lhs.find(',', s);
    terms.push_back(lhs.substr(s, comma == std::string::npos ? std::string::npos : comma - s));
    if (comma == std::string::npos) break;
    s = comma + 1;
  }
  if (terms.size() != given.size())
    throw Error(ErrorKind::value, "einsum: the equation \"" + equation + "\" has " + std::to_string(terms.size()) +
                                      " operands, got " + std::to_string(given.size()));
  std::string output;
  if (arrow != std::string::npos) {
    output = eq.substr(arrow + 2);
  } else {  // implicit output: the letters seen once, sorted (after the ellipsis dims)
    std::map<char, int> count;
    for (const auto& t : terms)
      for (char c : t) ++count[c];
    for (auto [c, n] : count)
      if (n == 1 && c != '.') output += c;
  }
  const std::vector<Tensor> operands = expand_ellipses(eq, terms, output, arrow == std::string::npos, given);
  std::vector<Term> ts;
  for (std::size_t i = 0; i < terms.size(); ++i) {
    require_defined("einsum", operands[i]);
    for (char c : terms[i])
      if (!std::isalpha(static_cast<unsigned char>(c)))
        throw Error(ErrorKind::value, std::string("einsum: invalid subscript '") + c + "' in \"" + equation + "\"");
    if (static_cast<std::int64_t>(terms[i].size()) != operands[i].dim())
      throw Error(ErrorKind::shape, "einsum: operand " + std::to_string(i) + " has " + std::to_string(operands[i].dim()) +
                                        " dims but subscripts \"" + terms[i] + "\"");
    ts.push_back(normalise(operands[i], terms[i]));
  }
  for (char c : output) {
    bool seen = false;
    for (const auto& t : terms) seen = seen || t.find(c) != std::string::npos;
    if (!seen) throw Error(ErrorKind::value, std::string("einsum: output subscript '") + c + "' appears in no operand");
  }
  // Left to right, each pair contracted by one batched matmul; what a later operand or the
  // output needs is kept.
  Term acc = ts[0];
  for (std::size_t i = 1; i < ts.size(); ++i) {
    std::string keep = output;
    for (std::size_t j = i + 1; j < ts.size(); ++j) keep += ts[j].letters;
    acc = contract(acc, ts[i], keep);
  }
  acc = sum_unused(acc, "", output);
  Shape perm;
  for (char c : output) perm.push_back(static_cast<std::int64_t>(acc.letters.find(c)));
  return acc.t.permute(perm);
}

Tensor prod(const Tensor& x, std::int64_t dim, bool keepdim, std::optional<DType> dtype) {
  BRRR_AUTOCAST_IF(!dtype, fp32, prod, x, dim, keepdim, dtype);
  NvtxRange range("prod");
  require_defined("prod", x);
  const std::int64_t d = wrap_dim("prod", dim, x.dim(), x.shape());
  if (x.dim() == 0) return cumprod(x, 0, dtype);
  const std::int64_t n = x.size(d);
  // The last element of the running product: one scan, and its gradient is exact with zeros.
  if (n == 0) {
    Shape s = x.shape();
    if (keepdim) s[static_cast<std::size_t>(d)] = 1;
    else s.erase(s.begin() + d);
    return ones(s, {.dtype = dtype ? *dtype : is_floating_point(x.dtype()) ? x.dtype() : DType::i64, .device = x.device()});
  }
  Tensor last = cumprod(x, d, dtype).narrow(d, n - 1, 1);
  return keepdim ? last : last.squeeze(d);
}

Tensor prod(const Tensor& x, std::optional<DType> dtype) {
  BRRR_AUTOCAST_IF(!dtype, fp32, prod, x, dtype);
  require_defined("prod", x);
  return prod(x.reshape({-1}), 0, false, dtype);
}

Tensor norm(const Tensor& x, double p, std::vector<std::int64_t> dims, bool keepdim) {
  return vector_norm(x, p, std::move(dims), keepdim);
}

namespace {

// matrix_norm over dims r, c through the singular values: kind 2 the largest (the spectral
// norm), -2 the smallest, 0 their sum (the nuclear norm).
Tensor reduce_singular_values(const Tensor& x, int kind, std::int64_t r, std::int64_t c, bool keepdim) {
  if (r == c) throw Error(ErrorKind::value, "matrix_norm: dims must name two different dims, got " + std::to_string(r) + " twice");
  // The two dims last, in either order: the singular values of a transpose are the same.
  Tensor s = linalg_svdvals(movedim(movedim(x, std::max(r, c), -1), std::min(r, c), -2));
  Tensor e = kind == 0 ? sum(s, {-1}) : kind > 0 ? amax(s, {-1}) : amin(s, {-1});
  return keepdim ? e.unsqueeze(std::min(r, c)).unsqueeze(std::max(r, c)) : e;
}

}  // namespace

Tensor matrix_norm(const Tensor& x, const std::string& ord, std::vector<std::int64_t> dims, bool keepdim) {
  BRRR_AUTOCAST(fp32, matrix_norm, x, ord, dims, keepdim);
  NvtxRange range("matrix_norm");
  require_defined("matrix_norm", x);
  if (x.dim() < 2) throw Error(ErrorKind::shape, "matrix_norm: expected at least 2 dims, got " + describe(x));
  if (dims.empty()) dims = {-2, -1};
  if (dims.size() != 2) throw Error(ErrorKind::value, "matrix_norm: dims must name two dims");
  if (ord == "fro") return vector_norm(x, 2, dims, keepdim);
  if (ord == "nuc") {
    const std::int64_t r = wrap_dim("matrix_norm", dims[0], x.dim(), x.shape()), c = wrap_dim("matrix_norm", dims[1], x.dim(), x.shape());
    return reduce_singular_values(x, 0, r, c, keepdim);
  }
  throw Error(ErrorKind::value, "matrix_norm: ord \"" + ord + "\" is not supported (\"fro\", \"nuc\", or a number: 2, -2, 1, -1, inf, -inf)");
}

Tensor matrix_norm(const Tensor& x, double ord, std::vector<std::int64_t> dims, bool keepdim) {
  BRRR_AUTOCAST(fp32, matrix_norm, x, ord, dims, keepdim);
  NvtxRange range("matrix_norm");
  require_defined("matrix_norm", x);
  if (x.dim() < 2) throw Error(ErrorKind::shape, "matrix_norm: expected at least 2 dims, got " + describe(x));
  if (dims.empty()) dims = {-2, -1};
  if (dims.size() != 2) throw Error(ErrorKind::value, "matrix_norm: dims must name two dims");
  const std::int64_t r = wrap_dim("matrix_norm", dims[0], x.dim(), x.shape()), c = wrap_dim("matrix_norm", dims[1], x.dim(), x.shape());
  constexpr double inf = std::numeric_limits<double>::infinity();
  // 1: max column sum of |x|; inf: max row sum (the operator norms); -1 / -inf: the minimums.
  if (ord == 1 || ord == -1 || ord == inf || ord == -inf) {
    const bool cols = ord == 1 || ord == -1;
    Tensor s = sum(abs(x), {cols ? r : c}, true);
    Tensor e = ord > 0 ? amax(s, {cols ? c : r}, true) : amin(s, {cols ? c : r}, true);
    if (keepdim) return e;
    return e.squeeze(std::max(r, c)).squeeze(std::min(r, c));
  }
  if (ord == 2 || ord == -2) return reduce_singular_values(x, ord > 0 ? 2 : -2, r, c, keepdim);
  throw Error::bad_value("matrix_norm", "ord", ord, "2, -2, 1, -1, inf or -inf (or \"fro\", \"nuc\")");
}

Tensor cdist(const Tensor& x1, const Tensor& x2, double p) {
  BRRR_AUTOCAST(fp32, cdist, x1, x2, p);
  NvtxRange range("cdist");
  require_defined("cdist", x1, "x1");
  require_defined("cdist", x2, "x2");
  if (x1.dim() < 2 || x2.dim() < 2 || x1.size(-1) != x2.size(-1))
    throw Error::shape_mismatch("cdist", x1.shape(), x2.shape(), "must be [..., P, M] and [..., R, M]");
  if (!(p >= 0)) throw Error::bad_value("cdist", "p", p, "non-negative");
  // ||x1_i - x2_j||_p over [..., P, R, M] differences: exact (no |a|^2 + |b|^2 - 2ab
  // cancellation), gradient 0 at zero distance (vector_norm's), memory P * R * M.
  return vector_norm(sub(x1.unsqueeze(-2), x2.unsqueeze(-3)), p, {-1});
}

}  // namespace brrr

// scaled_dot_product_attention (Vaswani et al. 2017, eq. 1) with PyTorch's semantics, and the
// fused kernel behind it on CUDA (FlashAttention-2, Dao 2023). The composite — matmul,
// masked scores, softmax, dropout, matmul — is the reference and the CPU path; every step is
// a recorded op, so its backward needs nothing here. The fused op calls the backend's
// attention_forward / attention_backward (ops/cpu/attention.cpp, ops/cuda/attention.cu) and
// saves q, k, v, the output and each row's log-sum-exp; under create_graph its backward is
// the same gradient written with Tensor ops (recomputing the probabilities), so that second
// derivatives exist.
//
// Dropout in the fused op (dropout_p in (0, 1)): the kernels drop the probabilities with the
// Philox words that the composite's dropout(weights, p) would draw from the same generator
// state (rand of [B, H, L, S], keep where u >= p; backend::AttentionDropout), and the generator
// advances by the same count, so CPU composite and CUDA fused give the same mask from one seed.
// The node keeps (seed, offset, p) and the backward regenerates the mask; under a CUDA graph
// capture the words come from the graph's replayed state (capture_random_words). Under
// create_graph the rule rebuilds the same mask as a tensor from those words.
module;
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>
module brrr.ops;
import brrr.tensor;
import brrr.backend;

#include "ops/autocast.hpp"

namespace brrr {

using namespace ops_detail;

namespace {

constexpr const char* sdpa = "scaled_dot_product_attention";
constexpr const char* flash = "scaled_dot_product_flash_attention";
constexpr double neg_inf = -std::numeric_limits<double>::infinity();

void check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  require_defined(op, q, "query");
  require_defined(op, k, "key");
  require_defined(op, v, "value");
  common_device(op, {q, k, v});
  require_floating(op, q, "query");
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    throw Error(ErrorKind::dtype, std::string(op) + ": query, key and value must have one dtype, got " + describe(q) +
                                      ", " + describe(k) + ", " + describe(v));
  if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2)
    throw Error(ErrorKind::shape, std::string(op) + ": query, key and value need at least 2 dims ([..., L, E]), got " +
                                      describe(q) + ", " + describe(k) + ", " + describe(v));
  if (q.size(-1) != k.size(-1) || k.size(-2) != v.size(-2))
    throw Error(ErrorKind::shape, std::string(op) + ": expected query [..., L, E], key [..., S, E], value [..., S, Ev], got " +
                                      to_string(q.shape()) + ", " + to_string(k.shape()) + ", " + to_string(v.shape()));
}

// The shape [..., L, S] of the attention weights q k^T, after checking that the batch dims (those
// before [L, E]) of q, k and v broadcast: a mismatch names this op and the three shapes rather
// than the composite's matmul.
Shape weights_shape(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  const auto batch = [](const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); };
  Shape shape;
  try {
    shape = broadcast_shapes(batch(q), batch(k), op);
    (void)broadcast_shapes(shape, batch(v), op);
  } catch (const Error&) {  // (its message names two of the three)
    throw Error(ErrorKind::shape, std::string(op) + ": the batch dims of query, key and value do not broadcast, got " +
                                      to_string(q.shape()) + ", " + to_string(k.shape()) + ", " + to_string(v.shape()));
  }
  shape.push_back(q.size(-2));
  shape.push_back(k.size(-2));
  return shape;
}

// The scale of q k^T. A NaN or infinite scale is refused: it can only give NaN weights (PyTorch
// takes it and returns NaN). With E == 0 the scores are all 0 whatever the scale, and the
// default 1 / sqrt(0) = inf would turn them into 0 * inf = NaN: PyTorch scales q and k by
// sqrt(scale) before their (empty) product and so gets 0 scores, uniform weights, the mean of v.
double scale_of(const char* op, const Tensor& q, const SdpaOptions& o) {
  if (o.scale && !std::isfinite(*o.scale)) throw Error::bad_value(op, "scale", *o.scale, "finite");
  if (q.size(-1) == 0) return 1.0;
  return o.scale ? *o.scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
}

// [L, S] bool: true where key j is after query i (masked out by is_causal).
Tensor future_mask(std::int64_t l, std::int64_t s, Device dev) {
  NoGradGuard no_grad;
  TensorOptions i64{.dtype = DType::i64, .device = dev};
  return gt(arange(s, i64).unsqueeze(0), arange(l, i64).unsqueeze(1));
}

// softmax(scale q k^T (+ causal)) of the fused op's inputs, as recorded ops.
Tensor probabilities(const Tensor& q, const Tensor& k, double scale, bool causal) {
  Tensor scores = mul(matmul(q, k.transpose(-2, -1)), scale);
  if (causal) scores = masked_fill(scores, future_mask(q.size(-2), k.size(-2), q.device()), neg_inf);
  return softmax(scores, -1);
}

// A tensor of `shape` [B, H, T, D] whose memory is [B, T, H, D] (last stride 1).
Tensor empty_bthd(const Shape& shape, DType dtype, Device dev) {
  return empty({shape[0], shape[2], shape[1], shape[3]}, {.dtype = dtype, .device = dev}).permute({0, 2, 1, 3});
}

Tensor last_dim_contiguous(const Tensor& t) { return t.stride(-1) == 1 || t.size(-1) == 1 ? t : t.contiguous(); }

// A gradient for the 4-D input `like`: with `like`'s strides when its memory is dense (a
// permutation of a contiguous tensor's, D innermost), as PyTorch's empty_like keeps them, so a
// leaf's .grad() or an input's producer gets the layout it has and no copy; [B, T, H, D]
// memory otherwise (the layout of q, k, v split from one [B, T, 3 H D] projection).
Tensor empty_grad_like(const Tensor& like) {
  std::vector<std::int64_t> order{0, 1, 2, 3};  // dims from outermost to innermost
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return like.stride(a) > like.stride(b); });
  bool dense = order[3] == 3;
  std::int64_t expected = 1;
  for (int i = 3; i >= 0 && dense; --i) {
    const std::int64_t d = order[static_cast<std::size_t>(i)];
    dense = like.size(d) == 1 || like.stride(d) == expected;
    expected *= like.size(d);
  }
  if (!dense) return empty_bthd(like.shape(), like.dtype(), like.device());
  Shape sizes;
  std::vector<std::int64_t> inverse(4);
  for (std::size_t i = 0; i < 4; ++i) {
    sizes.push_back(like.size(order[i]));
    inverse[static_cast<std::size_t>(order[i])] = static_cast<std::int64_t>(i);
  }
  return empty(sizes, {.dtype = like.dtype(), .device = like.device()}).permute(inverse);
}

// q, k, v split from one projection: views of one storage with equal shapes and strides, k
// and v at equal steps after q, in rows of a dense layout ([B, T, 3, H, D] memory from a
// [B, T, 3 H D] projection). Then their gradients are made views of one buffer in that same
// layout (disjoint: the checks below), so that split's backward, a cat of the three, finds
// them already in place and copies nothing. Returns the step (elements), 0 when not packed.
std::int64_t packed_step(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (q.storage().data() != k.storage().data() || q.storage().data() != v.storage().data()) return 0;
  if (q.shape() != k.shape() || q.shape() != v.shape() || q.strides() != k.strides() || q.strides() != v.strides())
    return 0;
  const std::int64_t step = k.storage_offset() - q.storage_offset();
  if (step <= 0 || v.storage_offset() - k.storage_offset() != step) return 0;
  // Dims by stride, innermost first (size-1 dims carry no elements).
  std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // (stride, size)
  for (std::int64_t d = 0; d < q.dim(); ++d)
    if (q.size(d) > 1) dims.emplace_back(q.stride(d), q.size(d));
  std::sort(dims.begin(), dims.end());
  std::size_t i = 0;
  std::int64_t inner = 1;  // the dense extent of the innermost dims
  for (; i < dims.size() && dims[i].first == inner; ++i) inner *= dims[i].second;
  // The rest: dense rows of `row` elements, each holding q's, k's and v's blocks disjointly.
  const std::int64_t row = i < dims.size() ? dims[i].first : 3 * step;
  for (std::int64_t expect = row; i < dims.size(); ++i) {
    if (dims[i].first != expect) return 0;
    expect *= dims[i].second;
  }
  return step >= inner && 2 * step + inner <= row ? step : 0;
}

struct FlashParams {
  double scale;
  bool causal;
  backend::AttentionDropout dropout;  // p == 0: none
  bool allow_tf32;                    // as when the forward ran, for both passes
};

// The composite dropout's noise (mask / (1 - p) in q's dtype, [B, H, L, S]) from the words a
// fused forward used: what dropout_noise draws, at the saved generator state.
Tensor dropout_noise_of(const backend::AttentionDropout& d, const Tensor& q, const Tensor& k) {
  NoGradGuard no_grad;
  const Device dev = q.device();
  Tensor u = empty({q.size(0), q.size(1), q.size(2), k.size(2)}, {.dtype = dropout_uniform_dtype(q.dtype()), .device = dev});
  if (d.seed_offset)
    backend::random_at_capture_state(backend::output(u, flash), backend::Distribution::uniform,
                                     {d.seed_offset, d.offset}, 0, 0);
  else
    backend::backend_for(dev).random(backend::output(u, flash), backend::Distribution::uniform, d.seed, d.offset, 0, 0);
  return dropout_noise_from(u, d.p, q.dtype());
}

autograd::Grads flash_rule(const autograd::Backward& c, const FlashParams& p) {
  // The inputs as given (so that create_graph reaches them), made last-dim contiguous below.
  const Tensor q = c.saved(0), k = c.saved(1), v = c.saved(2);
  Tensor g = c.grad();
  if (!g.defined()) return {Tensor(), Tensor(), Tensor()};
  if (c.saved(3).numel() == 0) {  // no output element: no kernel ran; k and v (S > 0) get zeros
    const auto zero = [](const Tensor& t) { return zeros(t.shape(), {.dtype = t.dtype(), .device = t.device()}); };
    return {zero(q), zero(k), zero(v)};
  }
  if (autograd::is_grad_enabled()) {
    // create_graph: the same gradients as recorded ops of q, k, v.
    Tensor pr = probabilities(q, k, p.scale, p.causal);
    Tensor noise = p.dropout.p > 0 ? dropout_noise_of(p.dropout, q, k) : Tensor();
    Tensor dv = matmul((noise.defined() ? mul(pr, noise) : pr).transpose(-2, -1), g);
    Tensor dp = matmul(g, v.transpose(-2, -1));
    if (noise.defined()) dp = mul(dp, noise);
    Tensor ds = mul(pr, sub(dp, sum(mul(dp, pr), {-1}, true)));
    return {mul(matmul(ds, k), p.scale), mul(matmul(ds.transpose(-2, -1), q), p.scale), dv};
  }
  const Tensor out = c.saved(3), lse = c.saved(4), keep = c.saved(5);
  const Tensor qc = last_dim_contiguous(q), kc = last_dim_contiguous(k), vc = last_dim_contiguous(v);
  Tensor gc = last_dim_contiguous(g.dtype() == q.dtype() ? g : g.to(q.dtype()));
  Tensor dq, dk, dv;
  if (const std::int64_t step = packed_step(q, k, v)) {
    std::int64_t span = 2 * step + 1;  // from q's first element to v's last
    for (std::int64_t d = 0; d < q.dim(); ++d) span += (q.size(d) - 1) * q.stride(d);
    Tensor buf = empty({span}, {.dtype = q.dtype(), .device = q.device()});
    dq = buf.as_strided(q.shape(), q.strides(), 0);
    dk = buf.as_strided(q.shape(), q.strides(), step);
    dv = buf.as_strided(q.shape(), q.strides(), 2 * step);
  } else {
    dq = empty_grad_like(q), dk = empty_grad_like(k), dv = empty_grad_like(v);
  }
  backend::AttentionDropout dropout = p.dropout;
  if (keep.defined()) dropout.keep_bits = static_cast<std::uint32_t*>(const_cast<void*>(backend::input_data(keep, flash)));
  backend::backend_for(q.device())
      .attention_backward(backend::output(dq, flash), backend::output(dk, flash), backend::output(dv, flash),
                          backend::input(gc, flash), backend::input(qc, flash), backend::input(kc, flash),
                          backend::input(vc, flash), backend::input(out, flash), backend::input(lse, flash), p.scale,
                          p.causal, dropout, p.allow_tf32, deterministic());
  return {c.needs(0) ? dq : Tensor(), c.needs(1) ? dk : Tensor(), c.needs(2) ? dv : Tensor()};
}

}  // namespace

Tensor scaled_dot_product_flash_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                          SdpaOptions options) {
  NvtxRange range(flash);
  check_qkv(flash, query, key, value);
  if (options.attn_mask.defined())
    throw Error(ErrorKind::value, std::string(flash) + ": takes no attn_mask (use scaled_dot_product_attention)");
  if (!(options.dropout_p >= 0 && options.dropout_p < 1))
    throw Error::bad_value(flash, "dropout_p", options.dropout_p, "in [0, 1)");
  if (query.dim() != 4 || key.dim() != 4 || value.dim() != 4 || key.size(0) != query.size(0) ||
      value.size(0) != query.size(0) || key.size(1) != query.size(1) || value.size(1) != query.size(1) ||
      value.size(3) != query.size(3))
    throw Error(ErrorKind::shape, std::string(flash) + ": expected query [B, H, L, D], key and value [B, H, S, D], got " +
                                      to_string(query.shape()) + ", " + to_string(key.shape()) + ", " +
                                      to_string(value.shape()));
  const std::int64_t d = query.size(3);
  if (d < 1 || d > 128 || key.size(2) < 1)
    throw Error(ErrorKind::shape, std::string(flash) + ": needs 1 <= D <= 128 and S >= 1, got query " +
                                      to_string(query.shape()) + " and key " + to_string(key.shape()));
  const Device dev = query.device();
  FlashParams params{scale_of(flash, query, options), options.is_causal, {}, allow_tf32()};
  const bool needs_grad = autograd::any_requires_grad({query, key, value});
  Tensor q, k, v, out, lse, keep;
  {
    NoGradGuard no_grad;
    q = last_dim_contiguous(query);
    k = last_dim_contiguous(key);
    v = last_dim_contiguous(value);
    out = empty_bthd(query.shape(), query.dtype(), dev);
    lse = empty({query.size(0), query.size(1), query.size(2)},
                {.dtype = query.dtype() == DType::f64 ? DType::f64 : DType::f32, .device = dev});
    if (out.numel() > 0 && options.dropout_p > 0)
      params.dropout = draw_dropout(options.dropout_p, query.dtype(), dev, out.numel() / query.size(3) * key.size(2));
    // The tensor-core kernels (CUDA: bf16/f16, f32 with TF32) keep the forward's mask as bits
    // for their backward (AttentionDropout::keep_bits) rather than drawing it twice more.
    const bool tensor_cores = dev.is_cuda() && (query.dtype() == DType::bf16 || query.dtype() == DType::f16 ||
                                                (query.dtype() == DType::f32 && params.allow_tf32));
    if (params.dropout.p > 0 && needs_grad && tensor_cores) {
      keep = empty({out.numel() / query.size(3), backend::attention_keep_words(key.size(2))},
                   {.dtype = DType::i32, .device = dev});
      params.dropout.keep_bits = static_cast<std::uint32_t*>(backend::output_data(keep, flash));
    }
    if (out.numel() > 0)
      backend::backend_for(dev).attention_forward(backend::output(out, flash), backend::output(lse, flash),
                                                  backend::input(q, flash), backend::input(k, flash),
                                                  backend::input(v, flash), params.scale, params.causal,
                                                  params.dropout, params.allow_tf32);
  }
  params.dropout.keep_bits = nullptr;  // the backward takes the saved tensor's
  // Recorded when empty too (B, H or L of 0), so that the output requires grad as its inputs
  // do; flash_rule gives zeros then (the kernels never ran).
  if (needs_grad)
    autograd::record("ScaledDotProductFlashAttentionBackward", {query, key, value}, {out},
                     {query, key, value, out, lse, keep},
                     [params](const autograd::Backward& c) { return flash_rule(c, params); });
  return out;
}

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    SdpaOptions options) {
  BRRR_AUTOCAST(lower_precision, scaled_dot_product_attention, query, key, value, options);
  NvtxRange range(sdpa);
  check_qkv(sdpa, query, key, value);
  const Tensor& mask = options.attn_mask;
  if (!(options.dropout_p >= 0 && options.dropout_p <= 1))
    throw Error::bad_value(sdpa, "dropout_p", options.dropout_p, "in [0, 1]");
  const double scale = scale_of(sdpa, query, options);
  const std::int64_t l = query.size(-2), s = key.size(-2);
  const Shape weights_dims = weights_shape(sdpa, query, key, value);
  if (mask.defined()) {
    common_device(sdpa, {query, mask});
    if (options.is_causal)
      throw Error(ErrorKind::value, std::string(sdpa) + ": attn_mask and is_causal cannot both be set");
    if (mask.dtype() != DType::boolean && !is_floating_point(mask.dtype()))
      throw Error::dtype_not_supported(sdpa, "attn_mask must be bool or floating", mask);
    // The mask broadcasts *to* the weights (PyTorch adds it in place): a larger mask would
    // silently add batch dims to the output.
    bool fits = false;
    try {
      fits = broadcast_shapes(mask.shape(), weights_dims, sdpa) == weights_dims;
    } catch (const Error&) {
    }
    if (!fits)
      throw Error(ErrorKind::shape, std::string(sdpa) + ": attn_mask " + to_string(mask.shape()) +
                                        " does not broadcast to the attention weights' shape " +
                                        to_string(weights_dims) + " (query " + to_string(query.shape()) + ", key " +
                                        to_string(key.shape()) + ")");
  }
  const bool fused = query.device().is_cuda() && query.dtype() != DType::f64 && !mask.defined() &&
                     options.dropout_p < 1 && query.dim() == 4 && key.dim() == 4 && value.dim() == 4 &&
                     key.size(0) == query.size(0) && value.size(0) == query.size(0) &&
                     key.size(1) == query.size(1) && value.size(1) == query.size(1) &&
                     value.size(3) == query.size(3) && query.size(3) >= 1 && query.size(3) <= 128 && s >= 1;
  if (fused) return scaled_dot_product_flash_attention(query, key, value, options);

  Tensor scores = mul(matmul(query, key.transpose(-2, -1)), scale);  // [..., L, S]
  if (options.is_causal) scores = masked_fill(scores, future_mask(l, s, query.device()), neg_inf);
  Tensor dead;  // rows with no key left: PyTorch's safe softmax gives them weights 0
  if (mask.defined()) {
    if (mask.dtype() == DType::boolean) scores = masked_fill(scores, logical_not(mask), neg_inf);
    else scores = add(scores, mask.dtype() == query.dtype() ? mask : mask.to(query.dtype()));
    NoGradGuard no_grad;
    // (S == 0: no keys at all, so no max to take; the empty product below gives the 0 rows.)
    if (s > 0) dead = eq(amax(scores, {-1}, true), neg_inf);
  }
  // A dead row's scores become 0 before softmax (finite gradients) and its weights 0 after.
  Tensor weights = dead.defined() ? masked_fill(softmax(masked_fill(scores, dead, 0.0), -1), dead, 0.0)
                                  : softmax(scores, -1);
  if (options.dropout_p > 0) weights = dropout(weights, options.dropout_p, true);
  return matmul(weights, value);
}

}  // namespace brrr

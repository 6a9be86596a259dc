// CausalSelfAttention (Vaswani et al. 2017, "Attention Is All You Need", section 3.2, with
// the causal mask of a decoder): x [B, T, E] -> qkv = x W_qkv^T + b ([B, T, 3E]) split into
// q, k, v and into heads [B, H, T, D] (D = E / H); y = scaled_dot_product_attention(q, k, v,
// causal, dropout on the weights when training), heads merged back to [B, T, E]; out = y
// W_proj^T + b. Every step is a differentiable op, so backward needs nothing here. Children: "qkv" (Linear E -> 3E) and "proj" (Linear E -> E).
module;
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>
module brrr.nn;
import brrr.tensor;
import brrr.ops;

namespace brrr::nn {

namespace {

class CausalSelfAttentionImpl final : public ModuleImpl {
public:
  CausalSelfAttentionImpl(std::int64_t embed_dim, std::int64_t num_heads, double dropout, bool bias)
      : e_(embed_dim), h_(num_heads), p_(dropout) {
    if (embed_dim <= 0 || num_heads <= 0 || embed_dim % num_heads != 0)
      throw Error(ErrorKind::value, "CausalSelfAttention: embed_dim (" + std::to_string(embed_dim) +
                                        ") must be a positive multiple of num_heads (" + std::to_string(num_heads) +
                                        ")");
    if (!(dropout >= 0.0 && dropout <= 1.0))
      throw Error(ErrorKind::value, "CausalSelfAttention: dropout must be in [0, 1], got " + std::to_string(dropout));
    register_module("qkv", Linear(embed_dim, 3 * embed_dim, bias).impl());
    register_module("proj", Linear(embed_dim, embed_dim, bias).impl());
  }

  Tensor forward(const Tensor& x) override {
    if (!x.defined()) throw Error(ErrorKind::value, "CausalSelfAttention: the input is undefined");
    if (x.dim() != 3 || x.size(2) != e_)
      throw Error(ErrorKind::shape, "CausalSelfAttention: input must be [B, T, " + std::to_string(e_) + "], got " +
                                        to_string(x.shape()));
    const std::int64_t b = x.size(0), t = x.size(1), d = e_ / h_;
    std::vector<Tensor> parts = split(own_children()[0].second->forward(x), e_, -1);  // 3 x [B, T, E]
    auto heads = [&](const Tensor& z) { return z.reshape({b, t, h_, d}).transpose(1, 2); };  // [B, H, T, D]
    Tensor q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
    // The fused kernel on CUDA without dropout; the composite otherwise (ops/attention.cpp).
    Tensor y0 = scaled_dot_product_attention(q, k, v, {.dropout_p = training ? p_ : 0.0, .is_causal = true});
    Tensor y = y0.transpose(1, 2).reshape({b, t, e_});  // [B, T, E]
    return own_children()[1].second->forward(y);
  }

  std::string name() const override {
    std::ostringstream os;
    os << "CausalSelfAttention(embed_dim=" << e_ << ", num_heads=" << h_ << ", dropout=" << number_text(p_) << ")";
    return os.str();
  }

private:
  std::int64_t e_, h_;
  double p_;
};

}  // namespace

CausalSelfAttention::CausalSelfAttention(std::int64_t embed_dim, std::int64_t num_heads, double dropout, bool bias) {
  impl_ = std::make_shared<CausalSelfAttentionImpl>(embed_dim, num_heads, dropout, bias);
}

}  // namespace brrr::nn

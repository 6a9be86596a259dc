// gpt: a character-level GPT trained on plain text, with the shape of nanoGPT's
// shakespeare-char configuration (Karpathy, github.com/karpathy/nanoGPT,
// config/train_shakespeare_char.py): 6 layers, 6 heads, 384 wide, block 256, batch 64,
// dropout 0.2, no biases; AdamW (lr 1e-3, betas 0.9/0.99, weight decay 0.1 on the matrices
// and embeddings only), 100 warm-up steps then cosine to 1e-4 at the last step, gradients
// clipped to norm 1.0. The parameters carry nanoGPT's names (transformer.wte.weight,
// transformer.h.0.attn.c_attn.weight, ..., lm_head.weight tied to the token embedding), so a
// --save checkpoint loads into nanoGPT's GPT with load_state_dict.
//
// Corpus: the files of Debian's `fortunes` package (/usr/share/games/fortunes, installed by
// tools/setup) without their `%` separator lines, or --text FILE (UTF-8). Characters are the
// vocabulary (sorted code points); the first 90 % of the text trains, the rest validates.
// The whole corpus lives on the device and batches are gathered there at random offsets
// (randint of the seeded generator), so a training step makes no host sync; the loss is read
// every --log-every steps and the train/validation estimate every --eval-every.
//
//   gpt                                  train on the GPU with the full configuration
//   gpt --device cpu --tiny              a minute on a CPU (2 layers, 64 wide, block 64)
//   gpt --save ckpt.safetensors          write the weights (and the vocabulary, in metadata)
//   gpt --resume ckpt.safetensors --iters 0 --sample 500 --temperature 0.8 --top-k 20
//   gpt --graph                          the same training, each step a replay of one CUDA graph
//   gpt --dtype bf16                     mixed precision: the forward under AutocastGuard(bf16)
//   gpt --dtype tf32                     f32 with TF32 tensor-core GEMMs (set_allow_tf32)
//   gpt --gelu tanh                      GELU's tanh form (GPT-2's) inside the MLP's GEMMs (fused_mlp)
//
// With --graph the first step runs eagerly (it makes AdamW's state) and captures nothing; the
// second is captured once (cuda::GraphedStep) and every later step replays it. The batch is
// drawn inside the step (randint under capture reads its Philox offset from device memory a
// replay hook advances) and the schedule's learning rate reaches the captured AdamW steps
// through their replay hooks, so the graphed run is the eager one, step for step.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <numbers>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>
import brrr;

using namespace brrr;

namespace {

struct Config {
  std::int64_t n_layer = 6, n_head = 6, n_embd = 384, block_size = 256, batch_size = 64;
  double dropout = 0.2, lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, beta2 = 0.99, grad_clip = 1.0;
  std::int64_t iters = 5000, warmup = 100, eval_every = 250, eval_iters = 200, log_every = 10;
  std::string device = "auto", text, save, resume, csv, dtype = "f32", offsets_out, gelu = "none";
  std::uint64_t seed = 1337;
  bool tiny = false, expect_progress = false, graph = false;
  std::int64_t sample = 0, top_k = 0;
  double temperature = 1.0;
};

// ---- text -------------------------------------------------------------------------------

// UTF-8 to code points; a byte that starts no valid sequence stands for itself (Latin-1).
// Overlong forms, surrogates and code points past U+10FFFF are not valid sequences (RFC 3629),
// so every code point decoded encodes back to valid UTF-8 (the checkpoint's vocab metadata).
std::vector<std::uint32_t> decode_utf8(const std::string& s) {
  static constexpr std::uint32_t kLeast[4] = {0, 0x80, 0x800, 0x10000};  // by continuation bytes
  std::vector<std::uint32_t> out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    bool ok = n >= 0 && i + n < s.size() + (n == 0 ? 1 : 0);
    std::uint32_t cp = n <= 0 ? c : c & (0x3f >> n);
    for (int k = 1; ok && k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      ok = (d >> 6) == 2;
      cp = (cp << 6) | (d & 0x3f);
    }
    if (ok && n > 0) ok = cp >= kLeast[n] && cp <= 0x10ffff && (cp < 0xd800 || cp > 0xdfff);
    if (!ok) cp = c, n = 0;
    out.push_back(cp);
    i += static_cast<std::size_t>(n) + 1;
  }
  return out;
}

std::string encode_utf8(std::uint32_t cp) {
  std::string s;
  if (cp < 0x80) s += static_cast<char>(cp);
  else if (cp < 0x800) s += {static_cast<char>(0xc0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3f))};
  else if (cp < 0x10000)
    s += {static_cast<char>(0xe0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3f)),
          static_cast<char>(0x80 | (cp & 0x3f))};
  else
    s += {static_cast<char>(0xf0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3f)),
          static_cast<char>(0x80 | ((cp >> 6) & 0x3f)), static_cast<char>(0x80 | (cp & 0x3f))};
  return s;
}

// A regular file's bytes: a directory, a FIFO or a device (/dev/zero) is refused, not read
// until memory runs out.
std::string read_file(const std::filesystem::path& p) {
  std::error_code ec;
  const auto st = std::filesystem::status(p, ec);
  if (ec) throw Error(ErrorKind::io, "cannot read " + p.string() + ": " + ec.message());
  if (!std::filesystem::is_regular_file(st))
    throw Error(ErrorKind::io, "cannot read " + p.string() + ": " +
                                   (std::filesystem::is_directory(st) ? "it is a directory" : "not a regular file"));
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(ErrorKind::io, "cannot read " + p.string() + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error(ErrorKind::io, "cannot read " + p.string() + ": " + std::strerror(errno));
  return ss.str();
}

// The fortune files (not their .dat indexes nor the .u8 links), sorted by name, each line
// that is a lone "%" (the separator between fortunes) dropped.
std::string fortunes_corpus() {
  const std::filesystem::path dir = "/usr/share/games/fortunes";
  if (!std::filesystem::is_directory(dir))
    throw Error(ErrorKind::io, "no " + dir.string() + " (install Debian's fortunes package: tools/setup), or pass --text FILE");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const auto ext = e.path().extension();
    if (e.is_regular_file() && !e.is_symlink() && ext != ".dat" && ext != ".u8") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& f : files) {
    std::istringstream in(read_file(f));
    for (std::string line; std::getline(in, line);)
      if (line != "%") text += line + "\n";
  }
  return text;
}

struct Vocab {
  std::vector<std::uint32_t> chars;  // token -> code point
  std::map<std::uint32_t, std::int64_t> index;
  std::string text() const {
    std::string s;
    for (auto c : chars) s += encode_utf8(c);
    return s;
  }
  // The characters of a text, sorted (nanoGPT's sorted(set(text))).
  static Vocab of(std::vector<std::uint32_t> cps) {
    std::sort(cps.begin(), cps.end());
    cps.erase(std::unique(cps.begin(), cps.end()), cps.end());
    return in_order(cps, "the text");
  }
  // A checkpoint's vocabulary: its characters in token order, as saved.
  static Vocab in_order(const std::vector<std::uint32_t>& cps, const std::string& source) {
    if (cps.empty()) throw Error(ErrorKind::value, source + " is empty: no characters to train or sample on");
    Vocab v;
    v.chars = cps;
    for (std::size_t i = 0; i < cps.size(); ++i)
      if (!v.index.emplace(cps[i], static_cast<std::int64_t>(i)).second)
        throw Error(ErrorKind::value, source + " has the character " + describe(cps[i]) + " twice");
    return v;
  }
  // "'a' (U+0061)" for messages.
  static std::string describe(std::uint32_t cp) {
    char code[16];
    std::snprintf(code, sizeof code, "U+%04X", static_cast<unsigned>(cp));
    return cp >= 0x20 && (cp < 0x7f || cp >= 0xa0) ? "'" + encode_utf8(cp) + "' (" + code + ")" : std::string(code);
  }
};

// ---- the model (nanoGPT's GPT with bias=False) ---------------------------------------------

// LayerNorm with a weight and no bias (nanoGPT's LayerNorm(ndim, bias=False)).
class LayerNormImpl final : public nn::ModuleImpl {
public:
  explicit LayerNormImpl(std::int64_t n) : n_(n) { register_parameter("weight", ones({n}, {.requires_grad = true})); }
  Tensor forward(const Tensor& x) override { return layer_norm(x, {n_}, weight(), Tensor(), 1e-5); }
  Tensor weight() { return own_parameters()[0].second; }
  std::string name() const override { return "LayerNorm(" + std::to_string(n_) + ")"; }

private:
  std::int64_t n_;
};

class AttentionImpl final : public nn::ModuleImpl {
public:
  AttentionImpl(const Config& c) : h_(c.n_head), e_(c.n_embd), p_(c.dropout) {  // p_: the attention's dropout
    c_attn = nn::Linear(c.n_embd, 3 * c.n_embd, false).impl();
    c_proj = nn::Linear(c.n_embd, c.n_embd, false).impl();
    register_module("c_attn", c_attn);
    register_module("c_proj", c_proj);
  }
  Tensor forward(const Tensor& x) override {
    const std::int64_t b = x.size(0), t = x.size(1), d = e_ / h_;
    std::vector<Tensor> qkv = split(c_attn->forward(x), e_, -1);
    auto heads = [&](const Tensor& z) { return z.reshape({b, t, h_, d}).transpose(1, 2); };  // [B, H, T, D]
    Tensor y = scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]),
                                            {.dropout_p = training ? p_ : 0.0, .is_causal = true});
    return c_proj->forward(y.transpose(1, 2).reshape({b, t, e_}));  // its dropout: the next residual step's
  }
  std::string name() const override { return "CausalSelfAttention"; }
  std::shared_ptr<nn::ModuleImpl> c_attn, c_proj;

private:
  std::int64_t h_, e_;
  double p_;
};

class MlpImpl final : public nn::ModuleImpl {
public:
  MlpImpl(const Config& c) : fc_(c.n_embd, 4 * c.n_embd, false), proj_(4 * c.n_embd, c.n_embd, false), gelu_(c.gelu) {
    c_fc = fc_.impl();
    c_proj = proj_.impl();
    register_module("c_fc", c_fc);
    register_module("c_proj", c_proj);
  }
  // Its dropout: the next residual step's. GELU's tanh form (--gelu tanh) runs inside the two
  // GEMMs' epilogues (fused_mlp); the exact form, nanoGPT's nn.GELU(), between them.
  Tensor forward(const Tensor& x) override {
    if (gelu_ == "tanh") return fused_mlp(x, fc_.weight(), Tensor(), proj_.weight(), Tensor(), "tanh");
    return c_proj->forward(gelu(c_fc->forward(x)));
  }
  std::string name() const override { return "MLP"; }
  std::shared_ptr<nn::ModuleImpl> c_fc, c_proj;

private:
  nn::Linear fc_, proj_;
  std::string gelu_;
};

// nanoGPT's block, x + attn(ln_1(x)) then x + mlp(ln_2(x)) with each branch's dropout, written
// as FlashAttention's GPT does: each residual step (the previous branch's dropout, the add, the
// next layer norm) is one dropout_add_layer_norm. forward takes the previous branch's output
// `hidden` (before its dropout) and the residual stream (undefined in the first block, whose
// `hidden` is the embeddings) and returns the same pair for the next block.
class BlockImpl final : public nn::ModuleImpl {
public:
  BlockImpl(const Config& c) : p_(c.dropout) {
    ln_1 = register_module("ln_1", std::make_shared<LayerNormImpl>(c.n_embd));
    attn = register_module("attn", std::make_shared<AttentionImpl>(c));
    ln_2 = register_module("ln_2", std::make_shared<LayerNormImpl>(c.n_embd));
    mlp = register_module("mlp", std::make_shared<MlpImpl>(c));
  }
  std::pair<Tensor, Tensor> forward(const Tensor& hidden, const Tensor& residual) {
    auto [h1, r1] = dropout_add_layer_norm(hidden, residual, ln_1->weight(), Tensor(), p_, 1e-5, training);
    auto [h2, r2] = dropout_add_layer_norm(attn->forward(h1), r1, ln_2->weight(), Tensor(), p_, 1e-5, training);
    return {mlp->forward(h2), r2};
  }
  std::string name() const override { return "Block"; }
  std::shared_ptr<LayerNormImpl> ln_1, ln_2;
  std::shared_ptr<AttentionImpl> attn;
  std::shared_ptr<MlpImpl> mlp;

private:
  double p_;
};

// "transformer": wte, wpe, h.0 ... h.{n-1}, ln_f.
class TransformerImpl final : public nn::ModuleImpl {
public:
  TransformerImpl(const Config& c, std::int64_t vocab) : p_(c.dropout) {
    wte = nn::Embedding(vocab, c.n_embd).impl();
    wpe = nn::Embedding(c.block_size, c.n_embd).impl();
    register_module("wte", wte);
    register_module("wpe", wpe);
    nn::ModuleList list;
    for (std::int64_t i = 0; i < c.n_layer; ++i) {
      auto b = std::make_shared<BlockImpl>(c);
      blocks.push_back(b);
      list.push_back(nn::Module(b));
    }
    register_module("h", list.impl());
    ln_f = register_module("ln_f", std::make_shared<LayerNormImpl>(c.n_embd));
  }
  Tensor forward(const Tensor& idx) override {
    const std::int64_t t = idx.size(1);
    Tensor pos = arange(t, {.dtype = DType::i64, .device = idx.device()});
    // nanoGPT: x = drop(wte + wpe), the blocks, ln_f(x); the dropout of the embeddings is the
    // first block's first residual step, the last block's MLP dropout ln_f's.
    Tensor hidden = add(wte->forward(idx), wpe->forward(pos)), residual;
    for (auto& b : blocks) std::tie(hidden, residual) = b->forward(hidden, residual);
    return dropout_add_layer_norm(hidden, residual, ln_f->weight(), Tensor(), p_, 1e-5, training).first;
  }
  std::string name() const override { return "Transformer"; }
  std::shared_ptr<nn::ModuleImpl> wte, wpe;
  std::vector<std::shared_ptr<BlockImpl>> blocks;
  std::shared_ptr<LayerNormImpl> ln_f;

private:
  double p_;
};

// x [..., E] -> x W^T with W the token embedding [vocab, E] (registered as "weight": the same
// tensor under two names, as nanoGPT's state dict has it).
class TiedHeadImpl final : public nn::ModuleImpl {
public:
  explicit TiedHeadImpl(const Tensor& w) { register_parameter("weight", w); }
  Tensor forward(const Tensor& x) override { return linear(x, own_parameters()[0].second); }
  std::string name() const override { return "Linear(tied)"; }
};

class GptImpl final : public nn::ModuleImpl {
public:
  GptImpl(const Config& c, std::int64_t vocab) : block_size(c.block_size) {
    transformer = register_module("transformer", std::make_shared<TransformerImpl>(c, vocab));
    // lm_head shares the token embedding (weight tying, Press & Wolf 2017), as nanoGPT.
    lm_head = register_module("lm_head", std::make_shared<TiedHeadImpl>(transformer->wte->own_parameters()[0].second));
  }
  // idx [B, T] (T <= block_size) -> logits [B, T, vocab].
  Tensor forward(const Tensor& idx) override { return lm_head->forward(transformer->forward(idx)); }
  std::string name() const override { return "GPT"; }
  std::shared_ptr<TransformerImpl> transformer;
  std::shared_ptr<TiedHeadImpl> lm_head;
  std::int64_t block_size;
};

// ---- training -------------------------------------------------------------------------------

// nanoGPT's get_lr: linear warm-up over `warmup` steps, cosine from lr to min_lr at `iters`.
double lr_at(const Config& c, std::int64_t it) {
  if (it < c.warmup) return c.lr * static_cast<double>(it + 1) / static_cast<double>(c.warmup + 1);
  if (it >= c.iters) return c.min_lr;
  const double ratio = static_cast<double>(it - c.warmup) / static_cast<double>(std::max<std::int64_t>(c.iters - c.warmup, 1));
  return c.min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * ratio)) * (c.lr - c.min_lr);
}

// A batch of `b` windows of `t` tokens at random offsets of `data` (i64 on the device): x and
// the next-token targets y, [b, t] each; no host sync.
// `offsets`, when given, receives the [b, 1] offsets drawn.
std::pair<Tensor, Tensor> batch(const Tensor& data, std::int64_t b, std::int64_t t, Tensor* drawn = nullptr) {
  const Device dev = data.device();
  Tensor offsets = randint(0, data.size(0) - t, {b, 1}, {.device = dev});
  if (drawn) *drawn = offsets;
  Tensor idx = add(offsets, arange(t, {.dtype = DType::i64, .device = dev}).unsqueeze(0));
  Tensor x = index_select(data, 0, idx.flatten()).view({b, t});
  Tensor y = index_select(data, 0, add(idx, 1).flatten()).view({b, t});
  return {x, y};
}

// The mean next-token loss; with `bf16` the forward runs under autocast (AutocastGuard: the
// GEMMs and attention in bf16, softmax, layer norms and the loss in f32; the weights and
// AdamW's state stay f32).
Tensor lm_loss(GptImpl& model, const Tensor& x, const Tensor& y, bool bf16) {
  AutocastGuard precision(DType::bf16, bf16);
  Tensor logits = model.forward(x);
  const std::int64_t v = logits.size(-1);
  return cross_entropy(logits.reshape({-1, v}), y.reshape({-1}));
}

// Mean loss over `iters` batches of each split, in evaluation mode (one host read per split).
std::pair<double, double> estimate(const nn::Module& m, GptImpl& model, const Tensor& train, const Tensor& val,
                                   const Config& c) {
  NoGradGuard no_grad;
  m.eval();
  double out[2];
  const Tensor* splits[2] = {&train, &val};
  for (int s = 0; s < 2; ++s) {
    Tensor acc = zeros({}, {.device = splits[s]->device()});
    for (std::int64_t i = 0; i < c.eval_iters; ++i) {
      auto [x, y] = batch(*splits[s], c.batch_size, c.block_size);
      acc = add(acc, lm_loss(model, x, y, c.dtype == "bf16"));
    }
    out[s] = acc.item<double>() / static_cast<double>(c.eval_iters);
  }
  m.train();
  return {out[0], out[1]};
}

// Top-k sampling (Fan et al. 2018) at a temperature, one token at a time from `prompt`.
std::vector<std::int64_t> generate(const nn::Module& m, GptImpl& model, std::vector<std::int64_t> tokens, std::int64_t n,
                                   double temperature, std::int64_t top_k, Device dev) {
  NoGradGuard no_grad;
  m.eval();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t t = std::min<std::int64_t>(static_cast<std::int64_t>(tokens.size()), model.block_size);
    std::vector<std::int64_t> window(tokens.end() - t, tokens.end());
    Tensor idx = Tensor::from_vector(window, {1, t}).to(dev);
    Tensor logits = model.forward(idx).select(1, t - 1);  // [1, vocab]
    // T -> 0 is the likeliest character; so is a T whose 1 / T is past f32's range.
    const auto inv_t = static_cast<float>(1.0 / temperature);
    if (temperature == 0 || std::isinf(inv_t)) {
      tokens.push_back(argmax(logits, -1).item<std::int64_t>());
      continue;
    }
    // (logits - max) / T <= 0: a small T overflows to -inf (weight 0), never to +inf (NaN).
    logits = mul(sub(logits, amax(logits, {-1}, true)), inv_t);
    if (top_k > 0 && top_k < logits.size(-1)) {
      Tensor kth = topk(logits, top_k, -1).values.narrow(-1, top_k - 1, 1);
      logits = masked_fill(logits, lt(logits, kth), -std::numeric_limits<double>::infinity());
    }
    tokens.push_back(multinomial(softmax(logits, -1), 1).item<std::int64_t>());
  }
  return tokens;
}

// nanoGPT's initialisation: N(0, 0.02) weights and embeddings, c_proj's std scaled by
// 1 / sqrt(2 n_layer) (GPT-2's residual scaling); layer norms' weights stay 1.
void init_weights(const nn::Module& m, std::int64_t n_layer) {
  NoGradGuard no_grad;
  for (auto& [name, p] : m.named_parameters()) {
    if (p.dim() < 2) continue;
    const bool proj = name.ends_with("c_proj.weight");
    nn::init::normal_(p, 0.0, proj ? 0.02 / std::sqrt(2.0 * static_cast<double>(n_layer)) : 0.02);
  }
}

bool is_tty() { return isatty(fileno(stdout)); }

// Fails before training, not after it, when `path` (given to `flag`) cannot be written: it
// names a directory, or its directory is missing or not writable. (What a --save path that
// exists may be is save_safetensors' to check.)
void check_writable(const char* flag, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return;
  const auto fail = [&](const std::string& why) {
    throw Error(ErrorKind::io, std::string(flag) + ": cannot write " + path + ": " + why);
  };
  if (path.back() == '/') fail("it names a directory");
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec && st.type() != fs::file_type::not_found) fail(ec.message());
  if (fs::is_directory(st)) fail("it is a directory");
  const fs::path dir = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  if (!fs::is_directory(fs::status(dir, ec))) fail("no directory " + dir.string());
  if (::access(dir.c_str(), W_OK) != 0) fail(dir.string() + ": " + std::strerror(errno));
}

// A checkpoint's metadata entry `key` (saved by --save: the model's shape), or `field` as it
// is when the checkpoint has none (saved before it was stored). A flag given explicitly must
// agree with the checkpoint; one left at its default takes the checkpoint's value (as nanoGPT's
// resume takes the model_args of its checkpoint).
void adopt(const CLI::App& app, const std::map<std::string, std::string>& meta, const std::string& file,
           const char* flag, const char* key, std::int64_t least, std::int64_t& field) {
  const auto it = meta.find(key);
  if (it == meta.end()) return;
  const std::string& v = it->second;
  std::int64_t saved = 0;
  const auto [last, ec] = std::from_chars(v.data(), v.data() + v.size(), saved);
  if (ec != std::errc() || last != v.data() + v.size() || saved < least)
    throw Error(ErrorKind::io, file + ": metadata " + key + " is not an integer >= " + std::to_string(least) + ": " + v);
  if (app.count(flag) != 0 && field != saved)
    throw Error(ErrorKind::value, file + " was saved with " + flag + " " + v + ", the run asks for " + std::to_string(field));
  field = saved;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  CLI::App app{"Train a character-level GPT (nanoGPT's shakespeare-char shape) on plain text with brrr."};
  app.add_option("--device", cfg.device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--text", cfg.text, "a UTF-8 text file (default: the fortunes package's files)");
  app.add_flag("--tiny", cfg.tiny, "a small configuration for a CPU: 2 layers, 2 heads, 64 wide, block 64, batch 16, 300 iters");
  // Sizes and counts are checked here, so that a 0 or a negative is a usage error, not a
  // division by zero, NaN losses or a silent no-op later. Integers are decimal only (CLI11 alone
  // reads 010 as octal 8 and saturates past 2^63): the transform checks the value and rewrites
  // it in canonical form. Real values must be finite.
  const auto integer = [](std::int64_t lo, const char* what) {
    return CLI::Validator(
        [lo, what](std::string& v) -> std::string {
          std::int64_t x = 0;
          const char* end = v.data() + v.size();
          const auto [last, ec] = std::from_chars(v.data() + (v.starts_with('+') ? 1 : 0), end, x);
          if (ec == std::errc::result_out_of_range) return "must be " + std::string(what) + " and below 2^63, got " + v;
          if (ec != std::errc() || last != end) return "must be a decimal integer " + std::string(what) + ", got " + v;
          if (x < lo) return "must be " + std::string(what) + ", got " + v;
          v = std::to_string(x);
          return {};
        },
        what);
  };
  const auto real = [](double lo, double hi, const char* what) {  // lo <= x < hi
    return CLI::Validator(
        [lo, hi, what](std::string& v) -> std::string {
          char* last = nullptr;
          const double x = std::strtod(v.c_str(), &last);
          if (v.empty() || *last != '\0' || v.find_first_of("xX") != std::string::npos || !std::isfinite(x))
            return "must be a finite number " + std::string(what) + ", got " + v;
          if (!(x >= lo && x < hi)) return "must be " + std::string(what) + ", got " + v;
          return {};
        },
        what);
  };
  const CLI::Validator positive = integer(1, ">= 1"), non_negative = integer(0, ">= 0");
  const double kHuge = std::numeric_limits<double>::infinity();
  app.add_option("--iters", cfg.iters, "training steps (0: no training, e.g. to sample from --resume)")
      ->transform(non_negative)
      ->capture_default_str();
  app.add_option("--batch-size", cfg.batch_size, "sequences per step")->transform(positive)->capture_default_str();
  app.add_option("--block-size", cfg.block_size, "context length")->transform(positive)->capture_default_str();
  app.add_option("--n-layer", cfg.n_layer, "transformer blocks")->transform(non_negative)->capture_default_str();
  app.add_option("--n-head", cfg.n_head, "attention heads")->transform(positive)->capture_default_str();
  app.add_option("--n-embd", cfg.n_embd, "model width")->transform(positive)->capture_default_str();
  app.add_option("--dropout", cfg.dropout, "dropout probability")->check(real(0, 1, "in [0, 1)"))->capture_default_str();
  app.add_option("--lr", cfg.lr, "peak learning rate")->check(real(0, kHuge, ">= 0"))->capture_default_str();
  app.add_option("--eval-every", cfg.eval_every, "steps between train/validation estimates")
      ->transform(positive)
      ->capture_default_str();
  app.add_option("--eval-iters", cfg.eval_iters, "batches per estimate")->transform(positive)->capture_default_str();
  app.add_option("--log-every", cfg.log_every, "steps between progress updates (each reads the loss: one sync)")
      ->transform(positive)
      ->capture_default_str();
  app.add_option("--csv", cfg.csv, "write step,train_loss,val_loss,lr,tokens_per_s rows to FILE");
  app.add_option("--save", cfg.save, "write the weights to FILE.safetensors (nanoGPT's names) after training");
  app.add_option("--resume", cfg.resume, "start from the weights (and vocabulary) of FILE.safetensors");
  app.add_option("--sample", cfg.sample, "characters to generate after training")
      ->transform(non_negative)
      ->capture_default_str();
  app.add_option("--temperature", cfg.temperature, "sampling temperature (0: greedy, the likeliest character)")
      ->check(real(0, kHuge, ">= 0"))
      ->capture_default_str();
  app.add_option("--top-k", cfg.top_k, "sample among the k likeliest characters (0: all)")
      ->transform(non_negative)
      ->capture_default_str();
  app.add_flag("--expect-progress", cfg.expect_progress,
               "exit with 1 unless the last train-loss estimate is below the first (a smoke test)");
  app.add_option("--seed", cfg.seed, "seed of weights, dropout, batches and sampling")
      ->transform(CLI::Validator(
          [](std::string& v) -> std::string {
            std::uint64_t x = 0;
            const char* end = v.data() + v.size();
            const auto [last, ec] = std::from_chars(v.data(), end, x);
            if (ec != std::errc() || last != end) return "must be a decimal integer in [0, 2^64), got " + v;
            v = std::to_string(x);
            return {};
          },
          "[0, 2^64)"))
      ->capture_default_str();
  app.add_option("--offsets-out", cfg.offsets_out,
                 "write each training batch's offsets to FILE (i64, batch-size per step) for bench/torch_gpt.py "
                 "--offsets (one host read per step)");
  app.add_option("--dtype", cfg.dtype,
                 "f32; tf32: f32 with TF32 GEMMs on CUDA (set_allow_tf32); or bf16: mixed precision (autocast; f32 "
                 "master weights)")
      ->check(CLI::IsMember({"f32", "tf32", "bf16"}))
      ->capture_default_str();
  app.add_option("--gelu", cfg.gelu,
                 "GELU's form: none (exact, nanoGPT's nn.GELU()) or tanh (GPT-2's approximation, fused into the MLP's "
                 "GEMMs by fused_mlp)")
      ->check(CLI::IsMember({"none", "tanh"}))
      ->capture_default_str();
  app.add_flag("--graph", cfg.graph,
               "capture the training step once as a CUDA graph and replay it for every step after the first "
               "(CUDA only)");
  CLI11_PARSE(app, argc, argv);
  if (cfg.tiny) {
    // Flags given explicitly still win over the tiny defaults.
    auto set = [&](const char* flag, auto& field, auto value) {
      if (app.count(flag) == 0) field = value;
    };
    set("--n-layer", cfg.n_layer, std::int64_t{2});
    set("--n-head", cfg.n_head, std::int64_t{2});
    set("--n-embd", cfg.n_embd, std::int64_t{64});
    set("--block-size", cfg.block_size, std::int64_t{64});
    set("--batch-size", cfg.batch_size, std::int64_t{16});
    set("--iters", cfg.iters, std::int64_t{300});
    set("--eval-every", cfg.eval_every, std::int64_t{100});
    set("--eval-iters", cfg.eval_iters, std::int64_t{20});
    set("--dropout", cfg.dropout, 0.0);
    set("--lr", cfg.lr, 3e-3);
  }
  try {
    // The model's shape from the checkpoint first (flags left at their defaults take it).
    std::optional<io::TensorMap> resumed;
    std::optional<std::string> vocab_text;
    if (!cfg.resume.empty()) {
      const std::map<std::string, std::string> meta = io::safetensors_metadata(cfg.resume);
      if (!meta.count("vocab")) throw Error(ErrorKind::io, cfg.resume + " has no vocab metadata");
      vocab_text = meta.at("vocab");
      adopt(app, meta, cfg.resume, "--n-layer", "n_layer", 0, cfg.n_layer);
      adopt(app, meta, cfg.resume, "--n-head", "n_head", 1, cfg.n_head);
      adopt(app, meta, cfg.resume, "--n-embd", "n_embd", 1, cfg.n_embd);
      adopt(app, meta, cfg.resume, "--block-size", "block_size", 1, cfg.block_size);
      if (const auto g = meta.find("gelu"); g != meta.end()) {
        if (g->second != "none" && g->second != "tanh")
          throw Error(ErrorKind::io, cfg.resume + ": metadata gelu is neither none nor tanh: " + g->second);
        if (app.count("--gelu") != 0 && cfg.gelu != g->second)
          throw Error(ErrorKind::value, cfg.resume + " was saved with --gelu " + g->second + ", the run asks for " + cfg.gelu);
        cfg.gelu = g->second;
      }
      resumed = io::load_safetensors(cfg.resume);
    }
    if (cfg.n_embd % cfg.n_head != 0) throw Error(ErrorKind::value, "--n-embd must be a multiple of --n-head");
    Device dev = cfg.device == "auto" ? (cuda::is_available() ? Device::cuda(0) : Device::cpu()) : Device::parse(cfg.device);
    if (cfg.graph && !cfg.offsets_out.empty())
      throw Error(ErrorKind::value, "--offsets-out reads each step's offsets, which a --graph replay keeps on the device");
    check_writable("--save", cfg.save);
    check_writable("--csv", cfg.csv);
    check_writable("--offsets-out", cfg.offsets_out);
    if (cfg.graph && !dev.is_cuda())
      throw Error(ErrorKind::device, "--graph: CUDA graphs need a CUDA device, the run is on " + dev.str());
    manual_seed(cfg.seed);

    std::vector<std::uint32_t> corpus;
    if (cfg.iters > 0 || !vocab_text) corpus = decode_utf8(cfg.text.empty() ? fortunes_corpus() : read_file(cfg.text));
    const Vocab vocab = vocab_text ? Vocab::in_order(decode_utf8(*vocab_text), cfg.resume + "'s vocabulary")
                                   : Vocab::of(corpus);
    const auto vsize = static_cast<std::int64_t>(vocab.chars.size());

    set_allow_tf32(cfg.dtype == "tf32");
    auto model = std::make_shared<GptImpl>(cfg, vsize);
    nn::Module handle(model);
    init_weights(handle, cfg.n_layer);
    if (resumed) handle.load_state_dict(*resumed);
    handle.to(dev);
    std::printf("brrr gpt: %lld layers, %lld heads, %lld wide, block %lld, vocab %lld, %.2fM parameters on %s\n",
                static_cast<long long>(cfg.n_layer), static_cast<long long>(cfg.n_head),
                static_cast<long long>(cfg.n_embd), static_cast<long long>(cfg.block_size),
                static_cast<long long>(vsize), static_cast<double>(handle.num_parameters()) / 1e6, dev.str().c_str());

    if (cfg.iters > 0) {
      std::vector<std::int64_t> ids;
      ids.reserve(corpus.size());
      for (auto cp : corpus) {
        auto it = vocab.index.find(cp);
        if (it == vocab.index.end())
          throw Error(ErrorKind::value, "the text has the character " + Vocab::describe(cp) + ", outside " + cfg.resume +
                                            "'s vocabulary");
        ids.push_back(it->second);
      }
      const auto n_train = static_cast<std::int64_t>(0.9 * static_cast<double>(ids.size()));
      if (n_train <= cfg.block_size + 1 || static_cast<std::int64_t>(ids.size()) - n_train <= cfg.block_size + 1)
        throw Error(ErrorKind::value, "the text is too short for block size " + std::to_string(cfg.block_size));
      Tensor all = Tensor::from_vector(ids, {static_cast<std::int64_t>(ids.size())}).to(dev);
      Tensor train = all.narrow(0, 0, n_train), val = all.narrow(0, n_train, all.size(0) - n_train);
      std::printf("corpus: %zu characters (%lld train, %lld validation)\n", ids.size(), static_cast<long long>(n_train),
                  static_cast<long long>(all.size(0) - n_train));

      // Weight decay on matrices and embeddings, none on the layer norms' weights (nanoGPT).
      std::vector<Tensor> decay, no_decay;
      for (const Tensor& p : handle.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
      optim::AdamW opt_decay(decay, {.lr = cfg.lr, .betas = {0.9, cfg.beta2}, .weight_decay = cfg.weight_decay});
      optim::AdamW opt_plain(no_decay, {.lr = cfg.lr, .betas = {0.9, cfg.beta2}, .weight_decay = 0.0});
      const std::vector<Tensor> params = handle.parameters();

      std::FILE* csv = cfg.csv.empty() ? nullptr : std::fopen(cfg.csv.c_str(), "w");
      const auto csv_failed = [&] { throw Error(ErrorKind::io, "--csv: cannot write " + cfg.csv + ": " + std::strerror(errno)); };
      if (!cfg.csv.empty() && !csv) csv_failed();
      if (csv && (std::fprintf(csv, "step,train_loss,val_loss,lr,tokens_per_s\n") < 0 || std::fflush(csv) != 0)) csv_failed();
      using clock = std::chrono::steady_clock;
      auto t0 = clock::now();
      std::int64_t tokens_since = 0;
      double rate = 0, first_loss = 0, last_loss = 0;
      // One training step: a batch, forward, backward, clipping, both AdamW updates.
      // --offsets-out: every training batch's offsets, i64 little-endian, batch_size per step.
      std::ofstream offsets_file;
      if (!cfg.offsets_out.empty()) {
        offsets_file.open(cfg.offsets_out, std::ios::binary);
        if (!offsets_file)
          throw Error(ErrorKind::io, "--offsets-out: cannot write " + cfg.offsets_out + ": " + std::strerror(errno));
      }
      Tensor offsets;
      auto train_step = [&]() -> std::vector<Tensor> {
        auto [x, y] = batch(train, cfg.batch_size, cfg.block_size, &offsets);
        Tensor loss = lm_loss(*model, x, y, cfg.dtype == "bf16");
        opt_decay.zero_grad();
        opt_plain.zero_grad();
        loss.backward();
        (void)optim::clip_grad_norm_(params, cfg.grad_clip);
        opt_decay.step();
        opt_plain.step();
        return {loss};
      };
      std::unique_ptr<cuda::GraphedStep> graphed;
      for (std::int64_t it = 0; it <= cfg.iters; ++it) {
        const double lr = lr_at(cfg, it);
        if (it % cfg.eval_every == 0 || it == cfg.iters) {
          auto [tl, vl] = estimate(handle, *model, train, val, cfg);
          if (it == 0) first_loss = tl;
          last_loss = tl;
          std::printf("%sstep %lld: train loss %.4f, val loss %.4f\n", is_tty() ? "\n" : "", static_cast<long long>(it),
                      tl, vl);
          if (csv && (std::fprintf(csv, "%lld,%.6f,%.6f,%.6g,%.1f\n", static_cast<long long>(it), tl, vl, lr, rate) < 0 ||
                      std::fflush(csv) != 0))
            csv_failed();
          if (!std::isfinite(tl) || !std::isfinite(vl))
            throw Error(ErrorKind::value, "the loss estimate is not finite at step " + std::to_string(it) +
                                              ": training diverged (a lower --lr?)");
          t0 = clock::now();  // estimates are not training time
          tokens_since = 0;
        }
        if (it == cfg.iters) break;
        opt_decay.set_lr(lr);  // before a replay: its hooks read the learning rate
        opt_plain.set_lr(lr);
        Tensor loss;
        if (cfg.graph && it > 0) {
          if (!graphed) graphed = std::make_unique<cuda::GraphedStep>(dev, train_step, cuda::GraphedStepOptions{.warmup = 0});
          loss = (*graphed)()[0];
        } else {
          loss = train_step()[0];
        }
        if (offsets_file.is_open()) {  // one host read per step: only when asked for
          const std::vector<std::int64_t> o = offsets.to_host<std::int64_t>();
          offsets_file.write(reinterpret_cast<const char*>(o.data()), static_cast<std::streamsize>(o.size() * sizeof(o[0])));
          if (!offsets_file)
            throw Error(ErrorKind::io, "--offsets-out: cannot write " + cfg.offsets_out + ": " + std::strerror(errno));
        }
        tokens_since += cfg.batch_size * cfg.block_size;
        if ((it + 1) % cfg.log_every == 0) {
          const double l = loss.item<double>();  // the one sync of this interval
          if (!std::isfinite(l))
            throw Error(ErrorKind::value, "the training loss is " + std::to_string(l) + " at step " + std::to_string(it + 1) +
                                              ": training diverged (a lower --lr?)");
          const double s = std::chrono::duration<double>(clock::now() - t0).count();
          rate = s > 0 ? static_cast<double>(tokens_since) / s : 0;
          const int width = 30;
          const int filled = static_cast<int>(width * (it + 1) / cfg.iters);
          std::printf(is_tty() ? "\r[%s%s] %lld/%lld  loss %.4f  lr %.2e  %.0f tokens/s" :
                                 "[%s%s] %lld/%lld  loss %.4f  lr %.2e  %.0f tokens/s\n",
                      std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                      static_cast<long long>(it + 1), static_cast<long long>(cfg.iters), l, lr, rate);
          std::fflush(stdout);
        }
      }
      if (csv && std::fclose(csv) != 0) csv_failed();
      if (offsets_file.is_open()) {  // the last bytes reach the file here
        offsets_file.close();
        if (!offsets_file) throw Error(ErrorKind::io, "--offsets-out: cannot write " + cfg.offsets_out + ": " + std::strerror(errno));
      }
      if (dev.is_cuda())  // the figure torch_gpt.py prints (torch.cuda.max_memory_allocated)
        std::printf("peak memory %.0f MiB allocated, %.0f MiB reserved\n",
                    static_cast<double>(cuda::memory_stats(dev).peak_allocated_bytes) / (1 << 20),
                    static_cast<double>(cuda::memory_stats(dev).peak_reserved_bytes) / (1 << 20));
      if (cfg.expect_progress && !(last_loss < first_loss)) {
        std::fprintf(stderr, "gpt: the train loss did not fall (%.4f -> %.4f)\n", first_loss, last_loss);
        return 1;
      }
    }
    if (!cfg.save.empty()) {
      io::TensorMap tensors;
      for (auto& [name, t] : handle.state_dict()) tensors[name] = t;
      // The vocabulary in token order and the model's shape, for --resume (nanoGPT keeps the
      // same in its checkpoint's model_args).
      io::save_safetensors(cfg.save, tensors,
                           {{"vocab", vocab.text()},
                            {"format", "pt"},
                            {"n_layer", std::to_string(cfg.n_layer)},
                            {"n_head", std::to_string(cfg.n_head)},
                            {"n_embd", std::to_string(cfg.n_embd)},
                            {"block_size", std::to_string(cfg.block_size)},
                            {"gelu", cfg.gelu}});
      std::printf("saved %s (nanoGPT's parameter names; vocabulary in the metadata)\n", cfg.save.c_str());
    }
    if (cfg.sample > 0) {
      const std::int64_t start = vocab.index.count('\n') ? vocab.index.at('\n') : 0;
      std::vector<std::int64_t> out = generate(handle, *model, {start}, cfg.sample, cfg.temperature, cfg.top_k, dev);
      std::string text;
      for (std::size_t i = 1; i < out.size(); ++i) text += encode_utf8(vocab.chars[static_cast<std::size_t>(out[i])]);
      std::printf("---- sample (temperature %g, top-k %lld)\n", cfg.temperature, static_cast<long long>(cfg.top_k));
      std::fwrite(text.data(), 1, text.size(), stdout);  // (the text may hold NULs)
      std::printf("\n----\n");
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "gpt: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {  // the standard library's (std::bad_alloc, ...): a message, not std::terminate
    std::fprintf(stderr, "gpt: %s\n", e.what());
    return 1;
  }
  return 0;
}

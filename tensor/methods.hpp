// The one list of Tensor's op methods (LibTorch's spelling: x.pow(2), x.sum(1),
// x.softmax(-1)). Each entry X(name, (parameters), (arguments)) becomes
//   - a member template of Tensor (tensor/core.cppm):  x.name(parameters)
//   - a static of TensorMethods (modules/ops.cppm):      brrr::name(x, arguments)
// so a method is the free function of the same name with the tensor first, and the two sides
// cannot drift: an entry without a matching free function fails to compile. `S` is the type
// of number operands (brrr::Scalar, which brrr.tensor only knows as TensorMethods::Scalar).
// Documentation: the free functions' (modules/ops.cppm). Plain header, std only: included by
// interface units and installed with them.
#pragma once

// clang-format off
#define BRRR_TENSOR_METHODS(X, S)                                                            \
  /* elementwise binary: broadcast, promote */                                               \
  X(add, (const Tensor& other), (other))                                                      \
  X(add, (S other), (other))                                                                  \
  X(sub, (const Tensor& other), (other))                                                      \
  X(sub, (S other), (other))                                                                  \
  X(mul, (const Tensor& other), (other))                                                      \
  X(mul, (S other), (other))                                                                  \
  X(div, (const Tensor& other), (other))                                                      \
  X(div, (S other), (other))                                                                  \
  X(div, (const Tensor& other, std::string_view rounding_mode), (other, rounding_mode))       \
  X(floor_divide, (const Tensor& other), (other))                                             \
  X(floor_divide, (S other), (other))                                                         \
  X(remainder, (const Tensor& other), (other))                                                \
  X(remainder, (S other), (other))                                                            \
  X(fmod, (const Tensor& other), (other))                                                     \
  X(fmod, (S other), (other))                                                                 \
  X(pow, (const Tensor& exponent), (exponent))                                                \
  X(pow, (S exponent), (exponent))                                                            \
  X(maximum, (const Tensor& other), (other))                                                  \
  X(minimum, (const Tensor& other), (other))                                                  \
  /* comparisons -> bool */                                                                   \
  X(eq, (const Tensor& other), (other))                                                       \
  X(eq, (S other), (other))                                                                   \
  X(ne, (const Tensor& other), (other))                                                       \
  X(ne, (S other), (other))                                                                   \
  X(lt, (const Tensor& other), (other))                                                       \
  X(lt, (S other), (other))                                                                   \
  X(le, (const Tensor& other), (other))                                                       \
  X(le, (S other), (other))                                                                   \
  X(gt, (const Tensor& other), (other))                                                       \
  X(gt, (S other), (other))                                                                   \
  X(ge, (const Tensor& other), (other))                                                       \
  X(ge, (S other), (other))                                                                   \
  /* elementwise unary */                                                                     \
  X(neg, (), ())                                                                              \
  X(abs, (), ())                                                                              \
  X(exp, (), ())                                                                              \
  X(log, (), ())                                                                              \
  X(log1p, (), ())                                                                            \
  X(sqrt, (), ())                                                                             \
  X(rsqrt, (), ())                                                                            \
  X(tanh, (), ())                                                                             \
  X(sigmoid, (), ())                                                                          \
  X(relu, (), ())                                                                             \
  X(gelu, (const std::string& approximate = "none"), (approximate))                           \
  X(silu, (), ())                                                                             \
  X(sin, (), ())                                                                              \
  X(cos, (), ())                                                                              \
  X(erf, (), ())                                                                              \
  X(sign, (), ())                                                                             \
  X(clamp, (std::optional<double> min, std::optional<double> max = std::nullopt), (min, max)) \
  X(clamp_min, (double min), (min))                                                           \
  X(clamp_max, (double max), (max))                                                           \
  /* reductions */                                                                            \
  X(sum, (), ())                                                                              \
  X(sum, (DimList dims, bool keepdim = false), (dims, keepdim))                               \
  X(mean, (), ())                                                                             \
  X(mean, (DimList dims, bool keepdim = false), (dims, keepdim))                              \
  X(max, (), ())                                                                              \
  X(max, (std::int64_t dim, bool keepdim = false), (dim, keepdim))                            \
  X(min, (), ())                                                                              \
  X(min, (std::int64_t dim, bool keepdim = false), (dim, keepdim))                            \
  X(amax, (DimList dims, bool keepdim = false), (dims, keepdim))                              \
  X(amin, (DimList dims, bool keepdim = false), (dims, keepdim))                              \
  X(argmax, (), ())                                                                           \
  X(argmax, (std::int64_t dim, bool keepdim = false), (dim, keepdim))                         \
  X(argmin, (), ())                                                                           \
  X(argmin, (std::int64_t dim, bool keepdim = false), (dim, keepdim))                         \
  X(var, (DimList dims = {}, double correction = 1, bool keepdim = false),                    \
    (dims, correction, keepdim))                                                              \
  X(logsumexp, (DimList dims, bool keepdim = false), (dims, keepdim))                         \
  /* linear algebra, softmax */                                                               \
  X(matmul, (const Tensor& other), (other))                                                   \
  X(mm, (const Tensor& other), (other))                                                       \
  X(softmax, (std::int64_t dim), (dim))                                                       \
  X(log_softmax, (std::int64_t dim), (dim))                                                   \
  /* indexing, masking, triangles */                                                          \
  X(index_select, (std::int64_t dim, const Tensor& index), (dim, index))                      \
  X(gather, (std::int64_t dim, const Tensor& index), (dim, index))                            \
  X(scatter_add, (std::int64_t dim, const Tensor& index, const Tensor& src), (dim, index, src)) \
  X(scatter, (std::int64_t dim, const Tensor& index, const Tensor& src), (dim, index, src))   \
  X(scatter, (std::int64_t dim, const Tensor& index, S value), (dim, index, value))           \
  X(scatter_reduce, (std::int64_t dim, const Tensor& index, const Tensor& src, std::string_view reduce, \
    bool include_self = true), (dim, index, src, reduce, include_self))                       \
  X(index_add, (std::int64_t dim, const Tensor& index, const Tensor& source, S alpha = 1),    \
    (dim, index, source, alpha))                                                              \
  X(index_copy, (std::int64_t dim, const Tensor& index, const Tensor& source), (dim, index, source)) \
  X(index_fill, (std::int64_t dim, const Tensor& index, S value), (dim, index, value))        \
  X(nonzero, (), ())                                                                          \
  X(masked_select, (const Tensor& mask), (mask))                                              \
  X(masked_scatter, (const Tensor& mask, const Tensor& source), (mask, source))               \
  X(masked_fill, (const Tensor& mask, S value), (mask, value))                                \
  X(tril, (std::int64_t diagonal = 0), (diagonal))                                            \
  X(triu, (std::int64_t diagonal = 0), (diagonal))                                            \
  /* splitting */                                                                             \
  X(split, (std::int64_t split_size, std::int64_t dim = 0), (split_size, dim))                \
  X(chunk, (std::int64_t chunks, std::int64_t dim = 0), (chunks, dim))

/// In place, with PyTorch's rules (ops/inplace.cpp); they return the tensor itself.
#define BRRR_TENSOR_INPLACE_METHODS(X, S)                                                    \
  X(add_, (const Tensor& other), (other))                                                     \
  X(add_, (S other), (other))                                                                 \
  X(sub_, (const Tensor& other), (other))                                                     \
  X(sub_, (S other), (other))                                                                 \
  X(mul_, (const Tensor& other), (other))                                                     \
  X(mul_, (S other), (other))                                                                 \
  X(div_, (const Tensor& other), (other))                                                     \
  X(div_, (S other), (other))                                                                 \
  X(scatter_, (std::int64_t dim, const Tensor& index, const Tensor& src), (dim, index, src))  \
  X(scatter_, (std::int64_t dim, const Tensor& index, S value), (dim, index, value))          \
  X(scatter_add_, (std::int64_t dim, const Tensor& index, const Tensor& src), (dim, index, src)) \
  X(scatter_reduce_, (std::int64_t dim, const Tensor& index, const Tensor& src, std::string_view reduce, \
    bool include_self = true), (dim, index, src, reduce, include_self))                       \
  X(index_add_, (std::int64_t dim, const Tensor& index, const Tensor& source, S alpha = 1),   \
    (dim, index, source, alpha))                                                              \
  X(index_copy_, (std::int64_t dim, const Tensor& index, const Tensor& source), (dim, index, source)) \
  X(index_fill_, (std::int64_t dim, const Tensor& index, S value), (dim, index, value))       \
  X(masked_fill_, (const Tensor& mask, S value), (mask, value))                               \
  X(masked_scatter_, (const Tensor& mask, const Tensor& source), (mask, source))
// clang-format on

// (self, a, b) from (a, b) and (self) from (): the parameter and argument lists with the
// tensor prepended, for TensorMethods.
#define BRRR_METHOD_SELF_PARAMS(...) (const Tensor& self __VA_OPT__(, ) __VA_ARGS__)
#define BRRR_METHOD_SELF_ARGS(...) (self __VA_OPT__(, ) __VA_ARGS__)

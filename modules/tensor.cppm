// brrr.tensor — the core model and the autograd graph every tensor carries. Two partitions:
//   brrr.tensor:core  (tensor/core.cppm)    errors, dtypes, devices, layouts, storage, the
//                                            Tensor handle, factories, views, conversions
//   brrr.tensor:graph (autograd/graph.cppm) graph nodes, saved tensors, grad mode, record(),
//                                            the backward engine
// It imports no other brrr module but the internal brrr.backend (in implementation units).
export module brrr.tensor;
export import :core;
export import :graph;

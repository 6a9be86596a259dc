// Pack<T, V>: V elements of T moved as one aligned access (16 bytes at most: one vector load
// or store per thread), shared by the elementwise and copy kernels.
#pragma once

namespace brrr::kernels {

template <class T, int V> struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

}  // namespace brrr::kernels

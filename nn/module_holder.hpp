// BRRR_MODULE(Name): LibTorch's TORCH_MODULE for brrr. Given `struct NameImpl :
// brrr::nn::ModuleImpl { ... }`, declares `Name`, a brrr::nn::ModuleHolder<NameImpl> (a
// handle with `net->member` access; see modules/nn.cppm). A macro cannot travel through
// `import brrr;`, so this plain header carries it; the alias it writes can be spelled by hand
// too: `using Name = brrr::nn::ModuleHolder<NameImpl>;`.
#pragma once

#define BRRR_MODULE(Name) using Name = ::brrr::nn::ModuleHolder<Name##Impl>

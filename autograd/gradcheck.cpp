module;
module brrr.autograd;

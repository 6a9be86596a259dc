module;
module brrr.optim;

module;
module brrr.ops;

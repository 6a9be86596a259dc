module;
module brrr.testing;

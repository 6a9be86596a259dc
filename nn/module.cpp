module;
module brrr.nn;

module;
module brrr.io;

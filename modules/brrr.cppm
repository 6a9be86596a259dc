// brrr — everything a user program needs: `import brrr;`.
export module brrr;
export import brrr.tensor;
export import brrr.cuda;
export import brrr.ops;
export import brrr.autograd;
export import brrr.testing;
export import brrr.nn;
export import brrr.optim;
export import brrr.io;
export import brrr.data;
export import brrr.dist;

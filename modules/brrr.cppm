// brrr — everything a user program needs: `import brrr;`.
export module brrr;
export import brrr.tensor;
export import brrr.cuda;

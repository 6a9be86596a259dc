"""PyTorch twin of examples/gpt (nanoGPT's shakespeare-char model): the same model (nanoGPT's
GPT with bias=False, parameter names included), corpus processing (the fortunes files sorted
by name without their '%' lines, or --text; characters decoded as gpt.cpp does; 90/10 split),
schedule (100 warm-up steps, cosine 1e-3 -> 1e-4), AdamW (betas 0.9/0.99, weight decay 0.1 on
matrices and embeddings, fused on CUDA), clipping 1.0 and loss estimates, starting from the
initial weights brrr wrote:

    examples/gpt --iters 0 --save init.safetensors          # brrr's initial weights + vocabulary
    examples/gpt --resume init.safetensors --csv brrr.csv    # brrr trains from them
    python3 bench/torch_gpt.py --init init.safetensors --csv torch.csv [--bf16] [--compile] [--gelu tanh]

By default the batch offsets are PyTorch's own draws (torch.randint with --seed): the two loss
curves then come from the same start and the same distribution of batches. With
`examples/gpt --offsets-out off.bin` and `--offsets off.bin` here, every training step uses the
batch brrr used (the estimates still draw their own), so the curves compare step by step. Prints ms/step (CUDA events, steps between estimates) and tokens/s.
"""
import argparse, math, os, time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file


def decode_utf8(data: bytes):
    """gpt.cpp's decoder: UTF-8, a byte that starts no valid sequence stands for itself (Latin-1)."""
    out, i, n = [], 0, len(data)
    while i < n:
        c = data[i]
        k = 0 if c < 0x80 else 1 if c >> 5 == 6 else 2 if c >> 4 == 14 else 3 if c >> 3 == 30 else -1
        ok = k >= 0 and i + k < n + (1 if k == 0 else 0)
        cp = c if k <= 0 else c & (0x3F >> k)
        j = 1
        while ok and j <= k:
            d = data[i + j]
            ok = d >> 6 == 2
            cp = (cp << 6) | (d & 0x3F)
            j += 1
        if ok and k > 0:  # overlong forms, surrogates, past U+10FFFF: not valid (RFC 3629)
            ok = cp >= (0, 0x80, 0x800, 0x10000)[k] and cp <= 0x10FFFF and not 0xD800 <= cp <= 0xDFFF
        if not ok:
            cp, k = c, 0
        out.append(cp)
        i += k + 1
    return out


def fortunes_corpus():
    d = "/usr/share/games/fortunes"
    names = sorted(f for f in os.listdir(d)
                   if os.path.isfile(os.path.join(d, f)) and not os.path.islink(os.path.join(d, f))
                   and not f.endswith((".dat", ".u8")))
    text = b""
    for f in names:
        data = open(os.path.join(d, f), "rb").read()
        lines = data.split(b"\n")
        if data.endswith(b"\n"):
            lines = lines[:-1]
        text += b"".join(line + b"\n" for line in lines if line != b"%")
    return text


class LayerNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, None, 1e-5)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=False)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=False)
        self.h, self.p = c.n_head, c.dropout

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = self.c_attn(x).split(e, dim=2)
        q, k, v = (z.view(b, t, self.h, e // self.h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0, is_causal=True)
        return F.dropout(self.c_proj(y.transpose(1, 2).reshape(b, t, e)), self.p, self.training)


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=False)
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=False)
        self.p, self.gelu = c.dropout, c.gelu

    def forward(self, x):
        return F.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate=self.gelu)), self.p, self.training)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1, self.attn, self.ln_2, self.mlp = LayerNorm(c.n_embd), Attention(c), LayerNorm(c.n_embd), Mlp(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c, vocab):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, c.n_embd), wpe=nn.Embedding(c.block_size, c.n_embd),
            h=nn.ModuleList([Block(c) for _ in range(c.n_layer)]), ln_f=LayerNorm(c.n_embd)))
        self.lm_head = nn.Linear(c.n_embd, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied
        self.p = c.dropout

    def forward(self, idx):
        t = idx.shape[1]
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(t, device=idx.device))
        x = F.dropout(x, self.p, self.training)
        for b in self.transformer.h:
            x = b(x)
        return self.lm_head(self.transformer.ln_f(x))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", required=True, help="brrr's checkpoint (examples/gpt --iters 0 --save FILE)")
    ap.add_argument("--text", help="a UTF-8 file (default: the fortunes package's files)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--n-head", type=int, default=6)
    ap.add_argument("--n-embd", type=int, default=384)
    ap.add_argument("--block-size", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--dropout", type=float, default=0.2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--iters", type=int, default=5000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--eval-iters", type=int, default=200)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--csv")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--offsets", help="brrr's training batch offsets (examples/gpt --offsets-out FILE)")
    ap.add_argument("--gelu", choices=["none", "tanh"], default="none", help="GELU's form (F.gelu's approximate)")
    ap.add_argument("--bf16", action="store_true", help="torch.autocast(bfloat16)")
    ap.add_argument("--tf32", action="store_true", help="TF32 matmuls (f32 otherwise)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    c = ap.parse_args()
    torch.manual_seed(c.seed)
    dev = torch.device(c.device)
    torch.backends.cuda.matmul.allow_tf32 = c.tf32
    torch.backends.cudnn.allow_tf32 = c.tf32

    with safe_open(c.init, "pt") as f:
        vocab = decode_utf8(f.metadata()["vocab"].encode("utf-8"))
    index = {cp: i for i, cp in enumerate(vocab)}
    corpus = decode_utf8(open(c.text, "rb").read() if c.text else fortunes_corpus())
    data = torch.tensor([index[cp] for cp in corpus], dtype=torch.long, device=dev)
    n_train = int(0.9 * len(corpus))
    train, val = data[:n_train], data[n_train:]

    model = GPT(c, len(vocab))
    state = load_file(c.init)
    model.load_state_dict(state, strict=True)
    model.to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    plain = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": plain, "weight_decay": 0.0}],
                            lr=c.lr, betas=(0.9, 0.99), fused=dev.type == "cuda")
    fwd = torch.compile(model) if c.compile else model

    given = None
    if c.offsets:
        given = torch.from_numpy(np.fromfile(c.offsets, dtype="<i8").reshape(-1, c.batch_size, 1)).to(dev)
        if len(given) < c.iters:
            raise SystemExit(f"--offsets: {c.offsets} holds {len(given)} steps, --iters is {c.iters}")

    def batch(split, step=None):
        if step is not None and given is not None:
            idx = given[step] + torch.arange(c.block_size, device=dev)
            return split[idx], split[idx + 1]
        ix = torch.randint(len(split) - c.block_size, (c.batch_size, 1), device=dev)
        idx = ix + torch.arange(c.block_size, device=dev)
        return split[idx], split[idx + 1]

    def loss_of(x, y):
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=c.bf16):
            logits = fwd(x)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))

    def lr_at(it):
        if it < c.warmup:
            return c.lr * (it + 1) / (c.warmup + 1)
        if it >= c.iters:
            return c.min_lr
        r = (it - c.warmup) / max(c.iters - c.warmup, 1)
        return c.min_lr + 0.5 * (1 + math.cos(math.pi * r)) * (c.lr - c.min_lr)

    @torch.no_grad()
    def estimate():
        model.eval()
        out = [torch.stack([loss_of(*batch(s)) for _ in range(c.eval_iters)]).mean().item() for s in (train, val)]
        model.train()
        return out

    csv = open(c.csv, "w") if c.csv else None
    if csv:
        csv.write("step,train_loss,val_loss,lr,tokens_per_s\n")
    rate, t0, tokens = 0.0, time.perf_counter(), 0
    step_ms = []
    for it in range(c.iters + 1):
        lr = lr_at(it)
        if it % c.eval_every == 0 or it == c.iters:
            tl, vl = estimate()
            print(f"step {it}: train loss {tl:.4f}, val loss {vl:.4f}")
            if csv:
                csv.write(f"{it},{tl:.6f},{vl:.6f},{lr:.6g},{rate:.1f}\n")
                csv.flush()
            t0, tokens = time.perf_counter(), 0
        if it == c.iters:
            break
        for g in opt.param_groups:
            g["lr"] = lr
        if dev.type == "cuda":
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
        x, y = batch(train, it)
        loss = loss_of(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if dev.type == "cuda":
            e.record()
            step_ms.append((s, e))
        tokens += c.batch_size * c.block_size
        if (it + 1) % c.log_every == 0:
            l = loss.item()
            rate = tokens / max(time.perf_counter() - t0, 1e-9)
            print(f"{it + 1}/{c.iters}  loss {l:.4f}  lr {lr:.2e}  {rate:.0f} tokens/s")
    if step_ms:
        torch.cuda.synchronize()
        ms = sorted(s.elapsed_time(e) for s, e in step_ms[10:] or step_ms)
        print(f"median step {ms[len(ms) // 2]:.2f} ms, peak memory {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()

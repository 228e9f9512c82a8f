"""PyTorch twin of bench/gpt_step.cpp: one GPT-2 training step (next-token cross entropy, backward,
AdamW lr 1e-4) with GPT-2's architecture (pre-norm blocks, causal attention through
F.scaled_dot_product_attention, or a masked softmax before PyTorch 2.0, GELU tanh, the LM head tied
to the token embedding, N(0, 0.02) initialisation, dropout off), with the same sizes and flags;
eager, or with --compile through torch.compile; --amp: bfloat16 autocast (--amp-dtype float16: float16);
--device cuda: on the GPU. Threads: --threads (torch.set_num_threads), else PyTorch's default.
Prints: "torch-<mode>[-cuda] threads <n> ms/step <median> tokens/s <rate> loss <first> -> <last>"."""
import argparse
import resource
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn


def attention(q, k, v):
    # Several queries come with no past (a training step, a prompt): causal mask. One query (a
    # decode step of bench/torch_generate.py) may see every key, so it needs no mask, as in HF's GPT-2.
    causal = q.shape[-2] > 1
    if hasattr(F, "scaled_dot_product_attention"):  # PyTorch 2.0 and later
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    scores = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
    if causal:
        t = q.shape[-2]
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return scores.softmax(dim=-1) @ v


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.c_attn, self.c_proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.c_fc, self.mlp_proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x, past=None):
        """The block's output and its (keys, values), after `past`'s when given (a KV cache)."""
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if past is not None:  # (B, heads, past length, head_dim) each
            k, v = torch.cat((past[0], k), dim=-2), torch.cat((past[1], v), dim=-2)
        y = attention(q, k, v)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")), (k, v)


class GPT(nn.Module):
    def __init__(self, vocab, tokens, width, layers, heads):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(tokens, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)

    def loss(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for block in self.h:
            x, _ = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in [("batch", 8), ("tokens", 128), ("layers", 4), ("width", 256), ("heads", 4), ("vocab", 50257),
                          ("warmup", 2), ("steps", 5), ("threads", 0)]:
        parser.add_argument("--" + name, type=int, default=default)
    parser.add_argument("--amp", action="store_true", help="16-bit autocast around the forward (torch.autocast)")
    parser.add_argument("--amp-dtype", choices=["bfloat16", "float16"], default="bfloat16", help="the autocast dtype")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--compile", action="store_true", help="time torch.compile(step) instead of eager")
    o = parser.parse_args()
    if o.threads > 0:
        torch.set_num_threads(o.threads)
    torch.manual_seed(0)
    device = torch.device(o.device)
    amp_dtype = getattr(torch, o.amp_dtype)
    model = GPT(o.vocab, o.tokens, o.width, o.layers, o.heads).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, o.vocab, (o.batch, o.tokens)).to(device)

    def step():
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=amp_dtype, enabled=o.amp):
            loss = model.loss(ids)
        loss.backward()
        optimizer.step()
        return loss.item()

    run = torch.compile(step) if o.compile else step
    first = last = 0.0
    for _ in range(o.warmup):
        first = run()
    seconds = []
    for i in range(o.steps):
        start = time.perf_counter()
        last = run()
        seconds.append(time.perf_counter() - start)
        if o.warmup == 0 and i == 0:
            first = last
    median = statistics.median(seconds)
    mode = ("compile" if o.compile else "eager") + ("" if not o.amp else "-amp-float16" if o.amp_dtype == "float16" else "-amp")
    mode += "-cuda" if device.type == "cuda" else ""
    print(f"torch-{mode} threads {torch.get_num_threads()} ms/step {median * 1e3:.1f} "
          f"tokens/s {o.batch * o.tokens / median:.0f} loss {first:.4f} -> {last:.4f} "
          f"peak_rss_mb {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}")


if __name__ == "__main__":
    main()

"""PyTorch twin of bench/generate_bench.cpp: greedy text generation with a GPT-2 of random weights
(pre-norm blocks, fused c_attn, GELU tanh, learned positions, the LM head tied to the token
embedding, N(0, 0.02) initialisation, dropout off, eval, inference mode), timing the first token
(the prompt's step, with its argmax) and the decode tokens/s of the remaining --new - 1 steps.
--mode cache keeps each layer's keys/values the way Hugging Face's GPT-2 does with past_key_values
(torch.cat of the new token's key/value onto the past); --mode nocache reruns every whole sequence
each step. --model gpt_train (4 layers, width 256, 4 heads, 256 tokens, 128 positions) or gpt2
(GPT-2 small: 12 layers, 768, 12 heads, vocabulary 50257, 1024 positions). Threads: --threads
(torch.set_num_threads, one inter-op thread), else PyTorch's default.
Prints: "generate <model> torch-<mode> batch <b> prompt <p> new <n> ttft_ms <median> decode_tokens_per_s <median>"."""
import argparse
import time

import torch

import torch_gpt_step  # the model, beside this file

CONFIGS = {  # vocab, positions, width, layers, heads: the same shapes as generate_bench's --model
    "gpt_train": (256, 128, 256, 4, 4),
    "gpt2": (50257, 1024, 768, 12, 12),
}


class GPT(torch_gpt_step.GPT):
    """torch_gpt_step's GPT-2 (the same modules and initialisation), run step by step."""

    def forward(self, ids, past=None, all_logits=False):
        """Logits of each row's last token (B, vocab) and each layer's (keys, values)."""
        start = 0 if past is None else past[0][0].shape[-2]  # new tokens sit after the past
        x = self.wte(ids) + self.wpe(torch.arange(start, start + ids.shape[1]))
        presents = []
        for i, block in enumerate(self.h):
            x, kv = block(x, None if past is None else past[i])
            presents.append(kv)
        x = self.ln_f(x)
        # nocache projects every position and then picks the last, as generate_bench's nocache
        # (and HF without a cache) do; the cached steps project only the last position.
        logits = (x @ self.wte.weight.t())[:, -1] if all_logits else x[:, -1] @ self.wte.weight.t()
        return logits, presents


def generate(model, prompts, new_tokens, cache):
    """Greedy tokens (B, new_tokens), seconds to the first token, seconds of the rest."""
    start = time.perf_counter()
    logits, past = model(prompts, all_logits=not cache)
    tokens = [logits.argmax(dim=-1)]
    first = time.perf_counter() - start
    sequences = torch.cat((prompts, tokens[0][:, None]), dim=1)
    decoding = time.perf_counter()
    for _ in range(new_tokens - 1):
        if cache:
            logits, past = model(tokens[-1][:, None], past)
        else:
            logits, _ = model(sequences, all_logits=True)
        tokens.append(logits.argmax(dim=-1))
        sequences = torch.cat((sequences, tokens[-1][:, None]), dim=1)
    return torch.stack(tokens, dim=1), first, time.perf_counter() - decoding


def build(model_name, batch, prompt):
    """The seeded model and (B, prompt) random prompt ids."""
    torch.manual_seed(0)
    config = CONFIGS[model_name]
    model = GPT(*config).eval()
    return model, torch.randint(0, config[0], (batch, prompt))


def median(values):  # the element generate_bench's median picks (the upper one for even counts)
    return sorted(values)[len(values) // 2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(CONFIGS), default="gpt_train")
    parser.add_argument("--mode", choices=["cache", "nocache"], default="cache")
    for name, default, help in [("batch", 1, "sequences generated side by side"), ("prompt", 32, "prompt tokens per sequence"),
                                ("new", 32, "tokens generated per sequence (at least 2)"),
                                ("runs", 3, "timed generations (the median counts)"), ("threads", 0, "0: PyTorch's default")]:
        parser.add_argument("--" + name, type=int, default=default, help=help)
    o = parser.parse_args()
    if min(o.batch, o.prompt, o.runs) < 1 or o.new < 2:
        parser.error("--batch, --prompt and --runs must be at least 1, --new at least 2")
    if o.prompt + o.new > CONFIGS[o.model][1]:
        parser.error(f"--prompt + --new exceed the model's {CONFIGS[o.model][1]} positions")
    if o.threads > 0:
        torch.set_num_threads(o.threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # refused once inter-op work has started; harmless here
            pass
    model, prompts = build(o.model, o.batch, o.prompt)
    first, rate = [], []
    with torch.inference_mode():
        generate(model, prompts, o.new, o.mode == "cache")  # warm-up: allocator and kernel caches
        for _ in range(o.runs):
            _, ttft, decode = generate(model, prompts, o.new, o.mode == "cache")
            first.append(ttft * 1e3)
            rate.append(o.batch * (o.new - 1) / decode)
    print(f"generate {o.model} torch-{o.mode} batch {o.batch} prompt {o.prompt} new {o.new} "
          f"ttft_ms {median(first):.2f} decode_tokens_per_s {median(rate):.1f}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
# The peer of bench_dapo_step_gpu on one GPU: what a DAPO step costs when it is
# built from HF transformers generate() and a PyTorch update, as TRL-style
# single-GPU trainers do it. The same load as the dapo benchmark: P prompts
# x n samples of L new tokens (no EOS: min_new_tokens = L), sampling at T = 1,
# then old log-probs (a no-grad forward) and one pass of the update over the
# same sequences in micro-batches, with gradient checkpointing and a fused
# AdamW step per mini-batch. Random Qwen2.5- or Qwen3-shaped bf16 weights (the shapes
# of shapes.py beside this script, which python3 finds there from any
# working directory). Prompts are random ids of
# `--prompt-len` tokens (the dapo run's demo prompts are ~40 tokens).
# Prints one JSON line: seconds per phase and tokens/s per GPU.
#   python3 bench/peers/peer_dapo_step.py 1.5b [--prompts 32 --n 8 --len 512 --prompt-len 40 --micro 16]
import argparse, json, time

import torch

from shapes import SHAPES, hf_classes

ap = argparse.ArgumentParser()
ap.add_argument("model", choices=sorted(SHAPES))
ap.add_argument("--prompts", type=int, default=32)
ap.add_argument("--n", type=int, default=8)
ap.add_argument("--len", type=int, default=512)
ap.add_argument("--prompt-len", type=int, default=40)
ap.add_argument("--micro", type=int, default=16, help="sequences per micro-batch of the update")
a = ap.parse_args()

Config, Model = hf_classes(SHAPES[a.model])
cfg = Config(**SHAPES[a.model])
cfg._attn_implementation = "sdpa"
torch.manual_seed(0)
with torch.device("cuda"):
    model = Model(cfg).to(torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=True)
prompts = torch.randint(0, 150000, (a.prompts, a.prompt_len), device="cuda")
batch = prompts.repeat_interleave(a.n, dim=0)  # n samples of each prompt


def sync_time():
    torch.cuda.synchronize()
    return time.time()


def generate():
    model.eval()
    model.gradient_checkpointing_disable()
    with torch.no_grad():
        return model.generate(batch, max_new_tokens=a.len, min_new_tokens=a.len, do_sample=True, temperature=1.0,
                              top_p=1.0, top_k=0, pad_token_id=0)


def token_logprobs(seqs):
    logits = model(seqs).logits[:, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, seqs[:, 1:, None]).squeeze(-1)


def old_logprobs(seqs):
    model.eval()
    with torch.no_grad():
        return [token_logprobs(seqs[i:i + a.micro]) for i in range(0, len(seqs), a.micro)]


def update(seqs, old):
    # DAPO's clipped token-level objective over the response tokens, two
    # mini-batches (as the dapo run's ppo_mini_batch_size = prompts / 2).
    model.train()
    model.gradient_checkpointing_enable()
    adv = torch.randn(len(seqs), device="cuda")
    mini = len(seqs) // 2
    for m in range(0, len(seqs), mini):
        for i in range(m, m + mini, a.micro):
            lp = token_logprobs(seqs[i:i + a.micro])[:, a.prompt_len - 1:]
            ratio = torch.exp(lp - old[i // a.micro][:, a.prompt_len - 1:])
            A = adv[i:i + a.micro, None]
            loss = -torch.min(ratio * A, ratio.clamp(0.8, 1.28) * A).mean() * (a.micro / mini)
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def step():
    t0 = sync_time()
    seqs = generate()
    t1 = sync_time()
    old = old_logprobs(seqs)
    t2 = sync_time()
    update(seqs, old)
    t3 = sync_time()
    return seqs, (t1 - t0, t2 - t1, t3 - t2, t3 - t0)


step()  # warm-up
seqs, (gen_s, old_s, upd_s, step_s) = step()
generated = a.prompts * a.n * a.len
trained = seqs.numel()
print(json.dumps({
    "peer": "hf_generate+torch_update", "model": a.model, "gpu": torch.cuda.get_device_name(), "gpus": 1,
    "prompts": a.prompts, "n": a.n, "response_len": a.len, "prompt_len": a.prompt_len,
    "gen_s": round(gen_s, 3), "old_log_prob_s": round(old_s, 3), "update_actor_s": round(upd_s, 3),
    "step_s": round(step_s, 3), "generated_tokens_per_step": generated, "trained_tokens_per_step": trained,
    "tok_s_per_gpu": round((generated + trained) / step_s), "gen_tok_s": round(generated / gen_s),
    "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}), flush=True)

#!/usr/bin/env python3
# Training-step peer on one GPU, for side-by-side runs with dapo's own benchmark:
# a PyTorch update step as TRL / verl-FSDP run it on one GPU - bf16 weights, SDPA attention,
# token log-probs of MB sequences of S tokens, a token-mean loss, backward, fused AdamW.
# Random Qwen2.5- or Qwen3-shaped model. MFU counts 6*params*tokens plus causal attention, against
# the card's dense bf16 peak (989 TFLOP/s for H100/H200 SXM).
# Usage: python3 bench/peers/peer_train_step.py 1.5b [--seq 4096] [--mb 4] [--no-ckpt]
import argparse, json, time, torch
from shapes import SHAPES, hf_classes

ap = argparse.ArgumentParser()
ap.add_argument("model", choices=sorted(SHAPES)); ap.add_argument("--seq", type=int, default=4096)
ap.add_argument("--mb", type=int, default=4); ap.add_argument("--no-ckpt", action="store_true")
a = ap.parse_args()
Config, Model = hf_classes(SHAPES[a.model])
cfg = Config(**SHAPES[a.model]); cfg._attn_implementation = "sdpa"
torch.manual_seed(0)
with torch.device("cuda"):
    model = Model(cfg).to(torch.bfloat16)
n_params = sum(p.numel() for p in model.parameters())
model.train()
if not a.no_ckpt: model.gradient_checkpointing_enable()
opt = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=True)
x = torch.randint(0, 150000, (a.mb, a.seq), device="cuda")
def step():
    logits = model(x).logits[:, :-1].float()
    lp = torch.log_softmax(logits, -1).gather(-1, x[:, 1:, None]).squeeze(-1)
    (-lp.mean()).backward(); opt.step(); opt.zero_grad(set_to_none=True)
for _ in range(2): step()
torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); t = time.time(); n = 3
for _ in range(n): step()
torch.cuda.synchronize(); dt = (time.time() - t) / n
tokens = a.mb * a.seq
L, H = cfg.num_hidden_layers, cfg.num_attention_heads * getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads)
flops = 6 * n_params * tokens + 6 * 2 * L * H * a.seq * a.seq / 2 * a.mb
print(json.dumps({"peer": "torch_train_step", "model": a.model, "gpu": torch.cuda.get_device_name(),
                  "params": n_params, "tokens": tokens, "grad_ckpt": not a.no_ckpt, "s": dt,
                  "tok_s": tokens / dt, "tflops": flops / dt / 1e12, "mfu": flops / dt / 989e12,
                  "peak_gib": torch.cuda.max_memory_allocated() / 2**30}), flush=True)

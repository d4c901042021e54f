#!/usr/bin/env python3
# Generation peers on one GPU, for side-by-side runs with dapo's own benchmark:
# HF transformers generate() with its default (dynamic) KV cache, and with a static
# KV cache, which transformers compiles with torch.compile (the PyTorch-native fast path).
# Random Qwen2.5- or Qwen3-shaped model in bf16, batch B, prompt P tokens, G new tokens, sampling T=1.
# Usage (on the GPU machine, its python3 has torch + transformers):
#   python3 bench/peers/peer_generate.py 1.5b [--batch 128] [--prompt 256] [--new 512] [--no-static]
# Prints one JSON line. The static variant spends about a minute compiling first.
import argparse, json, time, torch
from shapes import SHAPES, hf_classes

ap = argparse.ArgumentParser()
ap.add_argument("model", choices=sorted(SHAPES)); ap.add_argument("--batch", type=int, default=128)
ap.add_argument("--prompt", type=int, default=256); ap.add_argument("--new", type=int, default=512)
ap.add_argument("--no-static", action="store_true")
a = ap.parse_args()
Config, Model = hf_classes(SHAPES[a.model])
cfg = Config(**SHAPES[a.model]); cfg._attn_implementation = "sdpa"
torch.manual_seed(0)
with torch.device("cuda"):
    model = Model(cfg).to(torch.bfloat16).eval()
ids = torch.randint(0, 150000, (a.batch, a.prompt), device="cuda")
kw = dict(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, pad_token_id=0)
def timed(**extra):
    with torch.no_grad():
        model.generate(ids, max_new_tokens=a.new, min_new_tokens=a.new, **kw, **extra)  # warm-up (and compile)
        torch.cuda.synchronize(); t = time.time()
        model.generate(ids, max_new_tokens=a.new, min_new_tokens=a.new, **kw, **extra)
        torch.cuda.synchronize(); return time.time() - t
out = {"peer": "hf_generate", "model": a.model, "gpu": torch.cuda.get_device_name(),
       "batch": a.batch, "prompt": a.prompt, "new": a.new}
out["dynamic_tok_s"] = a.batch * a.new / timed()
if not a.no_static:
    out["static_compiled_tok_s"] = a.batch * a.new / timed(cache_implementation="static")
print(json.dumps(out), flush=True)

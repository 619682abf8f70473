#!/usr/bin/env python3
"""The decoder's oracle and speed peer: Hugging Face transformers (GPT-2, OPT) on the same weights and tokens.

Subcommands (run on the GPU machine, where torch and transformers are installed):
  make   --preset P --out DIR [--seed S]     a randomly initialised model written as DIR/model.safetensors
                                             (Hugging Face names, tied LM head stored once) + DIR/config.json
  grads  --model DIR --batch FILE --out F    loss and every parameter's gradient on the batch that
         [--dtype fp32|bf16] [--step K]      `twinflow run --dump-step` (or --dump-batches: its step K) wrote
                                             (tokens, targets), as safetensors
  train  --model DIR --batches FILE --steps N  AdamW (torch fused) over the batches `twinflow run
         [--lr --wd --beta1 --beta2 --eps --clip]  --dump-batches` wrote; prints the loss per step as JSON
         [--dtype bf16|fp32]                 (bf16 autocast over fp32 weights, or fp32 throughout: the
                                             precision noise floor of a loss curve)
  speed  --preset P --seq S --micro-batch B --steps N  tokens/s of the no-offload peer (fp32 master weights,
                                             bf16 autocast, SDPA attention, fused AdamW, clip 1.0)
  compare --ours A.safetensors --theirs B.safetensors  elementwise max abs error per tensor over max |B|
          [--noise C.safetensors]            with a second candidate C against the same reference B (e.g.
                                             transformers in bf16 against transformers in fp32): each
                                             row's noise_max_abs = max |C - B|, and the summary's worst
                                             ratio of our error to that noise floor

Dropout is off everywhere (Twin-Flow's decoder has none). The loss is the mean token cross-entropy with
the targets given (no internal label shift), as in docs/decoder.md.
"""
import argparse
import json
import math
import struct
import sys
import time

PRESETS = {
    # name: (family, layers, hidden, heads, ffn, vocab, max_positions, extra)
    "gpt2-124m": ("gpt2", 12, 768, 12, 3072, 50257, 1024, {}),
    "gpt2-350m": ("gpt2", 24, 1024, 16, 4096, 50257, 1024, {}),
    "opt-125m": ("opt", 12, 768, 12, 3072, 50272, 2048, {}),
    "opt-350m": ("opt", 24, 1024, 16, 4096, 50272, 2048, {"word_embed_proj_dim": 512, "do_layer_norm_before": False}),
    "opt-1.3b": ("opt", 24, 2048, 32, 8192, 50272, 2048, {}),
    "opt-2.7b": ("opt", 32, 2560, 32, 10240, 50272, 2048, {}),
    "opt-6.7b": ("opt", 32, 4096, 32, 16384, 50272, 2048, {}),
}


def build(preset, dtype=None, positions=0):
    """The preset's model with random weights; `positions` > the preset's table widens it (a longer seq)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, OPTConfig, OPTForCausalLM
    family, L, h, H, f, V, P, extra = PRESETS[preset]
    P = max(P, positions)
    if family == "gpt2":
        cfg = GPT2Config(n_layer=L, n_embd=h, n_head=H, n_inner=f, vocab_size=V, n_positions=P,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new",
                         layer_norm_epsilon=1e-5, tie_word_embeddings=True)
        cls = GPT2LMHeadModel
    else:
        cfg = OPTConfig(num_hidden_layers=L, hidden_size=h, num_attention_heads=H, ffn_dim=f, vocab_size=V,
                        max_position_embeddings=P, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                        layerdrop=0.0, activation_function="relu", enable_bias=True,
                        word_embed_proj_dim=extra.get("word_embed_proj_dim", h),
                        do_layer_norm_before=extra.get("do_layer_norm_before", True), tie_word_embeddings=True)
        cls = OPTForCausalLM
    cfg._attn_implementation = "sdpa"
    model = cls(cfg)
    return model.to(dtype) if dtype is not None else model


def params(model):
    """Trainable parameters by Hugging Face name, each tensor once (the tied LM head is the embedding)."""
    return dict(model.named_parameters())


def read_batch(path):
    """tokens and targets written by `twinflow run --dump-step`: header (magic 20241124, B, s) int32, then
    B*s int32 tokens, then B*s int32 targets."""
    import torch
    raw = open(path, "rb").read()
    magic, steps, B, s = struct.unpack("<4i", raw[:16])
    if magic != 20241124:
        sys.exit("hf_decoder: %s is not a Twin-Flow batch file" % path)
    n = B * s
    out, off = [], 16
    for _ in range(steps):
        tok = struct.unpack("<%di" % n, raw[off:off + 4 * n]); off += 4 * n
        tgt = struct.unpack("<%di" % n, raw[off:off + 4 * n]); off += 4 * n
        out.append((torch.tensor(tok).view(B, s), torch.tensor(tgt).view(B, s)))
    return out


def loss_of(model, tok, tgt, autocast):
    import torch
    import torch.nn.functional as F
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        logits = model(input_ids=tok).logits
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), tgt.reshape(-1))


def cmd_make(a):
    import torch
    from safetensors.torch import save_file
    torch.manual_seed(a.seed)
    model = build(a.preset)
    import os
    os.makedirs(a.out, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in params(model).items()}, a.out + "/model.safetensors")
    model.config.to_json_file(a.out + "/config.json")
    print(json.dumps({"preset": a.preset, "params": sum(p.numel() for p in params(model).values())}))


def load(a_model, preset, device):
    import torch
    from safetensors.torch import load_file
    model = build(preset)
    state = load_file(a_model + "/model.safetensors")
    missing = set(params(model)) - set(state)
    if missing:
        sys.exit("hf_decoder: %s lacks %s" % (a_model, sorted(missing)[:5]))
    with torch.no_grad():
        for k, p in params(model).items():
            p.copy_(state[k].to(p.dtype))
    return model.to(device)


def cmd_grads(a):
    import torch
    from safetensors.torch import save_file
    model = load(a.model, a.preset, "cuda")
    batches = read_batch(a.batch)
    if not 1 <= a.step <= len(batches):
        sys.exit("hf_decoder grads: --step %d is outside the file's steps 1..%d" % (a.step, len(batches)))
    tok, tgt = batches[a.step - 1]
    loss = loss_of(model, tok.cuda(), tgt.cuda(), autocast=(a.dtype == "bf16"))
    loss.backward()
    grads = {k: p.grad.detach().float().contiguous().cpu() for k, p in params(model).items()}
    save_file(grads, a.out)
    print(json.dumps({"loss": loss.item(), "dtype": a.dtype, "tensors": len(grads)}))


def cmd_train(a):
    import torch
    model = load(a.model, a.preset, "cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps, weight_decay=a.wd,
                            fused=True)
    losses = []
    for tok, tgt in read_batch(a.batches)[:a.steps]:
        loss = loss_of(model, tok.cuda(), tgt.cuda(), autocast=(a.dtype == "bf16"))
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    print(json.dumps({"losses": losses}))


def cmd_speed(a):
    import torch
    torch.manual_seed(0)
    model = build(a.preset, positions=a.seq).cuda()
    n_params = sum(p.numel() for p in params(model).values())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    V = model.config.vocab_size
    g = torch.Generator(device="cuda").manual_seed(1)
    times = []
    for step in range(a.steps):
        tok = torch.randint(0, V, (a.micro_batch, a.seq), device="cuda", generator=g)
        tgt = torch.randint(0, V, (a.micro_batch, a.seq), device="cuda", generator=g)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = loss_of(model, tok, tgt, autocast=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    steady = sorted(times[2:]) if len(times) > 3 else sorted(times)
    med = steady[len(steady) // 2]
    tokens = a.micro_batch * a.seq
    L, h = PRESETS[a.preset][1], PRESETS[a.preset][2]
    flops = 6.0 * n_params * tokens + 12.0 * L * h * a.seq * tokens  # dense + attention (no causal halving)
    print(json.dumps({"preset": a.preset, "params": n_params, "seq": a.seq, "micro_batch": a.micro_batch,
                      "median_step_ms": med * 1e3, "tokens_per_s": tokens / med, "tflops": flops / med / 1e12,
                      "flops_per_step": flops, "steps_ms": [t * 1e3 for t in times]}))


def cmd_compare(a):
    from safetensors.torch import load_file
    ours, theirs = load_file(a.ours), load_file(a.theirs)
    noise = load_file(a.noise) if a.noise else None
    rows, worst, worst_over_noise = [], 0.0, 0.0
    for k in sorted(theirs):
        for name, other in ((a.ours, ours), (a.noise, noise)):
            if other is not None and k not in other:
                sys.exit("hf_decoder compare: %s lacks %s" % (name, k))
        x, y = ours[k].double(), theirs[k].double()
        if x.shape != y.shape:
            sys.exit("hf_decoder compare: %s has shape %s vs %s" % (k, tuple(x.shape), tuple(y.shape)))
        scale = y.abs().max().item()
        max_abs = (x - y).abs().max().item()
        rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
        worst = max(worst, rel)
        row = {"tensor": k, "max_abs": max_abs, "max_abs_ref": scale, "max_abs_over_max_ref": rel,
               "nonfinite": int((~x.isfinite()).sum().item())}
        if noise is not None:
            row["noise_max_abs"] = (noise[k].double() - y).abs().max().item()
            row["over_noise"] = max_abs / row["noise_max_abs"] if row["noise_max_abs"] > 0 else (
                0.0 if max_abs == 0 else math.inf)
            worst_over_noise = max(worst_over_noise, row["over_noise"])
        rows.append(row)
    out = {"worst_max_abs_over_max_ref": worst, "tensors": rows}
    if noise is not None:
        out["worst_over_noise"] = worst_over_noise
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make"); m.add_argument("--preset", required=True, choices=PRESETS); m.add_argument("--out", required=True); m.add_argument("--seed", type=int, default=0)
    g = sub.add_parser("grads"); g.add_argument("--preset", required=True, choices=PRESETS); g.add_argument("--model", required=True); g.add_argument("--batch", required=True); g.add_argument("--out", required=True); g.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32"); g.add_argument("--step", type=int, default=1)
    t = sub.add_parser("train"); t.add_argument("--preset", required=True, choices=PRESETS); t.add_argument("--model", required=True); t.add_argument("--batches", required=True); t.add_argument("--steps", type=int, default=50)
    for name, d in (("--lr", 3e-4), ("--wd", 0.1), ("--beta1", 0.9), ("--beta2", 0.95), ("--eps", 1e-8), ("--clip", 1.0)):
        t.add_argument(name, type=float, default=d)
    t.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    s = sub.add_parser("speed"); s.add_argument("--preset", required=True, choices=PRESETS); s.add_argument("--seq", type=int, default=1024); s.add_argument("--micro-batch", type=int, default=8); s.add_argument("--steps", type=int, default=12)
    c = sub.add_parser("compare"); c.add_argument("--ours", required=True); c.add_argument("--theirs", required=True); c.add_argument("--noise")
    a = ap.parse_args()
    {"make": cmd_make, "grads": cmd_grads, "train": cmd_train, "speed": cmd_speed, "compare": cmd_compare}[a.cmd](a)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The Eigen double reference against torch.optim (AdamW, Adam, Adagrad) in float64.

Runs tf_reference_dump for each optimizer and several seeds, replays the same gradients through
torch.optim in float64, and requires elementwise agreement (max relative error <= 1e-12 on the
parameters and states). Exits 77 (ctest: skipped) when torch is not importable, and says so.
"""
import json
import subprocess
import sys

try:
    import torch
except ImportError:
    print("SKIPPED: torch is not installed here; this check runs on the GPU machine "
          "(bench/device/issue2.sh) or wherever `python3 -c 'import torch'` works")
    sys.exit(77)

DUMP = sys.argv[1]
STATE_KEYS = {"adamw": ("exp_avg", "exp_avg_sq"), "adam": ("exp_avg", "exp_avg_sq"), "adagrad": ("sum", None)}


def make(name, params, hp):
    if name == "adamw":
        return torch.optim.AdamW(params, lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"],
                                 weight_decay=hp["weight_decay"], foreach=False)
    if name == "adam":
        return torch.optim.Adam(params, lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"],
                                weight_decay=hp["weight_decay"], foreach=False)
    return torch.optim.Adagrad(params, lr=hp["lr"], lr_decay=hp["lr_decay"], weight_decay=hp["weight_decay"],
                               initial_accumulator_value=hp["initial_accumulator_value"], eps=hp["eps"],
                               foreach=False)


def max_rel(a, b):
    a = torch.tensor(a, dtype=torch.float64)
    return ((a - b).abs() / b.abs().clamp_min(1e-300)).max().item(), (a - b).abs().max().item()


failures = 0
for name in ("adamw", "adam", "adagrad"):
    for seed in (1, 2, 3):
        out = subprocess.run([DUMP, name, str(seed), "513", "20"], check=True, capture_output=True, text=True)
        d = json.loads(out.stdout)
        p = torch.nn.Parameter(torch.tensor(d["param0"], dtype=torch.float64))
        opt = make(name, [p], d["hp"])
        for g in d["grads"]:
            p.grad = torch.tensor(g, dtype=torch.float64)
            opt.step()
        st = opt.state[p]
        k1, k2 = STATE_KEYS[name]
        checks = [("param", d["param"], p.detach()), (k1, d["state1"], st[k1])]
        if k2:
            checks.append((k2, d["state2"], st[k2]))
        for label, ours, theirs in checks:
            rel, ab = max_rel(ours, theirs)
            ok = rel <= 1e-12
            failures += not ok
            print(f"{name:8s} seed {seed} {label:10s} max rel err {rel:.3e} max abs err {ab:.3e} "
                  f"{'ok' if ok else 'FAIL (> 1e-12)'}")
print(f"torch {torch.__version__}: {'all agree' if failures == 0 else f'{failures} disagreements'}")
sys.exit(1 if failures else 0)

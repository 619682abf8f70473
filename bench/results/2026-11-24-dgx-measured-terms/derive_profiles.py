#!/usr/bin/env python3
"""Derives DGX profiles with decoder terms from an H100 profile that has them (issue 16).

Usage: derive_profiles.py H100_PROFILE OUT_DIR
The DGX profiles (scenarios/hardware/dgx-a100-40gb.yaml, dgx-h100-80gb.yaml) have no measured decoder
terms (no DGX here). Each derived profile is the DGX profile with, under gpu:
  attention_tflops_by_shape: the H100's measured points x (DGX bf16_tflops / 989), 989 the H100 SXM's
      datasheet dense bf16 peak: the fused attention reaches the same fraction of the tensor-core peak;
  decoder_kernel_gbps: the H100's class rates x (DGX hbm_gbps / the H100 profile's hbm_gbps): each class
      reaches the same fraction of the streaming-kernel rate.
Both are assumptions (the A100 runs our sm_80 attention build, which was never measured), named in the
figures' sources. A profile without decoder terms gives no derived profile (exit 1)."""
import pathlib
import sys

import yaml

H100_DATASHEET_BF16_TFLOPS = 989.0  # scenarios/hardware/dgx-h100-80gb.yaml's source


def figure(node, key):
    v = node.get(key)
    return v["value"] if isinstance(v, dict) else None


def list_figure(key, rows, source):
    """A profile's list figure under gpu:, as core::format_hardware_profile writes one."""
    return [f"  {key}:", "    value:"] + [f"      - [{r}]" for r in rows] + [f'    source: "{source}"']


def main():
    src, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    h = yaml.safe_load(src.read_text())
    g = h["gpu"]
    att, ker, hbm = figure(g, "attention_tflops_by_shape"), figure(g, "decoder_kernel_gbps"), figure(g, "hbm_gbps")
    if not att and not ker:
        print(f"{src}: no decoder terms (gpu.attention_tflops_by_shape, gpu.decoder_kernel_gbps)")
        return 1
    root = pathlib.Path(__file__).resolve().parents[3]
    for name in ("dgx-a100-40gb", "dgx-h100-80gb"):
        text = (root / "scenarios" / "hardware" / f"{name}.yaml").read_text()
        d = yaml.safe_load(text)
        peak, dhbm = figure(d["gpu"], "bf16_tflops"), figure(d["gpu"], "hbm_gbps")
        lines = []
        if att:
            f = peak / H100_DATASHEET_BF16_TFLOPS
            lines += list_figure("attention_tflops_by_shape", [f"{a[0]}, {a[1]}, {a[2] * f:.4g}, {a[3]}" for a in att],
                                 f"assumed: {src.name}'s measured H100 points x {peak:g} / "
                                 f"{H100_DATASHEET_BF16_TFLOPS:g} (this GPU's bf16 peak over the H100 SXM's); not measured here")
        if ker:
            f = dhbm / hbm
            lines += list_figure("decoder_kernel_gbps", [f"{k[0]}, {k[1] * f:.4g}" for k in ker],
                                 f"assumed: {src.name}'s measured H100 class rates x {dhbm:g} / {hbm:g} (this GPU's "
                                 f"HBM rate over the H100 profile's streaming rate); not measured here")
        # insert after the gpu section's kernel_launch_ns line (every DGX profile has it)
        out_lines, done = [], False
        for line in text.splitlines():
            out_lines.append(line)
            if not done and line.startswith("  kernel_launch_ns:"):
                out_lines += lines
                done = True
        if not done:
            print(f"{name}: no gpu.kernel_launch_ns line to insert after")
            return 1
        text = "\n".join(out_lines) + "\n"
        text = text.replace(f"name: {name}\n", f"name: {name}-decoder\n", 1)
        (out / f"{name}-decoder.yaml").write_text(
            f"# DERIVED by bench/results/2026-11-24-decval-dgx/derive_profiles.py from {src.name}: "
            f"{name}.yaml with decoder terms\n" + text)
        print(f"wrote {out / (name + '-decoder.yaml')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

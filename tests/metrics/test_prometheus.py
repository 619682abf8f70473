#!/usr/bin/env python3
"""Integration test, with real parts: a real Prometheus scrapes `twinflow simulate --pace --metrics-port`, and every
PromQL expression of the Grafana dashboard must return data.

  1. installs Debian's prometheus package if prometheus/promtool are missing (install_prometheus.sh);
  2. starts `twinflow simulate` on a 2-rank fp16 scenario, replaying steps at a pace a dashboard can follow;
  3. starts Prometheus on loopback with a temporary config and storage directory, scraping it every second;
  4. waits until two scrapes held the twinflow metrics;
  5. runs every PromQL expression of dashboards/twinflow.json (panel targets and template variables) through
     /api/v1/query, with Grafana's variables replaced, and requires a non-empty result (and numbers: only the
     loss may be NaN, since the cost-only simulator computes none; the twinflow_gpu_* gauges, which only
     `twinflow run` publishes, must run but may be empty);
  6. runs `promtool check metrics` on a scrape and requires it clean; also checks dashboards/prometheus.yml
     with `promtool check config` and the dashboard's datasource against the provisioning file;
  7. stops what it started (SIGTERM, then SIGKILL; children also get SIGKILL if this script dies) and checks
     that twinflow exits 0 on SIGTERM.

Usage: test_prometheus.py path/to/twinflow SOURCE_DIR
"""
import ctypes
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

SCENARIO = "scenarios/toy-zero3-ratio0.4.yaml"  # 2 ranks, fp16 (a loss scale), CPU and GPU optimizer halves
PACE = 10  # a 7.2 ms simulated step every 72 ms of wall time
GRAFANA_VARS = {"$__rate_interval": "1m", "${rank}": ".*", "${scenario}": ".*", "$rank": ".*", "$scenario": ".*"}

started = []  # Popen objects to stop


def die_with_parent():
    """Runs in the child before exec: SIGKILL it when this test process dies (even by SIGKILL from ctest)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def start(cmd, **kw):
    p = subprocess.Popen(cmd, preexec_fn=die_with_parent, **kw)
    started.append(p)
    return p


def stop_all():
    for p in started:
        if p.poll() is None:
            p.terminate()
    for p in started:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def fail(msg):
    raise SystemExit("FAIL: " + msg)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def query(prom, expr):
    url = prom + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        _, body = http_get(url, timeout=10)
    except urllib.error.HTTPError as e:
        return {"status": "error", "error": e.read().decode()}
    return json.loads(body)


def wait_for(what, pred, timeout_s, procs=()):
    end = time.time() + timeout_s
    while time.time() < end:
        for p in procs:
            if p.poll() is not None:
                fail(f"{what}: {p.args[0]} exited with {p.returncode} while we waited")
        try:
            v = pred()
            if v:
                return v
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    fail(f"timed out after {timeout_s} s waiting for {what}")


def dashboard_expressions(dash):
    """Every PromQL expression in the dashboard: targets' `expr` anywhere, and the template variables'
    label_values(EXPR, LABEL) queries as (EXPR, LABEL)."""
    exprs = []

    def walk(x, where):
        if isinstance(x, dict):
            if isinstance(x.get("expr"), str):
                exprs.append((where + ": " + x.get("legendFormat", x.get("refId", "")), x["expr"], None))
            for k, v in x.items():
                walk(v, where + "/" + str(x.get("title", k)) if k == "targets" else where)
        elif isinstance(x, list):
            for v in x:
                walk(v, where)

    walk(dash.get("panels", []), "panel")
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v["query"]["query"] if isinstance(v.get("query"), dict) else v.get("query", "")
        m = re.fullmatch(r"\s*label_values\((.*),\s*([a-zA-Z_]\w*)\s*\)\s*", q)
        if not m:
            fail(f"variable {v['name']}: query {q!r} is not label_values(EXPR, LABEL)")
        exprs.append((f"variable {v['name']}", m.group(1), m.group(2)))
    return exprs


def substitute(expr):
    for k, v in GRAFANA_VARS.items():
        expr = expr.replace(k, v)
    if "$" in expr:
        fail(f"expression uses a Grafana variable this test does not know: {expr}")
    return expr


def main():
    if len(sys.argv) != 3:
        fail("usage: test_prometheus.py path/to/twinflow SOURCE_DIR")
    twinflow, src = sys.argv[1], sys.argv[2]
    here = os.path.dirname(os.path.abspath(__file__))
    t0 = time.time()

    # 1. Prometheus and promtool, from Debian's package.
    if not (shutil.which("prometheus") and shutil.which("promtool")):
        r = subprocess.run([os.path.join(here, "install_prometheus.sh")])
        if r.returncode != 0 or not (shutil.which("prometheus") and shutil.which("promtool")):
            fail("could not install Debian's prometheus package (needs apt and root or sudo); install it "
                 "(apt-get install prometheus) or leave this test out (ctest -LE integration)")
    version = subprocess.run(["prometheus", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"using {version} ({time.time() - t0:.1f} s)")

    with tempfile.TemporaryDirectory(prefix="tf-prom-") as tmp:
        # 2. twinflow simulate, serving metrics on a free port and replaying until stopped.
        sim_log = open(os.path.join(tmp, "simulate.log"), "w+")
        sim = start([twinflow, "simulate", os.path.join(src, SCENARIO), "--metrics-port", "0", "--pace", str(PACE),
                     "--steps", "1000000", "--metrics-linger", "-1"], stdout=sim_log, stderr=subprocess.STDOUT)

        def sim_output():
            sim_log.flush()
            with open(sim_log.name) as f:
                return f.read()

        url = wait_for("twinflow simulate to serve metrics",
                       lambda: re.search(r"metrics: serving (http://127\.0\.0\.1:\d+/metrics)", sim_output()), 60,
                       [sim]).group(1)
        sim_step_ms = float(re.search(r"best feasible ratio [\d.]+: step ([\d.]+) ms", sim_output()).group(1))
        target = url.split("/")[2]
        print(f"twinflow simulate serves {url} (simulated step {sim_step_ms} ms)")
        if http_get(url.replace("/metrics", "/healthz"))[1] != "ok\n":
            fail("/healthz did not answer ok")

        # 3. Prometheus on loopback, temporary config and storage.
        port = free_port()
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: twinflow\n    static_configs:\n"
                    f"      - targets: ['{target}']\n")
        prom_log = open(os.path.join(tmp, "prometheus.log"), "w")
        prom = start(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={os.path.join(tmp, 'data')}",
                      f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                     stdout=prom_log, stderr=subprocess.STDOUT)
        api = f"http://127.0.0.1:{port}"
        try:
            wait_for("Prometheus to be ready", lambda: http_get(api + "/-/ready")[0] == 200, 60, [prom, sim])
            print(f"Prometheus ready on {api} ({time.time() - t0:.1f} s)")

            # 4. Two scrapes that held the twinflow metrics (so rate() and increase() have two points).
            def scraped_twice():
                r = query(api, 'min(count_over_time(twinflow_steps_total{job="twinflow"}[5m]))')["data"]["result"]
                return r and float(r[0]["value"][1]) >= 2

            wait_for("two scrapes of the twinflow metrics", scraped_twice, 60, [prom, sim])
            targets = json.loads(http_get(api + "/api/v1/targets")[1])["data"]["activeTargets"]
            if [t["health"] for t in targets] != ["up"] or targets[0]["lastError"]:
                fail(f"the scrape target is not healthy: {targets}")
            print(f"two scrapes done ({time.time() - t0:.1f} s)")

            # 5. Every PromQL expression of the dashboard.
            dash_path = os.path.join(src, "dashboards", "twinflow.json")
            with open(dash_path) as f:
                dash = json.load(f)
            exprs = dashboard_expressions(dash)
            if len(exprs) < 10:
                fail(f"only {len(exprs)} expressions found in {dash_path}")
            bad = []
            for where, expr, label in exprs:
                q = substitute(expr)
                r = query(api, q)
                if r.get("status") != "success":
                    bad.append(f"{where}: {q}: {r.get('error')}")
                    continue
                res = r["data"]["result"]
                values = [float(s["value"][1]) for s in res] if r["data"]["resultType"] == "vector" else []
                if not res and "twinflow_gpu_" in q:
                    # the GPU's clock and power come from `twinflow run` only (NVML): the simulator has none, so
                    # the query must parse and run, and tests/metrics/test_step_metrics.cpp checks the gauges
                    print(f"    0 series  (real runs only)  {where}")
                    continue
                if not res:
                    bad.append(f"{where}: {q}: empty result")
                elif label and not all(label in s["metric"] for s in res):
                    bad.append(f"{where}: {q}: a series lacks the label {label}")
                elif values and all(math.isnan(v) for v in values) and "twinflow_loss{" not in q:
                    bad.append(f"{where}: {q}: only NaN values")
                shown = ", ".join(f"{v:.4g}" for v in values[:3]) + (" ..." if len(values) > 3 else "")
                print(f"  {len(res):3d} series  [{shown}]  {where}")
            if bad:
                fail("dashboard expressions without data:\n  " + "\n  ".join(bad))
            print(f"{len(exprs)} dashboard expressions returned data ({time.time() - t0:.1f} s)")

            # The numbers made it through: the mean step time is the simulated step.
            mean = query(api, 'max(twinflow_step_seconds_sum / twinflow_step_seconds_count)')["data"]["result"]
            got_ms = float(mean[0]["value"][1]) * 1e3
            if abs(got_ms - sim_step_ms) > 0.051:
                fail(f"mean step time in Prometheus {got_ms:.3f} ms, simulate printed {sim_step_ms} ms")

            # 6. promtool on a scrape, the example config, and the datasource the dashboard expects.
            _, scrape = http_get(url)
            lint = subprocess.run(["promtool", "check", "metrics"], input=scrape, capture_output=True, text=True)
            if lint.returncode != 0 or lint.stdout.strip() or lint.stderr.strip():
                fail(f"promtool check metrics (exit {lint.returncode}):\n{lint.stdout}{lint.stderr}")
            print(f"promtool check metrics: clean ({len(scrape)} bytes, {scrape.count(chr(10))} lines)")
            conf = subprocess.run(["promtool", "check", "config", os.path.join(src, "dashboards", "prometheus.yml")],
                                  capture_output=True, text=True)
            if conf.returncode != 0:
                fail(f"promtool check config dashboards/prometheus.yml:\n{conf.stdout}{conf.stderr}")
            with open(os.path.join(src, "dashboards", "provisioning", "datasources", "twinflow.yaml")) as f:
                uid = re.search(r"^\s*uid:\s*(\S+)", f.read(), re.M).group(1)
            uids = set(re.findall(r'"uid": "([^"]+)"', json.dumps(dash["panels"])))
            if uids != {uid}:
                fail(f"the dashboard's panels use datasource uids {uids}, the provisioning file defines {uid}")
        except SystemExit:
            print("---- prometheus log ----\n" + open(prom_log.name).read()[-3000:])
            print("---- simulate log ----\n" + sim_output()[-3000:])
            raise

        # 7. Stop: twinflow ends its replay cleanly on SIGTERM.
        sim.terminate()
        try:
            rc = sim.wait(timeout=20)
        except subprocess.TimeoutExpired:
            fail("twinflow simulate did not stop within 20 s of SIGTERM")
        if rc != 0 or "stopped by signal" not in sim_output():
            fail(f"twinflow simulate exited {rc} on SIGTERM:\n{sim_output()[-2000:]}")
        stop_all()
    print(f"integration: ok ({time.time() - t0:.1f} s)")


if __name__ == "__main__":
    # SIGTERM/SIGHUP (ctest's timeout, a CI cancel) unwind through the finally below.
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda s, f: sys.exit(f"interrupted by signal {s}"))
    try:
        main()
    finally:
        stop_all()
